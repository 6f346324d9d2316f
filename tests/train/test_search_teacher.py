"""The search teacher (`hm.train.features.search_teacher`: `--search-coef`, expert iteration).

Checked against what it must do: on the game, the search labels exactly every
`search_every`-th slot with its improved policy (a distribution over the legal actions);
its loss is the cross-entropy from that policy to the learner's, on the labelled samples
only, times its weight; with weight 0 nothing is searched; an env that is not the game,
and bad settings, are refused naming the flag.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probes import plain, probe_suite

from hm import search
from hm.env import HackMatrix
from hm.train import features, ppo
from hm.train.config import ConfigError, resolve, validate
from hm.train.features.search_teacher import SearchTeacher
from hm.train.learner import Learner, init, make_hyper
from hm.train.network import Network, evaluate

GAME = plain(num_envs=8, num_steps=2, total_timesteps=8 * 2, hidden_dim=16, num_layers=1, updates_per_call=1,
             search_coef=1.0, search_simulations=4, search_every=4, precision="f32")


def rollout(config, **member):
    """One rollout of `config`; with `search_coef=` or `program_bonus=`, of the same
    compiled program with the member's value set to it (as a sweep or an anneal would)."""
    resolved, env = resolve(config, "cpu", 1), HackMatrix()
    learner = Learner(env=env, config=resolved, features=features.build(env, resolved))
    state = init(resolved, env=env)
    hyper = jax.tree.map(jnp.asarray, make_hyper(resolved))
    for name, value in member.items():
        hyper[name] = jnp.full_like(hyper[name], value)
    _, trajectory, _ = _rollout(learner, state.params, state.envs, jax.random.split(jax.random.key(0), 1), hyper)
    return trajectory


_rollout = eqx.filter_jit(Learner.rollout)


@pytest.fixture(scope="module")
def searched():
    return rollout(GAME)


def test_the_search_labels_every_kth_slot_with_a_policy_over_the_legal_actions(searched):
    labelled = np.asarray(searched.extras["search_labelled"])          # [T, P, n]
    policy = np.asarray(searched.extras["search_policy"])               # [T, P, n, A]
    mask = np.asarray(searched.mask)
    assert labelled[:, :, ::4].all() and not labelled[:, :, [1, 2, 3, 5, 6, 7]].any()
    np.testing.assert_allclose(policy[labelled].sum(axis=-1), 1.0, rtol=1e-5)
    assert (policy[labelled][~mask[labelled]] == 0).all(), "no weight on an illegal action"
    assert (policy[~labelled] == 0).all()


def test_weight_zero_searches_nothing():
    quiet = rollout(GAME, search_coef=0.0)
    assert not np.asarray(quiet.extras["search_labelled"]).any()


def test_the_loss_is_the_cross_entropy_to_the_search_policy_on_the_labelled_samples():
    network = Network(6, 4, 8, 1, key=jax.random.key(0))
    keys = jax.random.split(jax.random.key(1), 3)
    obs = jax.random.normal(keys[0], (8, 6))
    mask = jnp.ones((8, 4), bool).at[:, 3].set(False)
    target = jax.nn.softmax(jax.random.normal(keys[1], (8, 4)) + jnp.where(mask, 0.0, -jnp.inf))
    labelled = jnp.asarray([True, False, True, False, False, True, False, False])
    batch = ppo.Minibatch(obs=obs, mask=mask, action=jnp.zeros(8, jnp.int32), log_prob=jnp.full((8,), -1.1),
                          advantage=jax.random.normal(keys[2], (8,)), target=jnp.zeros(8),
                          extras={"search_policy": target, "search_labelled": labelled})
    teacher = SearchTeacher(every=1, settings=search.Search(), term_weights=(), precision="f32")
    term, metrics = teacher.loss(evaluate(network, obs, "f32")[0], batch, {"search_coef": jnp.float32(0.5)}, None)
    logits, _ = evaluate(network, obs, "f32")
    log_p = np.asarray(jax.nn.log_softmax(jnp.where(mask, logits, -1e30)))
    rows = np.asarray(labelled)
    expected = -np.mean(np.sum(np.where(np.asarray(target) > 0, np.asarray(target) * log_p, 0.0), axis=-1)[rows])
    np.testing.assert_allclose(metrics["loss/search"], expected, rtol=1e-5)
    np.testing.assert_allclose(term, 0.5 * expected, rtol=1e-5)


@pytest.mark.parametrize(("fields", "flag", "text"), [
    ({"search_coef": -1.0}, "--search-coef", "--search-coef must be a number >= 0"),
    ({"search_simulations": 0}, "--search-simulations", "--search-simulations must be an integer in [1, 1024]"),
    ({"search_every": 3}, "--search-every", "must divide each device's share"),
    ({"search_steps": 0}, "--search-steps", "--search-steps must be an integer >= 1"),
    ({"search_program_bonus": -1.0}, "--search-program-bonus", "--search-program-bonus must be a number >= 0"),
])
def test_bad_search_settings_are_refused_naming_the_flag(fields, flag, text):
    with pytest.raises(ConfigError) as error:
        validate(dataclasses.replace(GAME, **fields), 1)
    assert error.value.flag == flag and text in error.value.message


def test_an_env_without_the_game_is_refused():
    with pytest.raises(ConfigError) as error:
        features.build(probe_suite(), resolve(dataclasses.replace(GAME, num_envs=8), "cpu", 1))
    assert error.value.flag == "--search-coef" and "plans over HackMatrix's games" in error.value.message


def test_search_steps_makes_the_weight_fall_to_zero_and_then_nothing_is_searched():
    """`search_steps` fades the weight linearly as the greedy teacher's `teacher_steps`
    does; past it the rollout searches no slot. None (the default) keeps the weight."""
    teacher = features.build(HackMatrix(), resolve(dataclasses.replace(GAME, search_steps=100), "cpu", 1))
    (search_teacher,) = [f for f in teacher if isinstance(f, SearchTeacher)]
    steps = lambda n: jnp.asarray([n % 2**32, n // 2**32], jnp.uint32)  # noqa: E731
    hyper = {"search_coef": jnp.float32(2.0)}
    np.testing.assert_allclose(search_teacher.anneal(hyper, steps(25))["search_coef"], 1.5)
    np.testing.assert_allclose(search_teacher.anneal(hyper, steps(100))["search_coef"], 0.0)
    constant = SearchTeacher(every=1, settings=search.Search(), term_weights=(), precision="f32")
    assert constant.anneal(hyper, steps(10**9))["search_coef"] == 2.0
    faded = search_teacher.anneal(hyper, steps(100))["search_coef"]
    assert not np.asarray(rollout(GAME, search_coef=float(faded)).extras["search_labelled"]).any()


def test_search_program_bonus_sets_what_the_search_pays_for_a_program(searched):
    """Unset, the search pays the member's program bonus (the learner's reward); set, its
    own, whatever the member's; and the labels follow what the search pays (a member's
    bonus of 1,000 a program changes the improved policies of a rollout: the same compiled
    program as `searched`, the bonus being the member's traced value)."""
    (default,) = [f for f in features.build(HackMatrix(), resolve(GAME, "cpu", 1)) if isinstance(f, SearchTeacher)]
    own = dataclasses.replace(GAME, search_program_bonus=0.0)
    (zero,) = [f for f in features.build(HackMatrix(), resolve(own, "cpu", 1)) if isinstance(f, SearchTeacher)]
    assert float(default.search_reward(jnp.float32(3.0)).program_bonus) == 3.0
    assert float(zero.search_reward(jnp.float32(3.0)).program_bonus) == 0.0
    np.testing.assert_array_equal(default.search_reward(jnp.float32(3.0)).term_weights, zero.search_reward(jnp.float32(3.0)).term_weights)
    lavish_labels = rollout(GAME, program_bonus=1000.0).extras["search_policy"]
    assert not np.allclose(np.asarray(searched.extras["search_policy"]), np.asarray(lavish_labels))

