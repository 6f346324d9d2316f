"""The masked categorical: exact zeros, legal-only entropy, exact inverse-CDF sampling."""

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

from hm.train import distributions

LOGITS = jnp.array([[0.5, -1.0, 2.0, 0.0, 1.0],
                    [3.0, 3.0, 3.0, 3.0, 3.0],
                    [-50.0, 40.0, 0.0, 1.0, 2.0]], jnp.float32)
MASK = jnp.array([[True, False, True, False, True],
                  [False, False, False, True, False],
                  [True, False, True, True, False]])


def reference_probs(logits, mask):
    logits, mask = np.asarray(logits, np.float64), np.asarray(mask)
    p = np.where(mask, np.exp(logits - logits.max(axis=-1, keepdims=True)), 0.0)
    return p / p.sum(axis=-1, keepdims=True)


def test_illegal_actions_have_exactly_zero_probability():
    p = distributions.probs(LOGITS, MASK)
    assert p.dtype == jnp.float32 and p.shape == (3, 5)
    assert np.all(np.asarray(p)[~np.asarray(MASK)] == 0.0)
    np.testing.assert_allclose(p, reference_probs(LOGITS, MASK), rtol=1e-5, atol=1e-30)
    # the masked-out logit 40 of row 3 plays no part
    assert float(p[2, 1]) == 0.0 and float(p[2, 0]) > 0.0


def test_log_prob_and_entropy_over_legal_actions_only():
    ref = reference_probs(LOGITS, MASK)
    action = jnp.array([2, 3, 0], jnp.int32)
    logp = distributions.log_prob(LOGITS, MASK, action)
    np.testing.assert_allclose(logp, np.log(ref[np.arange(3), [2, 3, 0]]), rtol=1e-5)
    ent = distributions.entropy(LOGITS, MASK)
    expected = -np.sum(np.where(ref > 0, ref * np.log(np.where(ref > 0, ref, 1.0)), 0.0), axis=-1)
    np.testing.assert_allclose(ent, expected, rtol=1e-5, atol=1e-6)
    assert float(ent[1]) == 0.0  # a single legal action: no uncertainty
    # uniform logits over k legal actions: entropy log k, not log 5
    uniform = distributions.entropy(jnp.zeros((1, 5)), MASK[:1])
    np.testing.assert_allclose(uniform, [np.log(3.0)], rtol=1e-6)


def test_gradients_are_finite_with_masks():
    def total(logits):
        return jnp.sum(distributions.entropy(logits, MASK)) + jnp.sum(
            distributions.log_prob(logits, MASK, jnp.array([0, 3, 2], jnp.int32)))

    grad = jax.grad(total)(LOGITS)
    assert np.all(np.isfinite(grad))
    assert np.all(np.asarray(grad)[~np.asarray(MASK)] == 0.0)


def test_empty_mask_falls_back_to_all_legal():
    mask = jnp.zeros((1, 5), bool)
    np.testing.assert_allclose(distributions.probs(jnp.zeros((1, 5)), mask), np.full((1, 5), 0.2))


def test_inverse_cdf_selects_the_interval_holding_u():
    ref = reference_probs(LOGITS, MASK)
    cdf = np.cumsum(ref, axis=-1)
    us = np.linspace(0.0, 1.0, 2001, endpoint=False, dtype=np.float32)
    for row in range(3):
        logits = jnp.broadcast_to(LOGITS[row], (us.size, 5))
        mask = jnp.broadcast_to(MASK[row], (us.size, 5))
        actions = np.asarray(distributions.sample(logits, mask, jnp.asarray(us)))
        assert np.all(np.asarray(MASK[row])[actions])
        expected = np.minimum(np.searchsorted(cdf[row], us, side="right"), np.flatnonzero(MASK[row]).max())
        # identical except where u sits within float error of a boundary
        disagree = actions != expected
        near = np.min(np.abs(us[:, None] - cdf[row][None, :]), axis=1) < 1e-6
        assert np.all(near[disagree])


def test_sampling_never_picks_an_illegal_action_even_at_the_top():
    u = jnp.array([np.nextafter(np.float32(1.0), np.float32(0.0))] * 3, jnp.float32)
    actions = np.asarray(distributions.sample(LOGITS, MASK, u))
    assert actions.tolist() == [4, 3, 3]  # the last legal action of each row
    actions = np.asarray(distributions.sample(LOGITS, MASK, jnp.zeros(3, jnp.float32)))
    assert actions.tolist() == [0, 3, 0]  # the first legal action of each row


@pytest.mark.parametrize("row", [0, 2])
def test_sampling_frequencies_match_probabilities(row):
    n = 200_000
    u = jax.random.uniform(jax.random.key(row), (n,))
    logits = jnp.broadcast_to(LOGITS[row], (n, 5))
    mask = jnp.broadcast_to(MASK[row], (n, 5))
    counts = np.bincount(np.asarray(distributions.sample(logits, mask, u)), minlength=5)
    p = reference_probs(LOGITS, MASK)[row]
    assert np.all(counts[p == 0] == 0)
    # binomial 5-sigma bounds
    sigma = np.sqrt(n * p * (1 - p))
    assert np.all(np.abs(counts - n * p) <= 5 * sigma + 1)


# --------------------------------------------------------------------------- sample_legal

NUM_ACTIONS = 28
sample_legal = jax.jit(distributions.sample_legal)
legal_masks = st.lists(st.booleans(), min_size=NUM_ACTIONS, max_size=NUM_ACTIONS).filter(any)


@given(mask=legal_masks, u=st.floats(0.0, 1.0, exclude_max=True, width=32))
def test_sample_legal_draws_a_legal_action(mask, u):
    action = sample_legal(jnp.array(mask), jnp.float32(u))
    assert action.dtype == jnp.int32 and action.shape == ()
    assert mask[int(action)]


@given(mask=legal_masks)
def test_sample_legal_gives_each_legal_action_an_equal_share_of_the_unit_interval(mask):
    # Inverse CDF: the k-th legal action for u in [k/n, (k+1)/n), so the draw is uniform.
    legal = np.flatnonzero(mask)
    n = len(legal)
    u = jnp.array([(k + 0.5) / n for k in range(n)] + [0.0, np.nextafter(1.0, 0.0)], jnp.float32)
    actions = jax.vmap(sample_legal, in_axes=(None, 0))(jnp.array(mask), u)
    np.testing.assert_array_equal(actions, np.concatenate([legal, legal[[0, -1]]]))


def test_sample_legal_is_sample_with_equal_logits():
    u = jax.random.uniform(jax.random.key(5), (3, 4096))
    mask = jnp.broadcast_to(MASK[:, None], (3, 4096, 5))
    equal = distributions.sample(jnp.zeros((3, 4096, 5)), mask, u)
    legal = distributions.sample_legal(mask, u)
    # the two CDFs differ only by float rounding at the interval boundaries
    assert float(jnp.mean(equal != legal)) < 1e-3


def test_sample_legal_with_no_legal_action_draws_from_all():
    u = jnp.array([0.0, 0.5, np.nextafter(1.0, 0.0)], jnp.float32)
    np.testing.assert_array_equal(sample_legal(jnp.zeros((3, 5), bool), u), [0, 2, 4])
