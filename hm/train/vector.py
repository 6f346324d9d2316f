"""Batches of environments as the learner steps them: any `hm.env.Environment`.

Episode handling is not written here: `vector_step` runs every slot through the env's
own `Environment.step`, the same truncation, auto-reset and episode counters a user of
`hm.env` gets:

* truncation: an episode that reaches `max_episode_steps` without ending is cut; the
  learner bootstraps from the value of its last observation (it is not a death);
* auto-reset: a finished slot continues with a new game drawn from that step's key, by
  the env's `reset_env_where`, which for HackMatrix generates games only for the slots
  that finished (`hm.game.reset_where`), so no reset pool is needed;
* a new run's slots hold no game (`vector_unstarted`, episode length -1) and take their
  first game in the first rollout (`vector_start`, the same `reset_env_where`), so
  starting a run does not compile the game a second time outside the training program;
* a curriculum: each slot's new episodes start as its `curriculum_share` and
  `curriculum_max_stage` ask (`hm.env.EnvParams`; one value per slot, so the members of
  a population may differ). Envs without stages ignore them.

What the learner reads of a step's `info`, besides the keys `Environment.step` adds:
`reward_terms` (name -> float32, the terms in the env's order; may be empty), `stage`
(int32) and `won` (bool). Other keys are passed on to the training features
(`hm.train.features`), e.g. the game's `programs_owned` for the program bonus.
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int32, Key, PyTree

from hm.env import Environment, EnvParams, EnvState
from hm.game import constants as C


class VecEnvState(eqx.Module):
    """A batch of `n` games and what the learner keeps about each (leading axis n)."""

    state: PyTree                      # the env's game state, every leaf batched
    obs: Float[Array, "n obs"]         # current observation (network input)
    mask: Bool[Array, "n actions"]     # current legal actions
    episode_return: Float[Array, " n"]  # undiscounted return so far this episode
    episode_length: Int32[Array, " n"]  # steps so far this episode; -1: no game yet


class StepOutput(eqx.Module):
    """What one batched step produced, before finished games were replaced."""

    final_obs: Float[Array, "n obs"]    # observation after the step (for bootstrapping)
    reward: Float[Array, " n"]
    done: Bool[Array, " n"]             # terminal
    truncated: Bool[Array, " n"]        # hit the step limit without terminating
    reward_terms: Float[Array, "n terms"]  # in the order of `reward_terms(env)`
    stage: Int32[Array, " n"]           # stage reached after the step
    won: Bool[Array, " n"]
    episode_return: Float[Array, " n"]  # return of the episode that just finished (if any)
    episode_length: Int32[Array, " n"]
    info: dict[str, Any]                # the env's other info keys (for the features)


_ADDED_BY_STEP = ("terminated", "truncated", "final_observation", "action_mask", "episode_return",
                  "episode_length")
_READ = ("reward_terms", "stage", "won")


def _observation_size(env: Environment) -> int:
    (size,) = env.observation_shape
    return size


def _step_info(env: Environment) -> dict[str, Any]:
    """The shapes of one step's `info` (`jax.ShapeDtypeStruct` leaves), and under
    `reward_term_order` the names of its reward terms in the env's order."""
    params = env.default_params
    order: list[tuple[str, ...]] = []

    def one_step(key):
        _, state = env.reset(key, params)
        action = jnp.argmax(env.action_mask(state)).astype(jnp.int32)
        info = env.step(key, state, action, params)[4]
        order.append(tuple(info.get("reward_terms", {})))  # insertion order, before any tree sorting
        return info

    shapes = jax.eval_shape(one_step, jax.random.key(0))
    missing = [k for k in _READ if k not in shapes]
    if missing:
        raise ValueError(f"{type(env).__name__}.step_env's info lacks {missing}: the learner reads "
                         f"{', '.join(_READ)} (hm.train.vector)")
    return {**shapes, "reward_term_order": order[0]}


_INFO: dict[Any, dict[str, Any]] = {}


def step_info(env: Environment) -> dict[str, Any]:
    """`_step_info`, remembered per env (tracing a game's step takes about a second)."""
    key = _cache_key(env)
    if key is None:
        return _step_info(env)
    if key not in _INFO:
        _INFO[key] = _step_info(env)
    return _INFO[key]


def reward_terms(env: Environment) -> tuple[str, ...]:
    """The names of the env's reward terms, in its order (`info["reward_terms"]`)."""
    return step_info(env)["reward_term_order"]


def info_keys(env: Environment) -> frozenset[str]:
    """The keys of the env's own step info (those `Environment.step` adds left out)."""
    return frozenset(step_info(env)) - set(_ADDED_BY_STEP) - {"reward_term_order"}


def _cache_key(env: Environment):
    arrays, static = eqx.partition(env, eqx.is_array)
    key = (jax.tree.structure(static), tuple(jax.tree.leaves(static)),
           tuple((a.shape, a.dtype) for a in jax.tree.leaves(arrays)))
    try:
        hash(key)
    except TypeError:
        return None
    return key


_RESET_SHAPES: dict[Any, PyTree] = {}


def game_shapes(env: Environment) -> PyTree:
    """Shapes and dtypes of one game's state (`jax.ShapeDtypeStruct` leaves).

    Tracing a game's reset takes about a second, so the answer is remembered per env
    class, static fields and array shapes (all a state's shape can depend on).
    """
    key = _cache_key(env)

    def shapes():
        return jax.eval_shape(lambda k: env.reset_env(k, env.default_params)[1], jax.random.key(0))

    if key is None:
        return shapes()
    if key not in _RESET_SHAPES:
        _RESET_SHAPES[key] = shapes()
    return _RESET_SHAPES[key]


def vector_unstarted(env: Environment, n: int) -> VecEnvState:
    """`n` slots holding no game yet (zeros, episode length -1); see `vector_start`."""

    def zeros(shape):
        return jnp.zeros((n,) + shape.shape, shape.dtype)

    return VecEnvState(state=jax.tree.map(zeros, game_shapes(env)),
                       obs=jnp.zeros((n, _observation_size(env)), jnp.float32),
                       mask=jnp.ones((n, env.num_actions), bool),
                       episode_return=jnp.zeros((n,), jnp.float32),
                       episode_length=jnp.full((n,), -1, jnp.int32))


def _per_slot(n: int, curriculum_share, curriculum_max_stage):
    """The curriculum settings as one value per slot ([n] each); `vector_start` and
    `vector_step` build each slot's `EnvParams` inside their `vmap`."""
    return (jnp.broadcast_to(jnp.asarray(curriculum_share, jnp.float32), (n,)),
            jnp.broadcast_to(jnp.asarray(curriculum_max_stage, jnp.int32), (n,)))


def vector_start(env: Environment, envs: VecEnvState, keys: Key[Array, " n"],
                 curriculum_share: Float[Array, " n"] | float = 0.0,
                 curriculum_max_stage: Int32[Array, " n"] | int = C.NUM_STAGES) -> VecEnvState:
    """Give every slot that holds no game yet a new game from its key (by the env's
    `reset_env_where`, the auto-reset's own path: no second program to compile), started
    as the slot's curriculum settings ask (one value per slot, or one for all)."""
    new = envs.episode_length < 0
    slots = _per_slot(new.shape[0], curriculum_share, curriculum_max_stage)

    def start(done, state, obs, key, share, max_stage):
        params = EnvParams(curriculum_share=share, curriculum_max_stage=max_stage)
        obs, state = env.reset_env_where(done, key, state, obs, params)
        return state, obs

    state, obs = jax.vmap(start)(new, envs.state, envs.obs, keys, *slots)
    mask = jnp.where(new[:, None], jax.vmap(env.game_action_mask)(state), envs.mask)
    return VecEnvState(state=state, obs=obs, mask=mask, episode_return=envs.episode_return,
                       episode_length=jnp.maximum(envs.episode_length, 0))


def vector_step(
    env: Environment,
    envs: VecEnvState,
    actions: Int32[Array, " n"],
    keys: Key[Array, " n"],
    max_episode_steps: int,
    curriculum_share: Float[Array, " n"] | float = 0.0,
    curriculum_max_stage: Int32[Array, " n"] | int = C.NUM_STAGES,
) -> tuple[VecEnvState, StepOutput]:
    """Step every game with the env's `step`: episodes are cut at `max_episode_steps`,
    and finished slots continue with a new game from their key, started as the slot's
    curriculum settings ask (one value per slot, or one for all)."""
    slots = _per_slot(actions.shape[0], curriculum_share, curriculum_max_stage)

    def step(key, game_state, episode_return, episode_length, action, share, max_stage):
        state = EnvState(game=game_state, episode_return=episode_return, episode_length=episode_length)
        params = EnvParams(max_episode_steps=max_episode_steps, curriculum_share=share,
                           curriculum_max_stage=max_stage)
        obs, state, reward, _, info = env.step(key, state, action, params)
        terms = info.pop("reward_terms")  # in the env's order, before vmap sorts the names
        info["reward_terms"] = jnp.stack(list(terms.values())) if terms else jnp.zeros((0,), jnp.float32)
        return obs, state, reward, info

    obs, state, reward, info = jax.vmap(step)(
        keys, envs.state, envs.episode_return, envs.episode_length, actions, *slots)
    new = VecEnvState(state=state.game, obs=obs, mask=info["action_mask"],
                      episode_return=state.episode_return, episode_length=state.episode_length)
    other = {k: v for k, v in info.items() if k not in _ADDED_BY_STEP + _READ}
    out = StepOutput(final_obs=info["final_observation"], reward=reward, done=info["terminated"],
                     truncated=info["truncated"], reward_terms=info["reward_terms"],
                     stage=info["stage"], won=info["won"], episode_return=info["episode_return"],
                     episode_length=info["episode_length"], info=other)
    return new, out


def describe(env: Environment) -> dict[str, Any]:
    """Identity of an environment, for checkpoints (refuse mismatched restores)."""
    return {"env": type(env).__name__, "obs_size": _observation_size(env), "num_actions": env.num_actions,
            "reward_terms": list(reward_terms(env))}
