"""Suite-wide JAX configuration, applied before any test module is imported.

Strict promotion makes silent broadcasting and dtype widening errors in tests, so a
rule written for one shape or dtype cannot quietly run on another. The persistent
compilation cache lets a rerun skip XLA compilation of every program it has seen.
XLA compiles the suite's programs without LLVM's optimisation passes
(`--xla_backend_optimization_level=0`): almost every program here is compiled once and
run a few times on a small batch, so compilation is most of the suite's time and the
passes cost more than they save: on the 2-core CI machine the whole suite, from a cold
cache, took 1,678 s of pytest with it against 2,235 s without (docs/performance.md §3.5),
though the tests that run much compiled code (the conv network's probes) are slower.
HLO-level optimisation (fusion, simplification) is unchanged: the level only changes how
the machine code is optimised, and the whole suite passes at either level. For the same
reason fusions are emitted by XLA's older elemental emitters
(`--xla_cpu_use_fusion_emitters=false`), which compile the game's step about 14 % faster
(7.5 s against 8.7 s for `jit(vmap(step))` of 8 games, 2026-12-02). Benchmarks
run outside pytest and keep XLA's defaults. Tests that start subprocesses pass their
own XLA_FLAGS.
Hypothesis gets no per-example deadline: an example that compiles a program takes
seconds the first time and milliseconds after, which a deadline reports as flaky.
JAX's in-memory caches are emptied after each test module (`_free_compiled_programs`):
a test process (`bin/test` runs a few, each taking whole test files) runs many modules,
and every compiled program it keeps adds to its memory, which grew until CI aborted
(docs/performance.md §3.5, "The test suite's memory"). A later module that needs a
program again loads it from the persistent cache, which the processes share.
"""

import gc
import os
import pathlib

import hypothesis
import jax
import pytest

_REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent

# Read when JAX starts its backend, which no import above has done yet.
os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0"
                           " --xla_cpu_use_fusion_emitters=false").strip()

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

jax.config.update("jax_compilation_cache_dir", str(_REPO_ROOT / ".cache" / "jax"))
# Cache every program, however quick to compile: a suite is many small programs.
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

hypothesis.settings.register_profile("hm", deadline=None)
hypothesis.settings.load_profile("hm")


def free_compiled_programs() -> None:
    """Drop the programs JAX keeps compiled in memory, and free what they held."""
    jax.clear_caches()
    gc.collect()


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """After each test module: `free_compiled_programs`."""
    yield
    free_compiled_programs()


# Seconds of setup, call and teardown per test file, summed over its tests; the slowest
# files are listed after the run (as `--durations` lists tests), with the process that
# ran each, so that a slow file, or a process left running alone at the end, shows.
_FILE_SECONDS: dict[str, float] = {}
_FILE_WORKER: dict[str, str] = {}
_SLOWEST_FILES = 15


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration
    # pytest-xdist gives the controller's reports the worker that ran them (`report.node`)
    _FILE_WORKER[path] = report.node.gateway.id if hasattr(report, "node") else "main"


def pytest_terminal_summary(terminalreporter):
    if not _FILE_SECONDS:
        return
    per_worker: dict[str, float] = {}
    for path, seconds in _FILE_SECONDS.items():
        per_worker[_FILE_WORKER[path]] = per_worker.get(_FILE_WORKER[path], 0.0) + seconds
    terminalreporter.write_sep("=", f"slowest {_SLOWEST_FILES} test files")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])[:_SLOWEST_FILES]:
        terminalreporter.write_line(f"{seconds:8.1f}s  {_FILE_WORKER[path]:>4}  {path}")
    terminalreporter.write_line("per process: " + ", ".join(f"{w} {s:.0f}s" for w, s in sorted(per_worker.items())))
