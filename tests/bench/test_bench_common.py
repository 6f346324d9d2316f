import json
import pathlib
import shutil
import subprocess

import jax
import jax.numpy as jnp
import pytest

from bench import common


def test_time_calls_feeds_each_output_to_the_next_call():
    add_one = jax.jit(lambda count: count + 1, donate_argnums=0)

    timing, count = common.time_calls(add_one, jnp.zeros((), jnp.int32), repeats=3)

    assert count.dtype == jnp.int32 and count.shape == ()
    assert int(count) == 1 + 3  # the untimed-in-median first call, then the repeats
    assert timing.compile_s > 0 and timing.first_call_s > 0 and timing.median_s > 0
    assert timing.peak_rss_mb > 0


def test_time_calls_needs_a_repeat():
    with pytest.raises(ValueError):
        common.time_calls(jax.jit(lambda x: x), jnp.zeros(()), repeats=0)


def test_record_appends_one_json_line_per_result(tmp_path, capsys):
    out = tmp_path / "results" / "env.jsonl"
    timing = common.Timing(compile_s=2.0, first_call_s=0.5, median_s=0.25, peak_rss_mb=100.0)

    common.record("env", {"num_envs": 8}, timing, steps=1000, out=out)
    common.record("env", {"num_envs": 8}, timing, steps=1000, out=out)

    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == 2
    assert results[0]["name"] == "env"
    assert results[0]["config"] == {"num_envs": 8}
    assert results[0]["metrics"]["steps_per_s"] == 4000.0
    assert results[0]["metrics"]["compile_s"] == 2.0
    assert results[0]["backend"] == jax.default_backend()
    assert "4,000 steps/s" in capsys.readouterr().out


def test_time_calls_reports_cpu_time_per_call(capsys):
    """CPU seconds of a call count this process's work: a call that computes reports some,
    and steps per CPU second is derived from it."""
    x = jnp.ones((256, 256))
    timing, _ = common.time_calls(jax.jit(lambda c: jnp.tanh(c @ x)), jnp.ones((256, 256)), repeats=2)
    assert timing.median_cpu_s is not None and timing.median_cpu_s > 0
    result = common.record("env", {"num_envs": 8}, timing, steps=1000, out=None)
    assert result["metrics"]["steps_per_cpu_s"] == pytest.approx(1000 / timing.median_cpu_s)
    assert "(CPU " in capsys.readouterr().out


def test_request_devices_is_a_no_op_when_enough_exist(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    common.request_devices(4)
    common.request_devices(1)


def test_request_devices_after_jax_started_says_how_to_get_them(monkeypatch):
    # setenv (not delenv) so that monkeypatch restores XLA_FLAGS afterwards and the flag
    # set here cannot leak into subprocesses started by later tests.
    monkeypatch.setenv("XLA_FLAGS", "")
    jax.devices()  # JAX has initialised its backends: the flag comes too late
    common.request_devices(len(jax.devices()) + 1)
    with pytest.raises(ValueError, match="XLA_FLAGS"):
        common.batch_mesh(len(jax.devices()) + 1, "envs")


def test_batch_mesh_refuses_more_devices_than_exist():
    with pytest.raises(ValueError):
        common.batch_mesh(len(jax.devices()) + 1, "envs")
    assert common.batch_mesh(1, "envs").shape == {"envs": 1}


def test_interleaved_calls_alternate_and_each_feeds_its_own_output():
    calls = []

    def counter(step):
        def add(x):
            jax.debug.callback(lambda: calls.append(step))
            return x + step
        return jax.jit(add)

    timed = common.time_calls_interleaved([counter(1), counter(10)],
                                          [jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)],
                                          repeats=3)

    assert [int(carry) for _, carry in timed] == [4, 40]     # 1 untimed + 3 timed calls each
    assert calls == [1, 10] + [1, 10] * 3                     # warm-up, then alternating rounds
    assert all(t.median_s > 0 and t.compile_s > 0 for t, _ in timed)


def test_the_commit_says_when_the_code_measured_is_not_the_commit(tmp_path, monkeypatch):
    # a repository of its own: one commit, then a change to a tracked file
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    shutil.copy(pathlib.Path(common.__file__), repo / "bench" / "common.py")

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    head = git("rev-parse", "--short=12", "HEAD")
    monkeypatch.setattr(common, "__file__", str(repo / "bench" / "common.py"))
    assert common._git_commit() == head
    (repo / "untracked.txt").write_text("not part of the code")
    assert common._git_commit() == head
    (repo / "bench" / "common.py").write_text("# changed\n")
    assert common._git_commit() == head + "-dirty"
