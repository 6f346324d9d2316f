"""Benchmark of stage generation under `vmap`, in the shape the env uses it.

`B` games (default 2048) are stepped `T` times inside one jitted `lax.scan`; every step a
fraction of the games completes a stage (or places transmissions) and the rest do nothing.
Reported: µs per game-step (median wall time, and minimum process CPU time, which is
the steadier figure on a shared machine), net of a baseline scan that draws the same keys and predicates
but updates nothing. Compile time is reported separately.

    python bench/bench_generation.py [--batch 2048] [--steps 64] [--repeats 5]
"""

import argparse
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp

from hm.game import generation

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


def _scan(update, rate: float, steps: int):
    """A jitted `(states, key) -> states` running `update` for `steps` steps."""

    def step(states, key):
        pred_key, games_key = jax.random.split(key)
        batch = states.stage.shape[0]
        pred = jax.random.uniform(pred_key, (batch,)) < rate
        keys = jax.random.split(games_key, batch)
        return update(states, pred, keys), None

    @jax.jit
    def run(states, key):
        return jax.lax.scan(step, states, jax.random.split(key, steps))[0]

    return run


UPDATES = {
    "baseline (keys and predicates only)": lambda s, p, k: s,
    "maybe_complete_stage": jax.vmap(generation.maybe_complete_stage),
    "where(pred, vmap(complete_stage))": lambda s, p, k: jax.tree.map(
        lambda a, b: jnp.where(p.reshape(p.shape + (1,) * (a.ndim - 1)), a, b),
        jax.vmap(generation.complete_stage)(s, k), s),
    "maybe_place_transmissions (1 each)": lambda s, p, k: jax.vmap(
        generation.maybe_place_transmissions)(s, k, p.astype(jnp.int32), jnp.zeros_like(
            p, jnp.int32), jnp.zeros_like(p, jnp.int32)),
    "vmap(place_transmissions) (1 where pred)": lambda s, p, k: jax.vmap(
        generation.place_transmissions)(s, k, p.astype(jnp.int32), jnp.zeros_like(
            p, jnp.int32), jnp.zeros_like(p, jnp.int32)),
    "maybe_new_game": jax.vmap(generation.maybe_new_game),
}

CASES = [  # (update, fraction of games selected per step)
    ("baseline (keys and predicates only)", 0.02),
    ("maybe_complete_stage", 0.0),
    ("maybe_complete_stage", 0.02),
    ("maybe_complete_stage", 0.10),
    ("maybe_complete_stage", 1.0),
    ("where(pred, vmap(complete_stage))", 0.02),
    ("maybe_place_transmissions (1 each)", 0.0),
    ("maybe_place_transmissions (1 each)", 0.10),
    ("vmap(place_transmissions) (1 where pred)", 0.10),
    ("maybe_new_game", 0.005),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", default="", help="run only cases whose name contains this")
    args = parser.parse_args()

    key = jax.random.key(0)
    start = jax.jit(jax.vmap(generation.new_game))(jax.random.split(key, args.batch))
    # Spread the games over stages 1..7 so completions advance rather than win.
    stages = jax.random.randint(jax.random.key(1), (args.batch,), 1, 8, jnp.int32)
    start = jax.block_until_ready(eqx.tree_at(lambda s: s.stage, start, stages))

    baseline = None
    print(f"batch {args.batch}, {args.steps} steps per call, median of {args.repeats}")
    for name, rate in CASES:
        if args.only and args.only not in name and not name.startswith("baseline"):
            continue
        run = _scan(UPDATES[name], rate, args.steps)
        t0 = time.perf_counter()
        jax.block_until_ready(run(start, key))
        compile_s = time.perf_counter() - t0
        wall, cpu = [], []
        for r in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            jax.block_until_ready(run(start, jax.random.key(r + 1)))
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        per = args.steps * args.batch / 1e6
        us_wall, us_cpu = statistics.median(wall) / per, min(cpu) / per
        if baseline is None:
            baseline = (us_wall, us_cpu)
            print(f"{name:42s} rate {rate:5.3f}: {us_wall:7.4f} µs/game-step wall, "
                  f"{us_cpu:7.4f} cpu (compile {compile_s:5.1f} s)")
        else:
            print(f"{name:42s} rate {rate:5.3f}: {us_wall - baseline[0]:7.4f} µs/game-step "
                  f"wall, {us_cpu - baseline[1]:7.4f} cpu, net of baseline "
                  f"(compile {compile_s:5.1f} s)")


if __name__ == "__main__":
    main()
