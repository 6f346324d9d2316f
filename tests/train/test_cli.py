"""`bin/train` flags: every bad value exits 2 with a message naming the flag, no traceback.

Validation happens before anything is compiled, so these run in-process through
`hm.tools.train.main` in well under a second each; one test goes through `bin/train`
itself in a subprocess.
"""

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from hm.game.constants import GAME_VERSION, NUM_ACTIONS, OBS_FLAT_SIZE
from hm.tools.train import TrainArgs, explicit_fields, main, named_fields
from hm.train import checkpoint, resume
from hm.train.checkpoint import Architecture, CheckpointMeta, Layout
from hm.train.config import TrainConfig

REPO = Path(__file__).resolve().parents[2]


def run_main(argv: list[str], capsys, tmp_path: Path) -> tuple[int, str]:
    """`main(argv)` with runs and compile cache under `tmp_path`; (exit code, stderr)."""
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--runs-dir", str(tmp_path / "runs"), "--compile-cache", ""])
    return exit_info.value.code, capsys.readouterr().err


BAD_INPUT = [
    (["--num-envs", "0"], "--num-envs must be a positive multiple of the device count"),
    (["--num-envs", "-5"], "--num-envs must be a positive multiple"),
    (["--num-envs", "abc"], "argument --num-envs: invalid int value: 'abc'"),
    (["--num-env", "8"], "unrecognized arguments: --num-env 8"),
    (["--num-steps", "0"], "--num-steps must be an integer >= 1; got 0"),
    (["--total-timesteps", "100"], "--total-timesteps must be at least one batch"),
    (["--lr", "0"], "--lr must be a number in (0, 1]; got 0.0"),
    (["--lr", "nan"], "--lr must be a number in (0, 1]"),
    (["--gamma", "1.5"], "--gamma must be a number in [0, 1]; got 1.5"),
    (["--gae-lambda", "-0.1"], "--gae-lambda must be a number in [0, 1]"),
    (["--num-minibatches", "0"], "--num-minibatches must be an integer >= 1"),
    (["--num-envs", "6", "--num-steps", "1", "--num-minibatches", "4", "--total-timesteps", "60"], "--num-minibatches"),
    (["--update-epochs", "0"], "--update-epochs must be an integer >= 1"),
    (["--clip-eps", "0"], "--clip-eps must be a number > 0"),
    (["--vf-coef", "-1"], "--vf-coef must be a number >= 0"),
    (["--ent-coef", "-0.5"], "--ent-coef must be a number >= 0"),
    (["--max-grad-norm", "0"], "--max-grad-norm must be a number > 0"),
    (["--hidden-dim", "0"], "--hidden-dim must be an integer >= 1"),
    (["--num-layers", "0"], "--num-layers must be an integer >= 1"),
    (["--precision", "fp16"], "argument --precision: Value for variable \"precision\" must be one of ['auto', 'f32', 'bf16']"),
    (["--seed", "-1"], "--seed must be an integer in [0, 4294967295]"),
    (["--max-episode-steps", "0"], "--max-episode-steps must be an integer >= 1"),
    (["--updates-per-call", "0"], "--updates-per-call must be an integer >= 1"),
    (["--devices", "0"], "--devices must be an integer in [1, "),
    (["--devices", "4096"], "--devices must be an integer in [1, "),
    (["--log-interval", "0"], "--log-interval must be an integer >= 1; got 0"),
    (["--save-interval", "0"], "--save-interval must be an integer >= 1 (updates); got 0"),
    (["--save-interval-minutes", "0"], "--save-interval-minutes must be a number > 0; got 0.0"),
    (["--save-interval-minutes", "5", "--save-interval", "3"], "give either --save-interval (updates) or --save-interval-minutes"),
    (["--keep-checkpoints", "0"], "--keep-checkpoints must be an integer >= 1; got 0"),
    (["--run-name", "a/b"], "--run-name must be letters, digits"),
    (["--run-suffix", "two words"], "--run-suffix must be letters, digits"),
    (["--resume", "/no/such/run"], "--resume: /no/such/run does not exist"),
    (["--num-processes", "0", "--process-id", "0", "--coordinator-address", "localhost:1"], "--num-processes must be an integer >= 1"),
    (["--num-processes", "2", "--process-id", "2", "--coordinator-address", "localhost:1"], "--process-id must be in [0, 1]"),
    (["--coordinator-address", "localhost:1"], "--coordinator-address, --num-processes and --process-id go together"),
    (["--value-norm", "2"], "--value-norm must be a number in [0, 1]; got 2.0"),
    (["--reward-weights", "distance"], "--reward-weights takes TERM=WEIGHT (e.g. distance=0); got 'distance'"),
    (["--reward-weights", "distance=x"], "--reward-weights distance: 'x' is not a number"),
    (["--reward-weights", "distance=nan"], "--reward-weights distance: the weight must be a finite number"),
    (["--reward-weights", "distance=0", "distance=1"], "--reward-weights gives distance twice"),
    (["--reward-weights", "altitude=0"], "--reward-weights altitude: not a reward term of this environment; its "
                                         "terms are step, stage, score"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUT, ids=[" ".join(argv) for argv, _ in BAD_INPUT])
def test_bad_input_exits_2_naming_the_flag(argv, message, capsys, tmp_path):
    code, err = run_main(argv, capsys, tmp_path)
    assert code == 2
    assert message in err, err
    assert "Traceback" not in err
    assert err.startswith("usage: bin/train")
    assert not (tmp_path / "runs").exists(), "nothing is written for bad input"


def write_checkpoint(directory: Path, **changes) -> Path:
    """A checkpoint file with a tiny config and no arrays, as far as refusal needs."""
    config = dataclasses.asdict(TrainConfig(num_envs=4, num_steps=4, total_timesteps=64, hidden_dim=8, num_layers=1))
    meta = CheckpointMeta(
        game_version=GAME_VERSION,
        architecture=Architecture(hidden_dim=8, num_layers=1, obs_size=OBS_FLAT_SIZE, num_actions=NUM_ACTIONS),
        layout=Layout(num_envs=4, num_devices=1, num_processes=1),
        update=3,
        env_steps=48,
        config=config,
        run_name="old",
        leaves={},
    )
    return checkpoint.save(directory / "checkpoints", {}, dataclasses.replace(meta, **changes))


def test_resume_with_another_architecture_is_refused_with_the_reason(capsys, tmp_path):
    write_checkpoint(tmp_path / "old")
    code, err = run_main(["--resume", str(tmp_path / "old"), "--hidden-dim", "64"], capsys, tmp_path)
    assert code == 2 and "Traceback" not in err
    assert "cannot resume from" in err and "hidden_dim: checkpoint has 8, this run has 64" in err


def test_resume_from_other_rules_is_refused_with_the_reason(capsys, tmp_path):
    write_checkpoint(tmp_path / "old", game_version=GAME_VERSION + 7)
    code, err = run_main(["--resume", str(tmp_path / "old")], capsys, tmp_path)
    assert code == 2 and "Traceback" not in err
    assert f"trained on rules version {GAME_VERSION + 7}" in err


def test_resume_from_a_directory_without_checkpoints_is_refused(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    code, err = run_main(["--resume", str(tmp_path / "empty")], capsys, tmp_path)
    assert code == 2 and "holds no checkpoint" in err and "Traceback" not in err


def test_explicit_run_name_that_exists_is_refused(capsys, tmp_path):
    (tmp_path / "runs" / "taken").mkdir(parents=True)
    argv = ["--run-name", "taken", "--num-envs", "4", "--num-steps", "4", "--total-timesteps", "16"]
    code, err = run_main(argv, capsys, tmp_path)
    assert code == 2 and "already exists" in err and "--resume" in err


def test_help_lists_the_common_flags_and_help_all_every_flag_in_kebab_case(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    short = capsys.readouterr().out
    shown = {token.strip("[],") for token in short.split() if token.startswith("--")}
    assert len(shown) <= 20 and {"--config", "--num-envs", "--resume", "--help-all"} <= shown
    assert "--teacher-every" not in shown and "--coordinator-address" not in shown
    with pytest.raises(SystemExit) as exit_info:
        main(["--help-all"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for field in [*(f.name for f in dataclasses.fields(TrainConfig)), "log_interval", "save_interval_minutes",
                  "save_interval", "runs_dir", "run_name", "run_suffix", "resume", "compile_cache",
                  "coordinator_address", "num_processes", "process_id"]:
        assert "--" + field.replace("_", "-") in out, field
    assert "_" not in "".join(token for token in out.split() if token.startswith("--"))
    assert "Parallel games" in out, "help text comes from the field comments"


def test_defaults_match_train_config():
    args = TrainArgs().parse_args([])
    assert args.train_config() == TrainConfig()
    options = args.run_options()
    assert options.save_interval is None and options.save_interval_minutes is None
    assert options.compile_cache == Path("~/.cache/hm/jax") and options.progress


def test_reward_weights_parse_into_the_config():
    args = TrainArgs(prog="bin/train").parse_args(["--reward-weights", "distance=0", "siphon-death=0.5"])
    assert args.train_config().reward_weights == (("distance", 0.0), ("siphon_death", 0.5))
    assert TrainArgs(prog="bin/train").parse_args([]).train_config().reward_weights == (("distance", 0.0),)
    assert TrainArgs(prog="bin/train").parse_args(["--reward-weights", "none"]).train_config().reward_weights == ()


def test_config_presets_and_the_flags_beside_them():
    plain = TrainArgs(prog="bin/train").parse_args(["--config", "plain", "--lr", "0.01"])
    argv = ["--config", "plain", "--lr", "0.01"]
    config = plain.train_config(named_fields(argv))
    assert (config.teacher_coef, config.program_bonus, config.reward_weights, config.value_transform, config.lr) == (
        0.0, 0.0, (), "none", 0.01)
    # on --resume a preset counts as the fields it changes, given explicitly
    assert {"teacher_coef", "program_bonus", "reward_weights", "value_transform", "lr", "config"} == explicit_fields(argv)


def test_teacher_flags_parse_into_the_config_and_default_to_kickstarting():
    default = TrainArgs(prog="bin/train").parse_args([]).train_config()
    assert default.teacher_coef == 1.0 and default.teacher_every is None  # auto: 8
    assert default.program_bonus == 3.0
    args = TrainArgs(prog="bin/train").parse_args(["--teacher-coef", "0.5", "--teacher-steps", "1000",
                                                   "--teacher-every", "4"])
    config = args.train_config()
    assert (config.teacher_coef, config.teacher_steps, config.teacher_every) == (0.5, 1000, 4)


def test_explicit_fields_reads_both_flag_forms():
    assert explicit_fields(["--num-envs", "8", "--lr=0.1", "--resume", "x", "-h"]) == {"num_envs", "lr", "resume"}


def test_bin_train_rejects_bad_input_without_traceback(tmp_path):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        [str(REPO / "bin" / "train"), "--num-envs", "0", "--runs-dir", str(tmp_path), "--compile-cache", ""],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2, result.stderr
    assert "--num-envs must be a positive multiple of the device count" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_older_than_an_architecture_field_resumes_with_its_own():
    # its config lacks the fields its `Architecture` records (as one from before `network`,
    # `critic` and `value_transform` existed lacks those): the run takes what the
    # checkpoint's parameters are, not today's defaults (local, sqrt, 256 x 2)
    config = dataclasses.asdict(TrainConfig(num_envs=4, num_steps=4, total_timesteps=64, hidden_dim=8, num_layers=1))
    for field in resume.ARCHITECTURE_FIELDS:
        del config[field]
    meta = CheckpointMeta(
        game_version=GAME_VERSION,
        architecture=Architecture(hidden_dim=8, num_layers=1, obs_size=OBS_FLAT_SIZE, num_actions=NUM_ACTIONS),
        layout=Layout(num_envs=4, num_devices=1, num_processes=1), update=3, env_steps=48, config=config,
        run_name="old", leaves={})
    merged = resume.merge_config(TrainConfig(), meta, frozenset())
    assert (merged.network, merged.critic, merged.value_transform, merged.hidden_dim) == ("mlp", "shared", "none", 8)
    # a flag given explicitly still wins (and the architecture check then refuses it)
    assert resume.merge_config(TrainConfig(), meta, frozenset({"value_transform"})).value_transform == "sqrt"
