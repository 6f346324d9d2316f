"""HackMatrix as a functional JAX environment, in the style of gymnax 1.0.

    from hm.env import HackMatrix
    env = HackMatrix()
    params = env.default_params
    obs, state = env.reset(key, params)
    obs, state, reward, done, info = env.step(key, state, action, params)

Everything is unbatched and pure; batch with `jax.vmap(env.step)`. As in gymnax, `step`
resets a finished episode itself: when `done`, the returned `obs` and `state` already
belong to the next episode, and `info["final_observation"]` is the observation the
finished one ended on. `done` is `terminated | truncated`; the two are apart in `info`
(a truncated episode was cut at `params.max_episode_steps`, and a learner bootstraps
from its final observation, where a terminated one has no future).

The auto-reset is cheap: under `vmap`, only the games that are done generate a new game
(`hm.game.reset_where`), so a plain `lax.scan` over `jax.vmap(env.step)` pays for the
episodes that end, not for a new game per step of every game.

A curriculum (`EnvParams.curriculum_share`, `curriculum_max_stage`) starts some episodes
at a later stage (`hm.game.generation.curriculum_game`, docs/rules.md#curriculum-starts);
with the defaults every episode is an ordinary game from stage 1, bit for bit.

`Environment` holds what any such environment shares (truncation, auto-reset, episode
counters, the info keys); a subclass gives the rules of one episode. The trainer
(`hm.train`) takes any `Environment` as it is, so there is one vectorised-env
implementation. Two optional hooks serve a learner: `compact_observation` /
`expand_observation` (how a rollout buffer may store an observation; the identity by
default) and `action_metrics` (named statistics of how often each action was taken;
none by default).
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float32, Int32, PRNGKeyArray, PyTree

import hm.game as game
from hm.game import constants as C
from hm.game import generation, observation

Info = dict


def _int32(x) -> Int32[Array, "*games"]:
    return jnp.asarray(x, jnp.int32)


def _float32(x) -> Float32[Array, "*games"]:
    return jnp.asarray(x, jnp.float32)


def _concrete(x) -> np.ndarray | None:
    """`x`'s value, or None inside a traced function (the caller's value, unchecked)."""
    try:
        return np.asarray(x)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return None


class EnvParams(eqx.Module):
    """Settings of an environment that may be traced (every field is a pytree leaf).

    `max_episode_steps` truncates an episode. `curriculum_share` is the probability that a
    new episode is a curriculum start (docs/rules.md#curriculum-starts), at a stage drawn
    uniformly from 2..`curriculum_max_stage`; 0, the default, starts every episode as an
    ordinary game from stage 1.

    Each field is one value for every game, or one per game (a leading axis, mapped
    with the games: `jax.vmap(env.step)(keys, states, actions, params)`).
    """

    max_episode_steps: Int32[Array, "*games"] = eqx.field(converter=_int32, default=1000)
    curriculum_share: Float32[Array, "*games"] = eqx.field(converter=_float32, default=0.0)
    curriculum_max_stage: Int32[Array, "*games"] = eqx.field(converter=_int32, default=C.NUM_STAGES)

    def __check_init__(self):
        checks = (("max_episode_steps", "at least 1", lambda v: v >= 1),
                  ("curriculum_share", "in [0, 1]", lambda v: (v >= 0) & (v <= 1)),
                  ("curriculum_max_stage", f"in 2..{C.NUM_STAGES}",
                   lambda v: (v >= 2) & (v <= C.NUM_STAGES)))
        for name, span, ok in checks:
            value = _concrete(getattr(self, name))
            if value is not None and not np.all(ok(value)):
                raise ValueError(f"EnvParams.{name} must be {span}, got {value}")


class EnvState(eqx.Module):
    """One environment: its game and the running episode's counters."""

    game: PyTree                          # the episode's own state (GameState for HackMatrix)
    episode_return: Float32[Array, ""]    # undiscounted return so far
    episode_length: Int32[Array, ""]      # steps so far


class Environment(eqx.Module):
    """A functional environment with truncation and auto-reset (gymnax's `Environment`).

    A subclass gives the rules of one episode: `reset_env`, `step_env`,
    `game_action_mask`, `game_observation`, and, where a new episode is expensive,
    a cheaper `reset_env_where`. `reset` and `step` are the same for every environment.
    As in gymnax, the reset methods take the `EnvParams` (how an episode starts may
    depend on them); `step_env` does not need them.
    """

    num_actions: eqx.AbstractVar[int]
    observation_shape: eqx.AbstractVar[tuple[int, ...]]

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    @abc.abstractmethod
    def reset_env(self, key: PRNGKeyArray, params: EnvParams) -> tuple[Float32[Array, "..."], PyTree]:
        """A new episode under `params`: `(observation, game)`."""

    @abc.abstractmethod
    def step_env(self, key: PRNGKeyArray, game_state: PyTree, action: Int32[Array, ""]
                 ) -> tuple[Float32[Array, "..."], PyTree, Float32[Array, ""], Bool[Array, ""], Info]:
        """One step of the episode: `(observation, game, reward, terminated, info)`.

        `info` holds what the subclass reports about a step (fixed keys and shapes);
        `step` adds its own keys to it.
        """

    @abc.abstractmethod
    def game_action_mask(self, game_state: PyTree) -> Bool[Array, " actions"]:
        """Which actions are legal in `game_state`."""

    @abc.abstractmethod
    def game_observation(self, game_state: PyTree) -> Float32[Array, "..."]:
        """The observation of `game_state`."""

    def reset_env_where(self, done: Bool[Array, ""], key: PRNGKeyArray, game_state: PyTree,
                        obs: Float32[Array, "..."], params: EnvParams
                        ) -> tuple[Float32[Array, "..."], PyTree]:
        """`reset_env(key, params)` where `done`, else `(obs, game_state)`.

        This default runs `reset_env` for every game (under `vmap`, on every step);
        override it where a new episode is expensive.
        """
        fresh_obs, fresh = self.reset_env(key, params)
        return (jnp.where(done, fresh_obs, obs),
                jax.tree.map(lambda new, old: jnp.where(done, new, old), fresh, game_state))

    def reset(self, key: PRNGKeyArray, params: EnvParams | None = None
              ) -> tuple[Float32[Array, "..."], EnvState]:
        """A new episode: `(obs, state)`, started as `params` (default `default_params`)
        asks: a curriculum start, or an ordinary game."""
        params = self.default_params if params is None else params
        obs, game_state = self.reset_env(key, params)
        return obs, EnvState(game=game_state, episode_return=jnp.float32(0.0),
                             episode_length=jnp.int32(0))

    def step(self, key: PRNGKeyArray, state: EnvState, action: Int32[Array, ""],
             params: EnvParams | None = None
             ) -> tuple[Float32[Array, "..."], EnvState, Float32[Array, ""], Bool[Array, ""], Info]:
        """One step, then a new episode if this one ended: `(obs, state, reward, done, info)`.

        `key` is split into `(step_key, reset_key)`: the step uses the first, and a
        finished episode is replaced by `reset(reset_key, params)`'s.

        `info` adds to `step_env`'s keys: `terminated` and `truncated` (`done` is their
        or), `final_observation` (the observation after the step, before any reset:
        equal to `obs` unless `done`), `action_mask` (for the returned state), and
        `episode_return` / `episode_length` of the episode so far, this step included.
        """
        params = self.default_params if params is None else params
        step_key, reset_key = jax.random.split(key)
        final_obs, game_state, reward, terminated, info = self.step_env(
            step_key, state.game, jnp.asarray(action, jnp.int32))
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        truncated = ~terminated & (episode_length >= params.max_episode_steps)
        done = terminated | truncated
        obs, game_state = self.reset_env_where(done, reset_key, game_state, final_obs, params)
        info = dict(info)
        info.update(terminated=terminated, truncated=truncated, final_observation=final_obs,
                    action_mask=self.game_action_mask(game_state),
                    episode_return=episode_return, episode_length=episode_length)
        new_state = EnvState(game=game_state,
                             episode_return=jnp.where(done, jnp.float32(0.0), episode_return),
                             episode_length=jnp.where(done, jnp.int32(0), episode_length))
        return obs, new_state, reward, done, info

    def compact_observation(self, obs: Float32[Array, "..."]) -> PyTree:
        """A compact form of `obs` for a rollout buffer; `expand_observation` inverts it
        exactly. The identity unless a subclass knows better."""
        return obs

    def expand_observation(self, compact: PyTree) -> Float32[Array, "..."]:
        """The observation that `compact_observation` stored, bit for bit."""
        return compact

    def action_metrics(self, fractions: Float32[Array, " actions"]) -> dict[str, Float32[Array, ""]]:
        """Named statistics of `fractions`, the share of steps that took each action (a
        learner logs them as `actions/...`). None unless a subclass names some."""
        del fractions
        return {}

    def action_mask(self, state: EnvState) -> Bool[Array, " actions"]:
        """Which actions are legal in `state`."""
        return self.game_action_mask(state.game)

    def observation(self, state: EnvState) -> Float32[Array, "..."]:
        """The observation of `state` (what `reset` and `step` return with it)."""
        return self.game_observation(state.game)


class HackMatrix(Environment):
    """HackMatrix (`hm.game`): observations float32[1545], 28 actions.

    `info` of `step`, besides the keys `Environment.step` adds: `reward_terms` (name ->
    float32, the terms of `hm.game.constants.REWARD_TERMS`, summing to the reward), `won`,
    `died`, `illegal` (an illegal action leaves the game as it was, gives reward 0 and
    terminates the episode), and, of the stepped game before any reset, `stage` and
    `programs_owned` (how many programs the player owns, `hm.game.programs_owned`).

    Observations are stored compactly (`compact_observation`: the tail as uint8 multiples
    of 1/36, `hm.game.observation.pack`), and `action_metrics` names the shares of moves,
    siphons and programs, and of each program.
    """

    num_actions: int = eqx.field(static=True, default=C.NUM_ACTIONS)
    observation_shape: tuple[int, ...] = eqx.field(static=True, default=(C.OBS_FLAT_SIZE,))

    def reset_env(self, key: PRNGKeyArray, params: EnvParams
                  ) -> tuple[Float32[Array, " 1545"], game.GameState]:
        state, obs = game.reset(key, self.start_stage(key, params))
        return obs.flat(), state

    def start_stage(self, key: PRNGKeyArray, params: EnvParams) -> Int32[Array, ""]:
        """The stage the episode that `key` starts begins at: 1 unless the curriculum
        draws a later one (`generation.curriculum_stage`, from the key's own stream)."""
        return generation.curriculum_stage(key, params.curriculum_share, params.curriculum_max_stage)

    def step_env(self, key: PRNGKeyArray, game_state: game.GameState, action: Int32[Array, ""]
                 ) -> tuple[Float32[Array, " 1545"], game.GameState, Float32[Array, ""],
                            Bool[Array, ""], Info]:
        game_state, obs, reward, terminated, game_info = game.step(game_state, action, key)
        info = {
            "reward_terms": {name: jnp.asarray(game_info["reward_terms"][name], jnp.float32)
                             for name in C.REWARD_TERMS},
            "won": game_info["won"],
            "died": game_info["died"],
            "illegal": game_info["illegal"],
            "stage": jnp.asarray(game_state.stage, jnp.int32),
            "programs_owned": game.programs_owned(game_state),
        }
        return obs.flat(), game_state, jnp.asarray(reward, jnp.float32), terminated, info

    def game_action_mask(self, game_state: game.GameState) -> Bool[Array, " 28"]:
        return game.legal_actions(game_state)

    def game_observation(self, game_state: game.GameState) -> Float32[Array, " 1545"]:
        return game.observe(game_state).flat()

    def compact_observation(self, obs: Float32[Array, " 1545"]) -> observation.PackedObservation:
        return observation.pack(obs)

    def expand_observation(self, compact: observation.PackedObservation) -> Float32[Array, " 1545"]:
        return observation.unpack(compact)

    def action_metrics(self, fractions: Float32[Array, " 28"]) -> dict[str, Float32[Array, ""]]:
        """Shares of all steps: `move_frac`, `siphon_frac`, `program_frac`, and
        `program/<name>` for each program."""
        out = {
            "move_frac": jnp.sum(fractions[: C.ACTION_SIPHON]),
            "siphon_frac": fractions[C.ACTION_SIPHON],
            "program_frac": jnp.sum(fractions[C.PROGRAM_ACTION_OFFSET:]),
        }
        for program, name in enumerate(C.PROGRAM_NAMES):
            out[f"program/{name}"] = fractions[C.PROGRAM_ACTION_OFFSET + program]
        return out

    def reset_env_where(self, done: Bool[Array, ""], key: PRNGKeyArray,
                        game_state: game.GameState, obs: Float32[Array, " 1545"], params: EnvParams
                        ) -> tuple[Float32[Array, " 1545"], game.GameState]:
        """Only the games that are done generate (`hm.game.reset_where`); every game
        draws its start stage (two hashed words), the done ones use it."""
        game_state, new_obs = game.reset_where(done, game_state, game.Observation(obs), key,
                                               self.start_stage(key, params))
        return new_obs.flat(), game_state
