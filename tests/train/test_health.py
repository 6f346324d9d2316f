"""Health warnings on synthetic metric streams."""

import math

import pytest

from hm.train.health import HealthMonitor, HealthThresholds, non_finite


def healthy(update: int) -> dict[str, float]:
    """A run going well: small KL and clipping, slowly falling entropy, return rising."""
    return {
        "loss/total": 0.5,
        "loss/entropy": 2.0 - 0.001 * update,
        "ppo/approx_kl": 0.01,
        "ppo/clip_frac": 0.1,
        "ppo/grad_norm": 0.4,
        "episode/count": 10.0,
        "episode/return": 1.0 + 0.1 * update,
        "episode/length": 50.0 + 0.5 * update,
    }


def kinds(monitor: HealthMonitor, stream) -> list[tuple[int, str]]:
    return [(update, w.kind) for update, metrics in enumerate(stream) for w in monitor.check(metrics)]


def test_healthy_run_raises_nothing():
    assert kinds(HealthMonitor(), (healthy(u) for u in range(300))) == []


def test_approx_kl_warns_when_it_starts_then_every_repeat_interval():
    monitor = HealthMonitor(HealthThresholds(repeat_every=10))
    stream = [{**healthy(u), "ppo/approx_kl": 0.2 if 5 <= u < 30 else 0.01} for u in range(40)]
    assert kinds(monitor, stream) == [(5, "approx_kl"), (15, "approx_kl"), (25, "approx_kl")]


def test_approx_kl_threshold_is_008():
    monitor = HealthMonitor()
    assert monitor.check({**healthy(0), "ppo/approx_kl": 0.08}) == []
    (warning,) = monitor.check({**healthy(1), "ppo/approx_kl": 0.081})
    assert warning.kind == "approx_kl" and not warning.fatal
    assert "0.081" in warning.message and "0.08" in warning.message and "--lr" in warning.message


def test_clip_frac_threshold_is_035():
    monitor = HealthMonitor()
    assert monitor.check({**healthy(0), "ppo/clip_frac": 0.35}) == []
    (warning,) = monitor.check({**healthy(1), "ppo/clip_frac": 0.5})
    assert warning.kind == "clip_frac" and "0.5" in warning.message


def test_a_warning_re_arms_after_the_condition_clears():
    monitor = HealthMonitor()
    stream = [{**healthy(u), "ppo/clip_frac": 0.5 if u in (1, 2, 5) else 0.1} for u in range(8)]
    assert kinds(monitor, stream) == [(1, "clip_frac"), (5, "clip_frac")]


def test_entropy_collapse_against_its_early_level():
    monitor = HealthMonitor(HealthThresholds(repeat_every=1000))
    # Entropy halves every 20 updates from 2.0: it crosses 0.2 (a tenth) just after update 66.
    stream = [{**healthy(u), "loss/entropy": 2.0 * 0.5 ** (u / 20)} for u in range(100)]
    found = kinds(monitor, stream)
    assert found == [(67, "entropy_collapse")]


def test_entropy_collapse_message_names_the_remedy():
    monitor = HealthMonitor()
    for u in range(5):
        monitor.check(healthy(u))
    (warning,) = monitor.check({**healthy(5), "loss/entropy": 0.01})
    assert "--ent-coef" in warning.message and not warning.fatal


def test_stall_length_rising_return_flat():
    monitor = HealthMonitor(HealthThresholds(repeat_every=1000))
    stream = [{**healthy(u), "episode/length": 50.0 + 5 * u, "episode/return": 3.0 + 0.001 * u} for u in range(40)]
    found = kinds(monitor, stream)
    assert found and found[0] == (19, "stall"), found
    assert all(kind == "stall" for _, kind in found)


def test_no_stall_when_return_rises_with_length():
    monitor = HealthMonitor()
    stream = [{**healthy(u), "episode/length": 50.0 + 5 * u, "episode/return": 3.0 + 1.0 * u} for u in range(60)]
    assert kinds(monitor, stream) == []


def test_no_stall_when_length_is_flat_and_return_flat():
    monitor = HealthMonitor()
    stream = [{**healthy(u), "episode/length": 80.0, "episode/return": 3.0} for u in range(60)]
    assert kinds(monitor, stream) == []


def test_stall_ignores_updates_without_finished_episodes():
    monitor = HealthMonitor()
    stream = [
        {**healthy(u), "episode/count": 0.0, "episode/length": float("nan"), "episode/return": float("nan")}
        for u in range(60)
    ]
    assert kinds(monitor, stream) == []


@pytest.mark.parametrize("name, value", [("loss/total", math.nan), ("ppo/grad_norm", math.inf), ("episode/return", -math.inf)])
def test_non_finite_is_fatal(name, value):
    monitor = HealthMonitor()
    monitor.check(healthy(0))
    (warning,) = monitor.check({**healthy(1), name: value})
    assert warning.fatal and warning.kind == "non_finite"
    assert name in warning.message and "last good checkpoint" in warning.message


def test_episode_means_over_no_episode_are_not_fatal():
    metrics = {**healthy(0), "episode/count": 0.0, "episode/return": math.nan, "episode/length": math.nan}
    assert non_finite(metrics) == {}
    assert HealthMonitor().check(metrics) == []
    assert list(non_finite({**metrics, "loss/value": math.nan})) == ["loss/value"]
