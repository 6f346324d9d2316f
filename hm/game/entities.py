"""Fixed-capacity entity lists: compaction and appending (docs/rules.md#fixed-shapes, §17.1, §17.2).

Enemy and transmission lists are structs of arrays whose first field is `alive`.
A list is *compact* when its live entries fill slots `0 .. n−1` in list order and every
other slot is all zeros. Rules may clear `alive` in place (list order is unchanged by a
removal); `compact` restores the canonical form, and `append` adds entries after the
last live one, dropping what does not fit (§17.1). Section numbers (§) are those of
docs/rules.md.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int32, UInt32

from hm.game import bitboard
from hm.game.state import Enemies, Transmissions

EntityList = Enemies | Transmissions


def count(entities: EntityList) -> Int32[Array, ""]:
    return jnp.sum(entities.alive, dtype=jnp.int32)


def is_compact(entities: EntityList) -> Bool[Array, ""]:
    """Whether the list is compact: no dead slot before a live one, dead slots all zero."""
    hole = jnp.any(entities.alive[1:] & ~entities.alive[:-1])
    dead = ~entities.alive
    litter = jnp.zeros_like(dead)
    for x in jax.tree.leaves(entities):
        litter = litter | (dead & (x != jnp.zeros((), x.dtype)))
    return ~hole & ~jnp.any(litter)


def compact(entities: EntityList) -> EntityList:
    """Move live entries to the front in their list order and zero the rest.

    A scatter to each live entry's rank (a prefix sum): cheaper than a sort under `vmap`.
    """
    capacity = entities.alive.shape[0]
    rank = jnp.cumsum(entities.alive, dtype=jnp.int32) - 1
    target = jnp.where(entities.alive, rank, capacity)      # dead entries: dropped

    def move(x):
        return jnp.zeros_like(x).at[target].set(x, mode="drop")

    return jax.tree.map(move, entities)


def append(entities: EntityList, new: EntityList) -> EntityList:
    """Append the live entries of `new` (in its slot order) after those of `entities`.

    `entities` must be compact. `new` may have any length; entries beyond the capacity
    are dropped.
    """
    capacity = entities.alive.shape[0]
    start = count(entities)
    slot = start + jnp.cumsum(new.alive, dtype=jnp.int32) - 1
    slot = jnp.where(new.alive, slot, capacity)   # out of range: dropped by the scatter

    def put(x, y):
        return x.at[slot].set(y.astype(x.dtype), mode="drop")

    return jax.tree.map(put, entities, new)


def cells(entities: EntityList) -> Int32[Array, " N"]:
    """Cell index of every slot (meaningless for dead slots)."""
    return entities.row.astype(jnp.int32) * 6 + entities.col.astype(jnp.int32)


def occupancy_words(entities: EntityList, *flags: Bool[Array, " N"]
                    ) -> tuple[bitboard.Bitboard, UInt32[Array, ""]]:
    """The cells holding a live entity of the list, and a flag word.

    Bit i + 1 of the flag word is set when some live entity has `flags[i]`; bit 0 when
    any entity lives. One elementwise pass over the slots and one variadic reduction.
    """
    alive = entities.alive
    lo, hi = bitboard.of_cell(jnp.where(alive, cells(entities), -1))
    flag = alive.astype(jnp.uint32)
    for i, f in enumerate(flags):
        flag = flag | ((alive & f).astype(jnp.uint32) << (i + 1))
    lo, hi, flag = bitboard.or_reduce(lo, hi, flag)
    return bitboard.Bitboard(lo, hi), flag


def occupancy(entities: EntityList) -> Bool[Array, "36"]:
    """Cells holding at least one live entity."""
    board, _ = occupancy_words(entities)
    return bitboard.to_mask(board)
