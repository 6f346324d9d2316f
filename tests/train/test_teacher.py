"""The teacher (`--teacher-coef`, kickstarting from a scripted player).

Checked against what it must do: the loss adds the policy's cross-entropy to the
teacher's action on exactly the samples the teacher labelled; the weight falls linearly
to 0 at `teacher_steps`, after which nothing is labelled; on a probe with no reward at
all the teacher alone moves the policy to its action; a member of a `teacher_coef` sweep
is the single run with its value (and weight 0 is the run without a teacher); the
teacher labels every `teacher_every`-th slot and no other; each member's teacher gets
its own `teacher_program_value`; a program floor (`--teacher-program-floor`) keeps
weighing the labels that seek programs, and only those, once the rest of the teacher's
weight is 0; bad settings are refused naming the flag. (The game's
teacher, `hm.tools.greedy.choose_each`, is checked in tests/tools/test_evaluate.py beside
the greedy baseline.)
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probes import LastLegal, taught_probe_suite, train_twice

from hm.train import NullEnv, TrainConfig, distributions, member_of, ppo
from hm.train.config import ConfigError, resolve, validate
from hm.train.learner import Learner, init, make_hyper, make_train_fn, teacher_weight
from hm.train.mesh import make_mesh
from hm.train.network import Network, evaluate

TEACHER_ACTION = 2


def no_reward(kind: type[LastLegal] = LastLegal) -> LastLegal:
    """One state, three legal actions that all pay 0 and end the episode: only the
    teacher (action 2) can move the policy here. `kind` is the env's class."""
    return kind(reward=np.zeros((1, 3)), next_state=np.zeros((1, 3), int), terminal=np.ones((1, 3), bool),
                     legal=np.ones((1, 3), bool), start_probs=np.ones(1))


PROBE = TrainConfig(num_envs=16, num_steps=8, total_timesteps=16 * 8 * 8, hidden_dim=16, num_layers=1,
                    num_minibatches=2, update_epochs=2, lr=2e-2, ent_coef=0.0, max_episode_steps=5,
                    updates_per_call=4, precision="f32", teacher_every=2, teacher_steps=10**6)


def train(config: TrainConfig, env=None):
    """Two calls (8 updates) of `config`; the final state and the last call's metrics."""
    return train_twice(config, env if env is not None else no_reward())


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
                          advantage=jax.random.normal(keys[2], (8,)), target=jnp.zeros(8))
    taught_batch = dataclasses.replace(batch, teacher_action=teacher)
    coefficients = ppo.LossCoefficients(clip_eps=0.2, vf_coef=0.5, ent_coef=0.01)
    plain, _ = ppo.loss(network, batch, coefficients, "f32")
    with_zero, metrics = ppo.loss(network, taught_batch, coefficients, "f32")
    with_half, _ = ppo.loss(network, taught_batch, dataclasses.replace(coefficients, teacher_coef=0.5), "f32")
    logits, _ = evaluate(network, obs, "f32")
    labelled = np.asarray(teacher) >= 0
    log_p = np.asarray(distributions.log_probs(logits, mask))
    expected = -np.mean(log_p[labelled, np.asarray(teacher)[labelled]])
    np.testing.assert_allclose(metrics["loss/teacher"], expected, rtol=1e-5)
    np.testing.assert_allclose(with_zero, plain, rtol=1e-6)
    np.testing.assert_allclose(with_half, plain + 0.5 * expected, rtol=1e-5)
    likeliest = np.argmax(np.where(np.asarray(mask), np.asarray(logits), -np.inf), axis=-1)
    np.testing.assert_allclose(metrics["teacher/agreement"],
                               np.mean(likeliest[labelled] == np.asarray(teacher)[labelled]), rtol=1e-6)
    # the program floor's part: the labels that seek programs, summed, over all the labels
    seeks = jnp.asarray([True, True, False, False, True, False, False, False])
    marked = dataclasses.replace(taught_batch, teacher_seeks=seeks)
    floored, floored_metrics = ppo.loss(network, marked, dataclasses.replace(
        coefficients, teacher_coef=0.5, teacher_program_coef=0.25), "f32")
    seeking = np.asarray(seeks) & labelled
    program_part = -np.sum(log_p[seeking, np.asarray(teacher)[seeking]]) / labelled.sum()
    np.testing.assert_allclose(floored, plain + 0.5 * expected + 0.25 * program_part, rtol=1e-5)
    np.testing.assert_allclose(floored_metrics["teacher/program_share"], seeking.sum() / labelled.sum())


def test_the_teacher_labels_every_kth_slot_and_no_other():
    config = dataclasses.replace(PROBE, num_envs=8, teacher_coef=1.0, teacher_every=4)
    resolved, env = resolve(config, "cpu", 1), no_reward()
    learner = Learner(env=env, config=resolved)
    state = init(resolved, env=env)
    hyper = jax.tree.map(jnp.asarray, make_hyper(resolved))
    keys = jax.random.split(jax.random.key(0), 1)
    _, trajectory, _ = eqx.filter_jit(Learner.rollout)(learner, state.params, state.envs, keys, hyper)
    labels = np.asarray(trajectory.teacher_action)          # [T, P, n]
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


class ValueSwitch(LastLegal):
    """`no_reward`'s MDP whose teacher takes a program value: with it above 0 it says the
    first legal action (0), else the last (2)."""

    teacher_values_programs = True

    def teacher_actions(self, states, mask, keys, program_value):
        first = jnp.argmax(mask, axis=1).astype(jnp.int32)
        return jnp.where(program_value > 0, first, super().teacher_actions(states, mask, keys, program_value))


def test_each_member_s_teacher_gets_its_own_program_value():
    """`--sweep teacher-program-value=0,1`: the value reaches the env's teacher, per member."""
    config = dataclasses.replace(PROBE, num_envs=8, teacher_coef=1.0, teacher_every=4,
                                 sweep=(("teacher_program_value", (0.0, 1.0)),))
    resolved, env = resolve(config, "cpu", 1), no_reward(ValueSwitch)
    learner = Learner(env=env, config=resolved)
    state = init(resolved, env=env)
    hyper = jax.tree.map(jnp.asarray, make_hyper(resolved))
    np.testing.assert_array_equal(hyper.teacher_program_value, [0.0, 1.0])
    keys = jax.random.split(jax.random.key(0), 2)
    _, trajectory, _ = eqx.filter_jit(Learner.rollout)(learner, state.params, state.envs, keys, hyper)
    labels = np.asarray(trajectory.teacher_action)          # [T, P, n]
    assert (labels[:, 0, ::4] == TEACHER_ACTION).all() and (labels[:, 1, ::4] == 0).all()


def test_a_program_value_is_refused_for_a_teacher_without_one_and_without_a_teacher():
    with pytest.raises(ConfigError) as error:
        validate(dataclasses.replace(PROBE, teacher_program_value=-1.0), 1)
    assert error.value.flag == "--teacher-program-value" and "must be a number >= 0" in error.value.message
    for fields, text in (({"teacher_coef": 1.0}, "LastLegal's teacher does not value programs"),
                         ({"teacher_coef": 0.0}, "no member trains with a teacher")):
        resolved = resolve(dataclasses.replace(PROBE, teacher_program_value=2.0, **fields), "cpu", 1)
        env = no_reward() if fields["teacher_coef"] else no_reward(ValueSwitch)
        with pytest.raises(ConfigError) as error:
            make_train_fn(resolved, env, make_mesh(1))
        assert error.value.flag == "--teacher-program-value" and text in error.value.message


class ProgramSeeker(LastLegal):
    """`no_reward`'s MDP whose teacher (action 2) takes a program value and marks every
    label as seeking programs."""

    teacher_values_programs = True
    SEEKS = True

    def teacher_seeks(self, states, actions, keys):
        return jnp.full(actions.shape, self.SEEKS)


class NothingSeeker(ProgramSeeker):
    """The same, with no label seeking programs."""

    SEEKS = False


def test_a_program_floor_keeps_teaching_the_labels_that_seek_programs_and_no_others():
    """The teacher's weight falls to 0 after one batch of 128 steps; with a floor of 1
    its program labels keep weighing 1, so the policy still learns the teacher's action,
    and the teacher keeps labelling; labels that seek nothing get no floor."""
    ended = dataclasses.replace(PROBE, teacher_coef=1.0, teacher_steps=PROBE.num_envs * PROBE.num_steps)
    floored = dataclasses.replace(ended, teacher_program_floor=1.0)
    kept, metrics = train(floored, no_reward(ProgramSeeker))
    assert policy_of(kept)[TEACHER_ACTION] > 0.9
    assert metrics["teacher/coef"][0] == 0.0 and metrics["teacher/program_coef"][0] == 1.0
    assert metrics["teacher/program_share"][0] == 1.0 and metrics["teacher/agreement"][0] == 1.0
    for config, env in ((ended, no_reward(ProgramSeeker)), (floored, no_reward(NothingSeeker))):
        faded, _ = train(config, env)
        assert policy_of(faded)[TEACHER_ACTION] < 0.6
    assert "teacher/program_coef" not in train(ended, no_reward(ProgramSeeker))[1]


def test_a_program_floor_is_refused_for_a_teacher_without_program_values_and_without_a_teacher():
    with pytest.raises(ConfigError) as error:
        validate(dataclasses.replace(PROBE, teacher_program_floor=-1.0), 1)
    assert error.value.flag == "--teacher-program-floor" and "must be a number >= 0" in error.value.message
    for fields, env, text in (({"teacher_coef": 1.0}, no_reward(), "LastLegal's teacher does not value programs"),
                              ({"teacher_coef": 0.0}, no_reward(ProgramSeeker), "no member trains with a teacher")):
        resolved = resolve(dataclasses.replace(PROBE, teacher_program_floor=1.0, **fields), "cpu", 1)
        with pytest.raises(ConfigError) as error:
            make_train_fn(resolved, env, make_mesh(1))
        assert error.value.flag == "--teacher-program-floor" and text in error.value.message


def test_teacher_every_is_not_checked_without_a_teacher_and_an_env_without_one_is_refused():
    validate(dataclasses.replace(PROBE, teacher_every=3), 1)
    resolved = resolve(dataclasses.replace(PROBE, teacher_coef=0.5), "cpu", 1)
    with pytest.raises(ConfigError) as error:
        make_train_fn(resolved, NullEnv(), make_mesh(1))
    assert error.value.flag == "--teacher-coef" and "NullEnv has no scripted teacher" in error.value.message
