"""`hm.env`: the gymnax-style API, its truncation and its auto-reset."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hm.game as game
from hm.env import EnvParams, EnvState, HackMatrix
from hm.game import constants as C
from hm.game.scenario import states_equal

env = HackMatrix()
OBS = (C.OBS_FLAT_SIZE,)
INFO_FLAGS = ("won", "died", "illegal", "terminated", "truncated")

reset = jax.jit(env.reset)
step = jax.jit(env.step)
batched_reset = jax.jit(jax.vmap(env.reset))
batched_step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
# Compiled, not run op by op (which compiles every operation on its own, far slower).
action_mask = jax.jit(env.action_mask)
batched_action_mask = jax.jit(jax.vmap(env.action_mask))
game_reset = jax.jit(game.reset)


def leaf(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def assert_trees_equal(a, b, what=""):
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y),
                                      err_msg=f"{what}{jax.tree_util.keystr(path)}")


def reset_key_of(key):
    """The key `step` resets a finished game with (its documented split)."""
    return jax.random.split(key)[1]


@pytest.fixture(scope="module")
def played():
    """16 games after 12 steps of random legal play (some reset on the way)."""
    n = 16
    obs, state = batched_reset(jax.random.split(jax.random.key(1), n))
    mask = batched_action_mask(state)
    params = EnvParams(max_episode_steps=1000)
    for t in range(12):
        key = jax.random.fold_in(jax.random.key(2), t)
        logits = jnp.where(mask, 0.0, -jnp.inf)
        action = jax.random.categorical(key, logits).astype(jnp.int32)
        obs, state, _, _, info = batched_step(jax.random.split(key, n), state, action, params)
        mask = info["action_mask"]
    return obs, state, mask


def test_api_shapes_and_dtypes():
    assert env.num_actions == 28 and env.observation_shape == OBS
    params = env.default_params
    assert isinstance(params, EnvParams)
    assert params.max_episode_steps.dtype == jnp.int32 and int(params.max_episode_steps) == 1000
    obs, state = reset(jax.random.key(0))
    assert isinstance(state, EnvState)
    assert obs.shape == OBS and obs.dtype == jnp.float32
    assert state.episode_return.shape == () and state.episode_return.dtype == jnp.float32
    assert state.episode_length.shape == () and state.episode_length.dtype == jnp.int32
    assert int(state.episode_length) == 0 and float(state.episode_return) == 0.0
    np.testing.assert_array_equal(jax.jit(env.observation)(state), obs)
    mask = action_mask(state)
    assert mask.shape == (28,) and mask.dtype == jnp.bool_

    action = jnp.argmax(mask).astype(jnp.int32)
    obs2, state2, reward, done, info = step(jax.random.key(1), state, action, params)
    assert obs2.shape == OBS and obs2.dtype == jnp.float32
    assert jax.tree.structure(state2) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(state2), jax.tree.leaves(state)):
        assert a.shape == b.shape and a.dtype == b.dtype
    assert reward.shape == () and reward.dtype == jnp.float32
    assert done.shape == () and done.dtype == jnp.bool_
    assert set(info) == {"reward_terms", "stage", "programs_owned", "final_observation", "action_mask",
                         "episode_return", "episode_length", *INFO_FLAGS}
    assert set(info["reward_terms"]) == set(C.REWARD_TERMS)
    for term in info["reward_terms"].values():
        assert term.shape == () and term.dtype == jnp.float32
    np.testing.assert_allclose(sum(info["reward_terms"].values()), reward, rtol=1e-6, atol=1e-6)
    for flag in INFO_FLAGS:
        assert info[flag].shape == () and info[flag].dtype == jnp.bool_, flag
    assert info["stage"].shape == () and info["stage"].dtype == jnp.int32
    assert info["final_observation"].shape == OBS and info["final_observation"].dtype == jnp.float32
    assert info["action_mask"].shape == (28,) and info["action_mask"].dtype == jnp.bool_
    assert info["episode_return"].dtype == jnp.float32
    assert info["episode_length"].dtype == jnp.int32 and int(info["episode_length"]) == 1
    # params may be left out: the default ones
    again = step(jax.random.key(1), state, action)
    assert_trees_equal(again, (obs2, state2, reward, done, info))


def test_reset_is_reproducible_per_key():
    a_obs, a = reset(jax.random.key(5))
    b_obs, b = reset(jax.random.key(5))
    c_obs, c = reset(jax.random.key(6))
    assert_trees_equal((a_obs, a), (b_obs, b))
    assert not np.array_equal(a_obs, c_obs)
    # the game is `hm.game.reset`'s, and the env observes it as the game does
    g, g_obs = game_reset(jax.random.key(5))
    assert states_equal(a.game, g, ignore_history=False)
    np.testing.assert_array_equal(a_obs, g_obs.flat())


def test_params_are_checked_and_traceable():
    with pytest.raises(ValueError, match="max_episode_steps"):
        EnvParams(max_episode_steps=0)
    # a new limit is a new value, not a new program
    traces = eqx.debug.assert_max_traces(max_traces=1)(env.step)
    stepped = jax.jit(traces)
    _, state = reset(jax.random.key(0))
    action = jnp.argmax(action_mask(state)).astype(jnp.int32)
    for limit in (1, 5, 1000):
        for k in range(2):
            obs, state, *_ = stepped(jax.random.key(k), state, action, EnvParams(limit))
            action = jnp.argmax(action_mask(state)).astype(jnp.int32)


def test_step_compiles_once_for_a_batch(played):
    _, state, mask = played
    counted = jax.jit(jax.vmap(eqx.debug.assert_max_traces(env.step, max_traces=1),
                               in_axes=(0, 0, 0, None)))
    action = jnp.argmax(mask, axis=1).astype(jnp.int32)
    for k in range(3):
        _, state, _, _, info = counted(jax.random.split(jax.random.key(k), 16), state, action,
                                       env.default_params)
        action = jnp.argmax(info["action_mask"], axis=1).astype(jnp.int32)


def test_illegal_action_is_reward_zero_and_terminates_then_resets():
    obs, state = reset(jax.random.key(3))
    mask = np.asarray(action_mask(state))
    illegal = int(np.flatnonzero(~mask)[0])
    key = jax.random.key(4)
    new_obs, new_state, reward, done, info = step(key, state, jnp.int32(illegal))
    assert float(reward) == 0.0 and bool(done)
    assert bool(info["illegal"]) and bool(info["terminated"]) and not bool(info["truncated"])
    assert all(float(v) == 0.0 for v in info["reward_terms"].values())
    # the finished episode ended where it was; the returned one is the reset key's game
    np.testing.assert_array_equal(info["final_observation"], obs)
    fresh_obs, fresh = reset(reset_key_of(key))
    np.testing.assert_array_equal(new_obs, fresh_obs)
    assert states_equal(new_state.game, fresh.game)
    assert game.to_dict(new_state.game) == game.to_dict(fresh.game)
    assert (int(new_state.episode_length), float(new_state.episode_return)) == (0, 0.0)
    assert int(info["episode_length"]) == 1
    np.testing.assert_array_equal(info["action_mask"], action_mask(fresh))
    # out of range is illegal too
    *_, done, info = step(key, state, jnp.int32(C.NUM_ACTIONS))
    assert bool(done) and bool(info["illegal"])


def test_truncation_is_reported_as_truncated_not_terminated():
    obs, state = reset(jax.random.key(7))
    params = EnvParams(max_episode_steps=3)
    returns = 0.0
    for t in range(3):
        action = jnp.argmax(action_mask(state)).astype(jnp.int32)
        key = jax.random.key(10 + t)
        new_obs, new_state, reward, done, info = step(key, state, action, params)
        assert not bool(info["terminated"]), "this test needs an episode that lasts 3 steps"
        returns += float(reward)
        assert int(info["episode_length"]) == t + 1
        np.testing.assert_allclose(float(info["episode_return"]), returns, rtol=1e-6)
        assert bool(done) == (t == 2) == bool(info["truncated"])
        if t < 2:
            np.testing.assert_array_equal(info["final_observation"], new_obs)
            assert int(new_state.episode_length) == t + 1
        obs, state, last_key, last_info = new_obs, new_state, key, info
    # cut, not ended: the final observation is the cut game's, the state a new game
    stepped_obs = last_info["final_observation"]
    assert not np.array_equal(stepped_obs, obs)
    fresh_obs, fresh = reset(reset_key_of(last_key))
    np.testing.assert_array_equal(obs, fresh_obs)
    assert game.to_dict(state.game) == game.to_dict(fresh.game)
    assert int(state.episode_length) == 0


def test_a_reset_game_is_a_valid_new_game(played):
    _, state, mask = played
    # illegal actions end every game at once: all 16 reset through the batched path
    action = jnp.argmin(mask, axis=1).astype(jnp.int32)
    action = jnp.where(jnp.all(mask, axis=1), C.NUM_ACTIONS, action)
    keys = jax.random.split(jax.random.key(9), 16)
    obs, new, _, done, _ = batched_step(keys, state, action, env.default_params)
    assert bool(jnp.all(done))
    for i in range(16):
        g = leaf(new.game, i)
        fresh, fresh_obs = game_reset(reset_key_of(keys[i]))
        d = game.to_dict(g)
        assert d == game.to_dict(fresh)
        assert game.to_dict(game.from_dict(d)) == d
        assert (int(g.history.depth), int(g.history.top)) == (0, int(fresh.history.top))
        assert (int(g.stage), int(g.turn), bool(g.won)) == (1, 0, False)
        np.testing.assert_array_equal(obs[i], fresh_obs.flat())


def test_batched_step_equals_stepping_each_game_alone(played):
    _, state, mask = played
    n = 16
    # a mix: legal and illegal actions, games at and below the step limit
    legal_action = jnp.argmax(mask, axis=1).astype(jnp.int32)
    action = jnp.where(jnp.arange(n) % 3 == 0, C.NUM_ACTIONS, legal_action)
    state = eqx.tree_at(lambda s: s.episode_length, state,
                        jnp.where(jnp.arange(n) % 4 == 1, 19, state.episode_length))
    params = EnvParams(max_episode_steps=20)
    keys = jax.random.split(jax.random.key(11), n)
    batched = batched_step(keys, state, action, params)
    done = np.asarray(batched[3])
    assert 0 < done.sum() < n and np.asarray(batched[4]["truncated"]).any()
    for i in range(n):
        alone = step(keys[i], leaf(state, i), action[i], params)
        assert_trees_equal(leaf(batched, i), alone, what=f"game {i}: ")
