"""`bin/train --profile DIR`: one fused call is traced, and the trace lands in DIR.

A tiny run on `NullEnv` (two calls of two updates each), as in test_run.py, sharing the
suite's persistent compilation cache, so the program compiles once per configuration.
"""

import gzip
import io
import json
from pathlib import Path

import pytest

from bench.null_env import NullEnv
from hm.tools.train import TrainArgs, main
from hm.train import TrainConfig
from hm.train.profiling import PERFETTO_FILE, call_to_trace, trace_files
from hm.train.run import RunOptions, Trainer, run
from tests.train.conftest import TINY


def train(tmp_path: Path, compile_cache: Path, profile: Path | None, config: TrainConfig = TINY) -> str:
    """Run a whole tiny training; returns what it printed."""
    console = io.StringIO()
    options = RunOptions(
        runs_dir=tmp_path / "runs", run_name="r", compile_cache=compile_cache, progress=False, profile=profile
    )
    assert run(Trainer(config, options, env=NullEnv(), console=console)) == 0
    return console.getvalue()


def test_profile_writes_one_trace_of_the_second_call(tmp_path, compile_cache):
    profile = tmp_path / "nested" / "profile"  # made if missing
    printed = train(tmp_path, compile_cache, profile)

    files = trace_files(profile)
    assert {path.parent for path in files} == {files[0].parent}, "exactly one call was traced"
    assert any(path.name.endswith(".xplane.pb") and path.stat().st_size > 0 for path in files), files
    (perfetto,) = [path for path in files if path.name == PERFETTO_FILE]
    events = json.loads(gzip.decompress(perfetto.read_bytes()))["traceEvents"]
    # The traced call ran the fused program: XLA's kernels are in the trace (Python
    # events start with "$"), among them the network's tanh.
    kernels = {str(event.get("name", "")) for event in events} - {""}
    kernels = {name for name in kernels if not name.startswith("$")}
    assert any("tanh" in name for name in kernels), sorted(kernels)[:20]
    assert f"profile: call 2 traced to {profile}" in printed
    # The run itself is unchanged by profiling: it still finishes and writes its policy.
    assert (tmp_path / "runs" / "r" / "policy.eqx").exists()


def test_no_profile_no_trace(tmp_path, compile_cache):
    printed = train(tmp_path, compile_cache, None)
    assert "profile:" not in printed
    assert not list(tmp_path.rglob("*.xplane.pb"))


def test_a_run_of_one_call_traces_that_call(tmp_path, compile_cache):
    one_call = TrainConfig(**{**TINY.__dict__, "total_timesteps": 8 * 8 * 2})
    printed = train(tmp_path, compile_cache, tmp_path / "profile", one_call)
    assert "profile: call 1 traced" in printed
    assert trace_files(tmp_path / "profile")


def test_call_to_trace():
    assert call_to_trace(1) == 0  # the only call, compile and all
    assert call_to_trace(2) == 1 and call_to_trace(50) == 1  # the first after compiling


def test_profile_flag_reaches_the_run_options():
    assert TrainArgs().parse_args(["--profile", "prof"]).run_options().profile == Path("prof")
    assert TrainArgs().parse_args([]).run_options().profile is None


def test_profile_naming_a_file_is_refused(tmp_path, capsys):
    existing = tmp_path / "file"
    existing.write_text("")
    with pytest.raises(SystemExit) as exit_info:
        main(["--profile", str(existing), "--runs-dir", str(tmp_path / "runs"), "--compile-cache", ""])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert f"--profile must name a directory; {existing} is a file" in err
