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
    # a scripted teacher's action where it labelled the sample, -1 elsewhere; None: no teacher
    teacher_action: Int32[Array, " B"] | None = None
    # whether the teacher's label moves towards owning a program; None: no program floor
    teacher_seeks: Bool[Array, " B"] | None = None


class LossCoefficients(eqx.Module):
    """The loss's scalars: numbers or traced values (a population sweeps them)."""

    clip_eps: float | Float[Array, ""]
    vf_coef: float | Float[Array, ""]
    ent_coef: float | Float[Array, ""]
    teacher_coef: float | Float[Array, ""] = 0.0
    # what the labels that seek programs weigh on top of teacher_coef (`--teacher-program-floor`)
    teacher_program_coef: float | Float[Array, ""] = 0.0


def _mean(x: Array, axis_name: str | None) -> Array:
    m = jnp.mean(x)
    return m if axis_name is None else lax.pmean(m, axis_name)


def normalise(x: Float[Array, " B"], axis_name: str | None) -> Float[Array, " B"]:
    """Zero mean, unit std over the (global) minibatch."""
    mean = _mean(x, axis_name)
    var = _mean(jnp.square(x - mean), axis_name)
    return (x - mean) / (jnp.sqrt(var) + 1e-8)


def loss(
    network: Network,
    batch: Minibatch,
    coefficients: LossCoefficients,
    precision: str,
    axis_name: str | None = None,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """PPO loss: clipped surrogate + vf_coef * value MSE - ent_coef * entropy
    (+ teacher_coef * the teacher's cross-entropy, when the batch has teacher actions,
    + teacher_program_coef * the part of it from labels that seek programs, when the
    batch marks them).

    The value error is measured in the value head's normalised units: divided by the
    network's `value_scale` (PopArt; 1 unless the learner normalises values), so that
    targets in the hundreds do not swamp the policy's share of a clipped gradient.

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
    # In the value head's normalised units (`network.value_scale` is 1 without --value-norm).
    value_errors = (values - batch.target) / lax.stop_gradient(network.value_scale)
    logp = distributions.log_prob(logits, batch.mask, batch.action)
    log_ratio = logp - batch.log_prob
    ratio = jnp.exp(log_ratio)
    advantage = normalise(batch.advantage, axis_name)
    clipped = jnp.clip(ratio, 1.0 - coefficients.clip_eps, 1.0 + coefficients.clip_eps)
    policy_loss = -jnp.mean(jnp.minimum(ratio * advantage, clipped * advantage))
    value_loss = 0.5 * jnp.mean(jnp.square(value_errors))
    entropy = jnp.mean(distributions.entropy(logits, batch.mask))
    total = policy_loss + coefficients.vf_coef * value_loss - coefficients.ent_coef * entropy
    teacher_metrics = {}
    if batch.teacher_action is not None:
        teacher_loss, program_loss, teacher_metrics = _teacher_loss(logits, batch, axis_name)
        total = total + coefficients.teacher_coef * teacher_loss
        if program_loss is not None:
            total = total + coefficients.teacher_program_coef * program_loss
    metrics = {
        "loss/total": total,
        "loss/policy": policy_loss,
        "loss/value": value_loss,
        "loss/entropy": entropy,
        "ppo/approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
        "ppo/clip_frac": jnp.mean((jnp.abs(ratio - 1.0) > coefficients.clip_eps).astype(jnp.float32)),
        **teacher_metrics,
    }
    if axis_name is not None:
        metrics = lax.pmean(metrics, axis_name)
    return total, metrics


def _teacher_loss(logits: Float[Array, "B actions"], batch: Minibatch, axis_name: str | None
                  ) -> tuple[Float[Array, ""], Float[Array, ""] | None, dict[str, Float[Array, ""]]]:
    """The policy's cross-entropy to the teacher's action, averaged over the samples the
    teacher labelled (over the global minibatch; 0 when it labelled none); where the
    batch marks the labels that seek programs, the same sum over those labels alone,
    divided by the same count (None otherwise); and the metrics: the cross-entropy, the
    share of labels where the policy's likeliest action is the teacher's, and the share
    of labels that seek programs.

    Like the other terms it is this device's share: its sum over the local labelled
    samples, divided by the global labelled share times the local batch, so that the
    gradients' `pmean` over devices is the gradient of the global mean.
    """
    taught = batch.teacher_action >= 0
    # an unlabelled sample scores the action it took (any legal action would do: the
    # teacher's -1 is not an action, and `where` discards the value)
    target = jnp.where(taught, batch.teacher_action, batch.action)
    cross_entropy = -distributions.log_prob(logits, batch.mask, target)
    share = lax.stop_gradient(jnp.maximum(_mean(taught.astype(jnp.float32), axis_name), 1e-12))
    loss = jnp.mean(jnp.where(taught, cross_entropy, 0.0)) / share
    likeliest = jnp.argmax(jnp.where(batch.mask, logits.astype(jnp.float32), -jnp.inf), axis=-1)
    agreement = jnp.mean((taught & (likeliest == batch.teacher_action)).astype(jnp.float32)) / share
    metrics = {"loss/teacher": loss, "teacher/agreement": agreement}
    if batch.teacher_seeks is None:
        return loss, None, metrics
    seeks = taught & batch.teacher_seeks
    program_loss = jnp.mean(jnp.where(seeks, cross_entropy, 0.0)) / share
    metrics["teacher/program_share"] = jnp.mean(seeks.astype(jnp.float32)) / share
    return loss, program_loss, metrics


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
    mean = _mean(targets, axis_name)
    square = _mean(jnp.square(targets), axis_name)
    second = jnp.square(scale) + jnp.square(shift)
    new_shift = shift + rate * (mean - shift)
    new_second = second + rate * (square - second)
    variance = jnp.maximum(new_second - jnp.square(new_shift), MIN_VALUE_SCALE**2)
    return new_shift, jnp.sqrt(variance)


def explained_variance(
    values: Float[Array, "*shape"], targets: Float[Array, "*shape"], axis_name: str | None = None
) -> Float[Array, ""]:
    """1 - Var[targets - values] / Var[targets] over the (global) batch; 0 if Var is 0."""
    t_mean = _mean(targets, axis_name)
    var_t = _mean(jnp.square(targets - t_mean), axis_name)
    residual = targets - values
    r_mean = _mean(residual, axis_name)
    var_r = _mean(jnp.square(residual - r_mean), axis_name)
    return jnp.where(var_t > 0, 1.0 - var_r / jnp.where(var_t > 0, var_t, 1.0), 0.0)


def global_norm(tree) -> Float[Array, ""]:
    leaves = [x for x in jax.tree.leaves(tree) if eqx.is_array(x)]
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves))
