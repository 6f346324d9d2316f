"""GAE and the PPO loss against hand computations."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hm.train import ppo
from hm.train.network import Network


def test_gae_by_hand():
    gamma, lam = 0.9, 0.8
    # one env, 4 steps: a step, a terminal step, a truncated step, a step
    rewards = jnp.array([[1.0], [2.0], [3.0], [4.0]])
    values = jnp.array([[0.5], [1.5], [2.5], [3.5]])
    dones = jnp.array([[False], [True], [False], [False]])
    truncated = jnp.array([[False], [False], [True], [False]])
    bootstrap = jnp.array([[0.0], [0.0], [10.0], [0.0]])
    last_value = jnp.array([5.0])
    adv, targets = ppo.gae(rewards, values, dones, truncated, bootstrap, last_value, gamma, lam)
    assert adv.shape == (4, 1) and adv.dtype == jnp.float32
    d3 = 4.0 + gamma * 5.0 - 3.5            # bootstraps from the final value
    a3 = d3
    d2 = 3.0 + gamma * 10.0 - 2.5           # truncated: the truncated state's value
    a2 = d2                                  # trace stops at the episode boundary
    d1 = 2.0 + 0.0 - 1.5                     # terminal: next state worth nothing
    a1 = d1
    d0 = 1.0 + gamma * 1.5 - 0.5
    a0 = d0 + gamma * lam * a1
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2, a3], rtol=1e-6)
    np.testing.assert_allclose(targets, adv + values, rtol=1e-6)


def test_gae_matches_a_loop_on_random_data():
    rng = np.random.default_rng(0)
    t, n, gamma, lam = 20, 5, 0.97, 0.9
    rewards = rng.normal(size=(t, n)).astype(np.float32)
    values = rng.normal(size=(t, n)).astype(np.float32)
    dones = rng.random((t, n)) < 0.1
    truncated = (rng.random((t, n)) < 0.1) & ~dones
    bootstrap = np.where(truncated, rng.normal(size=(t, n)), 0.0).astype(np.float32)
    last = rng.normal(size=n).astype(np.float32)
    adv, _ = ppo.gae(*(jnp.asarray(x) for x in (rewards, values, dones, truncated, bootstrap, last)),
                     gamma, lam)
    expected = np.zeros((t, n))
    running = np.zeros(n)
    for i in reversed(range(t)):
        next_value = last if i == t - 1 else values[i + 1]
        next_value = np.where(truncated[i], bootstrap[i], next_value)
        next_value = np.where(dones[i], 0.0, next_value)
        delta = rewards[i] + gamma * next_value - values[i]
        running = delta + gamma * lam * (~(dones[i] | truncated[i])) * running
        expected[i] = running
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-5)


def numpy_forward(network, obs):
    h = np.asarray(obs, np.float64)
    for layer in network.trunk:
        h = np.tanh(h @ np.asarray(layer.weight, np.float64) + np.asarray(layer.bias, np.float64))
    logits = h @ np.asarray(network.policy_head.weight, np.float64) + np.asarray(network.policy_head.bias)
    value = h @ np.asarray(network.value_head.weight, np.float64) + np.asarray(network.value_head.bias)
    return logits, value[:, 0]


@pytest.fixture(scope="module")
def fixed_batch():
    network = Network(6, 4, 8, 2, key=jax.random.key(0))
    # perturb the heads so the policy is far from uniform
    network = jax.tree.map(lambda x: x * 30.0 if x.ndim == 2 and x.shape[1] == 4 else x, network)
    rng = np.random.default_rng(1)
    b = 16
    mask = rng.random((b, 4)) < 0.7
    mask[:, 1] = True
    action = np.array([rng.choice(np.flatnonzero(m)) for m in mask], np.int32)
    batch = ppo.Minibatch(
        obs=jnp.asarray(rng.normal(size=(b, 6)), jnp.float32), mask=jnp.asarray(mask),
        action=jnp.asarray(action), log_prob=jnp.asarray(rng.normal(size=b) - 1.5, jnp.float32),
        advantage=jnp.asarray(rng.normal(size=b) * 3 + 1, jnp.float32),
        target=jnp.asarray(rng.normal(size=b), jnp.float32))
    return network, batch


def test_loss_on_a_fixed_batch_by_hand(fixed_batch):
    network, batch = fixed_batch
    coefficients = ppo.LossCoefficients(clip_eps=0.2, vf_coef=0.5, ent_coef=0.01)
    total, metrics = ppo.loss(network, batch, coefficients, "f32")

    logits, values = numpy_forward(network, batch.obs)
    mask = np.asarray(batch.mask)
    z = np.where(mask, logits, -np.inf)
    logp_all = z - z.max(-1, keepdims=True)
    logp_all = logp_all - np.log(np.exp(logp_all).sum(-1, keepdims=True))
    p = np.where(mask, np.exp(logp_all), 0.0)
    b = np.arange(len(mask))
    logp = logp_all[b, np.asarray(batch.action)]
    ratio = np.exp(logp - np.asarray(batch.log_prob))
    adv = np.asarray(batch.advantage, np.float64)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    policy = -np.mean(np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv))
    value = 0.5 * np.mean((values - np.asarray(batch.target)) ** 2)
    entropy = np.mean(-np.sum(np.where(mask, p * np.where(mask, logp_all, 0.0), 0.0), -1))
    expected = policy + 0.5 * value - 0.01 * entropy
    assert total.dtype == jnp.float32 and total.shape == ()
    np.testing.assert_allclose(metrics["loss/policy"], policy, rtol=1e-4)
    np.testing.assert_allclose(metrics["loss/value"], value, rtol=1e-4)
    np.testing.assert_allclose(metrics["loss/entropy"], entropy, rtol=1e-4)
    np.testing.assert_allclose(total, expected, rtol=1e-4)
    np.testing.assert_allclose(metrics["ppo/approx_kl"], np.mean((ratio - 1) - np.log(ratio)), rtol=1e-4)
    np.testing.assert_allclose(metrics["ppo/clip_frac"], np.mean(np.abs(ratio - 1) > 0.2), rtol=1e-6)
    assert 0.0 < float(metrics["ppo/clip_frac"]) < 1.0  # the batch exercises both sides


def test_bf16_loss_is_close_to_f32(fixed_batch):
    network, batch = fixed_batch
    coefficients = ppo.LossCoefficients(clip_eps=0.2, vf_coef=0.5, ent_coef=0.01)
    f32, _ = ppo.loss(network, batch, coefficients, "f32")
    bf16, _ = ppo.loss(network, batch, coefficients, "bf16")
    assert bf16.dtype == jnp.float32 and np.isfinite(float(bf16))
    np.testing.assert_allclose(bf16, f32, rtol=0.05, atol=0.05)
    grads32 = jax.grad(lambda n: ppo.loss(n, batch, coefficients, "f32")[0])(network)
    grads16 = jax.grad(lambda n: ppo.loss(n, batch, coefficients, "bf16")[0])(network)
    for g32, g16 in zip(jax.tree.leaves(grads32), jax.tree.leaves(grads16)):
        assert g16.dtype == jnp.float32  # gradients reach the f32 master weights in f32
        assert np.all(np.isfinite(g16))
    cos = sum(jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(grads32), jax.tree.leaves(grads16)))
    cos = cos / (ppo.global_norm(grads32) * ppo.global_norm(grads16))
    assert float(cos) > 0.99


def test_explained_variance():
    targets = jnp.array([1.0, 2.0, 3.0, 4.0])
    assert float(ppo.explained_variance(targets, targets)) == 1.0
    assert float(ppo.explained_variance(jnp.full(4, 2.5), targets)) == pytest.approx(0.0, abs=1e-6)
    assert float(ppo.explained_variance(jnp.zeros(4), jnp.ones(4))) == 0.0


def test_value_loss_is_measured_in_the_normalised_units(fixed_batch):
    # the same network and targets in units 50x larger, with value_scale 50: the same loss
    network, batch = fixed_batch
    coefficients = ppo.LossCoefficients(clip_eps=0.2, vf_coef=0.5, ent_coef=0.01)
    _, plain = ppo.loss(network, batch, coefficients, "f32")
    scaled = eqx.tree_at(lambda n: (n.value_shift, n.value_scale), network, (jnp.float32(7.0), jnp.float32(50.0)))
    bigger = eqx.tree_at(lambda b: b.target, batch, 7.0 + 50.0 * batch.target)
    _, metrics = ppo.loss(scaled, bigger, coefficients, "f32")
    np.testing.assert_allclose(metrics["loss/value"], plain["loss/value"], rtol=1e-5)
    # the statistics get no gradient: they are set by the learner, not trained
    grads = jax.grad(lambda n: ppo.loss(n, bigger, coefficients, "f32")[0])(scaled)
    assert float(grads.value_shift) == 0.0 and float(grads.value_scale) == 0.0


def test_value_statistics():
    targets = jnp.asarray(np.random.default_rng(0).normal(3.0, 20.0, size=(32, 16)), jnp.float32)
    shift, scale = jnp.float32(0.0), jnp.float32(1.0)
    # rate 1: the batch's own mean and (population) standard deviation
    new_shift, new_scale = ppo.value_statistics(targets, shift, scale, jnp.float32(1.0))
    np.testing.assert_allclose(new_shift, np.mean(targets), rtol=1e-5)
    np.testing.assert_allclose(new_scale, np.std(targets), rtol=1e-4)
    # rate 0: unchanged, exactly
    assert ppo.value_statistics(targets, shift, scale, jnp.float32(0.0)) == (0.0, 1.0)
    # a partial step moves both moments that share of the way
    half_shift, half_scale = ppo.value_statistics(targets, shift, scale, jnp.float32(0.5))
    np.testing.assert_allclose(half_shift, 0.5 * np.mean(targets), rtol=1e-5)
    second = 0.5 * 1.0 + 0.5 * np.mean(np.square(targets))
    np.testing.assert_allclose(half_scale, np.sqrt(second - half_shift**2), rtol=1e-4)
    # constant targets: the scale stops at its floor instead of reaching 0
    _, floor = ppo.value_statistics(jnp.full((4,), 5.0), shift, scale, jnp.float32(1.0))
    assert float(floor) == pytest.approx(ppo.MIN_VALUE_SCALE)
