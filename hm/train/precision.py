"""Mixed-precision policy: where bfloat16 is used and where float32 is kept.

`bf16`: master parameters and optimizer state stay float32; the forward and backward
passes run in bfloat16 (parameters and inputs are cast on entry, so gradients flow
back through the cast and arrive in float32); logits and values are cast back to
float32 before the softmax, log-probabilities, GAE and losses. `f32` computes in
float32 throughout. Which one is faster depends on the backend (docs/performance.md: on
TPU bf16 mainly saves memory and bandwidth; on this project's CPU it is slower), hence
`precision="auto"` in the config.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike
from jaxtyping import Array, PyTree

DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16}


def compute_dtype(precision: str) -> jnp.dtype:
    """The forward/backward dtype of a resolved precision ("f32" or "bf16")."""
    return jnp.dtype(DTYPES[precision])


def cast_floating(tree: PyTree, dtype: DTypeLike) -> PyTree:
    """Cast every floating-point array leaf of `tree` to `dtype`; leave the rest."""

    def cast(leaf):
        if eqx.is_array(leaf) and jnp.issubdtype(leaf.dtype, jnp.floating):
            return leaf.astype(dtype)
        return leaf

    return jax.tree.map(cast, tree)


def to_f32(x: Array) -> Array:
    """Leave the compute dtype: everything after the network is float32."""
    return x.astype(jnp.float32)
