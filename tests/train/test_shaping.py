"""Potential-based reward shaping (`--shaping`, `hm.train.learner.shaped_reward`).

Checked against what it must do: the learner's reward is the env's plus
C × (γΦ(s') − Φ(s)) on every step, with Φ(s') = 0 where the episode ended, and nothing
else changes (actions, the game's returns); a potential that lures toward a dead end
shifts the learned values by −Φ and leaves the learned policy where the reward puts it
(which a shaping that did not zero Φ at the end would not); the game's potential is the
greedy player's value, reported by `vector_step` before and after each step; a member
of a `shaping` sweep is the single run with its value; bad settings are refused
naming the flag.
"""

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probes import TabularEnv, train_twice

from hm.tools import greedy
from hm.train import NullEnv, TrainConfig, member_of
from hm.train.config import ConfigError, members, resolve, validate
from hm.train.envs import HackMatrixEnv, vector_start, vector_step, vector_unstarted
from hm.train.learner import Learner, make_hyper, make_train_fn
from hm.train.mesh import make_mesh
from hm.train.network import evaluate

GAMMA = 0.9
START, LURE, GOAL = 0, 1, 2
LURE_POTENTIAL = 5.0


class Lure(TabularEnv):
    """From START, action 0 goes to LURE (Φ = 5) and action 1 to GOAL (Φ = 0), both
    paying 0; every action in LURE ends the game paying 0, in GOAL paying +1. Episodes
    also start in LURE and GOAL, so their values are learned. Best: action 1 from START.
    The shaped reward pays γ × 5 for entering LURE, and −5 for leaving it only if Φ is
    0 at the end of the game."""

    potential_name: ClassVar[str | None] = "a table"
    potentials: jax.Array

    def __init__(self):
        reward = np.zeros((3, 2))
        reward[GOAL] = 1.0
        next_state = np.array([[LURE, GOAL], [LURE, LURE], [GOAL, GOAL]])
        terminal = np.array([[False, False], [True, True], [True, True]])
        super().__init__(reward, next_state, terminal, np.ones((3, 2), bool), np.ones(3) / 3)
        self.potentials = jnp.asarray([0.0, LURE_POTENTIAL, 0.0])

    def potential(self, state):
        return self.potentials[state.state]


PROBE = TrainConfig(num_envs=16, num_steps=8, total_timesteps=16 * 8 * 80, hidden_dim=32, num_layers=1,
                    num_minibatches=2, update_epochs=2, lr=1e-2, ent_coef=0.01, gamma=GAMMA,
                    max_episode_steps=50, updates_per_call=40, precision="f32", teacher_coef=0.0)


def train(config: TrainConfig):
    """Two calls of `config` on the lure; the final state on the host."""
    return train_twice(config, Lure())[0]


def policy_and_values(state, member: int = 0):
    logits, values = evaluate(member_of(state.params, member), jnp.eye(3), "f32")
    return np.asarray(jax.nn.softmax(logits)), np.asarray(values)


def rollout(config: TrainConfig):
    resolved = resolve(config, "cpu", 1)
    env = Lure()
    learner = Learner(env=env, config=resolved)
    params = jax.vmap(learner.init_params)(jax.random.split(jax.random.key(0), 1))
    keys = jax.random.split(jax.random.key(1), 1)
    hyper = make_hyper(resolved)
    return jax.jit(lambda *args: learner.rollout(*args))(params, learner.init_envs(), keys, hyper)


def test_the_reward_gains_the_discounted_potential_difference_and_nothing_else_changes():
    _, plain, plain_stats = rollout(PROBE)
    _, shaped, shaped_stats = rollout(dataclasses.replace(PROBE, shaping=2.0))
    np.testing.assert_array_equal(shaped.action, plain.action)
    np.testing.assert_array_equal(shaped_stats.episode_return, plain_stats.episode_return)
    state = np.argmax(np.asarray(plain.obs), axis=-1)[:, 0]          # [T, n]
    phi = np.asarray([0.0, LURE_POTENTIAL, 0.0])[state]
    done = np.asarray(plain.done)[:, 0]
    # the next state of a step is the next row's, except where the game ended (Φ = 0)
    expected = 2.0 * (GAMMA * np.where(done[:-1], 0.0, phi[1:]) - phi[:-1])
    np.testing.assert_allclose(shaped.reward[:-1, 0] - plain.reward[:-1, 0], expected, rtol=1e-6, atol=1e-6)
    assert done.any() and (state == LURE).any() and (expected != 0).any()


def test_a_luring_potential_shifts_the_values_and_not_the_policy():
    plain = train(PROBE)
    shaped = train(dataclasses.replace(PROBE, shaping=1.0))
    for state in (plain, shaped):
        probs, _ = policy_and_values(state)
        assert probs[START, 1] > 0.9, "the goal, not the lure"
    _, v_plain = policy_and_values(plain)
    _, v_shaped = policy_and_values(shaped)
    # V'(s) = V(s) − Φ(s): LURE 0 → −5, GOAL 1 → 1, START γ → γ
    np.testing.assert_allclose(v_plain, [GAMMA, 0.0, 1.0], atol=0.1)
    np.testing.assert_allclose(v_shaped, [GAMMA, -LURE_POTENTIAL, 1.0], atol=0.25)


def test_a_shaping_sweep_member_is_the_single_run():
    # 8 updates: a longer run's members drift apart by float rounding alone
    short = dataclasses.replace(PROBE, total_timesteps=16 * 8 * 8, updates_per_call=4)
    swept = dataclasses.replace(short, sweep=(("shaping", (0.0, 1.0)),))
    assert [m.hyper["shaping"] for m in members(resolve(swept, "cpu", 1))] == [0.0, 1.0]
    population = train(swept)
    for member, single in ((0, train(short)), (1, train(dataclasses.replace(short, shaping=1.0)))):
        for a, b in zip(jax.tree.leaves(member_of(population.params, member)),
                        jax.tree.leaves(member_of(single.params, 0)), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_games_potential_is_the_greedy_value_before_and_after_each_step():
    env, n = HackMatrixEnv(), 64

    @jax.jit
    def steps(key):
        envs = vector_start(env, vector_unstarted(env, n), jax.random.split(key, n))

        def one(envs, key):
            act_key, step_key = jax.random.split(key)
            logits = jnp.where(envs.mask, 0.0, -jnp.inf)
            action = jax.random.categorical(act_key, logits).astype(jnp.int32)
            before = jax.vmap(greedy.value)(envs.state)
            new, out = vector_step(env, envs, action, jax.random.split(step_key, n), 1000, potentials=True)
            after = jax.vmap(greedy.value)(new.state)
            return new, (out.potential, before, out.next_potential, after, out.done | out.truncated)

        return jax.lax.scan(one, envs, jax.random.split(key, 40))[1]

    potential, before, next_potential, after, finished = steps(jax.random.key(3))
    np.testing.assert_array_equal(potential, before)
    np.testing.assert_array_equal(np.where(finished, 0.0, next_potential), np.where(finished, 0.0, after))
    done = np.asarray(finished)
    assert done.any() and (np.asarray(next_potential)[done] == 0.0).all(), "Φ = 0 where the game ended"
    assert (np.asarray(potential) < -0.3).any(), "some states have an enemy next to the player"


def test_bad_shaping_is_refused_naming_the_flag():
    with pytest.raises(ConfigError, match=r"--shaping must be a number >= 0; got -1"):
        validate(dataclasses.replace(PROBE, shaping=-1.0), 1)
    with pytest.raises(ConfigError, match=r"--sweep shaping=-0.5: --shaping must be a number >= 0"):
        validate(dataclasses.replace(PROBE, sweep=(("shaping", (0.0, -0.5)),)), 1)
    with pytest.raises(ConfigError, match="--shaping: NullEnv has no potential"):
        make_train_fn(resolve(dataclasses.replace(PROBE, shaping=1.0), "cpu", 1), NullEnv(), make_mesh(1))
    make_train_fn(resolve(PROBE, "cpu", 1), NullEnv(), make_mesh(1))  # 0: no potential needed
