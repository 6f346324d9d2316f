"""The run loop: layout of a run directory, TensorBoard tags, resume exactness, layout
changes on resume, NaN stop, stop signals.

Every run here uses `NullEnv` and one tiny configuration, and every Trainer of the
session (and of the SIGTERM subprocess) shares one persistent compilation cache, so
the fused program compiles once per configuration and loads from disk afterwards.
"""

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from compiles import compilations

from bench.null_env import NullEnv
from hm.game.constants import PROGRAM_NAMES
from hm.train import TrainConfig, checkpoint, member_of, to_host
from hm.train.checkpoint import CheckpointError
from hm.train.logging import read_scalars, read_tags, tensorboard_tag
from hm.train.progress import ProgressBar, format_count, format_duration, format_progress
from hm.train.run import RunOptions, Trainer, loggable, member_rows, run
from hm.train.run_dir import RunError, make_run_name, new_run_dir
from tests.train.conftest import TINY

REPO = Path(__file__).resolve().parents[2]
# The teacher's length a run of TINY saves when left to the default: 2/5 of its 256 steps, rounded.
TAUGHT_STEPS = 102





@pytest.fixture
def make_trainer(compile_cache, tmp_path):
    """make_trainer(name, config=TINY, **options) -> (Trainer, console StringIO)."""
    made = []

    def make(name: str | None, config: TrainConfig = TINY, explicit=None, **options) -> tuple[Trainer, io.StringIO]:
        console = io.StringIO()
        options = RunOptions(runs_dir=tmp_path / "runs", run_name=name, compile_cache=compile_cache, **options)
        trainer = Trainer(config, options, env=NullEnv(), explicit=explicit, console=console)
        made.append(trainer)
        return trainer, console

    yield make
    for trainer in made:
        trainer.close()


def host_leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(to_host(eqx.filter(tree, eqx.is_array)))]


def assert_bitwise_equal(a, b):
    leaves_a, leaves_b = host_leaves(a), host_leaves(b)
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


# A whole run.


def test_a_run_writes_its_directory(make_trainer, tmp_path):
    trainer, console = make_trainer("whole", save_interval=2)
    assert run(trainer) == 0
    run_dir = tmp_path / "runs" / "whole"
    assert trainer.run_dir == run_dir and trainer.update == 4 and trainer.env_steps == 256

    config = json.loads((run_dir / "config.json").read_text())
    # the config, with the teacher's schedule written out concretely
    concrete = dataclasses.replace(TINY, teacher_steps=TAUGHT_STEPS)
    assert config["config"] == json.loads(json.dumps(dataclasses.asdict(concrete)))
    assert config["resolved"]["lr"] == 2.5e-4 and config["resolved"]["devices"] == 1
    assert config["run"]["name"] == "whole" and config["run"]["num_devices"] == 1

    checkpoints = [p.name for p in checkpoint.list_checkpoints(run_dir / "checkpoints")]
    assert checkpoints == ["ckpt_00000002.ckpt", "ckpt_00000004.ckpt"], "periodic, then final"
    assert checkpoint.read_meta(run_dir / "checkpoints" / "ckpt_00000004.ckpt").env_steps == 256

    assert_bitwise_equal(checkpoint.load_policy(run_dir), member_of(trainer.state.params, 0))
    policy = json.loads((run_dir / "policy.json").read_text())
    assert policy["hidden_dim"] == 16 and policy["num_layers"] == 1 and policy["network"] == "mlp"
    assert policy["critic"] == "shared"

    out = console.getvalue()
    assert "config (resolved):" in out and "devices: 1 x cpu" in out
    assert "first call (compile + 2 updates)" in out and "update 4 | 256 steps" in out
    assert "done: " in out and "policy.eqx" in out


def test_tensorboard_has_every_expected_tag(make_trainer, tmp_path):
    trainer, _ = make_trainer("tags")
    assert run(trainer) == 0
    scalars = read_scalars(tmp_path / "runs" / "tags")
    expected = {
        *(f"loss/{name}" for name in ("total", "policy", "value", "entropy")),
        *(f"ppo/{name}" for name in ("approx_kl", "clip_frac", "explained_variance", "grad_norm", "lr")),
        *(f"episode/{name}" for name in ("return", "length", "highest_stage", "win_rate", "count")),
        "reward/reward",   # NullEnv's one reward term
        "actions/move_frac",
        "actions/siphon_frac",
        "actions/program_frac",
        *(tensorboard_tag(f"actions/program/{name}") for name in PROGRAM_NAMES),
        "perf/steps_per_sec",
        "perf/steps_per_sec_per_device",
    }
    assert {"actions/program/SIPH_PLUS", "actions/program/ATK_PLUS", "actions/program/ANTI-V"} <= expected
    assert expected <= scalars.keys(), sorted(expected - scalars.keys())
    assert [step for step, _ in scalars["loss/total"]] == [128, 256], "one point per call, at its env steps"
    assert scalars["ppo/lr"][0][1] == pytest.approx(2.5e-4)
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= read_tags(tmp_path / "runs" / "tags")


# Resume.


def test_resume_continues_exactly(make_trainer, tmp_path):
    straight, _ = make_trainer("straight")
    straight.call()
    with compilations() as straight_compiled:
        straight.call()

    first, _ = make_trainer("stopped")
    first.call()
    saved = first.save()
    first.close()
    assert saved == tmp_path / "runs" / "stopped" / "checkpoints" / "ckpt_00000002.ckpt"

    resumed, console = make_trainer(None, resume=tmp_path / "runs" / "stopped")
    assert resumed.run_dir == tmp_path / "runs" / "stopped", "a resume continues in its run directory"
    assert (resumed.update, resumed.env_steps) == (2, 128)
    assert "resumed from" in console.getvalue()
    resumed.call()
    assert (resumed.update, resumed.env_steps) == (straight.update, straight.env_steps) == (4, 256)
    assert_bitwise_equal(resumed.state, straight.state)
    # A restored state is placed like a fresh one: its next calls reuse the compiled program.
    with compilations() as resumed_compiled:
        resumed.call()
    assert resumed_compiled == straight_compiled == []


def test_resume_takes_the_checkpoint_config_unless_a_flag_says_otherwise(make_trainer, tmp_path):
    first, _ = make_trainer("source")
    first.call()
    first.save()
    first.close()
    # As the command line does it: every field at its default, only ent_coef given.
    asked = dataclasses.replace(TrainConfig(), ent_coef=0.05)
    resumed, _ = make_trainer(None, asked, explicit=frozenset({"ent_coef"}), resume=tmp_path / "runs" / "source")
    assert resumed.config == dataclasses.replace(TINY, ent_coef=0.05, teacher_steps=TAUGHT_STEPS)


def test_a_checkpoint_from_before_the_redesign_is_refused_saying_why(make_trainer, tmp_path):
    """Format 3 (the trainer before 2026-12-02, with other defaults and options since
    removed) is refused with the tag that resumes it; nothing is written."""
    first, _ = make_trainer("current")
    first.call()
    path = first.save()
    first.close()
    older = tmp_path / "older.ckpt"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(older, "w") as target:
        for entry in source.namelist():
            data = source.read(entry)
            if entry == "meta.json":
                meta = json.loads(data)
                meta["format"] = "hm-checkpoint/3"
                data = json.dumps(meta).encode()
            target.writestr(entry, data)
    with pytest.raises(CheckpointError, match="research-leftovers-2026-12-02"):
        make_trainer(None, resume=older)


def test_a_damaged_newest_checkpoint_falls_back_to_the_newest_good_one(make_trainer, tmp_path):
    first, _ = make_trainer("damaged", save_interval=2)
    assert run(first) == 0
    directory = tmp_path / "runs" / "damaged" / "checkpoints"
    good, newest = checkpoint.list_checkpoints(directory)
    newest.write_bytes(newest.read_bytes()[:100])   # cut short
    resumed, console = make_trainer(None, resume=tmp_path / "runs" / "damaged")
    assert resumed.update == 2 and resumed.last_checkpoint == good
    said = console.getvalue()
    assert str(newest) in said and str(good) in said and "cannot be read" in said
    resumed.close()


def test_the_teacher_lasts_two_fifths_of_the_run_and_a_longer_resume_keeps_its_schedule(tmp_path, compile_cache):
    """`teacher_steps` None is 2/5 of the run's `total_timesteps`, saved as a number: a
    resume that asks for more steps goes on with the schedule the run started with."""
    def trainer(name, config=TINY, explicit=None, **options):
        options = RunOptions(runs_dir=tmp_path / "runs", run_name=name, compile_cache=compile_cache, **options)
        return Trainer(config, options, env=NullEnv(), explicit=explicit, console=io.StringIO())

    assert TINY.teacher_steps is None
    first = trainer("taught")
    assert first.config.teacher_steps == first.resolved.teacher_steps == TAUGHT_STEPS
    first.call()
    path = first.save()
    first.close()
    assert json.loads((tmp_path / "runs" / "taught" / "config.json").read_text())["config"]["teacher_steps"] == TAUGHT_STEPS
    longer = dataclasses.replace(TrainConfig(), total_timesteps=4 * TINY.total_timesteps)
    resumed = trainer(None, longer, explicit=frozenset({"total_timesteps"}), resume=path)
    assert resumed.config.total_timesteps == 4 * TINY.total_timesteps
    assert resumed.config.teacher_steps == TAUGHT_STEPS, "the schedule the run started with"
    resumed.close()


def test_resume_with_other_num_envs_keeps_weights_and_says_so(make_trainer, tmp_path):
    first, _ = make_trainer("narrow")
    first.call()
    path = first.save()
    params = first.state.params
    first.close()

    wider = dataclasses.replace(TINY, num_envs=16, total_timesteps=16 * 8 * 4)
    resumed, console = make_trainer(None, wider, resume=path)
    out = console.getvalue()
    assert "new batch layout: num_envs 8 -> 16" in out
    assert "weights and counters kept, optimizer state and environments re-initialised" in out
    assert_bitwise_equal(resumed.state.params, params)
    assert (resumed.update, resumed.env_steps) == (2, 128)
    moments = [np.asarray(x) for x in jax.tree_util.tree_leaves(resumed.state.opt_state) if np.ndim(x) > 0]
    assert moments and all(not m.any() for m in moments), "Adam moments start from zero again"
    assert resumed.state.envs.obs.shape[:2] == (1, 16)
    resumed.call()
    assert resumed.update == 4


def test_resume_refuses_another_architecture(make_trainer, tmp_path):
    first, _ = make_trainer("arch")
    first.call()
    path = first.save()
    first.close()
    with pytest.raises(checkpoint.CheckpointError, match="hidden_dim: checkpoint has 16, this run has 32"):
        make_trainer(None, dataclasses.replace(TINY, hidden_dim=32), resume=path)


# Stopping.


def test_nan_stops_and_keeps_the_last_good_checkpoint(make_trainer, tmp_path):
    trainer, console = make_trainer("diverges", save_interval=2)
    real = trainer._train_fn

    def diverge_on_second_call(state, hyper):
        state, metrics = real(state, hyper)
        if trainer.calls == 1:
            metrics = {**metrics, "loss/total": jnp.full((1,), jnp.nan)}
            state = eqx.tree_at(lambda s: s.params.value_head.bias, state, state.params.value_head.bias * jnp.nan)
        return state, metrics

    trainer._train_fn = diverge_on_second_call
    assert run(trainer) == 1
    directory = tmp_path / "runs" / "diverges" / "checkpoints"
    assert [p.name for p in checkpoint.list_checkpoints(directory)] == ["ckpt_00000002.ckpt"]
    assert checkpoint.all_finite(checkpoint.read_arrays(directory / "ckpt_00000002.ckpt"))
    assert not (tmp_path / "runs" / "diverges" / "policy.eqx").exists()
    out = console.getvalue()
    assert "warning [non_finite]" in out and "loss/total=nan" in out
    assert f"last good checkpoint: {directory / 'ckpt_00000002.ckpt'}" in out


def test_sigint_saves_then_exits(make_trainer, tmp_path):
    # Whatever handler was installed before (a shell starts background jobs with SIGINT
    # ignored) is the one to restore.
    before = signal.getsignal(signal.SIGINT)
    trainer, console = make_trainer("interrupted", save_interval_minutes=60)
    real = trainer._train_fn

    def interrupted(state, hyper):
        os.kill(os.getpid(), signal.SIGINT)
        return real(state, hyper)

    trainer._train_fn = interrupted
    assert run(trainer) == 128 + signal.SIGINT
    assert trainer.update == 2, "the call under way finishes, no new one starts"
    latest = checkpoint.find_checkpoint(tmp_path / "runs" / "interrupted")
    assert latest.name == "ckpt_00000002.ckpt"
    assert "resume with: bin/train --resume" in console.getvalue()
    assert signal.getsignal(signal.SIGINT) is before, "handlers restored"


SIGTERM_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import dataclasses
    from bench.null_env import NullEnv
    from hm.train import PRESETS
    from hm.train.run import RunOptions, Trainer, run

    config = dataclasses.replace(PRESETS["plain"], network="mlp", num_envs=8, num_steps=8, total_timesteps=8 * 8 * 100_000, hidden_dim=16,
                         num_layers=1, num_minibatches=2, update_epochs=1, updates_per_call=2, seed=3)
    options = RunOptions(runs_dir=Path(sys.argv[1]), run_name="term", compile_cache=Path(sys.argv[2]))
    sys.exit(run(Trainer(config, options, env=NullEnv())))
    """
)


def test_sigterm_saves_a_checkpoint_and_exits_cleanly(tmp_path, compile_cache):
    process = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_SCRIPT, str(tmp_path / "runs"), str(compile_cache)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        lines = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, "the run ended before training: " + process.stderr.read()
            lines.append(line)
            if line.startswith("update "):
                break
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    out = "".join(lines) + out
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    assert "received SIGTERM" in err
    latest = checkpoint.find_checkpoint(tmp_path / "runs" / "term")
    meta = checkpoint.read_meta(latest)
    assert meta.update >= 2 and meta.update % 2 == 0
    assert f"checkpoint {latest}" in out and "resume with: bin/train --resume" in out


MULTI_HOST_WORKER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import dataclasses
    from bench.null_env import NullEnv
    from hm.train import PRESETS, maybe_initialize_distributed
    from hm.train.run import RunOptions, Trainer, run

    port, process_id, runs, cache = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    config = dataclasses.replace(PRESETS["plain"], network="mlp", num_envs=8, num_steps=8, total_timesteps=8 * 8 * 4, hidden_dim=16, num_layers=1,
                         num_minibatches=2, update_epochs=1, updates_per_call=2, seed=3)
    options = RunOptions(runs_dir=runs, run_name="multi", compile_cache=cache, save_interval=2,
                         coordinator_address=f"localhost:{port}", num_processes=2, process_id=process_id)
    # The distributed runtime must start before anything touches a device (NullEnv does).
    maybe_initialize_distributed(options.coordinator_address, options.num_processes, options.process_id)
    sys.exit(run(Trainer(config, options, env=NullEnv())))
    """
)


@pytest.mark.slow
def test_two_processes_train_and_only_process_0_writes(tmp_path, compile_cache, make_trainer):
    import socket

    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        port = probe.getsockname()[1]
    runs = tmp_path / "runs"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", MULTI_HOST_WORKER, str(port), str(index), str(runs), str(compile_cache)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        for index in (0, 1)
    ]
    try:
        outputs = [process.communicate(timeout=600) for process in processes]
    finally:
        for process in processes:
            process.kill()
    for process, (_, err) in zip(processes, outputs):
        assert process.returncode == 0, err
    (out0, _), (out1, err1) = outputs
    assert "devices: 2 x cpu (2 processes, 4 envs per device)" in out0 and "done: " in out0
    assert "update " not in out1 and "run multi" not in out1, "process 1 prints nothing"
    assert "[" not in "".join(line for line in err1.splitlines() if not line.startswith("[Gloo]"))

    run_dir = runs / "multi"
    assert sorted(p.name for p in runs.iterdir()) == ["multi"]
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    assert (run_dir / "policy.eqx").exists() and (run_dir / "config.json").exists()
    latest = checkpoint.find_checkpoint(run_dir)
    meta = checkpoint.read_meta(latest)
    assert meta.layout == checkpoint.Layout(num_envs=8, num_devices=2, num_processes=2)
    assert meta.leaves[".envs.obs"][0] == (1, 8, 1545), "every process's env slots were gathered"

    # The same checkpoint continues in one process on one device: weights kept.
    resumed, console = make_trainer(None, resume=latest)
    assert "new batch layout: devices 2 -> 1, processes 2 -> 1" in console.getvalue()
    assert (resumed.update, resumed.env_steps) == (4, 256)
    np.testing.assert_array_equal(
        np.asarray(resumed.state.params.value_head.weight), checkpoint.read_arrays(latest)[".params.value_head.weight"]
    )


# Host-side pieces.


def test_run_names():
    import datetime

    now = datetime.datetime(2026, 11, 22, 3, 15, 0)
    assert make_run_name(None, None, now) == "20261122-031500"
    assert make_run_name(None, "bf16", now) == "20261122-031500-bf16"
    assert make_run_name("sweep", "lr3", now) == "sweep-lr3"


def test_new_run_dir_never_reuses_a_directory(tmp_path):
    (tmp_path / "20261122-031500").mkdir()
    assert new_run_dir(tmp_path, "20261122-031500", automatic=True) == tmp_path / "20261122-031500-2"
    assert new_run_dir(tmp_path, "20261122-031500", automatic=True) == tmp_path / "20261122-031500-3"
    with pytest.raises(RunError, match="already exists"):
        new_run_dir(tmp_path, "20261122-031500", automatic=False)
    assert new_run_dir(tmp_path / "new", "fresh", automatic=False) == tmp_path / "new" / "fresh"
    assert (tmp_path / "new" / "fresh").is_dir()


def test_member_rows_split_per_member_metrics():
    assert member_rows({"a": np.array([1.5]), "b": np.int32(3)}, 1) == [{"a": 1.5, "b": 3.0}]
    rows = member_rows({"a": np.array([1.0, 2.0]), "b": np.float32(7)}, 2)
    assert rows == [{"a": 1.0, "b": 7.0}, {"a": 2.0, "b": 7.0}]
    with pytest.raises(ValueError, match="metric a has shape"):
        member_rows({"a": np.zeros(3)}, 2)


def test_episode_means_are_not_logged_without_episodes():
    row = {"episode/count": 0.0, "episode/return": 0.0, "loss/total": 1.0, "env_steps": 128.0}
    assert loggable(row) == {"episode/count": 0.0, "loss/total": 1.0}
    assert loggable({**row, "episode/count": 2.0})["episode/return"] == 0.0


def test_progress_text():
    assert format_count(999) == "999" and format_count(15_300) == "15.3k" and format_count(10_000_000) == "10M"
    assert format_duration(3725) == "1h02m05s" and format_duration(61) == "1m01s" and format_duration(5) == "5s"
    text = format_progress(4_200_000, 10_000_000, 15_300, 3.41)
    assert text.startswith("[##########--------------]  42% 4.2M/10M steps")
    assert "15.3k steps/s" in text and "ETA 6m19s" in text and "return 3.41" in text
    assert "ETA" not in format_progress(0, 100, None, None)


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_redraws_on_a_terminal_and_prints_lines_above_it():
    stream, console = FakeTerminal(), io.StringIO()
    bar = ProgressBar(100, stream=stream, console=console)
    bar.update(50, 10.0, 1.0)
    bar.print("a line")
    bar.close()
    assert console.getvalue() == "a line\n"
    assert stream.getvalue().count("\r\x1b[2K[") == 2 and stream.getvalue().endswith("\n")


def test_progress_bar_in_a_log_file_writes_plain_lines_sparingly():
    stream = io.StringIO()
    bar = ProgressBar(100, stream=stream, console=io.StringIO(), plain_every=3600)
    for steps in (10, 20, 30):
        bar.update(steps, 10.0, None)
    assert stream.getvalue().count("\n") == 1 and "\r" not in stream.getvalue()
    silent = io.StringIO()
    ProgressBar(100, stream=silent, console=silent, enabled=False).update(10, 1.0, None)
    assert silent.getvalue() == ""
