"""A run's directory: its name, reserving it, and the config file written into it.

Every run writes into RUNS_DIR/RUN_NAME/: `config.json` (this module), TensorBoard
events (`hm.train.logging`), `checkpoints/` and the exported `policy.eqx` +
`policy.json` (`hm.train.checkpoint`).
"""

import datetime
import re
from pathlib import Path

CONFIG_FILE = "config.json"
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class RunError(Exception):
    """A run that cannot start as asked (bad directory, name taken); the message says why."""


def make_run_name(run_name: str | None, run_suffix: str | None, now: datetime.datetime | None = None) -> str:
    """`--run-name`, or the start time (`20261122-031500`); `-<suffix>` appended if given."""
    name = run_name or (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    return f"{name}-{run_suffix}" if run_suffix else name


def new_run_dir(runs_dir: Path, name: str, automatic: bool) -> Path:
    """Create a fresh directory for a new run and return it.

    An explicit name that is taken is refused (two runs never share a directory); an
    automatic one gets `-2`, `-3`... (runs started in the same second). Creating is
    the reservation, so two runs starting together cannot both take a name.
    """
    runs_dir = Path(runs_dir).expanduser()
    runs_dir.mkdir(parents=True, exist_ok=True)
    for candidate in [name] + ([f"{name}-{n}" for n in range(2, 1000)] if automatic else []):
        try:
            (runs_dir / candidate).mkdir()
            return runs_dir / candidate
        except FileExistsError:
            continue
    raise RunError(f"run directory {runs_dir / name} already exists; pick another --run-name, or --resume {runs_dir / name}")


def refuse_taken(runs_dir: Path, run_name: str | None, run_suffix: str | None) -> None:
    """Refuse now, before any work, an explicit run name whose directory exists."""
    if run_name is None:
        return
    taken = Path(runs_dir).expanduser() / make_run_name(run_name, run_suffix)
    if taken.exists():
        raise RunError(f"run directory {taken} already exists; pick another --run-name, or --resume {taken}")
