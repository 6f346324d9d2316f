"""Stage generation under `vmap`, in the shape the env uses it.

`--num-envs` games (default 2048) are stepped `--num-steps` times in one jitted
`lax.scan`; every step a fraction (`rate`) of the games completes a stage, or places a
transmission, or restarts, and the others do nothing. Each case reports through
`bench.common` (compile time, median call) and prints µs per game-step net of a baseline
scan that draws the same keys and predicates but updates nothing.

Cases: `maybe_complete_stage` at rates 0, 2 %, 10 %, 100 %; `jnp.where` over
`vmap(complete_stage)` at 2 % (what `maybe_complete_stage` avoids); `maybe_place_transmissions`
and `vmap(place_transmissions)` at 10 % (one transmission each); `maybe_new_game` at 0.5 %.

    python -m bench.bench_generation [--num-envs 2048] [--num-steps 32] [--only maybe_complete]
"""

import pathlib
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from tap import Tap

from bench import common
from hm.game import generation


class Args(Tap):
    num_envs: int = 2048  # games stepped together
    num_steps: int = 32  # steps per jitted call (one lax.scan)
    repeats: int = 5  # timed calls after the first; the median is reported
    only: str = ""  # run only the cases whose name contains this (and the baseline)
    out: pathlib.Path | None = None  # append the results as JSON lines to this file


def _where(pred, a, b):
    return jax.tree.map(
        lambda x, y: jnp.where(pred.reshape(pred.shape + (1,) * (x.ndim - 1)), x, y), a, b)


def _one_each(pred):
    n = pred.astype(jnp.int32)
    return n, jnp.zeros_like(n), jnp.zeros_like(n)


# name -> update(states, pred, keys) -> states, all batched over the games.
UPDATES: dict[str, Callable] = {
    "baseline": lambda s, p, k: s,
    "maybe_complete_stage": jax.vmap(generation.maybe_complete_stage),
    "where_complete_stage": lambda s, p, k: _where(
        p, jax.vmap(generation.complete_stage)(s, k), s),
    "maybe_place_transmissions": lambda s, p, k: jax.vmap(
        generation.maybe_place_transmissions)(s, k, *_one_each(p)),
    "vmap_place_transmissions": lambda s, p, k: jax.vmap(
        generation.place_transmissions)(s, k, *_one_each(p)),
    "maybe_new_game": jax.vmap(generation.maybe_new_game),
}

CASES = [  # (update, fraction of the games selected each step)
    ("baseline", 0.02),
    ("maybe_complete_stage", 0.0),
    ("maybe_complete_stage", 0.02),
    ("maybe_complete_stage", 0.10),
    ("maybe_complete_stage", 1.0),
    ("where_complete_stage", 0.02),
    ("maybe_place_transmissions", 0.10),
    ("vmap_place_transmissions", 0.10),
    ("maybe_new_game", 0.005),
]


def _run(update: Callable, rate: float, steps: int):
    """A jitted `(states, key) -> (states, key)` applying `update` for `steps` steps."""

    def step(states, key):
        pred_key, games_key = jax.random.split(key)
        batch = states.stage.shape[0]
        pred = jax.random.uniform(pred_key, (batch,)) < rate
        return update(states, pred, jax.random.split(games_key, batch)), None

    @jax.jit
    def run(carry):
        states, key = carry
        key, scan_key = jax.random.split(key)
        states, _ = jax.lax.scan(step, states, jax.random.split(scan_key, steps))
        return states, key

    return run


def main(args: Args) -> list[dict[str, Any]]:
    key = jax.random.key(0)
    games = jax.jit(jax.vmap(generation.new_game))(jax.random.split(key, args.num_envs))
    # Spread the games over stages 1..7 so that completions advance rather than win.
    stages = jax.random.randint(jax.random.key(1), (args.num_envs,), 1, 8, jnp.int32)
    games = jax.block_until_ready(eqx.tree_at(lambda s: s.stage, games, stages))

    results, baseline_s = [], None
    per_call = args.num_envs * args.num_steps
    for name, rate in CASES:
        if args.only and args.only not in name and name != "baseline":
            continue
        run = _run(UPDATES[name], rate, args.num_steps)
        timing, _ = common.time_calls(run, (games, key), args.repeats)
        config = {"num_envs": args.num_envs, "num_steps": args.num_steps, "rate": rate}
        results.append(common.record(f"generation/{name}", config, timing, per_call, args.out))
        if baseline_s is None:
            baseline_s = timing.median_s
        else:
            net = (timing.median_s - baseline_s) / per_call * 1e6
            print(f"    {name} at rate {rate}: {net:.3f} µs per game-step net of the baseline")
    return results


if __name__ == "__main__":
    common.disable_compilation_cache()
    main(Args().parse_args())
