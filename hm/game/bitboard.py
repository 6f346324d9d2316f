"""36-cell bitboards as two uint32 words: the cell sets of the rules (docs/rules.md#fixed-shapes, §17.3).

Word 0 holds rows 0–2 (cells 0–17), word 1 rows 3–5 (cells 18–35), bit `cell % 18`.
Two 32-bit words need no 64-bit integers (JAX's x64 mode stays off). A breadth-first
search over the board (enemy movement, §10.1; the exit distance, §14.2; a layout's
connectivity, §12.4) becomes a fixed number of shift-and-mask dilations instead of a
wavefront over a padded array; docs/performance.md has the measured difference. Section
numbers (§) are those of docs/rules.md.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int, Int32, UInt32

from hm.game import batching
from hm.game import constants as C

_HALF = C.NUM_CELLS // 2
_FULL = np.uint32((1 << _HALF) - 1)
_COL0 = np.uint32(sum(1 << (6 * r) for r in range(3)))
_COL5 = np.uint32(sum(1 << (6 * r + 5) for r in range(3)))
_ROW_LOW = np.uint32((1 << C.COLS) - 1)
_SHIFTS = np.arange(_HALF, dtype=np.uint32)

# Longest possible shortest path on 36 cells; a fixed trip count for every search.
MAX_DISTANCE = C.NUM_CELLS - 1
LEVELS_PER_ROUND = 4  # search levels per loop round (one skippable `cond` per round)


def from_mask(mask: Bool[Array, "36"]) -> UInt32[Array, "2"]:
    """Pack a per-cell bool mask into a bitboard."""
    bits = mask.reshape(2, _HALF).astype(jnp.uint32) << _SHIFTS[None, :]
    return jnp.bitwise_or.reduce(bits, axis=1)


def to_mask(board: UInt32[Array, "2"]) -> Bool[Array, "36"]:
    """Unpack a bitboard into a per-cell bool mask."""
    return ((board[:, None] >> _SHIFTS[None, :]) & np.uint32(1)).astype(bool).reshape(C.NUM_CELLS)


def or_reduce(*words: UInt32[Array, " N"]) -> tuple[UInt32[Array, ""], ...]:
    """Bitwise OR of each array over its axis: one variadic reduction, one pass."""
    zero = tuple(np.uint32(0) for _ in words)
    return jax.lax.reduce(words, zero, lambda a, b: tuple(x | y for x, y in zip(a, b)), (0,))


def popcount(words: UInt32[Array, "*s"]) -> Int32[Array, "*s"]:
    """Cells set in each word (sum over a board's words for its cell count)."""
    return jax.lax.population_count(words).astype(jnp.int32)


def meets(lo: UInt32[Array, "*s"], hi: UInt32[Array, "*s"],
          other_lo: UInt32[Array, "*s"], other_hi: UInt32[Array, "*s"]) -> Bool[Array, "*s"]:
    """Whether the bitboards (lo, hi) and (other_lo, other_hi) share a cell."""
    return ((lo & other_lo) | (hi & other_hi)) != 0


def cell_words(cell: Int[Array, "*s"]) -> tuple[UInt32[Array, "*s"], UInt32[Array, "*s"]]:
    """The two words of the bitboard holding only `cell` (nothing outside 0..35).

    Elementwise, so it serves any shape: one cell per game or per slot. Hot loops keep
    the words apart (see `dilate_words`).
    """
    cell = jnp.asarray(cell, jnp.int32)
    low = (cell >= 0) & (cell < _HALF)
    high = (cell >= _HALF) & (cell < C.NUM_CELLS)
    one = np.uint32(1) << jnp.where(low, cell, cell - _HALF).clip(0, _HALF - 1).astype(jnp.uint32)
    return jnp.where(low, one, np.uint32(0)), jnp.where(high, one, np.uint32(0))


def holds_words(lo: UInt32[Array, "..."], hi: UInt32[Array, "..."], cell: Int[Array, "..."]
                ) -> Bool[Array, "..."]:
    """Whether the bitboard (lo, hi) holds `cell` (a cell outside 0..35: no); the three
    broadcast together."""
    cell = jnp.asarray(cell, jnp.int32)
    c = cell.clip(0, C.NUM_CELLS - 1)
    word = jnp.where(c < _HALF, lo, hi)
    shift = jnp.where(c < _HALF, c, c - _HALF).astype(jnp.uint32)
    return (cell >= 0) & (cell < C.NUM_CELLS) & (((word >> shift) & np.uint32(1)) != 0)


def table(mask: np.ndarray) -> np.ndarray:
    """Host-side: the bitboards `[..., 2]` (uint32 words) of a `[..., 36]` bool table."""
    bits = np.asarray(mask).reshape(np.shape(mask)[:-1] + (2, _HALF)).astype(np.uint64)
    return (bits << np.arange(_HALF, dtype=np.uint64)).sum(-1).astype(np.uint32)


def cell_bit(cell: Int32[Array, ""]) -> UInt32[Array, "2"]:
    """The bitboard holding only `cell` (nothing if `cell` is outside 0..35)."""
    return jnp.stack(cell_words(cell))


def has(board: UInt32[Array, "2"], cell: Int32[Array, ""]) -> Bool[Array, ""]:
    """Whether `cell` is set."""
    return jnp.any((board & cell_bit(cell)) != 0)


def any_set(board: UInt32[Array, "2"]) -> Bool[Array, ""]:
    return jnp.any(board != 0)


def neighbour_words(lo: UInt32[Array, "*s"], hi: UInt32[Array, "*s"]
                    ) -> tuple[tuple[UInt32[Array, "*s"], UInt32[Array, "*s"]], ...]:
    """The cells one step from each cell of the bitboard (lo, hi), in §10.1's direction
    order (`C.DIRECTION_DELTAS`: up = row + 1, down, left = col − 1, right); cells that
    would leave the board fall off. Each as a (lo, hi) pair.

    Loops should carry the words as separate arrays: under `vmap` a `[..., 2]` board puts
    a dimension of 2 innermost, which the CPU cannot vectorise; two `[batch]` words it can.
    """
    up = ((lo << C.COLS) & _FULL, ((hi << C.COLS) | (lo >> (_HALF - C.COLS))) & _FULL)
    down = ((lo >> C.COLS) | ((hi & _ROW_LOW) << (_HALF - C.COLS)), hi >> C.COLS)
    left = ((lo & ~_COL0) >> 1, (hi & ~_COL0) >> 1)
    right = (((lo & ~_COL5) << 1) & _FULL, ((hi & ~_COL5) << 1) & _FULL)
    return up, down, left, right


def dilate_words(lo: UInt32[Array, "*s"], hi: UInt32[Array, "*s"]
                 ) -> tuple[UInt32[Array, "*s"], UInt32[Array, "*s"]]:
    """`dilate` on the two words held apart (see `neighbour_words`)."""
    for n_lo, n_hi in neighbour_words(lo, hi):
        lo, hi = lo | n_lo, hi | n_hi
    return lo, hi


def dilate(b: UInt32[Array, "... 2"]) -> UInt32[Array, "... 2"]:
    """`b` together with every orthogonal neighbour of its cells (works on stacks too)."""
    lo, hi = dilate_words(b[..., 0], b[..., 1])
    return jnp.stack([lo, hi], axis=-1)


def distance_to(source: UInt32[Array, "2"], passable: UInt32[Array, "2"],
                target: UInt32[Array, "2"]) -> Int32[Array, ""]:
    """Breadth-first path length from `source` to the nearest cell of `target`.

    Paths run over `passable` cells (the source is always in the search; a target cell
    need not be passable to be reached). Returns −1 when no target is reachable.
    Under `vmap` the games are the lanes of one search that stops once no game's goes on.
    """
    @batching.custom_batching(lambda _, *words: _distance_lanes(*words))
    def one(source, passable, target):
        return _distance_lanes(source[None], passable[None], target[None])[0]

    return one(source, passable, target)


def _distance_lanes(source: UInt32[Array, "B 2"], passable: UInt32[Array, "B 2"],
                    target: UInt32[Array, "B 2"]) -> Int32[Array, " B"]:
    p_lo, p_hi = passable[:, 0], passable[:, 1]
    t_lo, t_hi = target[:, 0], target[:, 1]

    def level(carry):
        i, v_lo, v_hi, f_lo, f_hi, found = carry
        for _ in range(LEVELS_PER_ROUND):
            g_lo, g_hi = dilate_words(f_lo, f_hi)
            g_lo, g_hi = g_lo & ~v_lo, g_hi & ~v_hi
            found = jnp.where((found < 0) & meets(g_lo, g_hi, t_lo, t_hi), i + 1, found)
            i, v_lo, v_hi, f_lo, f_hi = i + 1, v_lo | g_lo, v_hi | g_hi, g_lo & p_lo, g_hi & p_hi
        return i, v_lo, v_hi, f_lo, f_hi, found

    def searching(carry):
        _, _, _, f_lo, f_hi, found = carry
        return jnp.any((found < 0) & ((f_lo | f_hi) != 0))

    start_found = jnp.where(jnp.any((source & target) != 0, axis=1), 0, -1).astype(jnp.int32)
    carry = (jnp.int32(0), source[:, 0], source[:, 1], source[:, 0], source[:, 1], start_found)
    return batching.while_needed(-(-MAX_DISTANCE // LEVELS_PER_ROUND), searching, level, carry)[-1]


def flood(source: UInt32[Array, "2"], passable: UInt32[Array, "2"]) -> UInt32[Array, "2"]:
    """Every passable cell connected to `source` (source included)."""
    p_lo, p_hi = passable[0], passable[1]

    def level(_, reach):
        lo, hi = dilate_words(*reach)
        return (lo & p_lo) | reach[0], (hi & p_hi) | reach[1]

    lo, hi = jax.lax.fori_loop(0, MAX_DISTANCE, level, (source[0], source[1]))
    return jnp.stack([lo, hi])
