"""Batch-level skipping for rules that most games of a batch do not need this step.

Under `jax.vmap`, `lax.cond` becomes a select that runs both branches for every game.
A rule with a custom batching rule (`jax.custom_batching.custom_vmap`) can instead ask
one question of the whole batch ("does any game need this?") and skip the work for real.
The helpers here keep those batching rules short and alike.
"""

import jax
import jax.numpy as jnp


def broadcast_unbatched(axis_size: int, in_batched, args):
    """Give every unbatched leaf of `args` the batch axis, so one code path serves all."""
    def broadcast(x, batched):
        return x if batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))

    return jax.tree.map(broadcast, tuple(args), tuple(in_batched))


def all_batched(tree):
    """The `out_batched` tree of a batching rule whose outputs are all batched."""
    return jax.tree.map(lambda _: True, tree)


def select(pred, a, b):
    """`a` where `pred` else `b`, leaf by leaf, for two pytrees of one structure.

    Leaves that are the same array are kept as they are: no select over data a rule
    did not touch (the UNDO history, say), which under `vmap` would be a full copy.
    """
    return jax.tree.map(lambda x, y: x if x is y else jnp.where(pred, x, y), a, b)
