"""The fused learner on probe problems with known answers, and its compile/determinism
contract. One tiny program is compiled per module fixture and shared by the tests."""

import dataclasses
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from compiles import compilations
from probes import PROBE_STATES, TabularEnv, plain, probe_suite

from hm.env import HackMatrix
from hm.train import distributions, features, vector
from hm.train.config import ConfigError, TrainConfig, resolve
from hm.train.features.reward import weight_vector
from hm.train.learner import (
    Learner,
    Samples,
    init,
    make_hyper,
    make_train_fn,
    member_of,
    reshard_for,
    total_env_steps,
)
from hm.train.mesh import make_mesh
from hm.train.network import evaluate

GAMMA = 0.9
UPDATES = 30


def probe_config(**overrides):
    fields = {"num_envs": 16, "num_steps": 16, "total_timesteps": 16 * 16 * 2 * UPDATES,
              "hidden_dim": 32, "gamma": GAMMA, "ent_coef": 0.01, "lr": 5e-3,
              "max_episode_steps": 5, "updates_per_call": UPDATES, "precision": "f32"}
    fields.update(overrides)
    return resolve(plain(**fields), "cpu", 1)


def run(resolved, env, calls=2, seed=0):
    mesh = make_mesh(1)
    train = make_train_fn(resolved, env, mesh)
    state = init(resolved, seed, env=env, mesh=mesh)
    state, m = train(state)
    metrics = [m]
    with compilations(train) as recompiled:   # by the calls after the first
        for _ in range(calls - 1):
            state, m = train(state)
            metrics.append(m)
    return types.SimpleNamespace(train=train, state=state, metrics=metrics, env=env, mesh=mesh,
                                 resolved=resolved, recompiled=recompiled)


@pytest.fixture(scope="module")
def probe_run():
    # The learned values of the last update scatter over seeds by up to ~0.1 (Adam's last
    # steps at this learning rate; seeds 3-10 gave 0.0-0.1 before and after the switch to
    # `hm.env`'s auto-reset): the 0.05 tolerances below hold for this seed's run.
    return run(probe_config(), probe_suite(), seed=1)


def policy_and_values(params, env, precision="f32"):
    """The probe's learned policy and values; `params` of a population of one (its member)."""
    params = member_of(params, 0)
    logits, values = evaluate(params, jnp.eye(env.observation_shape[0]), precision)
    probs = distributions.probs(logits, env.legal)
    return {name: (np.asarray(probs[i]), float(values[i])) for i, name in enumerate(PROBE_STATES)}


def test_probe_values_are_learned(probe_run):
    learned = policy_and_values(probe_run.state.params, probe_run.env)
    expected = {"constant": 1.0, "positive": 1.0, "negative": -1.0, "discount_first": GAMMA,
                "discount_second": 1.0, "credit": 1.0, "masked": 1.0}
    for name, value in expected.items():
        assert learned[name][1] == pytest.approx(value, abs=0.05), name


def test_truncation_is_bootstrapped(probe_run):
    # +1 forever, cut after 5 steps: 1/(1-gamma) = 10 only with bootstrapping; treating
    # the cut as death would give at most (1 - 0.9^5)/(1 - 0.9) = 4.1
    _, value = policy_and_values(probe_run.state.params, probe_run.env)["loop"]
    assert value == pytest.approx(1.0 / (1.0 - GAMMA), abs=0.5)


def test_credit_assignment_and_masking(probe_run):
    learned = policy_and_values(probe_run.state.params, probe_run.env)
    assert learned["credit"][0][1] > 0.95
    probs, _ = learned["masked"]
    assert probs[2] == 0.0  # the illegal +10 action: never
    assert probs[1] > 0.95


def test_metrics_and_counters(probe_run):
    metrics = probe_run.metrics[-1]
    for name in ("loss/total", "loss/policy", "loss/value", "loss/entropy", "ppo/approx_kl",
                 "ppo/clip_frac", "ppo/explained_variance", "ppo/grad_norm", "ppo/lr",
                 "episode/return", "episode/length", "episode/highest_stage", "episode/win_rate",
                 "episode/count", "episode/max_stage", "reward/reward", "env_steps"):
        # one value per member (a single run is a population of one); env_steps is shared
        assert metrics[name].shape == (() if name == "env_steps" else (1,)), name
        assert np.all(np.isfinite(metrics[name])), name
    assert float(metrics["ppo/lr"][0]) == pytest.approx(5e-3)
    # without --value-norm PopArt is not built: no value statistics, and the network's stay the identity
    assert "value/shift" not in metrics and "teacher/coef" not in metrics
    network = member_of(probe_run.state.params, 0)
    assert (float(network.value_shift), float(network.value_scale)) == (0.0, 1.0)
    assert int(metrics["env_steps"]) == 16 * 16 * UPDATES
    assert int(metrics["episode/count"][0]) > 0
    assert float(metrics["ppo/explained_variance"][0]) > 0.9
    # episodes: mean return of the probe starts under the learned policy
    assert 0.5 < float(metrics["episode/return"][0]) < 2.5
    assert int(probe_run.state.update) == 2 * UPDATES
    assert total_env_steps(probe_run.state) == 2 * UPDATES * 16 * 16


def test_compiles_once(probe_run):
    state = probe_run.state
    with compilations() as compiled:
        state, _ = probe_run.train(state)
    assert compiled == []
    assert probe_run.recompiled == []
    probe_run.state = state


def test_buffers_are_donated(probe_run):
    state = probe_run.state
    new_state, _ = probe_run.train(state)
    assert state.params.trunk[0].weight.is_deleted()
    assert state.envs.obs.is_deleted()
    probe_run.state = new_state


def test_same_seed_same_parameters(probe_run):
    def train_from(seed):
        state = init(probe_run.resolved, seed, env=probe_run.env, mesh=probe_run.mesh)
        state, _ = probe_run.train(state)
        return state

    first, second, other = train_from(7), train_from(7), train_from(8)
    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(second)):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(other.params.trunk[0].weight, first.params.trunk[0].weight)


def test_reshard_keeps_weights_and_counters(probe_run):
    bigger = dataclasses.replace(probe_run.resolved, num_envs=32)
    state = reshard_for(probe_run.state, bigger, env=probe_run.env, mesh=probe_run.mesh)
    assert state.envs.obs.shape == (1, 32, probe_run.env.observation_shape[0])
    np.testing.assert_array_equal(state.params.trunk[0].weight, probe_run.state.params.trunk[0].weight)
    assert int(state.update) == int(probe_run.state.update)
    assert total_env_steps(state) == total_env_steps(probe_run.state)
    adam = state.opt_state[1][0]
    assert int(adam.count[0]) == 0 and float(jnp.abs(adam.mu.trunk[0].weight).max()) == 0.0


def test_bf16_learner_runs_and_learns():
    resolved = probe_config(precision="bf16")
    result = run(resolved, probe_suite(), calls=2)
    for leaf in jax.tree.leaves(result.state.params):
        assert leaf.dtype == jnp.float32 and np.all(np.isfinite(leaf))
    assert all(np.all(np.isfinite(v)) for v in result.metrics[-1].values())
    learned = policy_and_values(result.state.params, result.env, "bf16")
    assert learned["constant"][1] == pytest.approx(1.0, abs=0.1)
    assert learned["negative"][1] == pytest.approx(-1.0, abs=0.1)
    assert learned["credit"][0][1] > 0.9 and learned["masked"][0][2] == 0.0


def scaled_probe_suite(factor: float):
    suite = probe_suite()
    return eqx.tree_at(lambda env: env.reward, suite, suite.reward * factor)


def test_value_normalisation_learns_values_a_thousand_times_larger():
    # the probe suite with every reward x1000: normalised, the critic sees the same problem
    result = run(probe_config(value_norm=0.1), scaled_probe_suite(1000.0), calls=2, seed=1)
    learned = policy_and_values(result.state.params, result.env)
    expected = {"constant": 1.0, "positive": 1.0, "negative": -1.0, "discount_first": GAMMA,
                "discount_second": 1.0, "credit": 1.0, "masked": 1.0, "loop": 1.0 / (1.0 - GAMMA)}
    for name, value in expected.items():
        assert learned[name][1] == pytest.approx(1000.0 * value, abs=100.0), name
    assert learned["credit"][0][1] > 0.95 and learned["masked"][0][1] > 0.95
    metrics = result.metrics[-1]
    # the statistics follow the targets (hundreds to thousands), the value loss is in their units
    assert 500.0 < float(metrics["value/scale"][0]) < 10_000.0
    assert 100.0 < float(metrics["value/shift"][0]) < 5_000.0
    assert float(metrics["loss/value"][0]) < 1.0
    assert float(metrics["ppo/explained_variance"][0]) > 0.9


def jackpot_probe_suite(share: float, prize: float) -> TabularEnv:
    """The probe suite with the "positive" state paying `prize` and starting `share` of the
    episodes: a rare reward far above the others, as the game's victory (+500) is."""
    suite = probe_suite()
    i = PROBE_STATES.index("positive")
    start = np.exp(np.asarray(suite.start_logits, np.float64))
    start[i] = 0.0
    start = start / start.sum() * (1.0 - share)
    start[i] = share
    return TabularEnv(suite.reward.at[i].set(prize), suite.next_state, suite.terminal, suite.legal, start)


def test_value_normalisation_learns_a_rare_prize_of_500_beside_rewards_of_1():
    """One episode in 64 pays 500, the others +-1 (the game's victory against its usual
    rewards). Normalised (PopArt), the critic learns the prize, the small values to
    within a few units (its resolution once the scale is the prize's), and the policy
    still learns the +-1 choice; unnormalised, the prize's value loss swamps the clipped
    gradient and in the same budget the critic is still far below the prize."""
    env = jackpot_probe_suite(1 / 64, 500.0)
    normalised = policy_and_values(run(probe_config(value_norm=0.1), env, calls=2).state.params, env)
    assert normalised["positive"][1] == pytest.approx(500.0, abs=10.0)
    for name, value in {"constant": 1.0, "negative": -1.0, "credit": 1.0, "discount_second": 1.0}.items():
        assert normalised[name][1] == pytest.approx(value, abs=3.0), name
    assert normalised["credit"][0][1] > 0.95
    raw = policy_and_values(run(probe_config(value_norm=0.0), env, calls=2).state.params, env)
    assert raw["positive"][1] < 250.0


def test_a_sqrt_critic_learns_a_rare_prize_of_500_without_normalisation():
    """The same jackpot under `--value-transform sqrt` and no PopArt: the head predicts
    h(V), in which the prize is 21.9 and the rest about 0.4, so in the same budget the
    critic learns the prize that the raw critic above does not reach, and the small
    values with it."""
    env = jackpot_probe_suite(1 / 64, 500.0)
    learned = policy_and_values(run(probe_config(value_transform="sqrt"), env, calls=2).state.params, env)
    assert learned["positive"][1] == pytest.approx(500.0, abs=10.0)
    for name, value in {"constant": 1.0, "negative": -1.0, "credit": 1.0, "discount_second": 1.0}.items():
        assert learned[name][1] == pytest.approx(value, abs=0.5), name
    assert learned["credit"][0][1] > 0.95


def test_reward_weights_change_what_is_learned_from_not_the_game():
    # the same rollout, keys and network with the probe's one term weighted 3x: the
    # learner's rewards triple, the episodes' (game's) returns do not
    def rollout(**overrides):
        resolved, env = probe_config(**overrides), probe_suite()
        learner = Learner(env=env, config=resolved, features=features.build(env, resolved))
        params = jax.vmap(learner.init_params)(jax.random.split(jax.random.key(0), 1))
        keys = jax.random.split(jax.random.key(1), 1)
        return jax.jit(lambda *args: learner.rollout(*args))(params, learner.init_envs(), keys, make_hyper(resolved))

    _, plain, plain_stats = rollout()
    _, weighted, weighted_stats = rollout(reward_weights=(("reward", 3.0),))
    assert float(jnp.abs(plain.reward).sum()) > 0
    np.testing.assert_array_equal(weighted.reward, 3.0 * plain.reward)
    np.testing.assert_array_equal(weighted.action, plain.action)
    np.testing.assert_array_equal(weighted_stats.episode_return, plain_stats.episode_return)
    with pytest.raises(ConfigError, match="--reward-weights bonus: not a reward term of this environment"):
        features.build(probe_suite(), probe_config(reward_weights=(("bonus", 0.0),)))


def test_the_default_weights_drop_only_the_games_distance_term():
    terms = vector.reward_terms(HackMatrix())
    weights = weight_vector(terms, TrainConfig().reward_weights)
    assert weights.tolist() == [0.0 if name == "distance" else 1.0 for name in terms]
    # every weight 1: the env's own reward, exactly (no weighted sum at all)
    assert weight_vector(terms, (("distance", 1.0),)) is None
    assert weight_vector(terms, ()) is None, "(): the env's own reward"


def test_truncation_values_on_every_path():
    # two members with their own networks: each row is valued by its own member's
    env = probe_suite()
    learner = Learner(env=env, config=probe_config(num_envs=64, max_episode_steps=1000, num_seeds=2))
    params = jax.vmap(learner.init_params)(jax.random.split(jax.random.key(0), 2))
    obs = jax.random.normal(jax.random.key(1), (2, 64, env.observation_shape[0]))
    full = jnp.stack([evaluate(member_of(params, i), obs[i], "f32")[1] for i in range(2)])
    values = jax.jit(lambda p, o, t: learner.truncation_values(p, o, t))

    def cut(count, key):
        return jnp.zeros(64, bool).at[jax.random.permutation(jax.random.key(key), 64)[:count]].set(True)

    # none, compacted (capacity 9), capacity, every row; the other member with fewer
    for count, other in ((0, 0), (3, 1), (9, 0), (64, 5), (2, 9)):
        truncated = jnp.stack([cut(count, count), cut(other, 100 + other)])
        got = values(params, obs, truncated)
        np.testing.assert_allclose(got, jnp.where(truncated, full, 0.0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_steps, minibatches", [(16, 4), (6, 4), (3, 8)])
def test_minibatches_partition_each_group(num_steps, minibatches):
    resolved = probe_config(num_steps=num_steps, num_minibatches=minibatches,
                            total_timesteps=16 * num_steps)
    learner = Learner(env=probe_suite(), config=resolved)
    indices = np.asarray(learner.minibatch_indices(jax.random.key(0)))
    g = learner.group_size
    assert indices.shape == (minibatches, 16 // g, num_steps * g // minibatches)
    for group in range(16 // g):
        assert sorted(indices[:, group].ravel().tolist()) == list(range(num_steps * g))
    # sample s of group G is step s // g of env slot G * g + s % g
    steps = jnp.broadcast_to(jnp.arange(num_steps, dtype=jnp.int32)[:, None], (num_steps, 16))
    slots = jnp.broadcast_to(jnp.arange(16, dtype=jnp.int32)[None, :], (num_steps, 16))
    zeros = jnp.zeros((num_steps, 16), jnp.float32)
    samples = Samples(obs=jnp.zeros((num_steps, 16, 8), jnp.float32), mask=jnp.ones((num_steps, 16, 3), bool),
                      action=steps * 100 + slots, log_prob=zeros, advantage=zeros, target=zeros, extras={})
    picked = learner.minibatch(samples, jnp.asarray(indices[0]))
    expected = [(s // g) * 100 + group * g + s % g for group in range(16 // g) for s in indices[0][group]]
    assert picked.action.tolist() == expected
