"""Populations: many seeds and hyper-parameter settings trained in one compiled program.

Checked against what a population must be: each member computes what the single run
with its seed and settings computes; a sweep varies only what it names; hyper-parameter
values are traced (new values, no recompile); a run of a population logs, checkpoints,
resumes and exports per member; the tools pick members; bad specifications are refused
naming the flag. The 4-device check is in test_multidevice.py (its worker trains a
population of 4).
"""

import dataclasses
import io
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from compiles import compilations
from probes import plain, probe_suite

from bench.null_env import NullEnv
from hm.tools import evaluate
from hm.tools.train import main as train_main
from hm.tools.train import parse_sweep
from hm.train import TrainConfig, checkpoint, member_of, to_host
from hm.train.checkpoint import CheckpointError
from hm.train.config import ConfigError, members, resolve
from hm.train.learner import init, make_hyper, make_train_fn, place_hyper
from hm.train.logging import read_scalars, read_tags
from hm.train.mesh import make_mesh
from hm.train.run import RunOptions, Trainer, run
from tests.train.conftest import TINY

PROBE = plain(num_envs=16, num_steps=8, total_timesteps=16 * 8 * 6, hidden_dim=16, num_layers=1,
              num_minibatches=2, update_epochs=2, lr=5e-3, gamma=0.9, max_episode_steps=5,
              updates_per_call=3, precision="f32")


def train_two_calls(config: TrainConfig):
    """Two calls (6 updates) of `config` on the probe MDP; the final state and metrics."""
    resolved, env, mesh = resolve(config, "cpu", 1), probe_suite(), make_mesh(1)
    train = make_train_fn(resolved, env, mesh)
    state, _ = train(init(resolved, env=env, mesh=mesh))
    state, metrics = train(state)
    return to_host(state), to_host(metrics)


def assert_member_is_the_single_run(population, index: int, single) -> None:
    mine = jax.tree.leaves(member_of(population.params, index))
    theirs = jax.tree.leaves(member_of(single.params, 0))
    for a, b in zip(mine, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_each_seed_of_a_population_is_the_single_run_with_that_seed():
    population, metrics = train_two_calls(dataclasses.replace(PROBE, seed=4, num_seeds=2))
    assert metrics["loss/total"].shape == (2,)
    for index, seed in enumerate((4, 5)):
        single, single_metrics = train_two_calls(dataclasses.replace(PROBE, seed=seed))
        assert_member_is_the_single_run(population, index, single)
        assert metrics["episode/count"][index] == single_metrics["episode/count"][0]
    first, second = (jax.tree.leaves(member_of(population.params, i))[0] for i in (0, 1))
    assert not np.allclose(first, second), "seeds 4 and 5 train different networks"


def test_an_lr_sweep_gives_members_that_differ_in_lr_only():
    config = dataclasses.replace(PROBE, sweep=(("lr", (5e-3, 1e-3)),))
    resolved = resolve(config, "cpu", 1)
    hyper = make_hyper(resolved)
    np.testing.assert_array_equal(hyper["lr"], np.float32([5e-3, 1e-3]))
    for name in ("ent_coef", "vf_coef", "clip_eps", "gamma", "gae_lambda", "max_grad_norm"):
        values = hyper[name]
        assert values[0] == values[1] == np.float32(getattr(resolved, name)), name
    assert [m.seed for m in members(resolved)] == [0, 0], "the same seed: only lr differs"
    population, metrics = train_two_calls(config)
    np.testing.assert_allclose(metrics["ppo/lr"], [5e-3, 1e-3])
    for index, lr in enumerate((5e-3, 1e-3)):
        single, _ = train_two_calls(dataclasses.replace(PROBE, lr=lr))
        assert_member_is_the_single_run(population, index, single)


def test_a_value_norm_sweep_normalises_only_the_members_that_ask():
    population, metrics = train_two_calls(dataclasses.replace(PROBE, sweep=(("value_norm", (0.0, 0.2)),)))
    assert metrics["value/scale"][0] == 1.0 and metrics["value/shift"][0] == 0.0
    assert metrics["value/scale"][1] != 1.0 and metrics["value/shift"][1] != 0.0
    single, _ = train_two_calls(dataclasses.replace(PROBE, value_norm=0.2))
    assert_member_is_the_single_run(population, 1, single)


def test_hyper_parameters_are_traced_values():
    """Other hyper-parameter values run the same compiled program, and take effect."""
    resolved, env, mesh = resolve(PROBE, "cpu", 1), probe_suite(), make_mesh(1)
    train = make_train_fn(resolved, env, mesh)
    state, _ = train(init(resolved, env=env, mesh=mesh))
    other = place_hyper(resolve(dataclasses.replace(PROBE, lr=1e-4, ent_coef=0.3), "cpu", 1), mesh)
    with compilations() as compiled:
        state, metrics = train(state, other)
    assert compiled == []
    assert float(metrics["ppo/lr"][0]) == pytest.approx(1e-4)


# A population run: the driver around the program.

POPULATION = dataclasses.replace(TINY, num_seeds=2, sweep=(("ent_coef", (0.01, 0.1)),))
NAMES = ["ent-coef=0.01,seed=3", "ent-coef=0.01,seed=4", "ent-coef=0.1,seed=3", "ent-coef=0.1,seed=4"]


def trainer(tmp_path, compile_cache, name, config=POPULATION, **options):
    console = io.StringIO()
    options = RunOptions(runs_dir=tmp_path / "runs", run_name=name, compile_cache=compile_cache, **options)
    return Trainer(config, options, env=NullEnv(), console=console), console


def test_a_population_run_logs_saves_and_exports_per_member(tmp_path, compile_cache):
    made, console = trainer(tmp_path, compile_cache, "pop")
    assert run(made) == 0
    run_dir = tmp_path / "runs" / "pop"
    assert [m.name for m in made.members] == NAMES
    out = console.getvalue()
    assert "4 members" in out and "members: 0 ent-coef=0.01,seed=3;" in out
    assert "steps x 4 members" in out and "return best" in out and "median" in out and "worst" in out
    for name in NAMES:   # one TensorBoard run per member, with its own hyper-parameters
        member_dir = run_dir / name
        assert "episode/count" in read_scalars(member_dir)
        assert "_hparams_/session_start_info" in read_tags(member_dir)
    assert {"population/return_best", "population/return_median", "population/return_worst"} <= set(
        read_scalars(run_dir)), "the population's spread in the run directory"
    meta = checkpoint.read_meta(checkpoint.find_checkpoint(run_dir))
    assert [m["name"] for m in meta.members] == NAMES
    assert meta.members[2]["hyper"]["ent_coef"] == 0.1 and meta.members[1]["seed"] == 4
    assert meta.leaves[".params.value_head.weight"][0][0] == 4, "the whole population is saved"
    policy = json.loads((run_dir / "policy.json").read_text())
    best = made.best_member()
    assert policy["member"] == NAMES[best] and len(policy["members"]) == 4
    returns = [m["recent_return"] for m in meta.members]
    assert returns[best] == max(returns)
    exported = checkpoint.load_policy(run_dir)
    for a, b in zip(jax.tree.leaves(exported), jax.tree.leaves(member_of(made.state.params, best))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    # The tools: every member on the same games, one row each, then mean +- std per setting.
    stdout = io.StringIO()
    report = tmp_path / "members.json"
    assert evaluate.main([str(run_dir), "--all-members", "--episodes", "8", "--baseline", "random",
                          "--json", str(report)], stdout=stdout) == 0
    text = stdout.getvalue()
    assert all(name in text for name in NAMES)
    assert "ent-coef=0.01 (n=2)" in text and "ent-coef=0.1 (n=2)" in text
    document = json.loads(report.read_text())
    assert [m["name"] for m in document["members"]] == NAMES
    assert document["settings"]["ent-coef=0.1"]["seeds"] == [3, 4]
    # the baseline beside them, on the same games
    assert "baselines on the same games" in text and list(document["baselines"]) == ["random"]
    assert document["baselines"]["random"]["episodes"] == 8
    chosen = io.StringIO()
    assert evaluate.main([str(run_dir), "--member", NAMES[1], "--episodes", "8"], stdout=chosen) == 0
    assert f"member 1 ({NAMES[1]})" in chosen.getvalue()


def test_a_population_resumes_exactly(tmp_path, compile_cache):
    straight, _ = trainer(tmp_path, compile_cache, "straight")
    straight.call()
    straight.call()
    first, _ = trainer(tmp_path, compile_cache, "halves")
    first.call()
    path = first.save()
    first.close()
    resumed, console = trainer(tmp_path, compile_cache, None, resume=path)
    assert "resumed from" in console.getvalue()
    resumed.call()
    for a, b in zip(jax.tree.leaves(to_host(straight.state)), jax.tree.leaves(to_host(resumed.state)),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    straight.close()
    resumed.close()


def test_a_resume_with_another_population_is_refused(tmp_path, compile_cache):
    first, _ = trainer(tmp_path, compile_cache, "four")
    first.call()
    path = first.save()
    first.close()
    with pytest.raises(CheckpointError, match="population: the checkpoint holds 4 member"):
        trainer(tmp_path, compile_cache, None, config=dataclasses.replace(POPULATION, num_seeds=3), resume=path)


@pytest.mark.parametrize("argv, message", [
    (["--sweep", "lr"], "--sweep takes KEY=V1,V2,..."),
    (["--sweep", "lr=fast"], "--sweep lr: 'fast' is not a number"),
    (["--sweep", "bogus=1,2"], "--sweep cannot sweep 'bogus': there is no such setting"),
    (["--sweep", "num-envs=8,16"], "--sweep cannot sweep 'num-envs'"),
    (["--sweep", "lr=0.001,3"], "--sweep lr=3.0: --lr must be a number in (0, 1]"),
    (["--sweep", "gamma="], "--sweep gamma= has no values"),
    (["--num-seeds", "0"], "--num-seeds must be an integer in [1, 1024]"),
])
def test_bad_population_flags_exit_with_the_flag_named(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exited:
        train_main(argv + ["--runs-dir", str(tmp_path)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_parse_sweep():
    assert parse_sweep(["lr=1e-4,3e-4", "ent-coef=0.01"]) == (("lr", (1e-4, 3e-4)), ("ent_coef", (0.01,)))
    with pytest.raises(ConfigError) as error:
        parse_sweep(["=1"])
    assert error.value.flag == "--sweep"


def test_a_population_at_the_default_network_size_initialises():
    """`init` of a population at the default network size returns (in a fresh process,
    so no cached program hides it). With the members' networks built under `vmap`, the
    orthogonal initialiser's batched QR deadlocked jaxlib's 2-thread CPU pool and `init`
    never returned (tests at small widths did not see it: their QRs are not split over
    threads). The subprocess's timeout turns a hang into a failure."""
    script = ("import jax\n"
              "from hm.train import TrainConfig, init\n"
              "from hm.train.config import resolve\n"
              "resolved = resolve(TrainConfig(num_envs=8, num_steps=16, num_seeds=2), 'cpu', 1)\n"
              "state = jax.block_until_ready(init(resolved))\n"
              "print(jax.tree.leaves(state.params)[0].shape[0])\n")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300, stdin=subprocess.DEVNULL, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["2"]
