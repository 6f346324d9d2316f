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

`Environment` holds what any such environment shares (truncation, auto-reset, episode
counters, the info keys); a subclass gives the rules of one episode. The trainer's
environments (`hm.train.envs`) run through it too, so there is one vectorised-env
implementation.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float32, Int32, PRNGKeyArray, PyTree

import hm.game as game
from hm.game import constants as C

Info = dict


def _int32(x) -> Int32[Array, ""]:
    return jnp.asarray(x, jnp.int32)


class EnvParams(eqx.Module):
    """Settings of an environment that may be traced (every field is a pytree leaf)."""

    max_episode_steps: Int32[Array, ""] = eqx.field(converter=_int32, default=1000)

    def __check_init__(self):
        try:
            steps = int(self.max_episode_steps)
        except jax.errors.ConcretizationTypeError:
            return  # built inside a traced function: the caller's value, unchecked
        if steps < 1:
            raise ValueError(f"EnvParams.max_episode_steps must be at least 1, got {steps}")


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
    """

    num_actions: eqx.AbstractVar[int]
    observation_shape: eqx.AbstractVar[tuple[int, ...]]

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    @abc.abstractmethod
    def reset_env(self, key: PRNGKeyArray) -> tuple[Float32[Array, "..."], PyTree]:
        """A new episode: `(observation, game)`."""

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
                        obs: Float32[Array, "..."]) -> tuple[Float32[Array, "..."], PyTree]:
        """`reset_env(key)` where `done`, else `(obs, game_state)`.

        This default runs `reset_env` for every game (under `vmap`, on every step);
        override it where a new episode is expensive.
        """
        fresh_obs, fresh = self.reset_env(key)
        return (jnp.where(done, fresh_obs, obs),
                jax.tree.map(lambda new, old: jnp.where(done, new, old), fresh, game_state))

    def reset(self, key: PRNGKeyArray, params: EnvParams | None = None
              ) -> tuple[Float32[Array, "..."], EnvState]:
        """A new episode: `(obs, state)`. `params` is accepted for the gymnax signature;
        no setting changes how an episode starts."""
        del params
        obs, game_state = self.reset_env(key)
        return obs, EnvState(game=game_state, episode_return=jnp.float32(0.0),
                             episode_length=jnp.int32(0))

    def step(self, key: PRNGKeyArray, state: EnvState, action: Int32[Array, ""],
             params: EnvParams | None = None
             ) -> tuple[Float32[Array, "..."], EnvState, Float32[Array, ""], Bool[Array, ""], Info]:
        """One step, then a new episode if this one ended: `(obs, state, reward, done, info)`.

        `key` is split into `(step_key, reset_key)`: the step uses the first, and a
        finished episode is replaced by `reset(reset_key)`'s.

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
        obs, game_state = self.reset_env_where(done, reset_key, game_state, final_obs)
        info = dict(info)
        info.update(terminated=terminated, truncated=truncated, final_observation=final_obs,
                    action_mask=self.game_action_mask(game_state),
                    episode_return=episode_return, episode_length=episode_length)
        new_state = EnvState(game=game_state,
                             episode_return=jnp.where(done, jnp.float32(0.0), episode_return),
                             episode_length=jnp.where(done, jnp.int32(0), episode_length))
        return obs, new_state, reward, done, info

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
    terminates the episode) and `stage` (of the stepped game, before any reset).
    """

    num_actions: int = eqx.field(static=True, default=C.NUM_ACTIONS)
    observation_shape: tuple[int, ...] = eqx.field(static=True, default=(C.OBS_FLAT_SIZE,))

    def reset_env(self, key: PRNGKeyArray) -> tuple[Float32[Array, " 1545"], game.GameState]:
        state, obs = game.reset(key)
        return obs.flat(), state

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
        }
        return obs.flat(), game_state, jnp.asarray(reward, jnp.float32), terminated, info

    def game_action_mask(self, game_state: game.GameState) -> Bool[Array, " 28"]:
        return game.legal_actions(game_state)

    def game_observation(self, game_state: game.GameState) -> Float32[Array, " 1545"]:
        return game.observe(game_state).flat()

    def reset_env_where(self, done: Bool[Array, ""], key: PRNGKeyArray,
                        game_state: game.GameState, obs: Float32[Array, " 1545"]
                        ) -> tuple[Float32[Array, " 1545"], game.GameState]:
        """Only the games that are done generate (`hm.game.reset_where`)."""
        game_state, new_obs = game.reset_where(done, game_state, game.Observation(obs), key)
        return new_obs.flat(), game_state
