"""Health warnings on synthetic metric streams."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probes import plain, probe_suite

from hm.env import HackMatrix
from hm.game import constants as C
from hm.train.config import resolve
from hm.train.health import HealthMonitor, HealthThresholds, non_finite
from hm.train.learner import Learner, StepStats, make_hyper


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
        "actions/siphon_frac": 0.02,
        "legal/siphon_frac": 0.3,
        "actions/program/CRASH": 0.001,
        "legal/program/CRASH": 0.05,
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


def test_clip_frac_threshold_is_035_held_for_five_updates():
    monitor = HealthMonitor()
    at_threshold = [{**healthy(u), "ppo/clip_frac": 0.35} for u in range(10)]
    assert kinds(monitor, at_threshold) == []
    above = [{**healthy(u), "ppo/clip_frac": 0.5} for u in range(10, 15)]
    assert kinds(monitor, above[:4]) == []
    (warning,) = monitor.check(above[4])
    assert warning.kind == "clip_frac" and "0.5" in warning.message and "5 updates" in warning.message
    assert "--lr" in warning.message


def test_clip_frac_at_the_start_of_a_run_is_not_a_warning():
    """Like the local network's first updates (docs/training.md#health-warnings): 0.29-0.44, then below 0.3."""
    monitor = HealthMonitor()
    start = [0.44, 0.41, 0.29, 0.38, 0.36] + [0.25] * 50
    assert kinds(monitor, ({**healthy(u), "ppo/clip_frac": c} for u, c in enumerate(start))) == []


def test_a_warning_re_arms_after_the_condition_clears():
    monitor = HealthMonitor()
    stream = [{**healthy(u), "ppo/approx_kl": 0.5 if u in (1, 2, 5) else 0.01} for u in range(8)]
    assert kinds(monitor, stream) == [(1, "approx_kl"), (5, "approx_kl")]


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


def test_policy_still_after_twenty_updates_of_tiny_kl():
    monitor = HealthMonitor(HealthThresholds(repeat_every=1000))
    # approx_kl 5e-5 from update 10 on, except one healthy update at 20 that restarts the count.
    stream = [{**healthy(u), "ppo/approx_kl": 0.01 if u < 10 or u == 20 else 5e-5} for u in range(60)]
    assert kinds(monitor, stream) == [(40, "policy_still")]


def test_policy_still_threshold_and_message():
    monitor = HealthMonitor(HealthThresholds(still_updates=1))
    assert monitor.check({**healthy(0), "ppo/approx_kl": 1e-4}) == []
    (warning,) = monitor.check({**healthy(1), "ppo/approx_kl": 9e-5})
    assert warning.kind == "policy_still" and not warning.fatal
    assert "9e-05" in warning.message and "stopped moving" in warning.message and "--ent-coef" in warning.message


def test_an_action_dying_out_while_legal_is_named():
    monitor = HealthMonitor(HealthThresholds(repeat_every=1000))
    # Siphons taken on 0.005 % of steps while legal on 30 %: under 0.1 % of their chances.
    stream = [{**healthy(u), "actions/siphon_frac": 0.02 if u < 5 else 5e-5} for u in range(40)]
    found = [(u, w) for u, metrics in enumerate(stream) for w in monitor.check(metrics)]
    assert [(u, w.kind) for u, w in found] == [(24, "action_dies_out")]
    message = found[0][1].message
    assert "siphon_frac" in message and "0.005%" in message and "30%" in message and "CRASH" not in message


def test_an_action_rarely_legal_or_merely_rare_is_not_dying():
    monitor = HealthMonitor()
    rarely_legal = [{**healthy(u), "actions/siphon_frac": 0.0, "legal/siphon_frac": 0.005} for u in range(60)]
    # Taken on 0.2 % of the steps where it is legal: rare, but above 0.1 % of its chances.
    rare = [{**healthy(u), "actions/program/CRASH": 1e-4, "legal/program/CRASH": 0.05} for u in range(60)]
    assert kinds(monitor, rarely_legal) == [] and kinds(monitor, rare) == []


def test_dying_count_restarts_when_the_action_comes_back():
    monitor = HealthMonitor()
    stream = [{**healthy(u), "actions/program/CRASH": 0.001 if u % 15 == 0 else 0.0} for u in range(60)]
    assert kinds(monitor, stream) == []


# --- what the learner feeds the dying-action check ------------------------------------


def tiny_config():
    return resolve(plain(num_envs=16, num_steps=8, total_timesteps=16 * 8, hidden_dim=8,
                         max_episode_steps=5, updates_per_call=1, precision="f32"), "cpu", 1)


def test_rollout_sums_the_masks_actions_were_sampled_under():
    learner = Learner(env=probe_suite(), config=tiny_config())
    params = jax.vmap(learner.init_params)(jax.random.key(0)[None])   # a population of one
    _, trajectory, stats = eqx.filter_jit(learner.rollout)(params, learner.init_envs(), jax.random.key(1)[None],
                                                           make_hyper(learner.config))
    assert stats.legal.dtype == jnp.float32 and stats.legal.shape == (1, learner.env.num_actions)
    np.testing.assert_array_equal(np.asarray(stats.legal), np.asarray(trajectory.mask).sum(axis=(0, 2)))
    assert not np.all(np.asarray(trajectory.mask)), "the probes have illegal actions"


def test_legal_shares_reach_the_health_check_by_name():
    """`legal/<kind>` mirrors `actions/<kind>`, so the monitor pairs them (no game is run)."""
    learner = Learner(env=HackMatrix(), config=tiny_config())
    steps = learner.config.steps_per_call
    legal = jnp.zeros((C.NUM_ACTIONS,)).at[C.ACTION_SIPHON].set(0.5 * steps).at[:4].set(steps)
    actions = jnp.zeros((C.NUM_ACTIONS,)).at[0].set(steps)       # always up, never a siphon
    zero, zero_f = jnp.zeros(1, jnp.int32), jnp.zeros(1, jnp.float32)   # one member
    stats = StepStats(episodes=zero, episode_return=zero_f, episode_length=zero_f, episode_stage=zero_f,
                      max_stage=zero, wins=zero, reward_terms=jnp.zeros((1, len(C.REWARD_TERMS))),
                      actions=actions[None], legal=legal[None])
    per_update = jax.tree.map(lambda x: x[None], stats)   # as the update scan stacks them
    metrics = {name: float(value[0]) for name, value in learner._episode_metrics(per_update).items()}
    assert metrics["legal/siphon_frac"] == 0.5 and metrics["legal/move_frac"] == 4.0
    assert {f"legal/program/{name}" for name in C.PROGRAM_NAMES} <= metrics.keys()
    monitor = HealthMonitor(HealthThresholds(dying_updates=3))
    found = [w for _ in range(3) for w in monitor.check({**metrics, "episode/count": 0.0})]
    assert [w.kind for w in found] == ["action_dies_out"] and "siphon_frac" in found[0].message
