"""The base of every `hm` command line (typed-argument-parser), and the checks its tools share.

The `check_*` functions refuse a bad flag value at parse time: they exit with code 2 and
a message naming the flag and what it allows (`parser.error`), before any work starts.
"""

import math
from pathlib import Path

import jax
from tap import Tap

from hm.train.config import MAX_SEED


class Command(Tap):
    """A `Tap` with `--kebab-case` flags and no abbreviated flags, as every `hm` command."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("underscores_to_dashes", True)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def check_int(parser: Tap, flag: str, value: int, low: int, high: int | None = None) -> None:
    """Exit with code 2 and a message naming `flag` and its range if `value` is outside it."""
    if value < low or (high is not None and value > high):
        span = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        parser.error(f"{flag} must be {span}; got {value!r}")


def check_seed(parser: Tap, seed: int | None) -> None:
    """A `--seed` is unset or in [0, 2^32 - 1], the seeds `bin/train` takes."""
    if seed is not None:
        check_int(parser, "--seed", seed, 0, MAX_SEED)


def check_float(parser: Tap, flag: str, value: float, low: float) -> None:
    """`value` is finite and at least `low`."""
    if not (math.isfinite(value) and value >= low):
        parser.error(f"{flag} must be a finite number >= {low:g}; got {value!r}")


def check_positive(parser: Tap, flag: str, value: float) -> None:
    """`value` is finite and above 0."""
    if not (math.isfinite(value) and value > 0):
        parser.error(f"{flag} must be a finite number > 0; got {value!r}")


def check_output_file(parser: Tap, flag: str, path: Path) -> None:
    """Refuse now, not after the work, an output path that cannot be written."""
    if path.is_dir():
        parser.error(f"{flag} {path}: is a directory; give a file name")
    if not path.parent.is_dir():
        parser.error(f"{flag} {path}: directory {path.parent} does not exist")


def use_compile_cache() -> None:
    """Keep compiled programs across runs (as `bin/train` does), unless a cache is set up."""
    if jax.config.jax_compilation_cache_dir is None:
        from hm.train.run import DEFAULT_COMPILE_CACHE, configure_compile_cache

        configure_compile_cache(DEFAULT_COMPILE_CACHE)
