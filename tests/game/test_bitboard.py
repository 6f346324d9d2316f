"""Bitboards against per-cell arithmetic: neighbours, dilation, packing."""

import hypothesis.strategies as st
import jax
import numpy as np
from hypothesis import given

from hm.game import bitboard
from hm.game import constants as C

masks = st.lists(st.booleans(), min_size=C.NUM_CELLS, max_size=C.NUM_CELLS).map(np.array)


def _shifted(mask: np.ndarray, dr: int, dc: int) -> np.ndarray:
    """Per cell: whether the cell one step (−dr, −dc) away is in `mask`."""
    out = np.zeros((C.ROWS, C.COLS), bool)
    grid = mask.reshape(C.ROWS, C.COLS)
    for r in range(C.ROWS):
        for c in range(C.COLS):
            if 0 <= r - dr < C.ROWS and 0 <= c - dc < C.COLS:
                out[r, c] = grid[r - dr, c - dc]
    return out.reshape(-1)


@jax.jit
def _neighbours(mask):
    board = bitboard.from_mask(mask)
    return [jax.numpy.stack(n) for n in bitboard.neighbour_words(board[0], board[1])]


@given(mask=masks)
def test_neighbours_are_the_cells_one_step_away_in_the_rules_direction_order(mask):
    for (dr, dc), words in zip(C.DIRECTION_DELTAS, _neighbours(mask)):
        assert np.all(np.asarray(words) < 2**18), "a bit outside the board's 18 bits per word"
        np.testing.assert_array_equal(np.asarray(bitboard.to_mask(words)),
                                      _shifted(mask, int(dr), int(dc)))


@given(mask=masks)
def test_dilate_adds_every_orthogonal_neighbour(mask):
    expected = mask | np.any([_shifted(mask, int(dr), int(dc)) for dr, dc in C.DIRECTION_DELTAS], axis=0)
    got = jax.jit(lambda m: bitboard.to_mask(bitboard.dilate(bitboard.from_mask(m))))(mask)
    np.testing.assert_array_equal(np.asarray(got), expected)


@given(mask=masks)
def test_table_packs_as_from_mask_does(mask):
    np.testing.assert_array_equal(bitboard.table(mask), np.asarray(bitboard.from_mask(jax.numpy.asarray(mask))))
