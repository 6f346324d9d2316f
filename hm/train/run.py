"""The run loop: everything the host does between two fused training calls.

`make_train_fn` returns one compiled call that runs K whole PPO updates on every device.
A `Trainer` owns one run around it: it sets the run up (its directory, `hm.train.run_dir`;
resuming, `hm.train.resume`), then makes the calls, logs metrics to TensorBoard and the
console, checks health, saves checkpoints on a timer and at the end, and exports the
policy. `run` is the loop with signal handling and exit codes; `bin/train`
only parses flags and calls it.

Every process of a multi-host run executes the same code: decisions that involve a
collective (stop, save) are agreed on by all processes, and only process 0 writes files,
logs and the progress bar.
"""

import dataclasses
import datetime
import io
import math
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from hm.env import HackMatrix
from hm.game.constants import GAME_VERSION
from hm.train import (
    checkpoint,
    features,
    init,
    make_mesh,
    make_train_fn,
    maybe_initialize_distributed,
    member_of,
    members,
    place_hyper,
    profiling,
    resolve,
    resume,
    to_host,
    total_env_steps,
    validate,
)
from hm.train.checkpoint import Architecture, CheckpointMeta, Layout
from hm.train.config import ConfigError, to_dict
from hm.train.features.teacher import auto_teacher_steps
from hm.train.health import HealthMonitor, HealthWarning, has_episodes
from hm.train.logging import (
    RunLogger,
    format_config,
    format_metrics_line,
    format_population_line,
    write_json,
)
from hm.train.progress import ProgressBar, format_count, format_duration
from hm.train.run_dir import CONFIG_FILE, RUN_NAME, make_run_name, new_run_dir, refuse_taken
from hm.train.vector import describe

DEFAULT_COMPILE_CACHE = Path("~/.cache/hm/jax")
DEFAULT_SAVE_MINUTES = 10.0

EXIT_OK = 0
EXIT_DIVERGED = 1


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run is driven (none of it changes what is learned)."""

    runs_dir: Path = Path("runs")
    run_name: str | None = None
    run_suffix: str | None = None
    resume: Path | None = None
    log_interval: int = 1
    save_interval_minutes: float | int | None = None
    save_interval: int | None = None
    keep_checkpoints: int = checkpoint.KEEP_LAST
    compile_cache: Path | None = DEFAULT_COMPILE_CACHE
    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    progress: bool = True
    profile: Path | None = None  # write a jax.profiler trace of one call here (hm.train.profiling)


def validate_options(options: RunOptions) -> None:
    """Raise `ConfigError(flag, message)` for the first driver option out of range."""
    if options.log_interval < 1:
        raise ConfigError("--log-interval", f"--log-interval must be an integer >= 1; got {options.log_interval!r}")
    if options.save_interval is not None and options.save_interval < 1:
        raise ConfigError("--save-interval", f"--save-interval must be an integer >= 1 (updates); got {options.save_interval!r}")
    if options.save_interval_minutes is not None:
        if options.save_interval is not None:
            raise ConfigError("--save-interval", "give either --save-interval (updates) or --save-interval-minutes, not both")
        if not (options.save_interval_minutes > 0 and math.isfinite(options.save_interval_minutes)):
            raise ConfigError(
                "--save-interval-minutes",
                f"--save-interval-minutes must be a number > 0; got {options.save_interval_minutes!r}",
            )
    if options.keep_checkpoints < 1:
        raise ConfigError("--keep-checkpoints", f"--keep-checkpoints must be an integer >= 1; got {options.keep_checkpoints!r}")
    for flag, name in (("--run-name", options.run_name), ("--run-suffix", options.run_suffix)):
        if name is not None and not RUN_NAME.match(name):
            raise ConfigError(
                flag, f"{flag} must be letters, digits, '.', '_' or '-', starting with a letter or digit; got {name!r}"
            )
    multi_host = (options.coordinator_address, options.num_processes, options.process_id)
    if any(value is not None for value in multi_host) and not all(value is not None for value in multi_host):
        raise ConfigError(
            "--coordinator-address",
            "--coordinator-address, --num-processes and --process-id go together: give all three "
            "(or none: on a TPU pod slice they are found automatically)",
        )
    if options.num_processes is not None and options.num_processes < 1:
        raise ConfigError("--num-processes", f"--num-processes must be an integer >= 1; got {options.num_processes!r}")
    if options.process_id is not None:
        if options.process_id < 0:
            raise ConfigError("--process-id", f"--process-id must be an integer >= 0; got {options.process_id!r}")
        if options.num_processes is not None and options.process_id >= options.num_processes:
            raise ConfigError(
                "--process-id",
                f"--process-id must be in [0, {options.num_processes - 1}] for --num-processes "
                f"{options.num_processes}; got {options.process_id!r}",
            )
    if options.resume is not None and not Path(options.resume).expanduser().exists():
        raise ConfigError("--resume", f"--resume: {options.resume} does not exist")
    if options.profile is not None and Path(options.profile).expanduser().is_file():
        raise ConfigError("--profile", f"--profile must name a directory; {options.profile} is a file")


def configure_compile_cache(directory: Path | None) -> None:
    """Turn on JAX's persistent compilation cache in `directory` (None: leave it off).

    Every program is cached, however quick to compile: a restart then skips the
    expensive fused-update compile entirely.
    """
    if directory is None:
        return
    from jax.experimental.compilation_cache import compilation_cache

    directory = Path(directory).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    if jax.config.jax_compilation_cache_dir != str(directory):
        jax.config.update("jax_compilation_cache_dir", str(directory))
        # JAX opens its cache once per process, at the first compile: if anything
        # compiled before (with no cache or another one), make it open this one.
        compilation_cache.reset_cache()
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _fields(config: Any) -> dict[str, Any]:
    """A `TrainConfig` or `ResolvedConfig` as JSON-able values."""
    return to_dict(config)


def member_rows(metrics: Mapping[str, Any], count: int) -> list[dict[str, float]]:
    """One metric dict per member from one call's metrics.

    A metric with one value per member (shape [count]) is split among the members; a
    scalar (such as `env_steps`) is the same for all of them.
    """
    rows: list[dict[str, float]] = [{} for _ in range(count)]
    for name, value in metrics.items():
        array = np.asarray(value)
        if array.shape == (count,):
            for row, item in zip(rows, array):
                row[name] = float(item)
        elif array.shape == ():
            for row in rows:
                row[name] = float(array)
        else:
            raise ValueError(f"metric {name} has shape {array.shape}; expected () or ({count},)")
    return rows


def population_scalars(rows: list[Mapping[str, float]]) -> dict[str, float]:
    """The population's spread, for the run directory's own TensorBoard run: best,
    median and worst of each member's episode return and highest stage."""
    out = {}
    for name in ("episode/return", "episode/highest_stage"):
        values = [row[name] for row in rows if has_episodes(row) and math.isfinite(row.get(name, math.nan))]
        if values:
            short = name.removeprefix("episode/")
            out.update({f"population/{short}_best": max(values), f"population/{short}_median": float(np.median(values)),
                        f"population/{short}_worst": min(values)})
    return out


def loggable(metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics worth a TensorBoard point: episode means only when an episode finished
    (they read 0 otherwise), and no per-call constants."""
    skip_episodes = not has_episodes(metrics)
    return {
        name: value
        for name, value in metrics.items()
        if name != "env_steps" and not (skip_episodes and name.startswith("episode/") and name != "episode/count")
    }


def _any_process(flag: bool) -> bool:
    """Whether `flag` holds on any process; all processes must call this together."""
    if jax.process_count() == 1:
        return flag
    from jax.experimental import multihost_utils

    return bool(np.asarray(multihost_utils.process_allgather(np.int32(flag))).max())


class Trainer:
    """One training run: set up (new or resumed), then `call()` until `done`.

    Args:
        config: the `TrainConfig` asked for.
        options: how to drive the run.
        env: the environment (default `hm.env.HackMatrix()`).
        explicit: on resume, the config fields given explicitly; the others come from
            the checkpoint (`hm.train.resume.merge_config`). None: every field comes
            from `config`.
        console: where console lines go (default stdout).

    Raises:
        ConfigError: a value out of range (names the flag).
        CheckpointError: `--resume` names no usable checkpoint, or one that does not
            match this run (architecture, game version).
        RunError: the run directory cannot be used.
    """

    def __init__(
        self,
        config: Any,
        options: RunOptions = RunOptions(),
        env: Any = None,
        explicit: frozenset[str] | None = None,
        console: io.TextIOBase | None = None,
    ):
        validate_options(options)
        self.options = options
        self._console = console if console is not None else sys.stdout
        maybe_initialize_distributed(options.coordinator_address, options.num_processes, options.process_id)
        self.process_index = jax.process_index()
        self.is_writer = self.process_index == 0
        self.env = env if env is not None else HackMatrix()
        self._early_lines: list[str] = []  # said once the progress bar exists

        resume_from, meta = None, None
        if options.resume is not None:
            resume_from, meta = resume.find_resumable(options.resume, self._early_lines.append)
            config = resume.merge_config(config, meta, explicit)
        # the teacher's length, by default 2/5 of the run: concrete before the config is
        # saved, so that a resume with a longer --total-timesteps keeps the run's schedule
        if config.teacher_steps is None:
            config = dataclasses.replace(config, teacher_steps=auto_teacher_steps(config.total_timesteps))
        validate(config, jax.device_count())
        self.config = config
        configure_compile_cache(options.compile_cache)
        self.resolved = resolve(config, jax.default_backend(), jax.device_count())
        features.build(self.env, self.resolved)  # refuses, naming the flag, what the env cannot serve
        self.num_devices = self.resolved.devices
        self.batch_size = config.num_envs * config.num_steps
        self.updates_per_call = int(self.resolved.updates_per_call)
        self.num_updates = self.resolved.num_updates
        (obs_size,) = self.env.observation_shape
        self.architecture = Architecture(config.hidden_dim, config.num_layers, obs_size, self.env.num_actions,
                                         network=config.network, critic=config.critic,
                                         value_transform=config.value_transform)
        self.layout = Layout(config.num_envs, self.num_devices, jax.process_count())
        self.members = members(self.resolved)
        if meta is not None:
            resume.refuse_mismatch(resume_from, meta, self.architecture, GAME_VERSION, describe(self.env),
                                   [m.name for m in self.members])

        continuing = self._continued_run_dir(resume_from)
        if continuing is None:
            refuse_taken(options.runs_dir, options.run_name, options.run_suffix)  # now, not after building the state
        self.progress = ProgressBar(
            self.num_updates * self.batch_size * len(self.members),
            console=self._console,
            enabled=self.is_writer,
            live=options.progress,
        )
        for line in self._early_lines:
            self.say(line)
        self.say(
            f"devices: {self.num_devices} x {jax.default_backend()} "
            f"({jax.process_count()} process{'es' if jax.process_count() > 1 else ''}, "
            f"{config.num_envs // self.num_devices} envs per device"
            + (f" per member, {len(self.members)} members" if len(self.members) > 1 else "") + ")"
        )
        self.say(format_config("config (resolved):", self.resolved))
        if len(self.members) > 1:
            self.say("members: " + "; ".join(f"{m.index} {m.name}" for m in self.members))

        self.mesh = make_mesh(self.num_devices)
        self.last_checkpoint: Path | None = None
        if meta is None:
            self.state = init(self.resolved, env=self.env, mesh=self.mesh)
        else:
            self.state = resume.restore(resume_from, meta, self.resolved, self.env, self.mesh, self.layout, self.say)
            self.last_checkpoint = resume_from
        self.update, self.env_steps = int(to_host(self.state.update)), total_env_steps(self.state)
        self.hyper = place_hyper(self.resolved, self.mesh)
        self._train_fn = make_train_fn(self.resolved, self.env, self.mesh)

        self.run_dir = continuing or self._new_run_dir()
        self.run_name = self.run_dir.name
        self.checkpoint_dir = self.run_dir / checkpoint.CHECKPOINTS_DIR
        self.say(f"run {self.run_name}: {self.run_dir}")
        if self.is_writer:
            write_json(self.run_dir / CONFIG_FILE, self._describe(resume_from))
        purge = self.env_steps if meta else None
        # One TensorBoard run per member (runs/<name>/<member>/) in a population, each with
        # its own hyper-parameters for the HParams view; the population's spread in the
        # run directory itself. A single run logs into the run directory, as always.
        self.logger = RunLogger(self.run_dir, enabled=self.is_writer, purge_step=purge)
        if len(self.members) == 1:
            self.logger.hparams(_fields(self.resolved))
            self.member_loggers = [self.logger]
        else:
            self.member_loggers = [RunLogger(self.run_dir / m.name, enabled=self.is_writer, purge_step=purge)
                                   for m in self.members]
            for m, logger in zip(self.members, self.member_loggers):
                logger.hparams({**_fields(self.resolved), **m.hyper, "seed": m.seed, "member": m.name})
        self.health = [HealthMonitor() for _ in self.members]
        self.calls = 0
        self.diverged = False
        self.compile_seconds: float | None = None
        self._saved_update = self.update
        self._last_save_time = time.monotonic()
        # Each member's latest mean episode return: the tools' default member is the best.
        self.recent_returns: list[float | None] = [None] * len(self.members)
        if meta is not None and len(meta.members) == len(self.members):
            self.recent_returns = [m.get("recent_return") for m in meta.members]
        self._started = time.monotonic()
        self._steps_at_start = self.env_steps
        calls_left = -(-(self.num_updates - self.update) // self.updates_per_call)
        # Only process 0 traces: it alone writes files, and hosts' trace names could collide.
        self._profiled_call = profiling.call_to_trace(calls_left) if options.profile and self.is_writer else None

    # Setup.

    def _continued_run_dir(self, resume_from: Path | None) -> Path | None:
        """Resuming continues in the checkpoint's own run directory, unless a new name is asked for."""
        options = self.options
        if resume_from is None or options.run_name is not None or options.run_suffix is not None:
            return None
        if resume_from.parent.name != checkpoint.CHECKPOINTS_DIR:
            return None  # a loose checkpoint file: start a new run directory
        return resume_from.parent.parent

    def _new_run_dir(self) -> Path:
        """Reserve the new run's directory, once the state is built (a failed start leaves none)."""
        name = make_run_name(self.options.run_name, self.options.run_suffix)
        if not self.is_writer:  # writes nothing; process 0 picks the directory
            return Path(self.options.runs_dir).expanduser() / name
        return new_run_dir(self.options.runs_dir, name, automatic=self.options.run_name is None)

    def _describe(self, resume_from: Path | None) -> dict[str, Any]:
        return {
            "config": _fields(self.config),
            "resolved": _fields(self.resolved),
            "run": {
                "name": self.run_name,
                "started_at": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                "resumed_from": str(resume_from) if resume_from else None,
                "backend": jax.default_backend(),
                "num_devices": self.num_devices,
                "num_processes": jax.process_count(),
                "game_version": GAME_VERSION,
                "jax_version": jax.__version__,
                "argv": sys.argv,
            },
        }

    # The loop body.

    @property
    def done(self) -> bool:
        return self.update >= self.num_updates or self.diverged

    def call(self) -> list[dict[str, float]]:
        """Run one fused call (K updates), then log, check health and save if due.

        Returns the per-update metrics. Sets `diverged` (and saves nothing) when a
        metric is NaN or inf.
        """
        profiled = self.calls == self._profiled_call
        started = time.perf_counter()
        with profiling.trace(self.options.profile if profiled else None):
            self.state, metrics = self._train_fn(self.state, self.hyper)
            rows = member_rows(to_host(metrics), len(self.members))  # waits for the call
            finished = time.perf_counter()
        if profiled:
            self.say(
                f"profile: call {self.calls + 1} traced to {self.options.profile} (tensorboard --logdir "
                f"{self.options.profile}, or open its {profiling.PERFETTO_FILE} at ui.perfetto.dev)"
            )
        self.calls += 1
        self.update += self.updates_per_call
        self.env_steps += self.updates_per_call * self.batch_size
        rate = None
        if self.calls == 1:
            self.compile_seconds = finished - started
            self.say(f"first call (compile + {self.updates_per_call} updates): {self.compile_seconds:.1f} s")
        else:
            # End to end: since the previous call finished, host work (logs, saves) included.
            # Summed over the members: env steps the program stepped per second.
            rate = len(self.members) * self.updates_per_call * self.batch_size / (finished - self._last_call_finished)
        # Writing a trace takes a while: the next call's rate starts after it.
        self._last_call_finished = time.perf_counter() if profiled else finished
        interval = self.options.log_interval
        log_now = ((self.update - self.updates_per_call) // interval != self.update // interval
                   or self.update >= self.num_updates)
        for index, row in enumerate(rows):
            if rate is not None:
                row["perf/steps_per_sec"] = rate
                row["perf/steps_per_sec_per_device"] = rate / self.num_devices
            for warning in self.health[index].check(row):
                self._warn(warning, self.update, self.env_steps, index)
                self.diverged |= warning.fatal
            if has_episodes(row) and math.isfinite(row.get("episode/return", math.nan)):
                self.recent_returns[index] = row["episode/return"]
            if log_now:
                self.member_loggers[index].scalars(loggable(row), self.env_steps)
        if len(rows) > 1 and log_now:
            self.logger.scalars(population_scalars(rows), self.env_steps)
        if log_now or self.diverged:
            if len(rows) == 1:
                line = format_metrics_line(self.update, self.env_steps, loggable(rows[0]), self.num_devices)
            else:
                line = format_population_line(self.update, self.env_steps, [loggable(r) for r in rows],
                                              [m.name for m in self.members], self.num_devices)
            self.progress.print(line)
        self.progress.update(self.env_steps * len(self.members), rate, self._progress_return())
        return rows

    def _progress_return(self) -> float | None:
        """The return the progress bar shows: the run's, or the population's median."""
        known = [r for r in self.recent_returns if r is not None]
        return float(np.median(known)) if known else None

    def best_member(self) -> int:
        """The member with the best recent mean episode return (0 before any episode)."""
        known = [(r, -i) for i, r in enumerate(self.recent_returns) if r is not None and math.isfinite(r)]
        return -max(known)[1] if known else 0

    def _warn(self, warning: HealthWarning, update: int, step: int, member: int = 0) -> None:
        who = f" member {member} ({self.members[member].name})" if len(self.members) > 1 else ""
        self.progress.print(f"warning [{warning.kind}] at update {update}{who}: {warning.message}")
        self.member_loggers[member].text("health", f"[{warning.kind}] {warning.message}", step)

    def say(self, line: str) -> None:
        self.progress.print(line)

    # Checkpoints.

    def save_due(self) -> bool:
        """Whether a periodic checkpoint is due (agreed on by every process)."""
        if self.update == self._saved_update:
            due = False
        elif self.options.save_interval is not None:
            due = self._saved_update // self.options.save_interval != self.update // self.options.save_interval
        else:
            minutes = self.options.save_interval_minutes or DEFAULT_SAVE_MINUTES
            due = time.monotonic() - self._last_save_time >= minutes * 60
        return _any_process(due)

    def save(self) -> Path | None:
        """Checkpoint the whole state (all processes call; process 0 writes).

        Returns the path, or None when nothing changed since the last checkpoint or the
        state is not finite (a bad state never replaces a good checkpoint).
        """
        if self.update == self._saved_update and self.last_checkpoint is not None:
            return self.last_checkpoint
        arrays = checkpoint.tree_to_host(self.state)
        if not checkpoint.all_finite(arrays):
            self.say("not saving a checkpoint: the training state holds NaN or inf")
            return None
        path = checkpoint.checkpoint_path(self.checkpoint_dir, self.update)
        if self.is_writer:
            meta = CheckpointMeta(
                game_version=GAME_VERSION,
                architecture=self.architecture,
                layout=self.layout,
                update=self.update,
                env_steps=self.env_steps,
                config=_fields(self.config),
                run_name=self.run_name,
                leaves=checkpoint.leaf_table(arrays),
                env=describe(self.env),
                members=self._member_table(),
            )
            path = checkpoint.save(self.checkpoint_dir, arrays, meta, keep=self.options.keep_checkpoints)
            for logger in self.member_loggers:
                logger.flush()
            self.logger.flush()
        self._saved_update = self.update
        self._last_save_time = time.monotonic()
        self.last_checkpoint = path
        return path

    def _member_table(self) -> list[dict[str, Any]]:
        """The members as a checkpoint and `policy.json` record them."""
        return [{"index": m.index, "name": m.name, "seed": m.seed, "hyper": m.hyper,
                 "recent_return": self.recent_returns[m.index]} for m in self.members]

    def export_policy(self) -> Path:
        """Write `policy.eqx` (parameters only) and `policy.json` into the run directory.

        A population exports its best member by recent return (`best_member`); the
        checkpoint holds all of them (`bin/evaluate --member`).
        """
        best = self.best_member()
        params = checkpoint.tree_on_host(member_of(self.state.params, best))
        path = self.run_dir / checkpoint.POLICY_PARAMS
        if self.is_writer:
            checkpoint.export_policy(
                self.run_dir,
                params,
                {
                    **dataclasses.asdict(self.architecture),  # with the network kind and critic
                    "game_version": GAME_VERSION,
                    "precision": self.resolved.precision,
                    "run_name": self.run_name,
                    "update": self.update,
                    "env_steps": self.env_steps,
                    "config": _fields(self.config),
                    "member": self.members[best].name,
                    "members": self._member_table(),
                },
            )
        return path

    def summary(self) -> str:
        elapsed = time.monotonic() - self._started
        steps = (self.env_steps - self._steps_at_start) * len(self.members)
        rate = f"{format_count(steps / elapsed)} steps/s overall" if elapsed > 0 else ""
        return f"{format_count(steps)} steps in {format_duration(elapsed)} ({rate})"

    def close(self) -> None:
        self.progress.close()
        for logger in {id(x): x for x in [self.logger, *self.member_loggers]}.values():
            logger.close()


class StopSignals:
    """SIGTERM/SIGINT ask the loop to stop after the current call; a second SIGINT interrupts.

    A context manager: inside it `received` is the first stop signal's number (None until
    one comes); the previous handlers are back after it. `run` and
    `bench.bench_learning` stop, save a checkpoint and export the policy when it is set."""

    def __init__(self):
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signum
        print(
            f"\nreceived {signal.Signals(signum).name}: stopping after the current call and saving a checkpoint",
            file=sys.stderr,
            flush=True,
        )


def run(trainer: Trainer) -> int:
    """Train until done, a stop signal or divergence; returns the exit code.

    0: finished (final checkpoint and policy written); 1: stopped on NaN/inf (the last
    good checkpoint kept); 128 + signal number: stopped by SIGTERM/SIGINT after saving
    (or, on a second SIGINT, at once without saving).
    """
    with StopSignals() as signals:
        try:
            while not trainer.done:
                if _any_process(signals.received is not None):
                    break
                trainer.call()
                if trainer.diverged:
                    break
                if not trainer.done and trainer.save_due():
                    trainer.save()
            path = None if trainer.diverged else trainer.save()
            if path is None:  # NaN/inf in the metrics or in the state itself
                kept = trainer.last_checkpoint
                trainer.say(
                    "stopped: training diverged (NaN/inf); "
                    + (f"last good checkpoint: {kept}" if kept else "no checkpoint had been saved yet")
                )
                return EXIT_DIVERGED
            if not trainer.done:
                trainer.say(f"stopped at update {trainer.update}: checkpoint {path}")
                trainer.say(f"resume with: bin/train --resume {trainer.run_dir}")
                return 128 + (signals.received or signal.SIGTERM)
            policy = trainer.export_policy()
            if trainer.calls == 0:
                trainer.say(f"nothing to do: the run already reached update {trainer.update}; policy {policy}")
            else:
                trainer.say(f"done: {trainer.summary()}; checkpoint {path}; policy {policy}")
            return EXIT_OK
        except KeyboardInterrupt:  # a second Ctrl-C: leave at once
            trainer.say(f"interrupted without saving; last checkpoint: {trainer.last_checkpoint or 'none'}")
            return 128 + signal.SIGINT
        finally:
            trainer.close()
