"""Timing, device and result-file helpers shared by the benchmarks.

A benchmark is one jitted function from a carry to the next carry, called again and
again on its own output, the way a training loop feeds one rollout's end state into the
next. Compilation is timed on its own (ahead-of-time lower + compile), the first
execution is timed on its own too (it pays one-off allocation), and the steady state is
the median of the repeats after it, each ended by `jax.block_until_ready`.
"""

import dataclasses
import datetime
import json
import os
import pathlib
import re
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, TypeVar

import jax
import numpy as np

Carry = TypeVar("Carry")

_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of one benchmark, and the process's peak memory.

    `median_cpu_s` is the CPU time the process used during one call (all its threads):
    on a machine shared with other work it counts only what this program computed,
    while wall-clock time also counts the time other processes held the cores. Ratios of
    CPU time per step compare two programs' cost when the machine is not quiet.
    """

    compile_s: float  # trace + lower + XLA compile
    first_call_s: float  # first execution; pays one-off allocation, so not in the median
    median_s: float  # median over the repeats of one call
    peak_rss_mb: float  # peak resident set of the whole process so far, compile included
    median_cpu_s: float | None = None  # median CPU seconds of one call (all threads)


def time_calls(fn: Any, carry: Carry, repeats: int) -> tuple[Timing, Carry]:
    """Compile `fn` for `carry`, then call it `1 + repeats` times, each on the last output.

    Args:
        fn: a `jax.jit`-wrapped function taking and returning a carry of one structure.
            It may donate its argument: the carry passed in is not used again.
        carry: the first input.
        repeats: timed calls after the first; at least 1.

    Returns:
        The timing, and the carry after the last call.
    """
    return time_calls_interleaved([fn], [carry], repeats)[0]


def time_calls_interleaved(fns: list[Any], carries: list[Any], repeats: int
                           ) -> list[tuple[Timing, Any]]:
    """`time_calls` for several functions whose timed calls alternate (one call of each per
    round), so that a machine whose speed drifts affects all of them alike and their
    ratios hold. Each is compiled, then called once untimed, before the first round."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    compiled, compile_s, first_call_s = [], [], []
    seconds, cpu_seconds = [[] for _ in fns], [[] for _ in fns]
    carries = list(carries)
    for i, fn in enumerate(fns):
        start = time.perf_counter()
        compiled.append(fn.lower(carries[i]).compile())
        compile_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        carries[i] = jax.block_until_ready(compiled[i](carries[i]))
        first_call_s.append(time.perf_counter() - start)
    for _ in range(repeats):
        for i in range(len(fns)):
            start, cpu_start = time.perf_counter(), time.process_time()
            carries[i] = jax.block_until_ready(compiled[i](carries[i]))
            seconds[i].append(time.perf_counter() - start)
            cpu_seconds[i].append(time.process_time() - cpu_start)
    rss = peak_rss_mb()
    return [(Timing(compile_s[i], first_call_s[i], statistics.median(seconds[i]), rss,
                    statistics.median(cpu_seconds[i])), carries[i])
            for i in range(len(fns))]


def peak_rss_mb() -> float:
    """Peak resident set size of this process, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def request_devices(count: int) -> None:
    """Make sure `count` CPU devices will exist, by forcing host devices if needed.

    XLA reads the device count once, when JAX initialises its backends, so this must run
    before the first JAX computation. Only the CPU backend is affected: on a TPU host the
    TPU devices are used and the extra CPU devices cost nothing. On CPU, more devices
    than cores only adds overhead.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    match = re.search(rf"{_DEVICE_COUNT_FLAG}=(\d+)", flags)
    if count <= (int(match.group(1)) if match else 1):
        return
    # Takes effect only if JAX has not started its backends yet; `batch_mesh` then
    # reports the shortfall (with this advice) if it came too late.
    flags = re.sub(rf"{_DEVICE_COUNT_FLAG}=\d+", "", flags)
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_COUNT_FLAG}={count}".strip()


def batch_mesh(count: int, axis: str) -> jax.sharding.Mesh:
    """A one-axis mesh over the first `count` devices of the default backend."""
    devices = jax.devices()
    if len(devices) < count:
        raise ValueError(
            f"{count} devices requested, {len(devices)} available: {devices}; on CPU set "
            f"XLA_FLAGS={_DEVICE_COUNT_FLAG}={count} before JAX starts")
    return jax.sharding.Mesh(np.array(devices[:count]), (axis,))


def disable_compilation_cache() -> None:
    """Compile for real, so compile time is measured even where a cache is configured."""
    jax.config.update("jax_enable_compilation_cache", False)


def record(
    name: str, config: dict[str, Any], timing: Timing, steps: int, out: pathlib.Path | None
) -> dict[str, Any]:
    """Print one benchmark's result as a line and append it to `out` as a JSON line.

    Args:
        name: the benchmark, e.g. "env".
        config: the settings that define the workload; `bench/compare.py` only compares
            results whose name and config are equal.
        timing: from `time_calls`.
        steps: environment steps done by one call, for steps per second.
        out: the results file (JSON lines, created with its folder if missing), or None.

    Returns:
        The result as written.
    """
    metrics = {
        "steps_per_s": steps / timing.median_s,
        **dataclasses.asdict(timing),
    }
    if timing.median_cpu_s is not None:
        metrics["steps_per_cpu_s"] = steps / timing.median_cpu_s
    settings = " ".join(f"{key}={value}" for key, value in config.items())
    cpu = "" if timing.median_cpu_s is None else f" (CPU {timing.median_cpu_s:.3f} s)"
    print(
        f"{name} [{settings}] on {jax.default_backend()}: "
        f"{metrics['steps_per_s']:,.0f} steps/s, compile {timing.compile_s:.1f} s, "
        f"first call {timing.first_call_s:.2f} s, median call {timing.median_s:.3f} s{cpu}, "
        f"peak RSS {timing.peak_rss_mb:,.0f} MiB"
    )
    return record_line(name, config, metrics, out)


def record_line(name: str, config: dict[str, Any], metrics: dict[str, Any], out: pathlib.Path | None) -> dict[str, Any]:
    """Append one result (any metrics) to `out` as a JSON line, with the machine and commit.

    Returns:
        The result as written (also when `out` is None and nothing is written).
    """
    result = {
        "name": name,
        "config": config,
        "metrics": metrics,
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "commit": _git_commit(),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as results:
            results.write(json.dumps(result) + "\n")
    return result


def _git_commit() -> str | None:
    """The checked-out commit of the repo holding this file, if git can tell, with
    `-dirty` appended when tracked files differ from it (the code measured is not the
    commit's)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=pathlib.Path(__file__).parent, capture_output=True,
                              text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return None
