"""The masked categorical policy distribution.

Illegal actions get exactly zero probability: their logits are replaced by a large
negative *finite* number (so `0 * log p` stays 0, never NaN) and their probabilities
are zeroed explicitly. Entropy is over legal actions only. A row with no legal action
(which the game never produces) is treated as all-legal rather than producing NaN.

Sampling is by inverse CDF with one uniform per row (docs/performance.md: 4x cheaper than
`jax.random.categorical`'s one Gumbel per action). It samples exactly this
distribution: action `a` is drawn iff `cdf[a-1] <= u * cdf[-1] < cdf[a]`, an interval of
width `p[a]`, empty for an illegal action; the result is clamped to the last legal
action so rounding at the top end cannot select a trailing illegal one. `sample_legal`
is the same inverse CDF over the mask alone (every legal action equally likely), for
random play without a policy (benchmarks, tests).
"""

import jax.nn
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int32

ILLEGAL_LOGIT = -1e30


def _effective_mask(mask: Bool[Array, "*batch A"]) -> Bool[Array, "*batch A"]:
    return mask | ~jnp.any(mask, axis=-1, keepdims=True)


def log_probs(logits: Float[Array, "*batch A"], mask: Bool[Array, "*batch A"]) -> Float[Array, "*batch A"]:
    """Normalised log-probabilities over the legal actions (illegal ones ~ -1e30)."""
    mask = _effective_mask(mask)
    return jax.nn.log_softmax(jnp.where(mask, logits, ILLEGAL_LOGIT), axis=-1)


def probs(logits: Float[Array, "*batch A"], mask: Bool[Array, "*batch A"]) -> Float[Array, "*batch A"]:
    """Probabilities; exactly 0.0 on illegal actions."""
    return jnp.where(_effective_mask(mask), jnp.exp(log_probs(logits, mask)), 0.0)


def log_prob(logits: Float[Array, "*batch A"], mask: Bool[Array, "*batch A"],
             action: Int32[Array, "*batch"]) -> Float[Array, "*batch"]:
    """Log-probability of `action` under the mask it was sampled with."""
    return jnp.take_along_axis(log_probs(logits, mask), action[..., None], axis=-1)[..., 0]


def entropy(logits: Float[Array, "*batch A"], mask: Bool[Array, "*batch A"]) -> Float[Array, "*batch"]:
    """Entropy over the legal actions only (illegal terms are exactly 0)."""
    logp = log_probs(logits, mask)
    p = jnp.where(_effective_mask(mask), jnp.exp(logp), 0.0)
    return -jnp.sum(jnp.where(p > 0, p * logp, 0.0), axis=-1)


def _inverse_cdf(cdf: Float[Array, "*batch A"], mask: Bool[Array, "*batch A"],
                 uniform: Float[Array, "*batch"]) -> Int32[Array, "*batch"]:
    """The action whose CDF interval holds `uniform * cdf[-1]`, at most the last legal one.

    `cdf` need not be normalised; `mask` must have a legal action in every row."""
    threshold = uniform[..., None] * cdf[..., -1:]
    action = jnp.sum(cdf <= threshold, axis=-1, dtype=jnp.int32)
    num_actions = mask.shape[-1]
    last_legal = num_actions - 1 - jnp.argmax(mask[..., ::-1], axis=-1).astype(jnp.int32)
    return jnp.minimum(action, last_legal)


def sample(logits: Float[Array, "*batch A"], mask: Bool[Array, "*batch A"],
           uniform: Float[Array, "*batch"]) -> Int32[Array, "*batch"]:
    """Draw one action per row by inverse CDF from `uniform` in [0, 1)."""
    mask = _effective_mask(mask)
    return _inverse_cdf(jnp.cumsum(probs(logits, mask), axis=-1), mask, uniform)


def sample_legal(mask: Bool[Array, "*batch A"], uniform: Float[Array, "*batch"]) -> Int32[Array, "*batch"]:
    """Draw a uniformly random legal action per row from `uniform` in [0, 1).

    What `sample` draws with equal logits, without the softmax: the CDF counts legal
    actions, so the k-th of n legal actions is drawn for `uniform` in [k/n, (k+1)/n).
    """
    mask = _effective_mask(mask)
    legal_up_to = jnp.cumsum(mask, axis=-1, dtype=jnp.int32).astype(uniform.dtype)
    return _inverse_cdf(legal_up_to, mask, uniform)
