"""The actor-critic network: an MLP over the flat observation with two heads.

One shared trunk of `num_layers` tanh layers of `hidden_dim` units feeds a policy head
(one logit per action) and a value head. Sharing the trunk halves the cost of the
network, which is where PPO spends its time on CPU (PERFORMANCE.md): the first layer,
1545 x 256, is 84 % of the arithmetic. tanh rather than ReLU: bounded activations keep
the heads' inputs in a fixed range, which is what the on-policy studies found works
best for PPO MLPs and is robust in bfloat16; its cost is negligible next to the matmuls.

Initialisation follows PPO practice: orthogonal weights with gain sqrt(2) in the trunk,
0.01 on the policy head (an almost uniform initial policy), 1.0 on the value head;
zero biases.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from hm.train import precision as precision_lib


class Linear(eqx.Module):
    """`y = x @ weight + bias` with the weight stored input-major."""

    weight: Float[Array, "fan_in fan_out"]
    bias: Float[Array, " fan_out"]

    def __init__(self, fan_in: int, fan_out: int, gain: float, *, key: PRNGKeyArray):
        init = jax.nn.initializers.orthogonal(scale=gain)
        self.weight = init(key, (fan_in, fan_out), jnp.float32)
        self.bias = jnp.zeros((fan_out,), jnp.float32)

    def __call__(self, x: Float[Array, " fan_in"]) -> Float[Array, " fan_out"]:
        return x @ self.weight + self.bias


class Network(eqx.Module):
    """Actor-critic MLP on one flat observation (`evaluate` runs it on a batch)."""

    trunk: tuple[Linear, ...]
    policy_head: Linear
    value_head: Linear
    obs_size: int = eqx.field(static=True)
    num_actions: int = eqx.field(static=True)

    def __init__(self, obs_size: int, num_actions: int, hidden_dim: int, num_layers: int, *,
                 key: PRNGKeyArray):
        keys = jax.random.split(key, num_layers + 2)
        sizes = [obs_size] + [hidden_dim] * num_layers
        self.trunk = tuple(
            Linear(sizes[i], sizes[i + 1], math.sqrt(2.0), key=keys[i]) for i in range(num_layers))
        self.policy_head = Linear(hidden_dim, num_actions, 0.01, key=keys[-2])
        self.value_head = Linear(hidden_dim, 1, 1.0, key=keys[-1])
        self.obs_size = obs_size
        self.num_actions = num_actions

    def __call__(self, obs: Float[Array, " obs"]) -> tuple[Float[Array, " actions"], Float[Array, ""]]:
        """Logits and value, in the dtype of the parameters and input."""
        h = obs
        for layer in self.trunk:
            h = jnp.tanh(layer(h))
        return self.policy_head(h), self.value_head(h)[0]


def evaluate(
    network: Network, obs: Float[Array, "batch obs"], precision: str
) -> tuple[Float[Array, "batch actions"], Float[Array, " batch"]]:
    """Run the network under a precision policy; logits and values come back float32.

    Args:
        network: float32 master parameters.
        obs: float32 observations.
        precision: "f32" or "bf16" (see `hm.train.precision`).
    """
    dtype = precision_lib.compute_dtype(precision)
    logits, values = jax.vmap(precision_lib.cast_floating(network, dtype))(obs.astype(dtype))
    return precision_lib.to_f32(logits), precision_lib.to_f32(values)
