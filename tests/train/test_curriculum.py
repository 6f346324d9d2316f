"""The curriculum (`--curriculum SHARE`, `--curriculum-max-stage K`; docs/rules.md#curriculum-starts).

Checked: the flags are validated naming the flag, sweepable, and survive the config's
round trip; each env slot starts its new episodes as its own settings ask (share 0: the
ordinary games bit for bit, share 1: every game at a later stage); a population whose
members differ only in the share trains in one program, each member's games follow its
own share, and new values reuse the compiled program.
"""

import dataclasses
import io

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from compiles import compilations

from bench.null_env import NullEnv
from hm.env import HackMatrix
from hm.game import constants as C
from hm.game import generation
from hm.tools import evaluate
from hm.tools.train import main as train_main
from hm.tools.train import parse_sweep
from hm.train import PRESETS, TrainConfig, init, make_mesh, make_train_fn, resolve, to_host
from hm.train import config as config_lib
from hm.train import vector as envs_lib
from hm.train.config import ConfigError, members, validate
from hm.train.learner import make_hyper, place_hyper
from hm.train.run import RunOptions, Trainer
from tests.train.conftest import TINY

# --- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize("changes, flag", [
    ({"curriculum": -0.1}, "--curriculum"),
    ({"curriculum": 1.5}, "--curriculum"),
    ({"curriculum": float("nan")}, "--curriculum"),
    ({"curriculum_max_stage": 1}, "--curriculum-max-stage"),
    ({"curriculum_max_stage": 9}, "--curriculum-max-stage"),
    ({"sweep": (("curriculum", (0.0, 2.0)),)}, "--sweep"),
    ({"sweep": (("curriculum_max_stage", (2.0, 4.5)),)}, "--sweep"),
    ({"sweep": (("curriculum_max_stage", (3.0, 9.0)),)}, "--sweep"),
])
def test_bad_curriculum_values_are_refused_naming_the_flag(changes, flag):
    with pytest.raises(ConfigError) as error:
        validate(dataclasses.replace(TrainConfig(), **changes), 1)
    assert error.value.flag == flag
    assert "curriculum" in error.value.message


def test_the_command_line_refuses_a_bad_share_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        train_main(["--curriculum", "2"])
    assert exit_.value.code == 2
    assert "--curriculum must be a number in [0, 1]" in capsys.readouterr().err


def test_the_settings_are_sweepable_and_round_trip():
    config = dataclasses.replace(TrainConfig(), curriculum=0.3, curriculum_max_stage=5,
                                 sweep=parse_sweep(["curriculum=0,0.5", "curriculum-max-stage=3,8"]))
    validate(config, 1)
    resolved = resolve(config, "cpu", 1)
    assert config_lib.from_dict(config_lib.to_dict(resolved)) == resolved
    assert config_lib.from_dict(config_lib.to_dict(config)) == config
    names = [m.name for m in members(resolved)]
    assert names[:2] == ["curriculum=0,curriculum-max-stage=3,seed=0",
                         "curriculum=0,curriculum-max-stage=8,seed=0"]
    hyper = make_hyper(resolved)
    np.testing.assert_array_equal(hyper["curriculum"], np.float32([0, 0, 0.5, 0.5]))
    np.testing.assert_array_equal(hyper["curriculum_max_stage"], np.int32([3, 8, 3, 8]))
    assert hyper["curriculum_max_stage"].dtype == np.int32
    # a config written before the curriculum existed loads with it off
    old = config_lib.to_dict(resolve(TrainConfig(), "cpu", 1))
    del old["curriculum"], old["curriculum_max_stage"]
    assert config_lib.from_dict(old).curriculum == 0.0


def test_a_share_sweep_gives_members_that_differ_only_in_the_share():
    resolved = resolve(dataclasses.replace(TrainConfig(), sweep=(("curriculum", (0.0, 0.5)),)), "cpu", 1)
    hyper = make_hyper(resolved)
    np.testing.assert_array_equal(hyper["curriculum"], np.float32([0.0, 0.5]))
    for name in config_lib.SWEEPABLE:
        if name != "curriculum":
            values = hyper[name]
            assert values[0] == values[1], name
    assert [m.seed for m in members(resolved)] == [0, 0]


# --- env slots ---------------------------------------------------------------------------

N = 16


def started(share, max_stage=C.NUM_STAGES, seed=0):
    env = HackMatrix()
    keys = jax.random.split(jax.random.key(seed), N)
    fn = jax.jit(lambda keys, share, top: envs_lib.vector_start(
        env, envs_lib.vector_unstarted(env, N), keys, share, top))
    return fn(keys, jnp.broadcast_to(jnp.float32(share), (N,)),
              jnp.broadcast_to(jnp.int32(max_stage), (N,)))


@pytest.fixture(scope="module")
def ordinary():
    env = HackMatrix()
    keys = jax.random.split(jax.random.key(0), N)
    return jax.jit(lambda keys: envs_lib.vector_start(env, envs_lib.vector_unstarted(env, N), keys))(keys)


def test_share_zero_starts_the_ordinary_games_bit_for_bit(ordinary):
    for a, b in zip(jax.tree.leaves(started(0.0, 5)), jax.tree.leaves(ordinary), strict=True):
        np.testing.assert_array_equal(a, b)
    assert np.all(ordinary.state.stage == 1)


def test_share_one_starts_every_game_at_a_later_stage(ordinary):
    vec = started(1.0, 4)
    stage = np.asarray(vec.state.stage)
    assert np.all((stage >= 2) & (stage <= 4)), stage
    assert len(set(stage)) > 1
    env = HackMatrix()
    np.testing.assert_array_equal(vec.obs, jax.vmap(env.game_observation)(vec.state))
    np.testing.assert_array_equal(vec.mask, jax.vmap(env.game_action_mask)(vec.state))


def test_each_slot_follows_its_own_settings():
    env = HackMatrix()
    keys = jax.random.split(jax.random.key(1), N)
    share = jnp.where(jnp.arange(N) < N // 2, 0.0, 1.0).astype(jnp.float32)
    vec = jax.jit(lambda k, s: envs_lib.vector_start(env, envs_lib.vector_unstarted(env, N), k, s, 2))(keys, share)
    stage = np.asarray(vec.state.stage)
    assert np.all(stage[: N // 2] == 1) and np.all(stage[N // 2:] == 2)
    # the auto-reset too: every slot ends (an illegal action) and restarts by its share
    actions = jnp.full((N,), -1, jnp.int32)
    vec, out = jax.jit(lambda v, k, s: envs_lib.vector_step(env, v, actions, k, 1000, s, 2))(vec, keys, share)
    assert np.all(out.done)
    stage = np.asarray(vec.state.stage)
    assert np.all(stage[: N // 2] == 1) and np.all(stage[N // 2:] == 2)


# --- the trainer -------------------------------------------------------------------------

# plain PPO (the curriculum needs no teacher, and the greedy teacher is the larger program)
TINY_GAME = dataclasses.replace(PRESETS["plain"], num_envs=16, num_steps=8, total_timesteps=16 * 8 * 4,
                                hidden_dim=16, num_layers=1, num_minibatches=2, update_epochs=1,
                                updates_per_call=1, precision="f32", sweep=(("curriculum", (0.0, 1.0)),),
                                curriculum_max_stage=5)


def test_a_population_trains_each_member_on_its_own_share():
    resolved, env, mesh = resolve(TINY_GAME, "cpu", 1), HackMatrix(), make_mesh(1)
    train = make_train_fn(resolved, env, mesh)
    state, metrics = train(init(resolved, env=env, mesh=mesh))
    assert np.all(np.isfinite(np.asarray(metrics["loss/total"])))
    stage = np.asarray(state.envs.state.stage)          # [member, slot]
    assert np.all((stage[1] >= 2) & (stage[1] <= 5)), "share 1: every game began at 2..5"
    assert np.mean(stage[0]) < np.mean(stage[1])
    # other values reuse the program, and reach the games: member 0 now starts late too
    swapped = place_hyper(resolve(dataclasses.replace(TINY_GAME, sweep=(("curriculum", (1.0, 0.0)),),
                                                      curriculum_max_stage=2), "cpu", 1), mesh)
    before = np.asarray(jax.tree.leaves(state.params)[0])
    # every slot takes a new game at the next call's start (as a new run's do)
    state = eqx.tree_at(lambda s: s.envs.episode_length, state, jnp.full_like(state.envs.episode_length, -1))
    with compilations(train) as compiled:
        state, metrics = train(state, swapped)
    assert compiled == []
    assert np.all(np.isfinite(np.asarray(metrics["loss/total"])))
    assert np.all(np.asarray(state.envs.state.stage)[0] >= 2)
    assert not np.array_equal(np.asarray(jax.tree.leaves(state.params)[0]), before), "it trains"


def test_a_resumed_run_keeps_its_curriculum(compile_cache, tmp_path):
    """The checkpoint's config holds the settings: a resume without the flags continues
    with them (and hands them to the program), a flag given again overrides them."""
    def trainer(config, explicit=None, **options):
        options = RunOptions(runs_dir=tmp_path / "runs", compile_cache=compile_cache, **options)
        return Trainer(config, options, env=NullEnv(), explicit=explicit, console=io.StringIO())

    first = trainer(dataclasses.replace(TINY, curriculum=0.3, curriculum_max_stage=4), run_name="source")
    first.call()
    first.save()
    first.close()
    source = tmp_path / "runs" / "source"
    resumed = trainer(TrainConfig(), explicit=frozenset(), resume=source)
    assert (resumed.resolved.curriculum, resumed.resolved.curriculum_max_stage) == (0.3, 4)
    np.testing.assert_array_equal(to_host(resumed.hyper["curriculum"]), np.float32([0.3]))
    np.testing.assert_array_equal(to_host(resumed.hyper["curriculum_max_stage"]), np.int32([4]))
    resumed.close()
    again = trainer(dataclasses.replace(TrainConfig(), curriculum=0.6), explicit=frozenset({"curriculum"}),
                    resume=source)
    assert (again.resolved.curriculum, again.resolved.curriculum_max_stage) == (0.6, 4)
    again.close()


def test_evaluation_plays_ordinary_games_from_stage_one():
    """`bin/evaluate` and the learning benchmark start their games with `evaluate.start`,
    which takes no curriculum: ordinary new games, whatever a run trained with."""
    ks = jax.random.split(jax.random.key(6), 8)
    episodes = jax.jit(jax.vmap(evaluate.start))(ks)
    fresh = jax.jit(jax.vmap(generation.new_game))(ks)
    assert np.all(episodes.state.stage == 1)
    for a, b in zip(jax.tree.leaves(episodes.state), jax.tree.leaves(fresh), strict=True):
        np.testing.assert_array_equal(a, b)
