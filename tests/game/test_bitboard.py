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
    return bitboard.neighbours(bitboard.from_mask(mask))


@given(mask=masks)
def test_neighbours_are_the_cells_one_step_away_in_the_rules_direction_order(mask):
    for (dr, dc), board in zip(C.DIRECTION_DELTAS, _neighbours(mask)):
        assert np.all(np.asarray(board) < 2**18), "a bit outside the board's 18 bits per word"
        np.testing.assert_array_equal(np.asarray(bitboard.to_mask(board)),
                                      _shifted(mask, int(dr), int(dc)))


@given(mask=masks)
def test_dilate_adds_every_orthogonal_neighbour(mask):
    expected = mask | np.any([_shifted(mask, int(dr), int(dc)) for dr, dc in C.DIRECTION_DELTAS], axis=0)
    got = jax.jit(lambda m: bitboard.to_mask(bitboard.dilate(bitboard.from_mask(m))))(mask)
    np.testing.assert_array_equal(np.asarray(got), expected)


@given(mask=masks)
def test_table_packs_as_from_mask_does(mask):
    np.testing.assert_array_equal(np.asarray(bitboard.table(mask)),
                                  np.asarray(bitboard.from_mask(jax.numpy.asarray(mask))))


@given(masks=st.lists(masks, min_size=3, max_size=3).map(np.array))
def test_a_table_of_boards_packs_along_either_axis_and_unpacks(masks):
    """`from_mask` with the cells on the first axis (lanes last, as the enemy phase
    holds them) gives the boards `table` gives with the cells last, and `take`/`to_mask`
    read them back."""
    lanes = bitboard.from_mask(jax.numpy.asarray(masks.T), axis=0)
    np.testing.assert_array_equal(np.asarray(lanes), np.asarray(bitboard.table(masks)))
    np.testing.assert_array_equal(np.asarray(bitboard.to_mask(lanes)), masks)
    np.testing.assert_array_equal(
        np.asarray(bitboard.to_mask(bitboard.take(bitboard.table(masks), jax.numpy.int32(1)))),
        masks[1])


@given(a=masks, b=masks)
def test_set_operations_are_those_of_the_masks(a, b):
    ba, bb = (bitboard.from_mask(jax.numpy.asarray(m)) for m in (a, b))
    for got, expected in [(ba & bb, a & b), (ba | bb, a | b), (ba ^ bb, a ^ b), (~ba, ~a)]:
        np.testing.assert_array_equal(np.asarray(bitboard.to_mask(got)), expected)
    assert bool(bitboard.meets(ba, bb)) == bool(np.any(a & b))
    assert bool(bitboard.nonempty(ba)) == bool(np.any(a))
    assert int(bitboard.count(ba)) == int(np.sum(a))


@given(mask=masks)
def test_cells_held_one_by_one(mask):
    board = bitboard.from_mask(jax.numpy.asarray(mask))
    cells = jax.numpy.arange(-1, C.NUM_CELLS + 1)
    expected = np.concatenate([[False], mask, [False]])        # off the board: never held
    np.testing.assert_array_equal(np.asarray(bitboard.holds(board, cells)), expected)
    singles = bitboard.to_mask(bitboard.of_cell(cells))
    np.testing.assert_array_equal(np.asarray(singles), np.eye(C.NUM_CELLS + 2, dtype=bool)[:, 1:-1])


def _bfs_distance(source: int, passable: np.ndarray, target: np.ndarray) -> int:
    """Per-cell breadth-first search: the path length from `source` to the nearest target
    cell, stepping only from passable cells (the source always expands), −1 if none."""
    dist = {source: 0}
    frontier = [source]
    while frontier:
        nxt = []
        for cell in frontier:
            if target[cell]:
                return dist[cell]
            if cell != source and not passable[cell]:
                continue
            r, c = divmod(cell, C.COLS)
            for dr, dc in C.DIRECTION_DELTAS:
                rr, cc = r + int(dr), c + int(dc)
                n = rr * C.COLS + cc
                if 0 <= rr < C.ROWS and 0 <= cc < C.COLS and n not in dist:
                    dist[n] = dist[cell] + 1
                    nxt.append(n)
        frontier = sorted(nxt, key=dist.get)
    return -1


def _distance_of_masks(source, passable, target):
    return bitboard.distance_to(bitboard.of_cell(source), bitboard.from_mask(passable),
                                bitboard.from_mask(target))


_distance = jax.jit(_distance_of_masks)
_distances = jax.jit(jax.vmap(_distance_of_masks))


@given(games=st.lists(st.tuples(st.integers(0, C.NUM_CELLS - 1), masks, masks),
                      min_size=1, max_size=4))
def test_distance_to_is_a_breadth_first_search_alone_and_batched(games):
    sources = np.array([g[0] for g in games], np.int32)
    passable = np.array([g[1] for g in games])
    target = np.array([g[2] for g in games])
    expected = [_bfs_distance(int(s), p, t) for s, p, t in zip(sources, passable, target)]

    alone = [int(_distance(s, p, t)) for s, p, t in zip(sources, passable, target)]
    batched = _distances(sources, passable, target)
    assert alone == expected
    np.testing.assert_array_equal(np.asarray(batched), expected)
