"""A user's plain loop over `hm.env`: `lax.scan` over `jax.vmap(env.step)`, random legal play.

This is what a user writes without knowing how games are made: no reset pool, the
env's own auto-reset (`hm.env.HackMatrix.step`) on every step. Each step every game
takes a uniformly random legal action from the mask the previous step returned
(`info["action_mask"]`); the observations and rewards go into a per-game checksum the
call returns, so XLA cannot drop them. The work is the same as `bench_env`'s, whose
finished games restart from a reset pool generated once per call instead; with
`--compare-pool` both are timed in one process, their calls interleaved, and the ratio
(the plain loop over the pool) is printed.

    python -m bench.bench_env_loop [--num-envs 2048] [--num-steps 128] [--compare-pool] [--out FILE]
"""

import functools
import pathlib
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float32, PRNGKeyArray
from tap import Tap

from bench import bench_env, common
from hm.env import EnvState, HackMatrix
from hm.train.distributions import sample_legal


class Args(Tap):
    num_envs: int = 2048  # games stepped together
    num_steps: int = 128  # steps per jitted call (one lax.scan)
    repeats: int = 5  # timed calls after the first; the median is reported
    seed: int = 0  # PRNG seed of the games and actions
    compare_pool: bool = False  # also time bench_env (reset pool), interleaved, and print the ratio
    out: pathlib.Path | None = None  # append the result(s) as JSON lines to this file


class Loop(eqx.Module):
    """What the loop carries from step to step (batched: a leading env axis on every leaf)."""

    state: EnvState
    mask: Bool[Array, " actions"]  # legal actions of `state`
    key: PRNGKeyArray  # this game's own stream of actions and steps
    checksum: Float32[Array, ""]  # running sum of observations and rewards


def play_step(env: HackMatrix, loop: Loop) -> Loop:
    """One random legal step of one game (unbatched); the env restarts it if it ended."""
    key, action_key, step_key = jax.random.split(loop.key, 3)
    action = sample_legal(loop.mask, jax.random.uniform(action_key))
    obs, state, reward, _, info = env.step(step_key, loop.state, action)
    checksum = loop.checksum + jnp.sum(obs) + reward
    return Loop(state, info["action_mask"], key, checksum)


def play(loop: Loop, num_steps: int) -> Loop:
    """`num_steps` steps of every game: a `lax.scan` over `jax.vmap(env.step)`."""
    step = jax.vmap(functools.partial(play_step, HackMatrix()))
    return jax.lax.scan(lambda carry, _: (step(carry), None), loop, length=num_steps)[0]


def new_loop(keys: PRNGKeyArray) -> Loop:
    """Fresh games, one per key (batched)."""
    env = HackMatrix()
    game_keys, play_keys = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)
    _, state = jax.vmap(env.reset)(game_keys)
    return Loop(state, jax.vmap(env.action_mask)(state), play_keys,
                jnp.zeros(keys.shape, jnp.float32))


def main(args: Args) -> list[dict[str, Any]]:
    """Run the benchmark (and with `--compare-pool` bench_env's), print and record the results."""
    keys = jax.random.split(jax.random.key(args.seed), args.num_envs)
    fns = [jax.jit(functools.partial(play, num_steps=args.num_steps), donate_argnums=0)]
    carries = [jax.jit(new_loop)(keys)]
    if args.compare_pool:   # bench_env's own call, on one device
        run, games = bench_env.prepare(args.num_envs, args.num_steps, args.seed, devices=1)
        fns.append(run)
        carries.append(games)
    timed = common.time_calls_interleaved(fns, carries, args.repeats)
    config = {"num_envs": args.num_envs, "num_steps": args.num_steps, "devices": 1}
    steps = args.num_envs * args.num_steps
    results = [common.record(name, config, timing, steps, args.out)
               for name, (timing, _) in zip(("env_loop", "env"), timed)]
    if len(results) == 2:
        ratio = results[0]["metrics"]["steps_per_s"] / results[1]["metrics"]["steps_per_s"]
        print(f"plain loop / reset pool throughput: {ratio:.1%} (timed calls interleaved)")
    return results


if __name__ == "__main__":
    common.disable_compilation_cache()
    main(Args(underscores_to_dashes=True).parse_args())
