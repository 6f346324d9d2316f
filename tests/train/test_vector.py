"""Batches of `hm.env.Environment`s as the learner steps them (`hm.train.vector`), compact observations, NullEnv."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probes import PROBE_STATES, TabularState, probe_suite

from bench.null_env import NullEnv
from hm.env import EnvParams
from hm.game import constants as C
from hm.game import observation
from hm.train import vector


def test_pack_obs_is_exact_for_the_values_the_game_makes():
    # the game's grid values k/3 (k <= 3), k/4, k/9 (k <= 9), computed as the game does
    tail = jax.jit(lambda: jnp.concatenate([
        jnp.arange(k + 1, dtype=jnp.float32) / d for k, d in ((3, 3), (28, 4), (9, 9))]))()
    obs = jnp.concatenate([jnp.full((10,), 0.123456, jnp.float32), tail])
    packed = jax.jit(observation.pack, static_argnums=1)(obs, 10)
    assert packed.tail.dtype == jnp.uint8 and packed.head.dtype == jnp.float32
    restored = jax.jit(observation.unpack)(packed)
    assert restored.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(restored).view(np.uint32), np.asarray(obs).view(np.uint32))


def test_pack_obs_is_lossless_on_its_own_codes():
    codes = jnp.arange(256, dtype=jnp.uint8)
    packed = observation.PackedObservation(head=jnp.zeros((1,), jnp.float32), tail=codes)
    again = jax.jit(lambda p: observation.pack(observation.unpack(p), 1))(packed)
    np.testing.assert_array_equal(again.tail, codes)


def test_null_env_has_the_game_shapes_and_packs_exactly():
    env = NullEnv()
    obs, state = env.reset(jax.random.key(0))
    assert obs.shape == (C.OBS_FLAT_SIZE,) and obs.dtype == jnp.float32
    obs, state, _, _, info = env.step(jax.random.key(1), state, jnp.int32(3))
    assert env.action_mask(state).shape == (C.NUM_ACTIONS,)
    assert vector.reward_terms(env) == ("reward",) and set(info["reward_terms"]) == {"reward"}
    np.testing.assert_array_equal(env.expand_observation(env.compact_observation(obs)), obs)
    metrics = env.action_metrics(jnp.full((C.NUM_ACTIONS,), 1.0 / C.NUM_ACTIONS))
    assert float(metrics["move_frac"]) == pytest.approx(4 / 28)
    assert float(metrics["program/WAIT"]) == pytest.approx(1 / 28)


def test_vector_step_truncates_and_resets():
    env = probe_suite()
    loop, constant = PROBE_STATES.index("loop"), PROBE_STATES.index("constant")
    n = 2
    start = TabularState(state=jnp.array([loop, loop], jnp.int32))
    vec = vector.VecEnvState(state=start, obs=jax.vmap(env.game_observation)(start),
                             mask=jax.vmap(env.game_action_mask)(start),
                               episode_return=jnp.zeros(n), episode_length=jnp.array([0, 2], jnp.int32))
    keys = jax.random.split(jax.random.key(0), n)
    # a finished slot continues with the game `reset` makes from its step key's second half
    fresh_obs, fresh = env.reset_env(jax.random.split(keys[1])[1], EnvParams())
    actions = jnp.zeros(n, jnp.int32)
    vec, out = vector.vector_step(env, vec, actions, keys, 3)
    # slot 1 reached 3 steps: truncated (not done), restarted with a new game
    assert out.truncated.tolist() == [False, True] and out.done.tolist() == [False, False]
    assert vec.state.state.tolist() == [loop, int(fresh.state)]
    assert out.episode_return.tolist() == [1.0, 1.0] and out.episode_length.tolist() == [1, 3]
    assert vec.episode_length.tolist() == [1, 0] and vec.episode_return.tolist() == [1.0, 0.0]
    np.testing.assert_array_equal(out.final_obs[1], env.game_observation(TabularState(state=jnp.int32(loop))))
    np.testing.assert_array_equal(vec.obs[1], fresh_obs)
    np.testing.assert_array_equal(vec.mask[1], env.game_action_mask(fresh))
    # a terminal step: done, not truncated, restarted
    vec = eqx.tree_at(lambda v: v.state, vec, TabularState(state=jnp.array([loop, constant], jnp.int32)))
    vec, out = vector.vector_step(env, vec, actions, keys, 3)
    assert out.done.tolist() == [False, True] and out.truncated.tolist() == [False, False]
    assert vec.state.state.tolist() == [loop, int(fresh.state)]
    assert vec.episode_length.tolist() == [2, 0]


def test_vector_start_starts_only_the_slots_without_a_game():
    env = probe_suite()
    loop = PROBE_STATES.index("loop")
    vec = vector.vector_unstarted(env, 2)
    vec = eqx.tree_at(lambda v: (v.state, v.episode_length), vec,
                      (TabularState(state=jnp.array([loop, 0], jnp.int32)), jnp.array([5, -1], jnp.int32)))
    keys = jax.random.split(jax.random.key(3), 2)
    vec = vector.vector_start(env, vec, keys)
    fresh_obs, fresh = env.reset_env(keys[1], EnvParams())
    assert vec.state.state.tolist() == [loop, int(fresh.state)]
    assert vec.episode_length.tolist() == [5, 0]
    np.testing.assert_array_equal(vec.obs[1], fresh_obs)
    np.testing.assert_array_equal(vec.mask[1], env.game_action_mask(fresh))
