"""Environment throughput: many games of uniformly random legal play in one jitted scan.

This is the environment's share of a PPO rollout. Every step each game computes its
legal-action mask, takes a uniformly random legal action, steps and produces its
observation; finished games are replaced by fresh ones. The observations and rewards
are summed into a per-game checksum that the call returns, so XLA cannot drop them.

Game generation is expensive, so auto-reset draws from a reset pool (Craftax's
"optimistic resets", PufferLib's reset pools): each call first generates one fresh game
per slot with `jax.vmap(game.reset)`, then the scan swaps slot i's pool game into slot
i whenever that slot's game ends. A slot that finishes twice within one call restarts
from the same pool game (with different random actions); the pool is renewed every call.

    python -m bench.bench_env [--num-envs 2048] [--num-steps 128] [--devices 2] [--out FILE]
"""

import functools
import pathlib
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float32, PRNGKeyArray, PyTree
from tap import Tap

import hm.game as game
from bench import common
from hm.train.distributions import sample_legal


class Args(Tap):
    num_envs: int = 2048  # games stepped together, split evenly over the devices
    num_steps: int = 128  # steps per jitted call (one lax.scan, one reset pool)
    repeats: int = 5  # timed calls after the first; the median is reported
    devices: int = 1  # devices to shard the games over (on CPU: forced host devices, one per core)
    seed: int = 0  # PRNG seed of the games and actions
    out: pathlib.Path | None = None  # append the result as a JSON line to this file


class Games(eqx.Module):
    """What one slot carries from step to step (batched: a leading env axis on every leaf)."""

    state: game.GameState
    key: PRNGKeyArray  # this slot's own stream: actions, steps and its pool games
    checksum: Float32[Array, ""]  # running sum of observations and rewards


def replace_finished(done: Bool[Array, ""], stepped: PyTree, fresh: PyTree) -> PyTree:
    """`fresh` where the game is done, else `stepped` (both pytrees of one structure)."""
    return jax.tree.map(lambda new, old: jnp.where(done, new, old), fresh, stepped)


def play_step(games: Games, fresh: PyTree) -> Games:
    """One random legal step of one game, restarting it from `fresh` if it ended.

    Args:
        games: one slot (unbatched).
        fresh: (state, observation) of this slot's pool game.
    """
    key, action_key, step_key = jax.random.split(games.key, 3)
    action = sample_legal(game.legal_actions(games.state), jax.random.uniform(action_key))
    state, obs, reward, done, _ = game.step(games.state, action, step_key)
    state = game.restart(done, state, fresh[0])
    obs = replace_finished(done, obs, fresh[1])
    checksum = games.checksum + jnp.sum(obs.flat()) + reward.astype(jnp.float32)
    return Games(state, key, checksum)


def play(games: Games, num_steps: int) -> Games:
    """Renew the reset pool, then play `num_steps` steps of every game (batched)."""
    keys = jax.vmap(jax.random.split)(games.key)
    pool = jax.vmap(game.reset)(keys[:, 1])
    games = eqx.tree_at(lambda g: g.key, games, keys[:, 0])

    def scan_step(games: Games, _: None) -> tuple[Games, None]:
        return jax.vmap(play_step)(games, pool), None

    games, _ = jax.lax.scan(scan_step, games, length=num_steps)
    return games


def new_games(keys: PRNGKeyArray) -> Games:
    """Fresh games, one per key (batched)."""
    game_keys, play_keys = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)
    state, _ = jax.vmap(game.reset)(game_keys)
    return Games(state, play_keys, jnp.zeros(keys.shape, jnp.float32))


def prepare(num_envs: int, num_steps: int, seed: int, devices: int) -> tuple[Callable[[Games], Games], Games]:
    """The benchmark's compiled call (`num_steps` steps of every game, sharded over
    `devices`) and its first games. `bench_env_loop --compare-pool` times the same call."""
    if num_envs % devices:
        raise ValueError(f"--num-envs {num_envs} is not divisible by --devices {devices}")
    common.request_devices(devices)
    mesh = common.batch_mesh(devices, "envs")
    # Every leaf of Games has the env axis first, so one sharding covers the whole tree.
    by_env = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("envs"))

    keys = jax.device_put(jax.random.split(jax.random.key(seed), num_envs), by_env)
    games = jax.jit(new_games, out_shardings=by_env)(keys)
    run = jax.jit(
        functools.partial(play, num_steps=num_steps),
        in_shardings=by_env,
        out_shardings=by_env,
        donate_argnums=0,
    )
    return run, games


def main(args: Args) -> dict[str, Any]:
    """Run the benchmark, print and record its result, and return it."""
    run, games = prepare(args.num_envs, args.num_steps, args.seed, args.devices)
    timing, _ = common.time_calls(run, games, args.repeats)
    config = {"num_envs": args.num_envs, "num_steps": args.num_steps, "devices": args.devices}
    return common.record("env", config, timing, args.num_envs * args.num_steps, args.out)


if __name__ == "__main__":
    common.disable_compilation_cache()
    main(Args(underscores_to_dashes=True).parse_args())
