"""The actor-critic network: shapes, dtypes, initialisation, precision policy."""

import jax
import jax.numpy as jnp
import numpy as np

from hm.train.network import Network, evaluate
from hm.train.precision import cast_floating


def test_shapes_and_dtypes():
    network = Network(1545, 28, 64, 2, key=jax.random.key(0))
    obs = jax.random.uniform(jax.random.key(1), (5, 1545))
    for precision in ("f32", "bf16"):
        logits, values = evaluate(network, obs, precision)
        assert logits.shape == (5, 28) and values.shape == (5,)
        assert logits.dtype == values.dtype == jnp.float32
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(network))


def test_orthogonal_initialisation():
    network = Network(100, 28, 64, 3, key=jax.random.key(0))
    assert len(network.trunk) == 3
    w = np.asarray(network.trunk[1].weight)
    np.testing.assert_allclose(w.T @ w, 2.0 * np.eye(64), atol=1e-4)  # gain sqrt(2)
    head = np.asarray(network.policy_head.weight)
    np.testing.assert_allclose(head.T @ head, 1e-4 * np.eye(28), atol=1e-7)  # gain 0.01
    assert np.all(np.asarray(network.trunk[0].bias) == 0)
    # an almost uniform initial policy
    logits, _ = evaluate(network, jnp.ones((1, 100)), "f32")
    assert float(jnp.max(jnp.abs(logits))) < 0.2


def test_bf16_forward_close_to_f32():
    network = Network(1545, 28, 256, 2, key=jax.random.key(0))
    obs = jnp.round(jax.random.uniform(jax.random.key(1), (64, 1545)) * 36) / 36
    l32, v32 = evaluate(network, obs, "f32")
    l16, v16 = evaluate(network, obs, "bf16")
    assert np.all(np.isfinite(l16)) and np.all(np.isfinite(v16))
    np.testing.assert_allclose(l16, l32, atol=0.02)
    np.testing.assert_allclose(v16, v32, atol=0.1 * float(jnp.max(jnp.abs(v32))))
    assert cast_floating(network, jnp.bfloat16).trunk[0].weight.dtype == jnp.bfloat16
