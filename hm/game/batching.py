"""Batch-level skipping for rules that most games of a batch do not need this step.

No rule lives here (docs/rules.md has them); the rules that use it are the enemy
activations (docs/rules.md#enemy-phase), stage generation and transmission placement
(docs/rules.md#stages, docs/rules.md#transmission-placement) and the rarer programs
(docs/rules.md#program-effects). Under `jax.vmap`, `lax.cond` becomes a select that runs
both branches for every game. A rule with a custom batching rule
(`jax.custom_batching.custom_vmap`) can instead ask one question of the whole batch
("does any game need this?") and skip the work for real. The helpers here keep those
batching rules short and alike.
"""

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap
from jaxtyping import Array, Bool, Int, Int32


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

    A call that `vmap` batches as it is traced (the common case: straight-line code under
    `vmap`) never traces the function itself: a first `custom_vmap` (the probe) learns that
    the call is batched and runs `batched_rule` inside its own batching rule; a second one,
    whose unbatched version only has the right shapes, hands those results back to the
    batched code. Only a call traced unbatched (at the top level, or inside a `cond` branch
    or `jit` that is batched after tracing) traces the function, with its constants made
    explicit (ignored) arguments, so that `custom_vmap` accepts it wherever it is batched.
    """

    def decorate(fun):
        @functools.wraps(fun)
        def call(*args):
            flat, in_tree = jax.tree.flatten(args)

            def run_rule(axis_size, in_batched, leaves):
                leaves = [x if batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))
                          for x, batched in zip(leaves, in_batched)]
                return batched_rule(axis_size, *jax.tree.unflatten(in_tree, leaves))

            found = []  # the batched results, when the probe is batched as it is traced

            @custom_vmap
            def probe(leaves):
                return jnp.zeros((), jnp.int32)

            @probe.def_vmap
            def _(axis_size, in_batched, leaves):
                if not found and not probe_done:
                    found.append(run_rule(axis_size, in_batched[0], leaves))
                return jnp.zeros((), jnp.int32), False

            probe_done = False
            probe(flat)
            probe_done = True
            if found:
                out = found[0]
                out_leaves, out_tree = jax.tree.flatten(out)

                @custom_vmap
                def hand_back(leaves):
                    # Never evaluated: every call of it is batched (the probe's was).
                    return [jnp.zeros(x.shape[1:], x.dtype) for x in out_leaves]

                @hand_back.def_vmap
                def _(axis_size, in_batched, leaves):
                    return out_leaves, [True] * len(out_leaves)

                return jax.tree.unflatten(out_tree, hand_back(flat))

            closed, out_shape = jax.make_jaxpr(
                lambda *leaves: fun(*jax.tree.unflatten(in_tree, leaves)),
                return_shape=True)(*flat)

            @custom_vmap
            def traced(consts, leaves):
                return jax.core.eval_jaxpr(closed.jaxpr, consts, *leaves)

            @traced.def_vmap
            def batched(axis_size, in_batched, consts, leaves):
                out = jax.tree.leaves(run_rule(axis_size, in_batched[1], leaves))
                return out, [True] * len(out)

            out = traced(list(closed.consts), flat)
            return jax.tree.unflatten(jax.tree.structure(out_shape), out)

        return call

    return decorate


def prefix_sum(values: Int[Array, " B"] | Bool[Array, " B"]) -> Int32[Array, " B"]:
    """Inclusive prefix sum of small non-negative integers (or a count of flags), by blocks
    of 32 with two small triangular matrix products: `cumsum` is a quadratic reduce-window
    on CPU and `associative_scan` is dozens of ops. Exact while the total is below 2**24
    (float32 products at HIGHEST precision)."""
    batch = values.shape[0]
    width = min(32, batch)
    padded = math.ceil(batch / width) * width
    x = jnp.zeros(padded, jnp.float32).at[:batch].set(values.astype(jnp.float32))
    x = x.reshape(-1, width)
    hi = jax.lax.Precision.HIGHEST
    inner = jnp.dot(x, jnp.asarray(np.triu(np.ones((width, width), np.float32))), precision=hi)
    blocks = x.shape[0]
    before = jnp.dot(inner[:, -1], jnp.asarray(np.triu(np.ones((blocks, blocks), np.float32), 1)),
                     precision=hi)
    return (inner + before[:, None]).reshape(padded)[:batch].astype(jnp.int32)


def selected_chunk(selected: Bool[Array, " B"], width: int, c) -> Int32[Array, " width"]:
    """Chunk `c` of the indices of the `selected` entries, `width` of them, in batch order.

    Entries past the last selected one are B, out of range: a gather must clip them and a
    scatter with `mode="drop"` skips them.
    """
    batch = selected.shape[0]
    chunks = math.ceil(batch / width)
    rank = jnp.where(selected, prefix_sum(selected) - 1, chunks * width)
    order = jnp.full(chunks * width, batch, jnp.int32).at[rank].set(
        jnp.arange(batch, dtype=jnp.int32), mode="drop")
    return jax.lax.dynamic_slice(order, (c * width,), (width,))


def for_selected_chunks(selected: Bool[Array, " B"], width: int, body: Callable, carry):
    """`carry = body(index, carry)` for each chunk `index` of the selected entries'
    indices (`selected_chunk`), skipping the chunks that hold none (`while_needed`).

    The chunk's indices are computed in the loop, so that a batch selecting nothing pays
    for one sum and nothing else.
    """
    chunks = math.ceil(selected.shape[0] / width)
    n_chunks = (jnp.sum(selected, dtype=jnp.int32) + width - 1) // width

    def run(state):
        c, carry = state
        return c + 1, body(selected_chunk(selected, width, c), carry)

    return while_needed(chunks, lambda state: state[0] < n_chunks, run, (jnp.int32(0), carry))[1]


def where_selected(rule: Callable, chunk_divisor: int, min_chunk: int):
    """`maybe(state, pred, *args)` = `rule(state, pred, *args)` where `pred`, else `state`.

    `rule(state, active, *args)` must be a state update that is cheap when `active` is
    false (its result is then discarded). Unbatched, `maybe` is a `lax.cond`. Batched, it
    runs `rule` only on the selected games: gathered `chunk` at a time (≈ batch /
    `chunk_divisor`), updated with `vmap(rule)` and the changed fields scattered back in
    place, once per chunk of selected games (never when none is selected). Padding entries
    of the last chunk run with `active` false and are dropped.
    """

    def batched(axis_size, state, pred, *args):
        chunk = min(axis_size, max(min_chunk, axis_size // chunk_divisor))
        # `rule` on one chunk, traced once: the loop body evaluates this jaxpr, and the
        # leaves it passes through untouched are read off its outputs.
        leaves, tree = jax.tree.flatten(state)
        in_leaves, in_tree = jax.tree.flatten((state, pred, args))

        def on_leaves(*xs):
            st, p, a = jax.tree.unflatten(in_tree, xs)
            return jax.tree.leaves(jax.vmap(rule)(st, p, *a))

        on_chunk = jax.make_jaxpr(on_leaves)(
            *(jax.ShapeDtypeStruct((chunk,) + x.shape[1:], x.dtype) for x in in_leaves))
        invars = on_chunk.jaxpr.invars[:len(leaves)]
        changed = [out is not var for out, var in zip(on_chunk.jaxpr.outvars, invars)]
        # Only the leaves the rule changes are carried through the loop: a loop carrying
        # the UNDO history would copy it whole every step.
        fixed = {i: x for i, x in enumerate(leaves) if not changed[i]}

        def rebuild(carried):
            it = iter(carried)
            return [fixed[i] if i in fixed else next(it) for i in range(len(leaves))]

        def update_chunk(index, carried):
            real = index < axis_size
            source = jnp.minimum(index, axis_size - 1)
            take = lambda x: x[source]  # noqa: E731
            taken = [take(x) for x in rebuild(carried)]
            flat = taken + jax.tree.leaves((real, jax.tree.map(take, args)))
            updated = jax.core.eval_jaxpr(on_chunk.jaxpr, on_chunk.consts, *flat)
            return [x.at[index].set(after, mode="drop")
                    for i, (x, after) in enumerate(zip(rebuild(carried), updated)) if changed[i]]

        carried = for_selected_chunks(pred, chunk, update_chunk,
                                      [x for i, x in enumerate(leaves) if changed[i]])
        return tree.unflatten(rebuild(carried))

    @custom_batching(batched)
    def maybe(state, pred, *args):
        return jax.lax.cond(pred, lambda: rule(state, pred, *args), lambda: state)

    return maybe
