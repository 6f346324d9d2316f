"""Batch-level skipping for rules that most games of a batch do not need this step.

Under `jax.vmap`, `lax.cond` becomes a select that runs both branches for every game.
A rule with a custom batching rule (`jax.custom_batching.custom_vmap`) can instead ask
one question of the whole batch ("does any game need this?") and skip the work for real.
The helpers here keep those batching rules short and alike.
"""

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap


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


def while_needed(most: int, needed: Callable, body: Callable, carry):
    """`carry = body(carry)` while `needed(carry)`, at most `most` times, for batch-level
    code: a fixed-count loop of `lax.cond`s (no `while`), in about √most groups that are
    skipped as a whole, so the rounds not needed cost a few `cond`s (a few µs each on CPU)."""
    per_group = math.ceil(math.sqrt(most))

    def maybe_once(_, carry):
        return jax.lax.cond(needed(carry), body, lambda c: c, carry)

    def maybe_group(_, carry):
        return jax.lax.cond(needed(carry),
                            lambda c: jax.lax.fori_loop(0, per_group, maybe_once, c),
                            lambda c: c, carry)

    return jax.lax.fori_loop(0, math.ceil(most / per_group), maybe_group, carry)


def custom_batching(batched_rule: Callable):
    """Decorator: the function as written when unbatched; `batched_rule(axis_size, *args)`,
    with every leaf of `args` given a leading batch axis, under `vmap`.

    Unlike a bare `jax.custom_batching.custom_vmap`, the function may read array constants
    (tables) and may be called inside a `lax.cond`/`lax.switch` whose predicate is batched:
    such a `cond` batches every constant its branches capture, which `custom_vmap` rejects.
    Here the function is traced first and its constants become explicit (ignored) arguments.
    """

    def decorate(fun):
        @functools.wraps(fun)
        def call(*args):
            flat, in_tree = jax.tree.flatten(args)
            closed, out_shape = jax.make_jaxpr(
                lambda *leaves: fun(*jax.tree.unflatten(in_tree, leaves)),
                return_shape=True)(*flat)

            @custom_vmap
            def traced(consts, leaves):
                return jax.core.eval_jaxpr(closed.jaxpr, consts, *leaves)

            @traced.def_vmap
            def batched(axis_size, in_batched, consts, leaves):
                leaves = [x if batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))
                          for x, batched in zip(leaves, in_batched[1])]
                out = jax.tree.leaves(batched_rule(axis_size,
                                                   *jax.tree.unflatten(in_tree, leaves)))
                return out, [True] * len(out)

            out = traced(list(closed.consts), flat)
            return jax.tree.unflatten(jax.tree.structure(out_shape), out)

        return call

    return decorate
