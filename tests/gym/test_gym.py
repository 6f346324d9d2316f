"""hm.gym: the Gymnasium env passes Gymnasium's checker, follows the game's rules, and the
vector env steps a batch with Gymnasium's same-step autoreset conventions."""

import logging
import warnings

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import hm.game as game
import hm.gym
from hm.game import constants as C

ENV_ID = "hm/HackMatrix-v0"
NUM_ENVS = 4   # one batch size for every vector test: one compiled program for them all


def legal_random_action(rng: np.random.Generator, mask: np.ndarray) -> int:
    return int(rng.choice(np.flatnonzero(mask)))


def legal_random_actions(rng: np.random.Generator, masks: np.ndarray) -> np.ndarray:
    """One uniformly random legal action per row of `masks` (no loop over rows)."""
    scores = np.where(masks, rng.random(masks.shape), -1.0)
    return scores.argmax(axis=1)


def assert_no_warnings(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args, **kwargs)
    assert [str(w.message) for w in caught] == []
    return result


# --- the single env --------------------------------------------------------------------------

@pytest.mark.parametrize("observation_mode", ["flat", "dict"])
def test_check_env_passes_without_warnings(observation_mode):
    env = gymnasium.make(ENV_ID, observation_mode=observation_mode)
    # The checker wants the bare env (a wrapped one is itself a warning); `make` gave it
    # the spec, which the checker uses to make one env per render mode.
    assert_no_warnings(check_env, env.unwrapped)


def test_make_gives_the_spaces_and_the_registered_cap():
    env = gymnasium.make(ENV_ID)
    assert isinstance(env.unwrapped, hm.gym.HackMatrixEnv)
    assert env.action_space == gymnasium.spaces.Discrete(28)
    assert env.observation_space.shape == (1545,) and env.observation_space.dtype == np.float32
    assert env.spec.max_episode_steps == 1000
    dict_space = gymnasium.make(ENV_ID, observation_mode="dict").observation_space
    assert dict_space["player"].shape == (10,)
    assert dict_space["programs"] == gymnasium.spaces.MultiBinary(23)
    assert dict_space["grid"].shape == (6, 6, 42)


def test_reset_is_reproducible_and_seeds_differ():
    a, b = gymnasium.make(ENV_ID), gymnasium.make(ENV_ID)
    obs_a, info_a = a.reset(seed=7)
    obs_b, info_b = b.reset(seed=7)
    np.testing.assert_array_equal(obs_a, obs_b)
    np.testing.assert_array_equal(info_a["action_mask"], info_b["action_mask"])
    # reset() without a seed continues the seeded stream: reproducible too
    np.testing.assert_array_equal(a.reset()[0], b.reset()[0])
    firsts = {a.reset(seed=s)[0].tobytes() for s in range(4)}
    assert len(firsts) == 4


def test_random_rollout_follows_the_masks_and_the_space():
    env = gymnasium.make(ENV_ID)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=1)
    episodes, steps = 0, 0
    while episodes < 2 and steps < 400:
        mask = env.unwrapped.action_masks()
        np.testing.assert_array_equal(mask, info["action_mask"])
        assert mask.dtype == np.bool_ and mask.shape == (28,) and mask.any()
        obs, reward, terminated, truncated, info = env.step(legal_random_action(rng, mask))
        steps += 1
        assert obs in env.observation_space
        assert isinstance(reward, float) and type(terminated) is bool and type(truncated) is bool
        assert set(info) == {"action_mask", "won", "died", "illegal", "stage", "programs_owned", "reward_terms",
                             "episode_return", "episode_length"}
        assert set(info["reward_terms"]) == set(C.REWARD_TERMS)
        assert all(isinstance(v, np.ndarray) for v in info.values() if not isinstance(v, dict))
        assert not info["illegal"]
        assert reward == pytest.approx(sum(float(v) for v in info["reward_terms"].values()), abs=1e-4)
        if terminated or truncated:
            assert terminated == bool(info["won"] | info["died"])
            assert not info["action_mask"].any()     # over: nothing is legal until reset()
            episodes += 1
            obs, info = env.reset()
    assert steps > 0


def test_illegal_action_ends_the_episode_with_reward_zero():
    env = gymnasium.make(ENV_ID)
    _, info = env.reset(seed=3)
    illegal = int(np.flatnonzero(~info["action_mask"])[0])
    obs, reward, terminated, truncated, info = env.step(illegal)
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["illegal"] and not info["died"] and not info["won"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_make_truncates_by_time_limit():
    env = gymnasium.make(ENV_ID, max_episode_steps=3)
    _, info = env.reset(seed=9)
    rng = np.random.default_rng(9)
    for _ in range(3):
        _, _, terminated, truncated, info = env.step(legal_random_action(rng, info["action_mask"]))
        assert not terminated        # this seed's game lasts past three legal moves
    assert truncated and info["episode_length"] == 3


@pytest.mark.parametrize("action", [-1, 28, 3.0])
def test_an_action_outside_the_space_is_refused(action):
    env = hm.gym.HackMatrixEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(action)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="observation_mode"):
        hm.gym.HackMatrixEnv(observation_mode="pixels")
    with pytest.raises(ValueError, match="render_mode"):
        hm.gym.HackMatrixEnv(render_mode="human")
    with pytest.raises(ValueError, match="num_envs"):
        hm.gym.HackMatrixVectorEnv(num_envs=0)
    with pytest.raises(ValueError, match="max_episode_steps"):
        hm.gym.HackMatrixVectorEnv(num_envs=2, max_episode_steps=0)


def test_dict_observation_is_the_flat_one_split_as_observation_views():
    flat_env = gymnasium.make(ENV_ID)
    dict_env = gymnasium.make(ENV_ID, observation_mode="dict")
    flat, _ = flat_env.reset(seed=5)
    parts, _ = dict_env.reset(seed=5)
    view = game.Observation(values=jnp.asarray(flat))
    np.testing.assert_array_equal(parts["player"], np.asarray(view.player))
    np.testing.assert_array_equal(parts["programs"], np.asarray(view.programs))
    np.testing.assert_array_equal(parts["grid"], np.asarray(view.grid))
    assert parts["programs"].dtype == np.int8


def test_renders_the_text_board_and_a_picture():
    ansi = gymnasium.make(ENV_ID, render_mode="ansi")
    ansi.reset(seed=2)
    text = ansi.render()
    assert text == game.render(ansi.unwrapped.game_state)
    picture = gymnasium.make(ENV_ID, render_mode="rgb_array")
    picture.reset(seed=2)
    frame = picture.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3


# --- the vector env --------------------------------------------------------------------------

def test_make_vec_uses_the_vector_entry_point():
    envs = gymnasium.make_vec(ENV_ID, num_envs=NUM_ENVS)
    assert isinstance(envs, hm.gym.HackMatrixVectorEnv)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert envs.action_space == gymnasium.spaces.MultiDiscrete([28] * NUM_ENVS)
    assert envs.observation_space.shape == (NUM_ENVS, 1545)
    assert envs.single_observation_space == gymnasium.make(ENV_ID).observation_space
    assert envs.max_episode_steps == 1000


def test_gymnasiums_own_sync_vector_env_runs_the_single_env():
    # vectorization_mode="sync": Gymnasium's SyncVectorEnv of HackMatrixEnv (next-step
    # autoreset), e.g. for users who want Python-side wrappers on each game.
    envs = gymnasium.make_vec(ENV_ID, num_envs=2, vectorization_mode="sync")
    assert isinstance(envs, gymnasium.vector.SyncVectorEnv)
    obs, info = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs, reward, terminated, truncated, info = envs.step(legal_random_actions(rng, info["action_mask"]))
        assert obs.shape == (2, 1545) and info["action_mask"].shape == (2, 28)
        # a finished game's mask is empty until the next step resets it (next-step autoreset)
        assert not info["action_mask"][terminated | truncated].any()
        info["action_mask"][terminated | truncated] = True     # the action sent there is ignored


def test_vector_reset_is_reproducible():
    a = gymnasium.make_vec(ENV_ID, num_envs=NUM_ENVS)
    b = gymnasium.make_vec(ENV_ID, num_envs=NUM_ENVS)
    obs_a, _ = a.reset(seed=11)
    obs_b, _ = b.reset(seed=11)
    np.testing.assert_array_equal(obs_a, obs_b)
    assert len({row.tobytes() for row in obs_a}) == NUM_ENVS      # different games
    actions = legal_random_actions(np.random.default_rng(0), a.action_masks())
    np.testing.assert_array_equal(a.step(actions)[0], b.step(actions)[0])
    # ValueError; under the suite's runtime type checks the annotation refuses it first
    with pytest.raises((ValueError, TypeError), match="seed"):
        a.reset(seed=[1, 2, 3, 4])


def test_vector_rollout_autoresets_in_the_same_step():
    num_envs, cap = NUM_ENVS, 6
    envs = gymnasium.make_vec(ENV_ID, num_envs=num_envs, max_episode_steps=cap)
    stats = gymnasium.wrappers.vector.RecordEpisodeStatistics(envs)
    rng = np.random.default_rng(0)
    obs, info = stats.reset(seed=0)
    ended = 0
    for _ in range(2 * cap):
        assert obs in envs.observation_space
        masks = info["action_mask"]
        np.testing.assert_array_equal(masks, envs.action_masks())
        obs, reward, terminated, truncated, info = stats.step(legal_random_actions(rng, masks))
        assert reward.shape == (num_envs,) and terminated.dtype == np.bool_ and truncated.dtype == np.bool_
        assert obs.flags.writeable and info["action_mask"].flags.writeable     # the caller's own arrays
        done = terminated | truncated
        assert not (terminated & truncated).any()
        np.testing.assert_array_equal(info["_won"], ~done)
        np.testing.assert_array_equal(info["_action_mask"], np.ones(num_envs, bool))
        if not done.any():
            assert "final_obs" not in info
            continue
        ended += done.sum()
        final = info["final_info"]
        np.testing.assert_array_equal(info["_final_obs"], done)
        np.testing.assert_array_equal(info["_final_info"], done)
        np.testing.assert_array_equal(final["_episode_length"], done)
        assert info["final_obs"].shape == (num_envs, 1545)
        assert np.all(final["episode_length"][truncated] == cap)
        assert np.all(final["episode_length"][done] <= cap)
        # Gymnasium's own episode statistics agree with hm.env's
        np.testing.assert_allclose(info["episode"]["r"][done], final["episode_return"][done], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(info["episode"]["l"][done], final["episode_length"][done])
        # the returned observation of an ended game is its new game's first one
        assert not np.array_equal(obs[done], info["final_obs"][done])
    assert ended >= num_envs    # every game reaches the cap at least once


def test_vector_step_compiles_once(caplog):
    envs = gymnasium.make_vec(ENV_ID, num_envs=NUM_ENVS)
    _, info = envs.reset(seed=0)
    rng = np.random.default_rng(1)
    envs.step(legal_random_actions(rng, info["action_mask"]))
    with jax.log_compiles(True), caplog.at_level(logging.WARNING):
        caplog.clear()
        for _ in range(3):
            envs.step(legal_random_actions(rng, envs.action_masks()))
    assert [r.getMessage() for r in caplog.records if "ompil" in r.getMessage()] == []


def test_vector_reset_mask_restarts_only_those_games():
    envs = gymnasium.make_vec(ENV_ID, num_envs=NUM_ENVS)
    obs, info = envs.reset(seed=0)
    obs, *_ = envs.step(legal_random_actions(np.random.default_rng(0), info["action_mask"]))
    mask = np.arange(NUM_ENVS) % 2 == 0
    again, info = envs.reset(options={"reset_mask": mask})
    np.testing.assert_array_equal(again[~mask], obs[~mask])
    with pytest.raises(ValueError, match="reset_mask"):
        envs.reset(options={"reset_mask": np.ones(NUM_ENVS - 1, bool)})


def test_vector_illegal_actions_and_bad_actions():
    envs = gymnasium.make_vec(ENV_ID, num_envs=NUM_ENVS)
    _, info = envs.reset(seed=4)
    illegal = np.argmin(info["action_mask"], axis=1)      # first illegal action of each game
    _, reward, terminated, truncated, info = envs.step(illegal)
    np.testing.assert_array_equal(reward, np.zeros(NUM_ENVS))
    assert terminated.all() and not truncated.any()
    assert info["final_info"]["illegal"].all()
    with pytest.raises(ValueError, match="action"):
        envs.step(np.full(NUM_ENVS, 28))
    with pytest.raises(ValueError, match="shape"):
        envs.step(np.zeros(NUM_ENVS - 1, int))


def test_vector_dict_observations_and_render():
    envs = gymnasium.make_vec(ENV_ID, num_envs=NUM_ENVS, observation_mode="dict", render_mode="ansi")
    obs, _ = envs.reset(seed=0)
    assert obs in envs.observation_space
    assert obs["grid"].shape == (NUM_ENVS, 6, 6, 42)
    boards = envs.render()
    assert len(boards) == NUM_ENVS and all(isinstance(b, str) for b in boards) and boards[0] != boards[1]
