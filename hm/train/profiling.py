"""`bin/train --profile DIR`: a `jax.profiler` trace of one fused training call.

One call (K whole PPO updates: rollouts, advantages, epochs of minibatch updates) is the
unit the host waits on, so a trace of one call shows the whole of a steady-state
training step and nothing else. The first call is the wrong one to trace: its time is
mostly compilation (or loading from the compile cache). So the call traced is the second
of the run, or the only one when the run has a single call.

The trace goes to `DIR/plugins/profile/<timestamp>/`: an `.xplane.pb` that TensorBoard's
profile plugin reads (`tensorboard --logdir DIR`), and `perfetto_trace.json.gz`, which
opens in https://ui.perfetto.dev without TensorBoard. `docs/performance.md` explains
how to read it.
"""

import contextlib
from collections.abc import Iterator
from pathlib import Path

import jax

PERFETTO_FILE = "perfetto_trace.json.gz"


def call_to_trace(calls_in_run: int) -> int:
    """Index (0-based) of the call to trace in a run of `calls_in_run` calls: the first
    after compilation, or the only one."""
    return 1 if calls_in_run > 1 else 0


@contextlib.contextmanager
def trace(directory: Path | None) -> Iterator[None]:
    """Record everything JAX runs inside the block into `directory` (None: no trace).

    The caller must wait for the block's results inside it (e.g. copy them to the host):
    JAX dispatches asynchronously, and work still running at the exit is not recorded.
    """
    if directory is None:
        yield
        return
    directory = Path(directory).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    with jax.profiler.trace(str(directory), create_perfetto_trace=True):
        yield


def trace_files(directory: Path) -> list[Path]:
    """The trace files under `directory` (xplane protobufs and Perfetto traces), oldest run first."""
    directory = Path(directory).expanduser()
    found = [*directory.glob("plugins/profile/*/*.xplane.pb"), *directory.glob(f"plugins/profile/*/{PERFETTO_FILE}")]
    return sorted(found)
