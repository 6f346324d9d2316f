"""Checks of configuration values, shared by the config and the training features.

Every check raises `ConfigError` with a message that names the command-line flag and
its allowed range, so bad input never reaches JAX.
"""

import math
from typing import Any


class ConfigError(ValueError):
    """A configuration value is out of range. `flag` names the command-line flag."""

    def __init__(self, flag: str, message: str):
        super().__init__(message)
        self.flag = flag
        self.message = message


def flag(name: str) -> str:
    """The command-line flag of a config field: `num_envs` -> `--num-envs`."""
    return "--" + name.replace("_", "-")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return (is_int(value) or isinstance(value, float)) and math.isfinite(value)


def check_int(config: Any, name: str, low: int, high: int | None = None, optional: bool = False) -> None:
    """`getattr(config, name)` is an integer in [low, high] (None allowed if `optional`)."""
    value = getattr(config, name)
    if optional and value is None:
        return
    span = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    if not is_int(value) or value < low or (high is not None and value > high):
        raise ConfigError(flag(name), f"{flag(name)} must be {span}; got {value!r}")


def check_float(config: Any, name: str, low: float, high: float | None, *,
                low_open: bool = False, optional: bool = False) -> None:
    """Check `low <= value <= high` (`low < value` if `low_open`; no upper bound if None)."""
    value = getattr(config, name)
    if optional and value is None:
        return
    if high is None:
        span = f"a number {'>' if low_open else '>='} {low:g}"
    else:
        span = f"a number in {'(' if low_open else '['}{low:g}, {high:g}]"
    ok = is_number(value) and (value > low if low_open else value >= low)
    ok = ok and (high is None or value <= high)
    if not ok:
        raise ConfigError(flag(name), f"{flag(name)} must be {span}; got {value!r}")


def check_every(config: Any, name: str, devices: int) -> None:
    """`getattr(config, name)`, a labelling stride (one env slot in k), unset or dividing
    each device's share of `num_envs` (so local slot i is labelled when its global index is)."""
    every = getattr(config, name)
    if every is not None and config.num_envs % (every * devices):
        raise ConfigError(flag(name), f"{flag(name)} must divide each device's share of --num-envs "
                                      f"({config.num_envs} / {devices} device(s)); got {every!r}")


def auto_every(config: Any, devices: int, default: int) -> int:
    """The automatic labelling stride: `default`, or its largest divisor that divides each
    device's share of `num_envs`."""
    return math.gcd(config.num_envs // devices, default)


def any_member_above_zero(config: Any, name: str) -> bool:
    """Whether setting `name` is above 0 for any member of a population: its value or
    one of its swept values (`config.sweep`)."""
    swept = [values for key, values in config.sweep if key == name]
    return (getattr(config, name) or 0.0) > 0 or any(is_number(v) and v > 0 for values in swept for v in values)
