"""Batch-level skipping for rules that most games of a batch do not need this step.

No rule lives here (docs/rules.md has them); the rules that use it are the enemy
activations (docs/rules.md#enemy-phase), stage generation and transmission placement
(docs/rules.md#stages, docs/rules.md#transmission-placement) and the rarer programs
(docs/rules.md#program-effects).

Under `jax.vmap`, `lax.cond` becomes a select that runs both branches for every game. A
function with a custom batching rule (`jax.custom_batching.custom_vmap`) can instead see
the whole batch, ask it one question ("does any game need this?") and skip the work for
real. Two helpers build such functions:

* `custom_batching(batched_rule)`: a function that is written once for one game and
  once for a batch (`batched_rule`, every argument with a leading batch axis).
* `where_selected(rule, writes, ...)`: `rule(state, ...)` where a per-game predicate
  holds, else `state`. Batched, only the selected games are gathered, a chunk at a time,
  updated with `jax.vmap(rule)` and scattered back; only the state fields the rule
  declares in `writes` are carried through that loop and scattered, so the UNDO history
  (most of a state's bytes) is never copied.

Both are plain `custom_vmap`s. Two details make them work everywhere:

* The one-game function is wrapped in `jax.jit` before `custom_vmap` sees it. A
  `custom_vmap` passes the array constants its function reads (tables) as operands,
  and a `lax.cond` whose predicate is batched batches every operand of its branches,
  constants included, which `custom_vmap` rejects. Inside a `jit` the constants belong
  to the `jit`'s own jaxpr and are never batched, so these functions may be called inside
  such a `cond` (`generation.complete_stage` is, in the tests).
* `where_selected` needs to know which leaves the rule changes. It is told (`writes`,
  field paths such as `"enemies"` or `"history.top"`, checked against the state's
  fields when traced) rather than working it out: a rule that writes a field it does
  not declare is wrong under `vmap` (the write is dropped), and
  `undeclared_changes` finds such a field in the rule's result for one game.

Why this shape. The alternatives were to keep a probe `custom_vmap` that learns whether
a call is batched before tracing anything (it relied on when JAX calls batching rules and
on JAX internals), or to pass every table explicitly to every custom-batched
function (deep call trees read module tables). The cost of this one: `custom_vmap`
traces the one-game function even when it is batched (the trace is discarded), about
1.4 s more Python time when `vmap(step)` is compiled; the compiled program is the same
size and runs as fast (docs/performance.md, "The batching layer").

`batched_traces` counts, per rule, how often a batched rule was traced, so that tests can
fail loudly when `vmap` stops taking a fast path.
"""

import collections
import functools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap
from jaxtyping import Array, Bool, Int, Int32

# Traces of each batched rule, by the decorated function's module and qualified name
# (see the module docstring).
batched_traces: collections.Counter[str] = collections.Counter()


def broadcast_unbatched(axis_size: int, in_batched, args):
    """Give every unbatched leaf of `args` the batch axis, so one code path serves all."""
    def broadcast(x, batched):
        return x if batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))

    return jax.tree.map(broadcast, tuple(args), tuple(in_batched))


def select(pred, a, b):
    """`a` where `pred` else `b`, leaf by leaf, for two pytrees of one structure.

    Every leaf is selected: a caller that knows some leaves are the same in `a` and `b`
    (the UNDO snapshots, say) leaves them out of the select itself
    (`state.besides_snapshots`), since under `vmap` a select is a full copy.
    """
    return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


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

    The function may read array constants and may be called inside a `lax.cond` whose
    predicate is batched (see the module docstring: it runs inside a `jax.jit`).
    """

    def decorate(fun):
        one_game = jax.jit(fun)

        @custom_vmap
        def call(*args):
            return one_game(*args)

        @call.def_vmap
        def _(axis_size, in_batched, *args):
            batched_traces[f"{fun.__module__}.{fun.__qualname__}"] += 1
            out = batched_rule(axis_size, *broadcast_unbatched(axis_size, in_batched, args))
            return out, jax.tree.map(lambda _: True, out)

        return functools.wraps(fun)(lambda *args: call(*args))

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


# --------------------------------------------------------------------------- field paths

def leaf_paths(tree) -> list[str]:
    """The path of every leaf of `tree`, in leaf order, as dotted field names
    (`"board.content"`, `"history.top"`; a tuple's entries are numbered: `"0.board"`)."""
    return [jax.tree_util.keystr(path, simple=True, separator=".")
            for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def covers(field: str, path: str) -> bool:
    """Whether the field (or subtree) named `field` holds the leaf at `path`."""
    return path == field or path.startswith(field + ".")


def written_leaves(tree, writes: Sequence[str], owner: str = "rule") -> list[bool]:
    """For each leaf of `tree`, whether one of the fields named in `writes` holds it.

    A name that matches no leaf is an error (a typo, or a field that was renamed): it
    would otherwise silently declare nothing.
    """
    paths = leaf_paths(tree)
    unknown = [w for w in writes if not any(covers(w, p) for p in paths)]
    if unknown:
        raise ValueError(f"{owner}: writes names {unknown}, which are not fields of the "
                         f"state; its fields are {sorted(paths)}")
    return [any(covers(w, p) for w in writes) for p in paths]


# --------------------------------------------------------------------------- where_selected

def where_selected(rule: Callable, writes: Sequence[str], chunk_divisor: int, min_chunk: int):
    """`maybe(state, pred, *args)` = `rule(state, pred, *args)` where `pred`, else `state`.

    `rule(state, active, *args)` must be a state update that is cheap when `active` is
    false (its result is then discarded) and that changes no leaf outside the fields
    named in `writes` (paths as `leaf_paths` writes them; a field names all its leaves).
    Unbatched, `maybe` is a `lax.cond`. Batched, it runs `rule` only on the selected
    games: gathered `chunk` at a time (≈ batch / `chunk_divisor`, at least `min_chunk`),
    updated with `vmap(rule)` and the written fields scattered back in place, once per
    chunk of selected games (never when none is selected). Padding entries of the last
    chunk run with `active` false and are dropped.

    `maybe.rule` and `maybe.writes` are the rule and its declaration (for
    `undeclared_changes`).
    """
    writes = tuple(writes)
    name = rule.__name__

    def batched(axis_size, state, pred, *args):
        chunk = min(axis_size, max(min_chunk, axis_size // chunk_divisor))
        leaves, tree = jax.tree.flatten(state)
        written = written_leaves(state, writes, name)

        def whole(carried):
            """All leaves: the written ones from the loop's carry, the others as given."""
            it = iter(carried)
            return [next(it) if w else x for x, w in zip(leaves, written)]

        def carried_of(xs):
            return [x for x, w in zip(xs, written) if w]

        def update_chunk(index, carried):
            real = index < axis_size
            source = jnp.minimum(index, axis_size - 1)
            take = lambda x: x[source]
            before = whole(carried)
            games = tree.unflatten([take(x) for x in before])
            updated = jax.tree.leaves(jax.vmap(rule)(games, real, *jax.tree.map(take, args)))
            return [x.at[index].set(after, mode="drop")
                    for x, after in zip(carried_of(before), carried_of(updated))]

        # Only the written leaves are carried through the loop: a loop carrying the UNDO
        # history would copy it whole every step.
        carried = for_selected_chunks(pred, chunk, update_chunk, carried_of(leaves))
        return tree.unflatten(whole(carried))

    def maybe(state, pred, *args):
        return jax.lax.cond(pred, lambda: rule(state, pred, *args), lambda: state)

    # `batched_traces` counts it under the rule's name.
    maybe.__module__, maybe.__name__, maybe.__qualname__ = rule.__module__, name, rule.__qualname__
    maybe = custom_batching(batched)(maybe)
    maybe.rule, maybe.writes = rule, writes
    return maybe


def undeclared_changes(writes: Sequence[str], before, after) -> list[str]:
    """The leaves (paths) that differ between `before` and `after`, two versions of one
    game, outside the fields named in `writes`: for a `where_selected` rule (`maybe.writes`)
    run on one game, the writes that `vmap` would drop. For tests."""
    written = written_leaves(before, writes)
    return [path for path, x, y, w in zip(leaf_paths(before), jax.tree.leaves(before),
                                          jax.tree.leaves(after), written)
            if not w and not np.array_equal(np.asarray(x), np.asarray(y))]
