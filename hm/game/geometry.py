"""Static cell tables of the 6×6 board (docs/rules.md#conventions, §0.2; docs/rules.md#board, §1), built once with numpy.

Each table lists cell indices (`row * 6 + col`) with −1 where a cell would be off the
board, in the rules' canonical orders. Section numbers (§) are those of docs/rules.md.
"""

import numpy as np

from hm.game import constants as C


def _cell(r: int, c: int) -> int:
    return r * C.COLS + c if 0 <= r < C.ROWS and 0 <= c < C.COLS else -1


ROW_OF = np.arange(C.NUM_CELLS, dtype=np.int32) // C.COLS
COL_OF = np.arange(C.NUM_CELLS, dtype=np.int32) % C.COLS

# Orthogonal neighbours in canonical direction order (up, down, left, right).
NEIGHBOURS = np.array(
    [[_cell(r + dr, c + dc) for dr, dc in C.DIRECTION_DELTAS.tolist()]
     for r in range(C.ROWS) for c in range(C.COLS)], dtype=np.int32)

# The siphon cross (§8): the cell itself, then up, down, left, right.
CROSS = np.concatenate([np.arange(C.NUM_CELLS, dtype=np.int32)[:, None], NEIGHBOURS], axis=1)

# The 8 surrounding cells (§9.3 order: row offset −1..+1, then column offset −1..+1).
SURROUNDING = np.array(
    [[_cell(r + dr, c + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if (dr, dc) != (0, 0)]
     for r in range(C.ROWS) for c in range(C.COLS)], dtype=np.int32)

# Manhattan distance between every pair of cells.
MANHATTAN = (np.abs(ROW_OF[:, None] - ROW_OF[None, :])
             + np.abs(COL_OF[:, None] - COL_OF[None, :])).astype(np.int32)

# Masks of the same tables: CROSS_MASK[x, c] / SURROUNDING_MASK[x, c] is true when cell c
# is in the cross / among the 8 surrounding cells of x. A row of a static mask replaces a
# per-game scatter, which vectorises badly.
CROSS_MASK = np.zeros((C.NUM_CELLS, C.NUM_CELLS), bool)
SURROUNDING_MASK = np.zeros((C.NUM_CELLS, C.NUM_CELLS), bool)
for _x in range(C.NUM_CELLS):
    CROSS_MASK[_x, CROSS[_x][CROSS[_x] >= 0]] = True
    SURROUNDING_MASK[_x, SURROUNDING[_x][SURROUNDING[_x] >= 0]] = True
del _x
