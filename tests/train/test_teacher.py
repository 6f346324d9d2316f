"""The teacher feature (`hm.train.features.teacher`: `--teacher-coef`, kickstarting from a scripted player).

Checked against what it must do: the loss adds the policy's cross-entropy to the
teacher's action on exactly the samples the teacher labelled; the weight falls linearly
to 0 at `teacher_steps`, after which nothing is labelled; on a probe with no reward at
all the teacher alone moves the policy to its action; a member of a `teacher_coef` sweep
is the single run with its value (and weight 0 is the run without a teacher); the
teacher labels every `teacher_every`-th slot and no other; bad settings, and the greedy
teacher on an env that is not the game, are refused naming the flag. (The game's
teacher, `hm.players.greedy.choose_each`, is checked in tests/tools/test_evaluate.py beside
the greedy baseline.)
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probes import TabularEnv, last_legal, plain, taught_probe_suite, train_twice

from bench.null_env import NullEnv
from hm.train import TrainConfig, distributions, features, member_of, ppo
from hm.train.config import ConfigError, resolve, validate
from hm.train.features.teacher import Teacher, teacher_weight
from hm.train.learner import Learner, init, make_hyper, make_train_fn
from hm.train.mesh import make_mesh
from hm.train.network import Network, evaluate

TEACHER_ACTION = 2


def no_reward() -> TabularEnv:
    """One state, three legal actions that all pay 0 and end the episode: only the
    teacher (action 2, the last legal one) can move the policy here."""
    return TabularEnv(reward=np.zeros((1, 3)), next_state=np.zeros((1, 3), int), terminal=np.ones((1, 3), bool),
                      legal=np.ones((1, 3), bool), start_probs=np.ones(1))


PROBE = plain(num_envs=16, num_steps=8, total_timesteps=16 * 8 * 8, hidden_dim=16, num_layers=1,
              num_minibatches=2, update_epochs=2, lr=2e-2, ent_coef=0.0, max_episode_steps=5,
              updates_per_call=4, precision="f32", teacher_every=2, teacher_steps=10**6)


def train(config: TrainConfig, env=None):
    """Two calls (8 updates) of `config` taught by `last_legal`; the final state and the
    last call's metrics."""
    return train_twice(config, env if env is not None else no_reward(), teacher_policy=last_legal)


def policy_of(state, member: int = 0) -> np.ndarray:
    network = member_of(state.params, member)
    logits, _ = network(jnp.ones((1,), jnp.float32))
    return np.asarray(jax.nn.softmax(logits))


def test_the_teacher_alone_moves_the_policy_to_its_action():
    taught, metrics = train(dataclasses.replace(PROBE, teacher_coef=1.0))
    untaught, plain_metrics = train(PROBE)
    assert policy_of(taught)[TEACHER_ACTION] > 0.9
    # no reward: only the value loss, through the shared trunk, moves the untaught policy
    assert policy_of(untaught)[TEACHER_ACTION] < 0.6
    assert metrics["teacher/agreement"][0] == 1.0
    assert metrics["loss/teacher"][0] < 0.1
    assert "loss/teacher" not in plain_metrics and "teacher/coef" not in plain_metrics


def test_the_weight_falls_to_zero_and_then_nothing_is_labelled():
    batch = PROBE.num_envs * PROBE.num_steps
    # 8 updates; the weight is 1 - steps / (4 batches) at each update's start: 1, 0.75, ..., 0
    _, metrics = train(dataclasses.replace(PROBE, teacher_coef=2.0, teacher_steps=4 * batch))
    assert metrics["teacher/coef"][0] == 0.0, "the second call's updates all start at or past 4 batches"
    assert metrics["loss/teacher"][0] == 0.0 and metrics["teacher/agreement"][0] == 0.0, "no labels"
    steps = lambda n: jnp.asarray([n % 2**32, n // 2**32], jnp.uint32)  # noqa: E731
    np.testing.assert_allclose(teacher_weight(jnp.float32(2.0), steps(0), 100), 2.0)
    np.testing.assert_allclose(teacher_weight(jnp.float32(2.0), steps(25), 100), 1.5)
    np.testing.assert_allclose(teacher_weight(jnp.float32(2.0), steps(2**32 + 5), 100), 0.0)


def test_a_teacher_sweep_member_is_the_single_run_and_weight_zero_is_no_teacher():
    suite = taught_probe_suite()
    population, metrics = train(dataclasses.replace(PROBE, sweep=(("teacher_coef", (0.0, 1.0)),)), suite)
    # the second call's updates start at 4..7 batches of 128: its mean weight is at 5.5
    np.testing.assert_allclose(metrics["teacher/coef"], [0.0, 1.0 - 5.5 * 128 / 10**6], rtol=1e-6)
    taught, _ = train(dataclasses.replace(PROBE, teacher_coef=1.0), suite)
    plain, _ = train(PROBE, suite)
    assert not np.allclose(jax.tree.leaves(member_of(population.params, 0))[0],
                           jax.tree.leaves(member_of(population.params, 1))[0]), "the teacher changed member 1"
    for member, single in ((0, plain), (1, taught)):
        for a, b in zip(jax.tree.leaves(member_of(population.params, member)),
                        jax.tree.leaves(member_of(single.params, 0)), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_loss_is_the_cross_entropy_on_the_labelled_samples():
    network = Network(6, 4, 8, 1, key=jax.random.key(0))
    keys = jax.random.split(jax.random.key(1), 3)
    obs = jax.random.normal(keys[0], (8, 6))
    mask = jnp.ones((8, 4), bool).at[:, 3].set(False)
    action = jax.random.randint(keys[1], (8,), 0, 3)
    teacher = jnp.asarray([1, -1, 2, -1, 0, -1, -1, 1], jnp.int32)
    batch = ppo.Minibatch(obs=obs, mask=mask, action=action, log_prob=jnp.full((8,), -1.1),
                          advantage=jax.random.normal(keys[2], (8,)), target=jnp.zeros(8),
                          extras={"teacher_action": teacher})
    coefficients = ppo.LossCoefficients(clip_eps=0.2, vf_coef=0.5, ent_coef=0.01)
    teacher_feature = (Teacher(teacher_steps=1, every=1, policy=last_legal),)
    untaught, _ = ppo.loss(network, batch, coefficients, "f32")
    with_zero, metrics = ppo.loss(network, batch, coefficients, "f32", None, teacher_feature,
                                  {"teacher_coef": jnp.float32(0.0)})
    with_half, _ = ppo.loss(network, batch, coefficients, "f32", None, teacher_feature,
                            {"teacher_coef": jnp.float32(0.5)})
    logits, _ = evaluate(network, obs, "f32")
    labelled = np.asarray(teacher) >= 0
    log_p = np.asarray(distributions.log_probs(logits, mask))
    expected = -np.mean(log_p[labelled, np.asarray(teacher)[labelled]])
    np.testing.assert_allclose(metrics["loss/teacher"], expected, rtol=1e-5)
    np.testing.assert_allclose(with_zero, untaught, rtol=1e-6)
    np.testing.assert_allclose(with_half, untaught + 0.5 * expected, rtol=1e-5)
    likeliest = np.argmax(np.where(np.asarray(mask), np.asarray(logits), -np.inf), axis=-1)
    np.testing.assert_allclose(metrics["teacher/agreement"],
                               np.mean(likeliest[labelled] == np.asarray(teacher)[labelled]), rtol=1e-6)


def test_the_teacher_labels_every_kth_slot_and_no_other():
    config = dataclasses.replace(PROBE, num_envs=8, teacher_coef=1.0, teacher_every=4)
    resolved, env = resolve(config, "cpu", 1), no_reward()
    learner = Learner(env=env, config=resolved, features=features.build(env, resolved, teacher_policy=last_legal))
    state = init(resolved, env=env)
    hyper = jax.tree.map(jnp.asarray, make_hyper(resolved))
    keys = jax.random.split(jax.random.key(0), 1)
    _, trajectory, _ = eqx.filter_jit(Learner.rollout)(learner, state.params, state.envs, keys, hyper)
    labels = np.asarray(trajectory.extras["teacher_action"])          # [T, P, n]
    assert (labels[:, :, ::4] == TEACHER_ACTION).all()
    assert (labels[:, :, [1, 2, 3, 5, 6, 7]] == -1).all()


@pytest.mark.parametrize(("fields", "flag", "text"), [
    ({"teacher_coef": -1.0}, "--teacher-coef", "--teacher-coef must be a number >= 0"),
    ({"teacher_steps": 0}, "--teacher-steps", "--teacher-steps must be an integer >= 1"),
    ({"teacher_coef": 1.0, "teacher_every": 3}, "--teacher-every", "must divide each device's share"),
    ({"sweep": (("teacher_coef", (0.0, 1.0)),), "teacher_every": 5}, "--sweep",
     "--sweep teacher-coef=1.0: --teacher-every must divide"),
])
def test_bad_teacher_settings_are_refused_naming_the_flag(fields, flag, text):
    with pytest.raises(ConfigError) as error:
        validate(dataclasses.replace(PROBE, **fields), 1)
    assert error.value.flag == flag and text in error.value.message


def test_teacher_every_is_not_checked_without_a_teacher_and_an_env_without_one_is_refused():
    validate(dataclasses.replace(PROBE, teacher_every=3), 1)
    resolved = resolve(dataclasses.replace(PROBE, teacher_coef=0.5), "cpu", 1)
    with pytest.raises(ConfigError) as error:
        make_train_fn(resolved, NullEnv(), make_mesh(1))
    assert error.value.flag == "--teacher-coef" and "the greedy teacher plays HackMatrix" in error.value.message
    make_train_fn(resolved, NullEnv(), make_mesh(1), teacher_policy=last_legal)  # a teacher of its own: fine


def test_the_default_config_teaches_with_the_greedy_player_for_two_fifths_of_the_run():
    """One set of defaults: `TrainConfig()` is kickstarted PPO, the teacher's weight 1
    falling to 0 at 2/5 of the run, labelling one slot in 8."""
    from hm.env import HackMatrix

    resolved = resolve(TrainConfig(total_timesteps=20_000_000), "cpu", 1)
    (teacher,) = [f for f in features.build(HackMatrix(), resolved) if isinstance(f, Teacher)]
    assert resolved.teacher_coef == 1.0 and teacher.teacher_steps == 8_000_000 and teacher.every == 8
