"""Compare two benchmark result files (base vs head) and fail on a regression.

Results are matched by benchmark name and config; where a file holds several results
for one benchmark (repeated runs), each metric's median over them is used. Exits 1 when
any gated metric is worse in head than in base by more than its threshold.

    python -m bench.compare base.jsonl head.jsonl [--steps-threshold 0.1]
"""

import dataclasses
import json
import pathlib
import statistics
import sys

from tap import Tap


class Args(Tap):
    base: pathlib.Path  # results of the base commit (JSON lines from a benchmark's --out)
    head: pathlib.Path  # results of the head commit
    steps_threshold: float = 0.10  # fail when steps/s falls by more than this fraction
    compile_threshold: float = 0.25  # fail when compile time grows by more than this fraction
    rss_threshold: float | None = None  # fail when peak RSS grows by more than this fraction (default: report only)

    def configure(self) -> None:
        self.add_argument("base")
        self.add_argument("head")


@dataclasses.dataclass(frozen=True)
class Metric:
    """A compared metric, and how much worse it may get before the comparison fails."""

    key: str  # in a result's "metrics"
    label: str
    higher_is_better: bool
    threshold: float | None  # largest allowed relative worsening; None: report only


@dataclasses.dataclass(frozen=True)
class Row:
    bench: str
    metric: Metric
    base: float
    head: float

    @property
    def change(self) -> float:
        """Relative change from base to head."""
        return self.head / self.base - 1.0

    @property
    def regressed(self) -> bool:
        if self.metric.threshold is None:
            return False
        worsening = -self.change if self.metric.higher_is_better else self.change
        return worsening > self.metric.threshold


def metrics(args: Args) -> list[Metric]:
    return [
        Metric("steps_per_s", "steps/s", True, args.steps_threshold),
        # Reported only: what the programs cost in CPU time, which other work on a shared
        # machine does not inflate (results written before it existed lack it).
        Metric("steps_per_cpu_s", "steps/CPU s", True, None),
        Metric("compile_s", "compile s", False, args.compile_threshold),
        Metric("peak_rss_mb", "peak RSS MiB", False, args.rss_threshold),
    ]


def load(path: pathlib.Path) -> dict[str, dict[str, float]]:
    """Per benchmark ("name key=value ..."), the median of each metric over its results."""
    runs: dict[str, list[dict[str, float]]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            result = json.loads(line)
            settings = " ".join(f"{k}={v}" for k, v in sorted(result["config"].items()))
            bench = f"{result['name']} {settings}"
            runs.setdefault(bench, []).append(result["metrics"])
    return {
        bench: {key: statistics.median(run[key] for run in results) for key in results[0]}
        for bench, results in runs.items()
    }


def compare(
    base: dict[str, dict[str, float]], head: dict[str, dict[str, float]], compared: list[Metric]
) -> tuple[list[Row], list[str]]:
    """Rows for every metric of every benchmark in both files, and the unmatched benchmarks."""
    rows = [
        Row(bench, metric, base[bench][metric.key], head[bench][metric.key])
        for bench in sorted(base.keys() & head.keys())
        for metric in compared
        if metric.key in base[bench] and metric.key in head[bench]
    ]
    unmatched = [f"only in base: {b}" for b in sorted(base.keys() - head.keys())]
    unmatched += [f"only in head: {b}" for b in sorted(head.keys() - base.keys())]
    return rows, unmatched


def table(rows: list[Row]) -> str:
    width = max([len("benchmark")] + [len(row.bench) for row in rows])
    lines = [f"{'benchmark':<{width}} {'metric':<13} {'base':>12} {'head':>12} {'change':>8}  verdict"]
    for row in rows:
        verdict = "REGRESSED" if row.regressed else ("ok" if row.metric.threshold is not None else "-")
        lines.append(
            f"{row.bench:<{width}} {row.metric.label:<13} {row.base:>12,.2f} {row.head:>12,.2f} "
            f"{row.change:>+8.1%}  {verdict}"
        )
    return "\n".join(lines)


def main(args: Args) -> int:
    rows, unmatched = compare(load(args.base), load(args.head), metrics(args))
    print(table(rows))
    for line in unmatched:
        print(line)
    if not rows:
        print("warning: no benchmark appears in both files; nothing compared")
    regressions = [row for row in rows if row.regressed]
    for row in regressions:
        print(f"regression: {row.bench} {row.metric.label} {row.change:+.1%} "
              f"(allowed {row.metric.threshold:.0%})")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main(Args(underscores_to_dashes=True).parse_args()))
