"""The learner on the real game. One short training run (the engine compiles once) is
checked three ways: it beats a uniformly random policy, the game's observations survive
the rollout buffer's uint8 storage bit for bit, and every state offers a legal action."""

import dataclasses
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from compiles import compilations

from hm.env import HackMatrix
from hm.game import constants as C
from hm.train import PRESETS, init, make_mesh, make_train_fn, resolve

CALLS = 32
BASELINE_CALLS = 4


@pytest.fixture(scope="module")
def game_run():
    # small batch, a larger step and a small entropy bonus: learns within seconds
    # PPO on the default reward and network, without the teacher and the bonus (their tests are their own)
    config = dataclasses.replace(PRESETS["plain"], reward_weights=(("distance", 0.0),), num_envs=64, num_steps=64,
                                 total_timesteps=64 * 64 * CALLS, hidden_dim=64, lr=2e-3, ent_coef=0.01,
                                 updates_per_call=1, precision="f32")
    resolved = resolve(config, "cpu", 1)
    env, mesh = HackMatrix(), make_mesh(1)
    train = make_train_fn(resolved, env, mesh)
    round_trip = jax.jit(lambda obs: jax.vmap(env.expand_observation)(jax.vmap(env.compact_observation)(obs)))
    observations, masks = [], []

    def call(state):
        state, metrics = train(state)
        # a single run is a population of one: drop the member axis
        observations.append(np.asarray(state.envs.obs)[0])
        masks.append(np.asarray(state.envs.mask)[0])
        assert np.isfinite(float(metrics["loss/total"][0]))
        return state, (float(metrics["episode/return"][0]), int(metrics["episode/count"][0]))

    # A uniformly random legal policy: zero policy head (equal logits), reset before every
    # call; a call's episode statistics come from its rollout, before its update.
    def uniform_policy(state):
        head = state.params.policy_head
        return eqx.tree_at(lambda s: (s.params.policy_head.weight, s.params.policy_head.bias), state,
                           (jnp.zeros_like(head.weight), jnp.zeros_like(head.bias)))

    state, result = call(uniform_policy(init(resolved, 1, env=env, mesh=mesh)))
    baseline = [result]
    with compilations(train) as recompiled:   # by every call after the first
        for _ in range(BASELINE_CALLS - 1):
            state, result = call(uniform_policy(state))
            baseline.append(result)
        state = init(resolved, 0, env=env, mesh=mesh)
        trained = []
        for _ in range(CALLS):
            state, result = call(state)
            trained.append(result)
    obs = np.concatenate(observations)
    return types.SimpleNamespace(baseline=baseline, trained=trained, recompiled=recompiled, obs=obs,
                                 restored=np.asarray(round_trip(obs)), masks=np.concatenate(masks))


def mean_return(results):
    returns, counts = np.array(results).T
    assert counts.sum() > 0
    return float(np.sum(returns * counts) / counts.sum())


@pytest.mark.slow
def test_learner_beats_a_random_policy(game_run):
    random_return, learned_return = mean_return(game_run.baseline), mean_return(game_run.trained[-8:])
    assert learned_return > random_return + 1.0, (random_return, learned_return)
    assert game_run.recompiled == []


@pytest.mark.slow
def test_game_observations_survive_packing_exactly(game_run):
    assert game_run.obs.shape == ((CALLS + BASELINE_CALLS) * 64, C.OBS_FLAT_SIZE)
    np.testing.assert_array_equal(game_run.restored.view(np.uint32), game_run.obs.view(np.uint32))


@pytest.mark.slow
def test_every_state_has_a_legal_action(game_run):
    assert game_run.masks.shape[-1] == C.NUM_ACTIONS
    assert np.all(game_run.masks.any(axis=-1))
