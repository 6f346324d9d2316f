"""36-cell bitboards as two uint32 words: the cell sets of the rules (docs/rules.md#fixed-shapes, §17.3).

A `Bitboard` is the one form of a cell set in the engine: word `lo` holds rows 0–2
(cells 0–17), word `hi` rows 3–5 (cells 18–35), bit `cell % 18`. Two 32-bit words need no 64-bit integers (JAX's x64 mode stays off). A breadth-first
search over the board (enemy movement, §10.1; the exit distance, §14.2; a layout's
connectivity, §12.4) becomes a fixed number of shift-and-mask dilations instead of a
wavefront over a padded array; docs/performance.md has the measured difference. Section
numbers (§) are those of docs/rules.md.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int, Int32, UInt32

from hm.game import batching
from hm.game import constants as C

CELLS_PER_WORD = C.NUM_CELLS // 2       # cells 0–17 in word `lo`, 18–35 in word `hi`
FULL_WORD = np.uint32((1 << CELLS_PER_WORD) - 1)
_COL0 = np.uint32(sum(1 << (6 * r) for r in range(3)))
_COL5 = np.uint32(sum(1 << (6 * r + 5) for r in range(3)))
_ROW_LOW = np.uint32((1 << C.COLS) - 1)
_SHIFTS = np.arange(CELLS_PER_WORD, dtype=np.uint32)

# Longest possible shortest path on 36 cells; a fixed trip count for every search.
MAX_DISTANCE = C.NUM_CELLS - 1
LEVELS_PER_ROUND = 4  # search levels per loop round (one skippable `cond` per round)


class Bitboard(NamedTuple):
    """A set of cells: bit `cell % 18` of word `lo` (cells 0–17) or of word `hi` (18–35).

    The two words are arrays of one shape: one board per game, per slot or per lane.
    Every operation is elementwise over that shape, so one function serves a single
    game, a table indexed by cell, and the `[batch]` lanes of a loop. The words stay
    two arrays rather than a `[..., 2]` array: under `vmap` a dimension of 2 innermost
    is one the CPU cannot vectorise, and two `[batch]` words it can.

    `&`, `|`, `^` and `~` are the set operations (`~` keeps to the 36 cells). A bitboard is
    a pytree (a named tuple), so loops carry it and `jax.tree.map` maps its words.
    """

    lo: UInt32[Array, "*s"]
    hi: UInt32[Array, "*s"]

    def __and__(self, other: "Bitboard") -> "Bitboard":
        return Bitboard(self.lo & other.lo, self.hi & other.hi)

    def __or__(self, other: "Bitboard") -> "Bitboard":
        return Bitboard(self.lo | other.lo, self.hi | other.hi)

    def __xor__(self, other: "Bitboard") -> "Bitboard":
        return Bitboard(self.lo ^ other.lo, self.hi ^ other.hi)

    def __invert__(self) -> "Bitboard":
        return Bitboard(~self.lo & FULL_WORD, ~self.hi & FULL_WORD)


EVERY_CELL = Bitboard(FULL_WORD, FULL_WORD)


def from_mask(mask: Bool[Array, "..."], axis: int = -1) -> Bitboard:
    """Pack a per-cell bool mask (the 36 cells along `axis`) into a bitboard."""
    axis = axis % mask.ndim
    shifts = _SHIFTS.reshape([CELLS_PER_WORD if a == axis else 1 for a in range(mask.ndim)])
    low, high = jnp.split(mask.astype(jnp.uint32), 2, axis=axis)
    return Bitboard(jnp.bitwise_or.reduce(low << shifts, axis=axis),
                    jnp.bitwise_or.reduce(high << shifts, axis=axis))


def to_mask(board: Bitboard) -> Bool[Array, "*s 36"]:
    """Unpack a bitboard into a per-cell bool mask (cells on the last axis)."""
    def bits(word):
        word = jnp.asarray(word)[..., None]
        return (word >> _SHIFTS.reshape((1,) * (word.ndim - 1) + (-1,))) & np.uint32(1)

    return jnp.concatenate([bits(board.lo), bits(board.hi)], axis=-1).astype(bool)


def table(mask: np.ndarray) -> Bitboard:
    """Host-side: the bitboards (numpy words `[...]`) of a `[..., 36]` bool table, for
    static cell sets indexed by cell (`take`)."""
    bits = np.asarray(mask).reshape(np.shape(mask)[:-1] + (2, CELLS_PER_WORD)).astype(np.uint64)
    words = (bits << _SHIFTS.astype(np.uint64)).sum(-1).astype(np.uint32)
    return Bitboard(words[..., 0], words[..., 1])


def take(board: Bitboard, index: Int[Array, "*t"]) -> Bitboard:
    """The boards at `index` of a table of boards (a gather from each word)."""
    return Bitboard(jnp.asarray(board.lo)[index], jnp.asarray(board.hi)[index])


def where(pred: Bool[Array, "*s"], a: Bitboard, b: Bitboard) -> Bitboard:
    """`a` where `pred`, else `b` (the three broadcast together)."""
    return Bitboard(jnp.where(pred, a.lo, b.lo), jnp.where(pred, a.hi, b.hi))


def or_reduce(*words: UInt32[Array, " N"]) -> tuple[UInt32[Array, ""], ...]:
    """Bitwise OR of each array over its axis: one variadic reduction, one pass (of the
    words of a bitboard per slot, with flag words beside them)."""
    zero = tuple(np.uint32(0) for _ in words)
    return jax.lax.reduce(words, zero, lambda a, b: tuple(x | y for x, y in zip(a, b)), (0,))


def popcount(words: UInt32[Array, "*s"]) -> Int32[Array, "*s"]:
    """Bits set in each uint32 word."""
    return jax.lax.population_count(words).astype(jnp.int32)


def count(board: Bitboard) -> Int32[Array, "*s"]:
    """Cells in the set."""
    return popcount(board.lo) + popcount(board.hi)


def nonempty(board: Bitboard) -> Bool[Array, "*s"]:
    """Whether the set holds any cell."""
    return (board.lo | board.hi) != 0


def meets(a: Bitboard, b: Bitboard) -> Bool[Array, "*s"]:
    """Whether the two sets share a cell."""
    return ((a.lo & b.lo) | (a.hi & b.hi)) != 0


def of_cell(cell: Int[Array, "*s"]) -> Bitboard:
    """The set holding only `cell` (empty for a cell outside 0..35), elementwise: one
    cell per game or per slot."""
    cell = jnp.asarray(cell, jnp.int32)
    low = (cell >= 0) & (cell < CELLS_PER_WORD)
    high = (cell >= CELLS_PER_WORD) & (cell < C.NUM_CELLS)
    one = np.uint32(1) << jnp.where(low, cell, cell - CELLS_PER_WORD).clip(
        0, CELLS_PER_WORD - 1).astype(jnp.uint32)
    return Bitboard(jnp.where(low, one, np.uint32(0)), jnp.where(high, one, np.uint32(0)))


def holds(board: Bitboard, cell: Int[Array, "..."]) -> Bool[Array, "..."]:
    """Whether the set holds `cell` (a cell outside 0..35: no); the words and `cell`
    broadcast together."""
    cell = jnp.asarray(cell, jnp.int32)
    c = cell.clip(0, C.NUM_CELLS - 1)
    word = jnp.where(c < CELLS_PER_WORD, board.lo, board.hi)
    shift = jnp.where(c < CELLS_PER_WORD, c, c - CELLS_PER_WORD).astype(jnp.uint32)
    return (cell >= 0) & (cell < C.NUM_CELLS) & (((word >> shift) & np.uint32(1)) != 0)


def neighbours(board: Bitboard) -> tuple[Bitboard, Bitboard, Bitboard, Bitboard]:
    """The cells one step from each cell of `board`, in §10.1's direction order
    (`C.DIRECTION_DELTAS`: up = row + 1, down, left = col − 1, right); cells that would
    leave the board fall off."""
    lo, hi = board
    up = Bitboard((lo << C.COLS) & FULL_WORD,
                  ((hi << C.COLS) | (lo >> (CELLS_PER_WORD - C.COLS))) & FULL_WORD)
    down = Bitboard((lo >> C.COLS) | ((hi & _ROW_LOW) << (CELLS_PER_WORD - C.COLS)), hi >> C.COLS)
    left = Bitboard((lo & ~_COL0) >> 1, (hi & ~_COL0) >> 1)
    right = Bitboard(((lo & ~_COL5) << 1) & FULL_WORD, ((hi & ~_COL5) << 1) & FULL_WORD)
    return up, down, left, right


def dilate(board: Bitboard) -> Bitboard:
    """`board` together with every orthogonal neighbour of its cells."""
    for step in neighbours(board):
        board = board | step
    return board


def distance_to(source: Bitboard, passable: Bitboard, target: Bitboard) -> Int32[Array, "*s"]:
    """Breadth-first path length from `source` to the nearest cell of `target`.

    Paths run over `passable` cells (the source is always in the search; a target cell
    need not be passable to be reached). Returns −1 when no target is reachable.
    Under `vmap` the games are the lanes of one search that stops once no game's goes on.
    """
    @batching.custom_batching(lambda _, *words: _distance_lanes(*words))
    def one(source, passable, target):
        lanes = (jax.tree.map(lambda w: w[None], b) for b in (source, passable, target))
        return _distance_lanes(*lanes)[0]

    return one(source, passable, target)


class _Search(NamedTuple):
    """The carry of `_distance_lanes`: one entry per lane."""

    level: Int32[Array, ""]       # levels searched so far
    visited: Bitboard
    frontier: Bitboard            # the last level's passable cells, to expand next
    found: Int32[Array, " B"]     # the distance to the target, −1 until found


def _distance_lanes(source: Bitboard, passable: Bitboard, target: Bitboard) -> Int32[Array, " B"]:
    def levels(s: _Search) -> _Search:
        for _ in range(LEVELS_PER_ROUND):
            reached = dilate(s.frontier) & ~s.visited
            found = jnp.where((s.found < 0) & meets(reached, target), s.level + 1, s.found)
            s = _Search(s.level + 1, s.visited | reached, reached & passable, found)
        return s

    def searching(s: _Search):
        return jnp.any((s.found < 0) & nonempty(s.frontier))

    start = _Search(jnp.int32(0), source, source,
                    jnp.where(meets(source, target), 0, -1).astype(jnp.int32))
    rounds = -(-MAX_DISTANCE // LEVELS_PER_ROUND)
    return batching.while_needed(rounds, searching, levels, start).found
