"""PPO pieces: generalised advantage estimation and the clipped-surrogate loss.

Pure functions on arrays. Under `shard_map` each device holds a slice of the batch;
pass `axis_name` so that means (advantage normalisation, losses, metrics) are taken
over the global batch, which keeps the result independent of the device count.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int32

from hm.train import distributions
from hm.train.network import Network, evaluate


def gae(
    rewards: Float[Array, "T N"],
    values: Float[Array, "T N"],
    dones: Bool[Array, "T N"],
    truncated: Bool[Array, "T N"],
    bootstrap_values: Float[Array, "T N"],
    last_value: Float[Array, " N"],
    gamma: float | Float[Array, ""],
    gae_lambda: float | Float[Array, ""],
) -> tuple[Float[Array, "T N"], Float[Array, "T N"]]:
    """Generalised advantage estimates and value targets, by a reverse scan.

    Step `t` took the env from observation `t` (value `values[t]`) and earned
    `rewards[t]`. If the episode ended there, `dones[t]` (terminal: death, victory)
    means the next state is worth 0, while `truncated[t]` (step limit) means it is
    worth `bootstrap_values[t]`, the value of the truncated state's own observation.
    Otherwise the next state's value is `values[t+1]` (`last_value` after the last
    step). Either kind of ending stops the advantage trace.

    Returns:
        `(advantages, targets)` with `targets = advantages + values`.
    """
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)
    next_values = jnp.where(truncated, bootstrap_values, next_values)
    next_values = jnp.where(dones, 0.0, next_values)
    deltas = rewards + gamma * next_values - values
    continues = (~(dones | truncated)).astype(jnp.float32)

    def backward(advantage, step):
        delta, cont = step
        advantage = delta + gamma * gae_lambda * cont * advantage
        return advantage, advantage

    _, advantages = lax.scan(backward, jnp.zeros_like(last_value), (deltas, continues), reverse=True)
    return advantages, advantages + values


class Minibatch(eqx.Module):
    """The samples of one gradient step (this device's share of them)."""

    obs: Float[Array, "B obs"]
    mask: Bool[Array, "B actions"]
    action: Int32[Array, " B"]
    log_prob: Float[Array, " B"]      # under the sampling policy and mask
    advantage: Float[Array, " B"]
    target: Float[Array, " B"]        # value target (GAE return)
    # what the training features stored with each sample (`Feature.labels`), by name
    extras: dict[str, Array] = eqx.field(default_factory=dict)


class LossCoefficients(eqx.Module):
    """The loss's scalars: numbers or traced values (a population sweeps them)."""

    clip_eps: float | Float[Array, ""]
    vf_coef: float | Float[Array, ""]
    ent_coef: float | Float[Array, ""]


def mean(x: Array, axis_name: str | None) -> Array:
    """The mean of `x`, over the global batch under `axis_name`."""
    m = jnp.mean(x)
    return m if axis_name is None else lax.pmean(m, axis_name)


def normalise(x: Float[Array, " B"], axis_name: str | None) -> Float[Array, " B"]:
    """Zero mean, unit std over the (global) minibatch."""
    centre = mean(x, axis_name)
    var = mean(jnp.square(x - centre), axis_name)
    return (x - centre) / (jnp.sqrt(var) + 1e-8)


def loss(
    network: Network,
    batch: Minibatch,
    coefficients: LossCoefficients,
    precision: str,
    axis_name: str | None = None,
    features: tuple = (),
    hyper: dict[str, Array] | None = None,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """PPO loss: clipped surrogate + vf_coef * value MSE - ent_coef * entropy, plus each
    training feature's term (`Feature.loss`, given the logits, the batch and `hyper`).

    The value error is measured in the value head's normalised units: both values mapped
    by the network's value transform (`Network.head_units`: h of them under
    `--value-transform sqrt`, else themselves) and divided by its `value_scale` (PopArt;
    1 unless the learner normalises values), so that targets in the hundreds do not
    swamp the policy's share of a clipped gradient.

    The value loss is the plain squared error, not clipped: this game's returns reach
    hundreds (victory pays 500+), and clipping value moves to +-clip_eps would stall
    the critic (and value clipping did not help in Andrychowicz et al., "What Matters
    in On-Policy Reinforcement Learning?", ICLR 2021, either).

    The returned loss is this device's mean over its share of the minibatch; under
    `shard_map` the caller averages the gradients over devices with `lax.pmean`,
    which gives the gradient of the global mean because every device holds an equal
    share. (The learner's `shard_map` runs with `check_vma=False`, where JAX does not
    sum the cotangents of replicated inputs by itself.) With `axis_name` the
    advantage normalisation and the metrics are over the global minibatch.
    """
    logits, values = evaluate(network, batch.obs, precision)
    # In the value head's normalised units: h(V) under --value-transform sqrt, divided by
    # `network.value_scale` (1 without --value-norm).
    value_errors = ((network.head_units(values) - network.head_units(batch.target))
                    / lax.stop_gradient(network.value_scale))
    logp = distributions.log_prob(logits, batch.mask, batch.action)
    log_ratio = logp - batch.log_prob
    ratio = jnp.exp(log_ratio)
    advantage = normalise(batch.advantage, axis_name)
    clipped = jnp.clip(ratio, 1.0 - coefficients.clip_eps, 1.0 + coefficients.clip_eps)
    policy_loss = -jnp.mean(jnp.minimum(ratio * advantage, clipped * advantage))
    value_loss = 0.5 * jnp.mean(jnp.square(value_errors))
    entropy = jnp.mean(distributions.entropy(logits, batch.mask))
    total = policy_loss + coefficients.vf_coef * value_loss - coefficients.ent_coef * entropy
    feature_metrics = {}
    for feature in features:
        term, extra = feature.loss(logits, batch, hyper, axis_name)
        if term is not None:
            total = total + term
        feature_metrics.update(extra)
    metrics = {
        "loss/total": total,
        "loss/policy": policy_loss,
        "loss/value": value_loss,
        "loss/entropy": entropy,
        "ppo/approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
        "ppo/clip_frac": jnp.mean((jnp.abs(ratio - 1.0) > coefficients.clip_eps).astype(jnp.float32)),
        **feature_metrics,
    }
    if axis_name is not None:
        metrics = lax.pmean(metrics, axis_name)
    return total, metrics


# The smallest standard deviation the value statistics take (targets that hardly vary
# would otherwise blow the normalised value error up).
MIN_VALUE_SCALE = 1e-2


def value_statistics(
    targets: Float[Array, "*batch"],
    shift: Float[Array, ""],
    scale: Float[Array, ""],
    rate: Float[Array, ""],
    axis_name: str | None = None,
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """PopArt's running mean and standard deviation of the value targets.

    The first and second moments move `rate` of the way towards the (global) batch's:
    `mu' = mu + rate * (mean(t) - mu)`, `nu' = nu + rate * (mean(t^2) - nu)` with
    `nu = sigma^2 + mu^2`; then `sigma' = sqrt(nu' - mu'^2)`, at least `MIN_VALUE_SCALE`.
    `rate` 1 takes the batch's own statistics; 0 keeps `(shift, scale)` as they are.
    """
    first = mean(targets, axis_name)
    square = mean(jnp.square(targets), axis_name)
    second = jnp.square(scale) + jnp.square(shift)
    new_shift = shift + rate * (first - shift)
    new_second = second + rate * (square - second)
    variance = jnp.maximum(new_second - jnp.square(new_shift), MIN_VALUE_SCALE**2)
    return new_shift, jnp.sqrt(variance)


def explained_variance(
    values: Float[Array, "*shape"], targets: Float[Array, "*shape"], axis_name: str | None = None
) -> Float[Array, ""]:
    """1 - Var[targets - values] / Var[targets] over the (global) batch; 0 if Var is 0."""
    t_mean = mean(targets, axis_name)
    var_t = mean(jnp.square(targets - t_mean), axis_name)
    residual = targets - values
    r_mean = mean(residual, axis_name)
    var_r = mean(jnp.square(residual - r_mean), axis_name)
    return jnp.where(var_t > 0, 1.0 - var_r / jnp.where(var_t > 0, var_t, 1.0), 0.0)


def global_norm(tree) -> Float[Array, ""]:
    leaves = [x for x in jax.tree.leaves(tree) if eqx.is_array(x)]
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves))
