"""Environments as the learner sees them, and the batched auto-reset around them.

`AbstractEnv` is the protocol: the four functions of `hm.game` (reset, step,
legal_actions, observe) on a single unbatched game, with the observation already flat,
plus how to store an observation compactly and how to name action statistics.
`HackMatrixEnv` adapts `hm.game` to it; `NullEnv` does (almost) nothing in the same
shapes, to measure the learner on its own; tests add tiny probe environments.

Episode handling is the same for every environment and lives here once, in
`vector_unstarted` / `vector_start` / `vector_step`, which work on a batch of games:

* truncation: an episode that reaches `max_episode_steps` without ending is cut; the
  learner bootstraps from the value of its last observation (it is not a death);
* auto-reset from a reset pool: `reset` can be expensive (stage generation), so it is
  not evaluated per env per step. Instead the learner draws one fresh game per env
  slot per rollout (`vector_fresh`) and an env slot that finishes an episode takes its
  fresh game with `jnp.where`. A slot that finishes twice in one rollout starts from
  the same fresh game again (its play then differs by the policy's and the game's
  randomness). Keeping the pool per slot makes it gather-free and independent of how
  env slots are split over devices;
* a new run's slots hold no game (`vector_unstarted`, episode length -1) and take their
  first game from the first rollout's pool (`vector_start`), so starting a run does not
  compile `reset` a second time outside the training program.
"""

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int32, Key, PRNGKeyArray, PyTree, UInt8

from hm.game import constants as C


class EnvInfo(eqx.Module):
    """What the learner reports about a step, beyond the reward."""

    reward_terms: Float[Array, " terms"]  # in the order of the env's `reward_terms`
    stage: Int32[Array, ""]               # stage reached after the step
    won: Bool[Array, ""]


class AbstractEnv(eqx.Module):
    """A single, unbatched environment (batching is `jax.vmap` by the caller)."""

    obs_size: eqx.AbstractVar[int]
    num_actions: eqx.AbstractVar[int]
    reward_terms: eqx.AbstractVar[tuple[str, ...]]

    @abc.abstractmethod
    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, Float[Array, " obs"]]:
        """A new episode: `(state, flat observation)`."""

    @abc.abstractmethod
    def step(
        self, state: PyTree, action: Int32[Array, ""], key: PRNGKeyArray
    ) -> tuple[PyTree, Float[Array, " obs"], Float[Array, ""], Bool[Array, ""], EnvInfo]:
        """`(state, obs, reward, done, info)`; `done` means terminal (no bootstrap)."""

    @abc.abstractmethod
    def legal_actions(self, state: PyTree) -> Bool[Array, " actions"]:
        """Which actions are legal in `state`."""

    @abc.abstractmethod
    def observe(self, state: PyTree) -> Float[Array, " obs"]:
        """The flat observation of `state`."""

    def restart(self, done: Bool[Array, ""], state: PyTree, fresh: PyTree) -> PyTree:
        """`fresh` (a new episode from `reset`) where `done`, else `state`."""
        return jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, state)

    def encode_obs(self, obs: Float[Array, " obs"]) -> PyTree:
        """A compact form of `obs` for the rollout buffer; `decode_obs` inverts it exactly."""
        return obs

    def decode_obs(self, compact: PyTree) -> Float[Array, " obs"]:
        return compact

    def action_metrics(self, fractions: Float[Array, " actions"]) -> dict[str, Float[Array, ""]]:
        """Named statistics of the fraction of steps that took each action."""
        return {}


# --- compact observations --------------------------------------------------------------

# Every value the game puts in the programs vector and the grid is k/3, k/4 or k/9
# (GAME_RULES §15) for small k: a multiple of 1/36. The tail is stored as the uint8
# round(36 x) and decoded as `u / 36` by the same XLA division the game uses, which
# reproduces the game's float32 values bit for bit over their range (k/3 for k <= 3,
# k/4, k/9 for k <= 9; tested on real observations). XLA on CPU turns division by a
# constant into multiplication by the reciprocal, so neither side is always the
# correctly rounded quotient (17/36, 5/3 are 1 ulp off), but both sides agree.
# The player vector (row/5, credits/50, ...) is kept as float32.
OBS_QUANTUM = 36


class PackedObservation(eqx.Module):
    """A flat observation with its tail stored as uint8 multiples of 1/36."""

    head: Float[Array, " head"]
    tail: UInt8[Array, " tail"]


def pack_obs(obs: Float[Array, " obs"], head_size: int) -> PackedObservation:
    tail = jnp.clip(jnp.round(obs[head_size:] * OBS_QUANTUM), 0, 255).astype(jnp.uint8)
    return PackedObservation(head=obs[:head_size], tail=tail)


def unpack_obs(packed: PackedObservation) -> Float[Array, " obs"]:
    tail = packed.tail.astype(jnp.float32) / OBS_QUANTUM
    return jnp.concatenate([packed.head, tail], axis=-1)


def hackmatrix_action_metrics(fractions: Float[Array, " actions"]) -> dict[str, Float[Array, ""]]:
    """Fractions of steps per action kind and per program (fractions of all steps)."""
    out = {
        "actions/move_frac": jnp.sum(fractions[: C.ACTION_SIPHON]),
        "actions/siphon_frac": fractions[C.ACTION_SIPHON],
        "actions/program_frac": jnp.sum(fractions[C.PROGRAM_ACTION_OFFSET:]),
    }
    for program, name in enumerate(C.PROGRAM_NAMES):
        out[f"actions/program/{name}"] = fractions[C.PROGRAM_ACTION_OFFSET + program]
    return out


class _HackMatrixShaped(AbstractEnv):
    """What every env in HackMatrix's shapes shares: the packed observation and the
    action metrics."""

    def encode_obs(self, obs):
        return pack_obs(obs, C.PLAYER_FEATURES)

    def decode_obs(self, compact):
        return unpack_obs(compact)

    def action_metrics(self, fractions):
        return hackmatrix_action_metrics(fractions)


class HackMatrixEnv(_HackMatrixShaped):
    """`hm.game` behind the learner's protocol."""

    obs_size: int = eqx.field(static=True, default=C.OBS_FLAT_SIZE)
    num_actions: int = eqx.field(static=True, default=C.NUM_ACTIONS)
    reward_terms: tuple[str, ...] = eqx.field(static=True, default=C.REWARD_TERMS)

    def reset(self, key):
        from hm import game

        state, obs = game.reset(key)
        return state, obs.flat()

    def step(self, state, action, key):
        from hm import game

        state, obs, reward, done, info = game.step(state, action, key)
        terms = jnp.stack([jnp.asarray(info["reward_terms"][name], jnp.float32) for name in self.reward_terms])
        env_info = EnvInfo(reward_terms=terms, stage=jnp.asarray(state.stage, jnp.int32),
                           won=jnp.asarray(info["won"], bool))
        return state, obs.flat(), jnp.asarray(reward, jnp.float32), jnp.asarray(done, bool), env_info

    def legal_actions(self, state):
        from hm import game

        return game.legal_actions(state)

    def restart(self, done, state, fresh):
        from hm import game

        return game.restart(done, state, fresh)

    def observe(self, state):
        from hm import game

        return game.observe(state).flat()


class NullState(eqx.Module):
    row: Int32[Array, ""]        # which canned observation is showing
    remaining: Int32[Array, ""]  # steps until the episode ends


class NullEnv(_HackMatrixShaped):
    """A do-nothing environment in HackMatrix's shapes, to time the learner alone.

    The state is two integers; observations, masks and rewards are rows of small
    canned random tables (observation values on the game's 1/36 grid, decoded as the
    learner decodes them, so they pack the same way), chosen by a cheap hash of the
    action. Episodes last 20-60 steps, so the
    auto-reset path is exercised as in the game.
    """

    obs_table: Float[Array, "rows obs"]
    mask_table: Bool[Array, "rows actions"]
    reward_table: Float[Array, " rows"]
    obs_size: int = eqx.field(static=True, default=C.OBS_FLAT_SIZE)
    num_actions: int = eqx.field(static=True, default=C.NUM_ACTIONS)
    reward_terms: tuple[str, ...] = eqx.field(static=True, default=C.REWARD_TERMS)

    def __init__(self, rows: int = 16, seed: int = 0):
        rng = np.random.default_rng(seed)
        tail = rng.integers(0, OBS_QUANTUM + 1, size=(rows, C.OBS_FLAT_SIZE - C.PLAYER_FEATURES))
        head = jnp.asarray(rng.random((rows, C.PLAYER_FEATURES)), jnp.float32)
        unpack = jax.vmap(lambda h, t: unpack_obs(PackedObservation(head=h, tail=t)))
        mask = rng.random((rows, C.NUM_ACTIONS)) < 0.5
        mask[:, 0] = True
        self.obs_table = unpack(head, jnp.asarray(tail, jnp.uint8))
        self.mask_table = jnp.asarray(mask)
        self.reward_table = jnp.asarray(rng.normal(size=rows), jnp.float32)

    def reset(self, key):
        row_key, length_key = jax.random.split(key)
        rows = self.obs_table.shape[0]
        state = NullState(row=jax.random.randint(row_key, (), 0, rows, jnp.int32),
                          remaining=jax.random.randint(length_key, (), 20, 61, jnp.int32))
        return state, self.obs_table[state.row]

    def step(self, state, action, key):
        rows = self.obs_table.shape[0]
        state = NullState(row=(state.row * 5 + action + 1) % rows, remaining=state.remaining - 1)
        reward = self.reward_table[state.row]
        terms = jnp.zeros((len(self.reward_terms),), jnp.float32).at[0].set(reward)
        info = EnvInfo(reward_terms=terms, stage=jnp.int32(1), won=jnp.bool_(False))
        return state, self.obs_table[state.row], reward, state.remaining <= 0, info

    def legal_actions(self, state):
        return self.mask_table[state.row]

    def observe(self, state):
        return self.obs_table[state.row]


# --- batches of environments with truncation and auto-reset ----------------------------


class VecEnvState(eqx.Module):
    """A batch of `n` games and what the learner keeps about each (leading axis n)."""

    state: PyTree                      # the env's state, every leaf batched
    obs: Float[Array, "n obs"]         # current observation (network input)
    mask: Bool[Array, "n actions"]     # current legal actions
    episode_return: Float[Array, " n"]  # undiscounted return so far this episode
    episode_length: Int32[Array, " n"]  # steps so far this episode; -1: no game yet


class FreshGames(eqx.Module):
    """One newly reset game per env slot: the reset pool of one rollout."""

    state: PyTree
    obs: Float[Array, "n obs"]


class StepOutput(eqx.Module):
    """What one batched step produced, before finished games were replaced."""

    final_obs: Float[Array, "n obs"]   # observation after the step (for bootstrapping)
    reward: Float[Array, " n"]
    done: Bool[Array, " n"]            # terminal
    truncated: Bool[Array, " n"]       # hit the step limit without terminating
    info: EnvInfo                      # batched
    episode_return: Float[Array, " n"]  # return of the episode that just finished (if any)
    episode_length: Int32[Array, " n"]


def vector_fresh(env: AbstractEnv, keys: Key[Array, " n"]) -> FreshGames:
    """Reset one game per key (a batch of keys)."""
    state, obs = jax.vmap(env.reset)(keys)
    return FreshGames(state=state, obs=obs)


_RESET_SHAPES: dict[Any, PyTree] = {}


def reset_shapes(env: AbstractEnv) -> PyTree:
    """Shapes and dtypes of one game's state (`jax.ShapeDtypeStruct` leaves).

    Tracing a game's `reset` takes about a second, so the answer is remembered per
    env class, static fields and array shapes (all a state's shape can depend on).
    """
    arrays, static = eqx.partition(env, eqx.is_array)
    key = (jax.tree.structure(static), tuple(jax.tree.leaves(static)),
           tuple((a.shape, a.dtype) for a in jax.tree.leaves(arrays)))
    try:
        hash(key)
    except TypeError:
        return jax.eval_shape(env.reset, jax.random.key(0))[0]
    if key not in _RESET_SHAPES:
        _RESET_SHAPES[key] = jax.eval_shape(env.reset, jax.random.key(0))[0]
    return _RESET_SHAPES[key]


def vector_unstarted(env: AbstractEnv, n: int) -> VecEnvState:
    """`n` slots holding no game yet (zeros, episode length -1); see `vector_start`."""

    def zeros(shape):
        return jnp.zeros((n,) + shape.shape, shape.dtype)

    return VecEnvState(state=jax.tree.map(zeros, reset_shapes(env)),
                       obs=jnp.zeros((n, env.obs_size), jnp.float32),
                       mask=jnp.ones((n, env.num_actions), bool),
                       episode_return=jnp.zeros((n,), jnp.float32),
                       episode_length=jnp.full((n,), -1, jnp.int32))


def vector_start(env: AbstractEnv, envs: VecEnvState, fresh: FreshGames) -> VecEnvState:
    """Give every slot that holds no game yet its game from `fresh`."""
    new = envs.episode_length < 0
    state, obs = _select(new, (fresh.state, fresh.obs), (envs.state, envs.obs))
    mask = jnp.where(new[:, None], jax.vmap(env.legal_actions)(state), envs.mask)
    return VecEnvState(state=state, obs=obs, mask=mask, episode_return=envs.episode_return,
                       episode_length=jnp.maximum(envs.episode_length, 0))


def _select(pred: Bool[Array, " n"], on_true: PyTree, on_false: PyTree) -> PyTree:
    def where(a, b):
        return jnp.where(pred.reshape(pred.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree.map(where, on_true, on_false)


def vector_step(
    env: AbstractEnv,
    envs: VecEnvState,
    actions: Int32[Array, " n"],
    keys: Key[Array, " n"],
    fresh: FreshGames,
    max_episode_steps: int,
) -> tuple[VecEnvState, StepOutput]:
    """Step every game; cut episodes at `max_episode_steps`; restart finished ones.

    A finished slot (terminal or truncated) continues from its game in `fresh`.
    """
    state, obs, reward, done, info = jax.vmap(env.step)(envs.state, actions, keys)
    episode_return = envs.episode_return + reward
    episode_length = envs.episode_length + 1
    truncated = ~done & (episode_length >= max_episode_steps)
    finished = done | truncated
    state = jax.vmap(env.restart)(finished, state, fresh.state)
    next_obs = _select(finished, fresh.obs, obs)
    # after the swap, so the (possibly costly) mask is traced once, not also for the pool
    mask = jax.vmap(env.legal_actions)(state)
    new = VecEnvState(
        state=state, obs=next_obs, mask=mask,
        episode_return=jnp.where(finished, 0.0, episode_return),
        episode_length=jnp.where(finished, 0, episode_length),
    )
    out = StepOutput(final_obs=obs, reward=reward, done=done, truncated=truncated, info=info,
                     episode_return=episode_return, episode_length=episode_length)
    return new, out


def describe(env: AbstractEnv) -> dict[str, Any]:
    """Identity of an environment, for checkpoints (refuse mismatched restores)."""
    return {"env": type(env).__name__, "obs_size": env.obs_size, "num_actions": env.num_actions,
            "reward_terms": list(env.reward_terms)}
