"""The learner's program bonus (`--program-bonus`, `hm.train.features.reward`).

Checked against what it must do: the learner's reward is the env's plus
B × (programs owned after the step − before it) on every step, with the count after
the step taken from the game that ended there (nothing is paid back), and nothing else
changes (actions, the game's returns); so it moves the learned policy: a probe's learner gives up a reward for a program it would otherwise
pass by, and keeps a program it would otherwise trade away. On the game, the count is
the programs the player owns, before and after each step: siphoning a program block
adds one and an UNDO that takes it back removes it. A member of a `program_bonus`
sweep is the single run with its value; bad settings are refused naming the flag.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probes import TabularEnv, plain, train_twice

from bench.null_env import NullEnv
from hm import game
from hm.env import HackMatrix
from hm.game import constants as C
from hm.tools.train import TrainArgs
from hm.train import TrainConfig, features, member_of
from hm.train.config import ConfigError, members, resolve, validate
from hm.train.learner import Learner, make_hyper, make_train_fn
from hm.train.mesh import make_mesh
from hm.train.network import evaluate
from hm.train.vector import VecEnvState, vector_step

START, HOLD, GAINED, END = 0, 1, 2, 3
PROGRAMS = np.array([0.0, 1.0, 1.0, 0.0])   # programs owned in each state
BONUS = 1.0


class Collector(TabularEnv):
    """In START, action 0 takes a program (to GAINED) and pays 0, action 1 pays +0.5
    and takes none (to END). In HOLD (owning one), action 0 trades the program away for
    +0.5 (to END), action 1 keeps it (to GAINED) and pays 0. Every action ends the game.
    Without a bonus the learner takes the +0.5 in both; with a bonus of 1 for each
    program gained (−1 for each lost) it takes and keeps the program."""

    programs: jax.Array

    def __init__(self):
        reward = np.zeros((4, 2))
        reward[START, 1] = reward[HOLD, 0] = 0.5
        next_state = np.array([[GAINED, END], [END, GAINED], [END, END], [END, END]])
        terminal = np.ones((4, 2), bool)
        super().__init__(reward, next_state, terminal, np.ones((4, 2), bool), np.array([0.5, 0.5, 0.0, 0.0]))
        self.programs = jnp.asarray(PROGRAMS, jnp.float32)

    def step_env(self, key, game_state, action):
        obs, state, reward, done, step_info = super().step_env(key, game_state, action)
        return obs, state, reward, done, {**step_info, "programs_owned": count(state)}


def count(state):
    """The programs owned in a `Collector` state."""
    return jnp.asarray(PROGRAMS, jnp.float32)[state.state]


PROBE = plain(num_envs=16, num_steps=8, total_timesteps=16 * 8 * 80, hidden_dim=32, num_layers=1,
              num_minibatches=2, update_epochs=2, lr=1e-2, ent_coef=0.01, gamma=0.9,
              max_episode_steps=50, updates_per_call=40, precision="f32")


def rollout(config: TrainConfig):
    resolved = resolve(config, "cpu", 1)
    env = Collector()
    learner = Learner(env=env, config=resolved, features=features.build(env, resolved, program_count=count))
    params = jax.vmap(learner.init_params)(jax.random.split(jax.random.key(0), 1))
    keys = jax.random.split(jax.random.key(1), 1)
    return jax.jit(lambda *args: learner.rollout(*args))(params, learner.init_envs(), keys, make_hyper(resolved))


def test_the_reward_gains_the_bonus_times_the_change_in_programs_and_nothing_else_changes():
    _, plain, plain_stats = rollout(PROBE)
    _, paid, paid_stats = rollout(dataclasses.replace(PROBE, program_bonus=BONUS))
    np.testing.assert_array_equal(paid.action, plain.action)
    np.testing.assert_array_equal(paid_stats.episode_return, plain_stats.episode_return)
    state = np.argmax(np.asarray(plain.obs), axis=-1)[:, 0]                       # [T, n]
    after = np.asarray(Collector().next_state)[state, np.asarray(plain.action)[:, 0]]
    # every step ends a game: the count after it is the ended game's, not the new game's
    assert np.asarray(plain.done).all()
    expected = BONUS * (PROGRAMS[after] - PROGRAMS[state])
    np.testing.assert_allclose(paid.reward[:, 0] - plain.reward[:, 0], expected, rtol=1e-6, atol=1e-6)
    assert (expected > 0).any() and (expected < 0).any() and (expected == 0).any()


def test_the_bonus_moves_the_learned_policy_to_taking_and_keeping_programs():
    plain = train_twice(PROBE, Collector(), program_count=count)[0]
    paid = train_twice(dataclasses.replace(PROBE, program_bonus=BONUS), Collector(), program_count=count)[0]

    def probs(state):
        logits, _ = evaluate(member_of(state.params, 0), jnp.eye(4), "f32")
        return np.asarray(jax.nn.softmax(logits))

    assert probs(plain)[START, 1] > 0.9 and probs(plain)[HOLD, 0] > 0.9, "the +0.5 without a bonus"
    assert probs(paid)[START, 0] > 0.9, "take the program: 1 > 0.5"
    assert probs(paid)[HOLD, 1] > 0.9, "keep it: 0 > 0.5 − 1"


def test_a_program_bonus_sweep_member_is_the_single_run():
    short = dataclasses.replace(PROBE, total_timesteps=16 * 8 * 8, updates_per_call=4)
    swept = dataclasses.replace(short, sweep=(("program_bonus", (0.0, BONUS)),))
    assert [m.hyper["program_bonus"] for m in members(resolve(swept, "cpu", 1))] == [0.0, BONUS]
    population = train_twice(swept, Collector(), program_count=count)[0]
    for member, config in ((0, short), (1, dataclasses.replace(short, program_bonus=BONUS))):
        single = train_twice(config, Collector(), program_count=count)[0]
        for a, b in zip(jax.tree.leaves(member_of(population.params, member)),
                        jax.tree.leaves(member_of(single.params, 0)), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _at(row: int, col: int, owned: list[str], blocks: list[dict]) -> game.GameState:
    """Stage 1, the exit at (5, 5), the player at (row, col) with a data siphon and 5 credits."""
    return game.from_dict({"player": {"row": row, "col": col, "hp": 3, "credits": 5, "energy": 1,
                                      "dataSiphons": 1},
                           "exit": [5, 5], "ownedPrograms": owned, "blocks": blocks})


def test_the_games_count_is_the_programs_owned_before_and_after_each_step():
    """The game's `info["programs_owned"]` after each step, and the bonus it pays:
    siphoning a program block gains a program (+1); UNDO twice (back past the siphon's
    turn, docs/rules.md#undo) takes it back (−1); moves gain nothing."""
    env = HackMatrix()
    block = {"row": 4, "col": 3, "type": "program", "programType": "wait", "spawnCount": 0}
    undo = C.PROGRAM_ACTION_OFFSET + C.UNDO
    start = _at(5, 2, [undo], [block])
    batch = jax.tree.map(lambda *x: jnp.stack(x), start, start)
    envs = VecEnvState(state=batch, obs=jax.vmap(env.game_observation)(batch),
                       mask=jax.vmap(env.game_action_mask)(batch),
                       episode_return=jnp.zeros(2), episode_length=jnp.zeros(2, jnp.int32))
    (bonus,) = features.build(env, resolve(plain(program_bonus=2.0), "cpu", 1))
    hyper = {"program_bonus": jnp.asarray([2.0], jnp.float32)}

    def step(envs, action):
        new, out = vector_step(env, envs, action, jax.random.split(jax.random.key(0), 2), 1000)
        one_member = jax.tree.map(lambda x: x[None], (envs, out))
        return new, out, bonus.reward(one_member[1].reward, *one_member, hyper)[0] - out.reward

    step = jax.jit(step)
    right, up, down = 3, 0, 1
    # game 0: right (beside the block), siphon, UNDO, UNDO; game 1: only moves
    actions = [(right, right), (C.ACTION_SIPHON, right), (undo, down), (undo, up)]
    counts = [((1, 1), (1, 1)), ((1, 1), (2, 1)), ((2, 1), (2, 1)), ((2, 1), (1, 1))]
    for action, (before, after) in zip(actions, counts, strict=True):
        assert bool(envs.mask[jnp.arange(2), jnp.asarray(action)].all())
        np.testing.assert_array_equal(jax.vmap(game.programs_owned)(envs.state), before)
        envs, out, paid = step(envs, jnp.asarray(action, jnp.int32))
        assert not bool(out.done.any())
        np.testing.assert_array_equal(out.info["programs_owned"], after)
        np.testing.assert_allclose(paid, 2.0 * (np.asarray(after) - np.asarray(before)), atol=1e-6)


def test_bad_program_bonus_is_refused_naming_the_flag():
    with pytest.raises(ConfigError, match=r"--program-bonus must be a number >= 0; got -1"):
        validate(dataclasses.replace(PROBE, program_bonus=-1.0), 1)
    with pytest.raises(ConfigError, match=r"--sweep program-bonus=-0.5: --program-bonus must be a number >= 0"):
        validate(dataclasses.replace(PROBE, sweep=(("program_bonus", (0.0, -0.5)),)), 1)
    with pytest.raises(ConfigError, match="--program-bonus: NullEnv has no programs to count"):
        make_train_fn(resolve(dataclasses.replace(PROBE, program_bonus=1.0), "cpu", 1), NullEnv(), make_mesh(1))
    make_train_fn(resolve(PROBE, "cpu", 1), NullEnv(), make_mesh(1))  # 0: no count needed


def test_program_bonus_parses_into_the_config_and_defaults_to_three():
    assert TrainArgs(prog="bin/train").parse_args([]).train_config().program_bonus == 3.0
    assert TrainArgs(prog="bin/train").parse_args(["--config", "plain"]).train_config().program_bonus == 0.0
    assert TrainArgs(prog="bin/train").parse_args(["--program-bonus", "0.5"]).train_config().program_bonus == 0.5
    assert TrainArgs(prog="bin/train").parse_args(["--program-bonus", "0"]).train_config().program_bonus == 0.0
