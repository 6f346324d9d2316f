"""A one-line progress bar on stderr: env steps, steps/s, ETA and recent return.

On a terminal the line is redrawn in place and console lines are printed above it; when
stderr is a file or pipe (tmux logs, CI) a plain line is written at most every
`plain_every` seconds instead, so logs stay readable. No dependency: the bar is
`format_progress`, a pure function.
"""

import io
import sys
import time


def format_count(value: float | int) -> str:
    """1234 -> '1.2k', 10_000_000 -> '10M'."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            text = f"{value / limit:.1f}"
            return (text[:-2] if text.endswith(".0") else text) + suffix
    return f"{value:.0f}"


def format_duration(seconds: float | int) -> str:
    """3725 -> '1h02m05s'."""
    if seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{seconds:02d}s"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


def format_progress(
    env_steps: int,
    total_steps: int,
    steps_per_sec: float | int | None,
    recent_return: float | int | None,
    width: int = 24,
) -> str:
    """The bar's text, e.g. `[#####-------]  42% 4.2M/10M steps | 15.3k steps/s | ETA 6m20s | return 3.41`."""
    fraction = min(max(env_steps / total_steps, 0.0), 1.0) if total_steps > 0 else 1.0
    filled = int(fraction * width)
    parts = [
        f"[{'#' * filled}{'-' * (width - filled)}] {fraction:4.0%} {format_count(env_steps)}/{format_count(total_steps)} steps"
    ]
    if steps_per_sec:
        parts.append(f"{format_count(steps_per_sec)} steps/s")
        parts.append(f"ETA {format_duration(max(total_steps - env_steps, 0) / steps_per_sec)}")
    if recent_return is not None and recent_return == recent_return:
        parts.append(f"return {recent_return:.3g}")
    return " | ".join(parts)


class ProgressBar:
    """The bar and the console lines printed above it.

    `enabled=False` (processes other than 0) makes every call a no-op; `live=False`
    keeps the console lines but draws no bar.
    """

    def __init__(
        self,
        total_steps: int,
        stream: io.TextIOBase | None = None,
        console: io.TextIOBase | None = None,
        enabled: bool = True,
        live: bool = True,
        plain_every: float | int = 60.0,
    ):
        self.total_steps = total_steps
        self.stream = stream if stream is not None else sys.stderr
        self.console = console if console is not None else sys.stdout
        self.enabled = enabled
        self.bar = enabled and live
        self.plain_every = plain_every
        self._live = self.bar and _is_terminal(self.stream)
        self._text = ""
        self._last_plain = float("-inf")

    def update(self, env_steps: int, steps_per_sec: float | int | None, recent_return: float | int | None) -> None:
        if not self.bar:
            return
        self._text = format_progress(env_steps, self.total_steps, steps_per_sec, recent_return)
        if self._live:
            self._draw()
        elif time.monotonic() - self._last_plain >= self.plain_every:
            self._last_plain = time.monotonic()
            self.stream.write(self._text + "\n")
            self.stream.flush()

    def print(self, line: str) -> None:
        """Print `line` to the console, above the bar."""
        if not self.enabled:
            return
        if self._live and self._text:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
        self.console.write(line + "\n")
        self.console.flush()
        if self._live and self._text:
            self._draw()

    def close(self) -> None:
        if self.enabled and self._live and self._text:
            self.stream.write("\n")
            self.stream.flush()
        self._text = ""

    def _draw(self) -> None:
        self.stream.write("\r\x1b[2K" + self._text)
        self.stream.flush()


def _is_terminal(stream: io.TextIOBase) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
