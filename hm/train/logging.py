"""Run logging: TensorBoard event files (tensorboardX), hyper-parameters, console lines.

`RunLogger` writes into the run directory; on processes other than 0 it is disabled and
every call is a no-op, so the run loop never branches on the process index.
`read_scalars` reads the event files back (no TensorBoard install needed): the tests use
it, and so can a script comparing runs.
"""

import dataclasses
import json
import math
import re
import statistics
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# Characters TensorBoard allows in a tag; others become "_", as tensorboardX would do,
# but without its log line. "+" is spelled out first, so the programs SIPH+ and ATK+
# read "actions/program/SIPH_PLUS" and "actions/program/ATK_PLUS", not "SIPH_" and "ATK_".
_TAG_INVALID = re.compile(r"[^-/\w\.]")


def tensorboard_tag(name: str) -> str:
    """`name` as TensorBoard accepts it: "+" written `_PLUS`, other invalid characters `_`."""
    return _TAG_INVALID.sub("_", name.replace("+", "_PLUS"))


# Metrics the hyper-parameter view compares runs by.
HPARAM_METRICS = ("episode/return", "episode/highest_stage", "episode/win_rate", "perf/steps_per_sec")


class RunLogger:
    """TensorBoard scalars, text and hyper-parameters for one run directory."""

    def __init__(self, run_dir: Path, enabled: bool = True, purge_step: int | None = None, flush_secs: int = 30):
        """`purge_step`: on resume, the step to continue from; events an earlier session
        wrote at or after it (after its last checkpoint) are hidden by TensorBoard."""
        self.enabled = enabled
        self._writer = None
        if enabled:
            from tensorboardX import SummaryWriter

            self._writer = SummaryWriter(str(run_dir), purge_step=purge_step, flush_secs=flush_secs)

    def scalars(self, metrics: Mapping[str, float], step: int) -> None:
        """Write every finite metric at `step` (episode means over no episode are NaN: skipped)."""
        if self._writer is None:
            return
        for tag, value in metrics.items():
            if math.isfinite(value):
                self._writer.add_scalar(tensorboard_tag(tag), value, step)

    def text(self, tag: str, text: str, step: int) -> None:
        if self._writer is not None:
            self._writer.add_text(tag, text, step)

    def hparams(self, hparams: Mapping[str, Any], metrics: tuple[str, ...] = HPARAM_METRICS) -> None:
        """Record the hyper-parameters in this run's own event file, so TensorBoard's
        HParams view lines runs up against their `metrics` scalars (no sub-run)."""
        if self._writer is None:
            return
        from tensorboardX.summary import hparams as hparams_summaries

        values = {name: _hparam_value(value) for name, value in hparams.items()}
        writer = self._writer._get_file_writer()
        for summary in hparams_summaries(values, {name: 0.0 for name in metrics}):
            writer.add_summary(summary)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _hparam_value(value: Any) -> bool | int | float | str:
    if isinstance(value, (bool, int, float, str)):
        return value
    return "none" if value is None else str(value)


def format_config(title: str, config: Any) -> str:
    """A dataclass (or mapping) as aligned `name  value` lines under `title`."""
    items = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    width = max((len(name) for name in items), default=0)
    return "\n".join([title] + [f"  {name:<{width}}  {value}" for name, value in items.items()])


def format_metrics_line(update: int, env_steps: int, metrics: Mapping[str, float], num_devices: int) -> str:
    """The console line of one logged update."""
    from hm.train.progress import format_count

    def value(name: str, spec: str = ".3g") -> str:
        number = metrics.get(name, float("nan"))
        return format(number, spec) if math.isfinite(number) else "-"

    rate = metrics.get("perf/steps_per_sec", float("nan"))
    per_device = f"{format_count(rate)} steps/s ({format_count(rate / num_devices)}/device)" if math.isfinite(rate) else "- steps/s"
    return (
        f"update {update} | {format_count(env_steps)} steps | {per_device} | "
        f"return {value('episode/return')} | length {value('episode/length', '.1f')} | "
        f"stage {value('episode/highest_stage', '.2f')} | win {value('episode/win_rate', '.2f')} | "
        f"kl {value('ppo/approx_kl')} | clip {value('ppo/clip_frac', '.2f')} | "
        f"entropy {value('loss/entropy')} | ev {value('ppo/explained_variance', '.2f')}"
    )


def format_population_line(update: int, env_steps: int, rows: list[Mapping[str, float]], names: list[str],
                           num_devices: int) -> str:
    """The console line of one logged update of a population: the best, median and worst
    member by mean episode return (members with no finished episode left out)."""
    from hm.train.progress import format_count

    rate = rows[0].get("perf/steps_per_sec", float("nan"))
    speed = f"{format_count(rate)} steps/s" if math.isfinite(rate) else "- steps/s"
    scored = sorted((row["episode/return"], i) for i, row in enumerate(rows)
                    if row.get("episode/count", 0) > 0 and math.isfinite(row.get("episode/return", math.nan)))
    head = f"update {update} | {format_count(env_steps)} steps x {len(rows)} members | {speed}"
    if not scored:
        return head + " | return - (no episode finished)"
    (worst, w), (best, b) = scored[0], scored[-1]
    median = statistics.median(value for value, _ in scored)

    def stage(i: int) -> str:
        return format(rows[i].get("episode/highest_stage", float("nan")), ".2f")

    return (f"{head} | return best {best:.3g} ({names[b]}, stage {stage(b)}) | median {median:.3g} | "
            f"worst {worst:.3g} ({names[w]}, stage {stage(w)})")


def write_json(path: Path, data: Any) -> None:
    from hm.train.checkpoint import atomic_write

    text = json.dumps(data, indent=1, sort_keys=True, default=str) + "\n"
    atomic_write(path, lambda file: file.write(text.encode()))


# Reading event files back.


def read_records(path: Path) -> Iterator[bytes]:
    """The records of one TFRecord file (length, CRC, data, CRC; CRCs not checked)."""
    data = Path(path).read_bytes()
    offset = 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        start = offset + 12
        if start + length + 4 > len(data):
            break  # a record still being written
        yield data[start : start + length]
        offset = start + length + 4


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in a run directory's event files: tag -> [(step, value)] in file order."""
    from tensorboardX.proto import event_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(Path(run_dir).glob("events.out.tfevents.*")):
        for record in read_records(path):
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                if value.WhichOneof("value") == "simple_value":
                    scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def read_tags(run_dir: Path) -> set[str]:
    """Every summary tag (scalars, text, hyper-parameters) in a run directory's event files."""
    from tensorboardX.proto import event_pb2

    return {
        value.tag
        for path in sorted(Path(run_dir).glob("events.out.tfevents.*"))
        for record in read_records(path)
        for value in event_pb2.Event.FromString(record).summary.value
    }
