"""Training health: warnings a person should see while a run is still worth saving.

`HealthMonitor.check` takes one update's metrics (the names `make_train_fn` reports) and
returns the warnings they raise. It is plain Python over floats, so it is tested on
synthetic metric streams. The rules, with the thresholds in `HealthThresholds`:

* `ppo/approx_kl` above 0.08: the policy moves too far per update.
* `ppo/clip_frac` above 0.35 on `clip_updates` (5) checks in a row: most samples are
  clipped, the updates are mostly wasted. One update alone is not enough: a fresh policy
  learning from the teacher clips 30-45 % of its samples in its first few updates, and
  then settles near 20 % (docs/training.md#health-warnings).
* entropy collapsing: `loss/entropy` below a tenth of its early level, so the policy is
  close to deterministic and has stopped exploring.
* stall: `episode/length` rising while `episode/return` stays flat, the signature of an
  agent that learned to survive (or dither) without progressing.
* policy stopped moving: `ppo/approx_kl` below 1e-4 on `still_updates` (20) checks in a
  row. Healthy PPO moves its policy by 1e-3 to 1e-2 nats per update (implementations
  that stop early aim at 0.01 to 0.02); a hundredth of the low end, sustained, means the
  updates no longer change what the agent does: a vanished learning signal, a
  saturated policy or a learning rate decayed too far.
* an action dying out while still legal: for each action kind the env reports both as
  `actions/<kind>` (share of steps taking it) and `legal/<kind>` (share of steps where
  it was legal, summed over the kind's actions), the kind is taken on fewer than 0.1 %
  of the steps where it could be (`min_taken_per_legal`), on `dying_updates` (20) checks
  in a row, while legal on at least 1 % of steps (`min_legal_frac`; rarer chances are
  too few to judge). A uniformly random player takes each legal action on about a tenth
  of its chances, so 0.1 % is a hundredfold neglect: the policy has written the action
  off (the measured default run took siphons on 0.006 % of steps) and, with its
  probability near zero, will not explore it again.
* NaN or inf in any metric: fatal; the run stops and keeps its last good checkpoint.

A warning that persists is repeated every `repeat_every` updates, not on every one.
"""

import collections
import dataclasses
import math
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class HealthWarning:
    """`kind` is a stable identifier; `fatal` means the run must stop."""

    kind: str
    message: str
    fatal: bool = False


@dataclasses.dataclass(frozen=True)
class HealthThresholds:
    max_approx_kl: float = 0.08
    max_clip_frac: float = 0.35
    clip_updates: int = 5
    # Entropy is "collapsing" below this fraction of its early level...
    entropy_collapse_fraction: float = 0.1
    # ...the early level being the largest of the first this many updates.
    entropy_reference_updates: int = 5
    # Stall: compare the older and newer halves of this many updates with episodes.
    stall_window: int = 20
    # Episode length grew by more than this fraction...
    stall_length_rise: float = 0.25
    # ...while return grew by at most this fraction of max(|older return|, 1).
    stall_return_rise: float = 0.05
    # Policy stopped moving: approx_kl below this on `still_updates` checks in a row.
    min_approx_kl: float = 1e-4
    still_updates: int = 20
    # An action kind dies out: taken on fewer than this share of the steps where it was
    # legal, on `dying_updates` checks in a row, while legal on >= `min_legal_frac` of steps.
    min_taken_per_legal: float = 1e-3
    min_legal_frac: float = 0.01
    dying_updates: int = 20
    repeat_every: int = 50


class HealthMonitor:
    """Watches a stream of per-update metrics; keeps only the short history it needs."""

    def __init__(self, thresholds: HealthThresholds = HealthThresholds()):
        self.thresholds = thresholds
        self._entropy_early: list[float] = []
        self._episodes: collections.deque[tuple[float, float]] = collections.deque(maxlen=thresholds.stall_window)
        self._since_warned: dict[str, int] = {}
        self._streaks: dict[str, int] = {}        # condition -> consecutive checks it held

    def check(self, metrics: Mapping[str, float]) -> list[HealthWarning]:
        """The warnings raised by one update's metrics, in a fixed order."""
        bad = non_finite(metrics)
        if bad:
            listed = ", ".join(f"{name}={value}" for name, value in bad.items())
            return [
                HealthWarning(
                    "non_finite",
                    f"non-finite metrics ({listed}): stopping; the last good checkpoint is kept",
                    fatal=True,
                )
            ]
        found = [
            self._gate(kind, message)
            for kind, message in (
                ("approx_kl", self._approx_kl(metrics)),
                ("clip_frac", self._clip_frac(metrics)),
                ("entropy_collapse", self._entropy(metrics)),
                ("stall", self._stall(metrics)),
                ("policy_still", self._policy_still(metrics)),
                ("action_dies_out", self._dying_actions(metrics)),
            )
        ]
        return [warning for warning in found if warning is not None]

    def _gate(self, kind: str, message: str | None) -> HealthWarning | None:
        """Emit when a condition starts, then every `repeat_every` updates while it lasts."""
        if message is None:
            self._since_warned.pop(kind, None)
            return None
        since = self._since_warned.get(kind)
        if since is None or since + 1 >= self.thresholds.repeat_every:
            self._since_warned[kind] = 0
            return HealthWarning(kind, message)
        self._since_warned[kind] = since + 1
        return None

    def _streak(self, name: str, holds: bool) -> int:
        """How many checks in a row, this one included, condition `name` has held (0 if not now)."""
        self._streaks[name] = self._streaks.get(name, 0) + 1 if holds else 0
        return self._streaks[name]

    def _approx_kl(self, metrics: Mapping[str, float]) -> str | None:
        kl = metrics.get("ppo/approx_kl")
        if kl is not None and kl > self.thresholds.max_approx_kl:
            return (
                f"ppo/approx_kl {kl:.3g} > {self.thresholds.max_approx_kl}: the policy moves too far per "
                "update; lower --lr or --update-epochs, or raise --num-minibatches"
            )
        return None

    def _clip_frac(self, metrics: Mapping[str, float]) -> str | None:
        clip = metrics.get("ppo/clip_frac")
        t = self.thresholds
        held = self._streak("clip_frac", clip is not None and clip > t.max_clip_frac)
        if held < t.clip_updates:
            return None
        return (
            f"ppo/clip_frac {clip:.3g} > {t.max_clip_frac} for {held} updates: most samples are "
            "clipped; lower --lr or --update-epochs"
        )

    def _entropy(self, metrics: Mapping[str, float]) -> str | None:
        entropy = metrics.get("loss/entropy")
        if entropy is None:
            return None
        if len(self._entropy_early) < self.thresholds.entropy_reference_updates:
            self._entropy_early.append(entropy)
            return None
        reference = max(self._entropy_early)
        if reference > 0 and entropy < self.thresholds.entropy_collapse_fraction * reference:
            return (
                f"loss/entropy {entropy:.3g} fell below {self.thresholds.entropy_collapse_fraction:g} x its "
                f"early level {reference:.3g}: the policy is collapsing; raise --ent-coef"
            )
        return None

    def _stall(self, metrics: Mapping[str, float]) -> str | None:
        length, episode_return = metrics.get("episode/length"), metrics.get("episode/return")
        if length is None or episode_return is None or not has_episodes(metrics):
            return None
        self._episodes.append((length, episode_return))
        if len(self._episodes) < self.thresholds.stall_window:
            return None
        half = self.thresholds.stall_window // 2
        older, newer = list(self._episodes)[:half], list(self._episodes)[-half:]
        length_old, length_new = _mean(p[0] for p in older), _mean(p[0] for p in newer)
        return_old, return_new = _mean(p[1] for p in older), _mean(p[1] for p in newer)
        longer = length_new > (1 + self.thresholds.stall_length_rise) * max(length_old, 1.0)
        flat = return_new - return_old <= self.thresholds.stall_return_rise * max(abs(return_old), 1.0)
        if longer and flat:
            return (
                f"episode/length rose {length_old:.1f} -> {length_new:.1f} while episode/return stayed "
                f"{return_old:.3g} -> {return_new:.3g}: the agent is stalling"
            )
        return None


    def _policy_still(self, metrics: Mapping[str, float]) -> str | None:
        kl = metrics.get("ppo/approx_kl")
        held = self._streak("policy_still", kl is not None and kl < self.thresholds.min_approx_kl)
        if held < self.thresholds.still_updates:
            return None
        return (
            f"ppo/approx_kl {kl:.2g} < {self.thresholds.min_approx_kl:g} for {held} updates: the policy "
            "has stopped moving; check loss/entropy (raise --ent-coef if it collapsed) and --lr"
        )

    def _dying_actions(self, metrics: Mapping[str, float]) -> str | None:
        """Action kinds taken on under `min_taken_per_legal` of their legal steps, for long."""
        t = self.thresholds
        dying = []
        for name, legal in metrics.items():
            if not name.startswith(LEGAL_PREFIX):
                continue
            kind = name[len(LEGAL_PREFIX):]
            taken = metrics.get(ACTIONS_PREFIX + kind)
            neglected = taken is not None and legal >= t.min_legal_frac and taken < t.min_taken_per_legal * legal
            if self._streak(f"dying/{kind}", neglected) >= t.dying_updates:
                dying.append(f"{kind} (taken on {100 * taken:.2g}% of steps, legal on {100 * legal:.2g}%)")
        if not dying:
            return None
        return (
            f"actions dying out while still legal, for {t.dying_updates}+ updates: {', '.join(dying)}; "
            "the policy has written them off; raise --ent-coef to keep exploring them"
        )


# The env's action metrics: shares of steps taking each action kind, and where it was legal.
ACTIONS_PREFIX = "actions/"
LEGAL_PREFIX = "legal/"


def has_episodes(metrics: Mapping[str, float]) -> bool:
    """Whether the episode/* means describe any finished episode (else they are 0/0)."""
    return metrics.get("episode/count", 1.0) > 0


def non_finite(metrics: Mapping[str, float]) -> dict[str, float]:
    """Metrics that are NaN or inf, ignoring episode means over zero finished episodes."""
    skip_episodes = not has_episodes(metrics)
    return {
        name: value
        for name, value in metrics.items()
        if not math.isfinite(value) and not (skip_episodes and name.startswith("episode/"))
    }


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)
