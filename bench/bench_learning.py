"""Learning benchmark: does a training config produce agents that play well?

It trains one configuration for a fixed env-step budget over `--num-seeds` seeds
(`--seed`, `--seed + 1`, ...), as one population (`bin/train --num-seeds`: every seed in
one compiled program), stops it at its start and at `--eval-points` evenly spaced points
(the last at the end), and evaluates each seed's policy of that moment on held-out games with
`hm.tools.evaluate` — ordinary games from stage 1, drawn from the evaluation seed
family, which training never uses. The scripted baselines (uniform random and greedy)
are evaluated once on the same games, so every number has a reference.

    python -m bench.bench_learning --total-timesteps 20000000            # defaults, 3 seeds
    python -m bench.bench_learning --total-timesteps 5000000 --lr 3e-4 --label lr3e-4 \
        --out bench/results/learning.jsonl --plot docs/learning/lr3e-4.png

Every `bin/train` flag is accepted and means what it means there. Each evaluation is
one JSON line in `--out` (the format of the other benchmarks: `name`, `config`,
`metrics`, ...), with the env steps and the training wall-clock seconds at which it was
taken (the population's wall-clock: the seeds trained together), so configurations can be
compared per env step and per second. The plot shows
evaluation return and mean highest stage against env steps (top) and against training
wall-clock (bottom), one line per seed, with the baselines as dashed lines; the summary table (printed at the end) is what
`docs/results.md#how-results-are-measured` quotes. `--compare RESULTS --plot FILE` draws every configuration
of a results file on one figure.
"""

import dataclasses
import io
import json
import math
import pathlib
import signal
import time
from collections.abc import Sequence
from typing import Any

import jax

from bench import common
from hm.tools.train import TrainArgs

# What a line of the summary (and the plot) shows, from an evaluation report's summary.
HEADLINE = ("return", "highest_stage", "siphon_share", "program_share", "win_rate")
# Also recorded (lines written before these were added lack them): where programs are lost
# on the way to being run, and how often the player siphons.
FUNNEL = ("program_owned_share", "program_legal_share", "siphons_per_episode")


class LearningArgs(TrainArgs):
    """Train one config over several seeds and evaluate it along the way (see the module doc).
    Every bin/train flag applies to each seed's run."""

    num_seeds: int = 3  # Seeds to train (seed, seed+1, ...), together as one population.
    eval_points: int = 5  # Evaluations per run, evenly spaced in env steps (the last at the end).
    eval_episodes: int = 256  # Held-out games per evaluation.
    eval_seed: int = 0  # Which held-out games (hm.tools.evaluate's evaluation seed family).
    label: str = "default"  # Name of this configuration in the results and the plot.
    compare: pathlib.Path | None = None  # Train nothing: plot every configuration in this results file on one figure (--plot).
    labels: list[str] = []  # With --compare: only these configurations (default: all of the file's).
    out: pathlib.Path | None = None  # Append one JSON line per evaluation to this file.
    plot: pathlib.Path | None = None  # Write the PNG plot here.


def _check(args: LearningArgs, parser: LearningArgs) -> None:
    for name, low in (("num_seeds", 1), ("eval_points", 1), ("eval_episodes", 1)):
        value = getattr(args, name)
        if value < low:
            parser.error(f"--{name.replace('_', '-')} must be an integer >= {low}; got {value}")
    if args.sweep:
        parser.error("--sweep: the learning benchmark measures one configuration; run it once per "
                     "setting, each with its own --label")
    for name in ("out", "plot"):
        path = getattr(args, name)
        if path is not None and path.exists() and path.is_dir():
            parser.error(f"--{name} {path} is a directory; give a file path")


def eval_steps(total: int, batch: int, points: int) -> list[int]:
    """The env-step counts at which to evaluate: `points` evenly spaced, the last at the end,
    each rounded up to a whole number of updates (the run can stop only between calls)."""
    updates = max(1, total // batch)
    marks = sorted({max(1, -(-updates * (i + 1) // points)) for i in range(points)})
    return [m * batch for m in marks]


def aligned(config: Any, points: int) -> Any:
    """`config` with `updates_per_call` dividing every evaluation point, so each evaluation
    happens exactly at its point (the run can stop only between fused calls)."""
    from hm.train.config import resolve

    resolved = resolve(config, jax.default_backend(), jax.device_count())
    marks = [m // resolved.batch_size for m in eval_steps(config.total_timesteps, resolved.batch_size, points)]
    return dataclasses.replace(config, updates_per_call=math.gcd(resolved.updates_per_call, *marks))


def evaluate_params(params: Any, args: LearningArgs, precision: str) -> dict[str, float]:
    """Headline numbers of a network on the held-out games."""
    from hm.tools import evaluate

    report = evaluate.evaluate(params, num_episodes=args.eval_episodes, seed=args.eval_seed,
                               max_steps=args.max_episode_steps, precision=precision)
    return report.summary()


def evaluate_baseline(name: str, args: LearningArgs) -> dict[str, float]:
    from hm.tools import evaluate

    report = evaluate.evaluate(name, num_episodes=args.eval_episodes, seed=args.eval_seed,
                               max_steps=args.max_episode_steps)
    return report.summary()


def train_population(args: LearningArgs, runs_dir: pathlib.Path, record) -> tuple[list[dict[str, Any]], int | None]:
    """Every seed's run, as one population, with its evaluations; `record(row)` is called
    after each evaluation of each seed. Returns the rows and the stop signal's number
    (None: the run reached its end).

    SIGTERM or SIGINT (`hm.train.run.StopSignals`) stops it after the current training
    call (or the current evaluation), like `bin/train`: the points not reached are not
    evaluated, and the checkpoint and the policy of where it stopped are written, so a
    run stopped early can still be evaluated (`bin/evaluate RUN --all-members`) or resumed.
    """
    from hm.train.run import RunOptions, StopSignals, Trainer

    config = aligned(args.train_config(), args.eval_points)
    options = RunOptions(runs_dir=runs_dir, run_name=args.label, progress=False,
                         save_interval=1 << 30, keep_checkpoints=1,
                         compile_cache=pathlib.Path(args.compile_cache) if args.compile_cache else None)
    trainer = Trainer(config, options, console=io.StringIO())
    marks = eval_steps(config.total_timesteps, trainer.batch_size, args.eval_points)
    with StopSignals() as signals:
        try:
            rows, train_seconds = _train_and_evaluate(trainer, marks, signals, args, record)
            trainer.save()
            trainer.export_policy()
        finally:
            trainer.close()
    stopped = None if trainer.done else signals.received  # a signal during the last evaluation stops nothing
    if stopped is not None:
        print(f"  {args.label}: stopped by {signal.Signals(stopped).name} at {trainer.env_steps:,} env "
              f"steps ({train_seconds:.0f} s); checkpoint and policy in {trainer.run_dir}")
    return rows, stopped


def _train_and_evaluate(trainer, marks: list[int], signals, args: LearningArgs, record
                        ) -> tuple[list[dict[str, Any]], float]:
    """Train to each mark and evaluate every member there, until the end or a stop signal."""
    from hm.train import member_of

    rows, train_seconds = [], 0.0
    for mark in [0] + marks:
        started = time.perf_counter()
        while trainer.env_steps < mark and not trainer.done and signals.received is None:
            trainer.call()
            if trainer.diverged:
                raise RuntimeError(f"the population diverged (NaN/inf) at {trainer.env_steps} env steps")
        train_seconds += time.perf_counter() - started
        if signals.received is not None:
            break
        params = jax.device_get(trainer.state.params)
        for member in trainer.members:
            summary = evaluate_params(member_of(params, member.index), args, trainer.resolved.precision)
            row = {"seed": member.seed, "env_steps": trainer.env_steps, "train_seconds": train_seconds,
                   "population": len(trainer.members),
                   "compile_seconds": trainer.compile_seconds or 0.0, **summary}
            rows.append(row)
            record(row)
            print(f"  {args.label} seed {member.seed} @ {trainer.env_steps:,} steps ({train_seconds:.0f} s): "
                  + ", ".join(f"{k} {row[k]:.3g}" for k in HEADLINE + FUNNEL))
    return rows, train_seconds


def read_results(path: pathlib.Path) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, float]]]:
    """The learning lines of a results file: evaluation rows per label, and the baselines."""
    rows: dict[str, list[dict[str, Any]]] = {}
    baselines: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        result = json.loads(line)
        if result.get("name") != "learning":
            continue
        metrics = result["metrics"]
        if "baseline" in metrics:
            baselines[metrics["baseline"]] = metrics
        else:
            rows.setdefault(result["config"]["label"], []).append(metrics)
    return rows, baselines


def mean_curve(rows: list[dict[str, Any]], metric: str, x: str = "env_steps") -> tuple[list[float], list[float]]:
    """The seeds' mean of `metric` at each evaluation point of one configuration, against
    `x`: `env_steps`, or `train_seconds` (the population's training wall-clock at that
    point, the same for its seeds; their mean where it is not)."""
    steps = sorted({r["env_steps"] for r in rows})
    at = [[r for r in rows if r["env_steps"] == s] for s in steps]
    xs = [sum(r[x] for r in point) / len(point) for point in at]
    return xs, [sum(r[metric] for r in point) / len(point) for point in at]


def plot_comparison(path: pathlib.Path, rows: dict[str, list[dict[str, Any]]],
                    baselines: dict[str, dict[str, float]]) -> None:
    """Evaluation return and mean highest stage for one or more configurations, against
    env steps (top) and against training wall-clock minutes (bottom): a thin line per
    seed, a thick one for their mean, the baselines dashed."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(11, 8.4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    scales = (("env_steps", 1e6, "env steps (millions)"), ("train_seconds", 60.0, "training wall-clock (minutes)"))
    for row_axes, (x, unit, x_label) in zip(axes, scales):
        for axis, metric, title in ((row_axes[0], "return", "evaluation return"),
                                    (row_axes[1], "highest_stage", "mean highest stage")):
            for (label, mine), color in zip(sorted(rows.items()), colors):
                seeds = sorted({r["seed"] for r in mine})
                for seed in seeds:
                    points = [r for r in mine if r["seed"] == seed]
                    axis.plot([r[x] / unit for r in points], [r[metric] for r in points],
                              color=color, alpha=0.35, linewidth=1)
                xs, means = mean_curve(mine, metric, x)
                axis.plot([v / unit for v in xs], means, color=color, linewidth=2.5, marker="o",
                          label=f"{label} (mean of {len(seeds)} seeds)" if len(seeds) > 1 else f"{label} (one seed)")
            for (name, summary), style in zip(sorted(baselines.items()), ("--", ":")):
                axis.axhline(summary[metric], color="grey", linestyle=style, label=f"{name} baseline")
            axis.set_xlabel(x_label)
            axis.set_title(title)
            axis.grid(alpha=0.3)
    axes[0][1].legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def summary_table(label: str, rows: list[dict[str, Any]], baselines: dict[str, dict[str, float]]) -> str:
    """Markdown: the final evaluation of each seed, their mean, and the baselines."""
    last = {}
    for row in rows:
        last[row["seed"]] = row
    header = "| run | env steps | " + " | ".join(HEADLINE) + " |"
    lines = [header, "|" + "---|" * (len(HEADLINE) + 2)]
    for seed, row in sorted(last.items()):
        lines.append(f"| {label} seed {seed} | {row['env_steps']:,} | "
                     + " | ".join(f"{row[k]:.3f}" for k in HEADLINE) + " |")
    if last:
        mean = {k: sum(r[k] for r in last.values()) / len(last) for k in HEADLINE}
        steps = max(r["env_steps"] for r in last.values())
        lines.append(f"| **{label} mean** | {steps:,} | " + " | ".join(f"**{mean[k]:.3f}**" for k in HEADLINE) + " |")
    for name, summary in sorted(baselines.items()):
        lines.append(f"| {name} baseline | - | " + " | ".join(f"{summary[k]:.3f}" for k in HEADLINE) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = LearningArgs(prog="python -m bench.bench_learning")
    args = parser.parse_args(argv)
    _check(args, parser)
    if args.compare is not None:
        if args.plot is None or not args.compare.is_file():
            parser.error("--compare needs an existing results file and --plot")
        rows_by_label, baselines = read_results(args.compare)
        missing = sorted(set(args.labels) - set(rows_by_label))
        if missing:
            parser.error(f"--labels: {', '.join(missing)} not in {args.compare} "
                         f"(it has {', '.join(sorted(rows_by_label))})")
        if args.labels:
            rows_by_label = {label: rows_by_label[label] for label in args.labels}
        for label, mine in sorted(rows_by_label.items()):
            print(summary_table(label, mine, baselines))
        plot_comparison(args.plot, rows_by_label, baselines)
        print(f"plot: {args.plot}")
        return [row for mine in rows_by_label.values() for row in mine]
    runs_dir = pathlib.Path(args.runs_dir) / f"bench-learning-{time.strftime('%Y%m%d-%H%M%S')}"
    config = {**{k: v for k, v in dataclasses.asdict(args.train_config()).items()
                 if k not in ("seed", "num_seeds", "sweep")},
              "label": args.label, "eval_episodes": args.eval_episodes, "eval_seed": args.eval_seed}

    def record(row: dict[str, Any]) -> None:
        common.record_line("learning", config, row, args.out)

    baselines = {name: evaluate_baseline(name, args) for name in ("random", "greedy")}
    for name, summary in baselines.items():
        record({"baseline": name, **summary})
    rows, stopped = train_population(args, runs_dir, record)
    table = summary_table(args.label, rows, baselines)
    print(table)
    if args.plot is not None:
        plot_comparison(args.plot, {args.label: rows}, baselines)
        print(f"plot: {args.plot}")
    if stopped is not None:  # bin/train's exit code for a run stopped by a signal
        raise SystemExit(128 + stopped)
    return rows


if __name__ == "__main__":
    main()
