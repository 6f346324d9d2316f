"""`hm.viz.draw_frame`: one game as a picture.

Colours are checked at known places: a pixel of a cell's tile away from any text, so
a change of font does not break the tests but a wrong cell, orientation or colour does.
"""

import jax
import numpy as np
import pytest

from hm import game, viz
from hm.game import constants as C
from hm.game.state import bare_state
from hm.viz import _frame as F

# Compiled (and cached on disk) like the tools' reset: op-by-op it takes seconds.
reset = jax.jit(game.reset)


def frame_of(scenario: dict, **kwargs) -> np.ndarray:
    """The picture of a scenario (docs/scenarios.md); the player is at (0, 0) unless it says otherwise."""
    return viz.draw_frame(game.from_dict({"exit": [5, 5], "player": {"row": 0, "col": 0}, **scenario}), **kwargs)


def pixel(frame: np.ndarray, x: float, y: float) -> tuple[int, ...]:
    return tuple(int(v) for v in frame[round(y), round(x)])


def token_body(row: int, col: int) -> tuple[float, float]:
    """A point inside a lone token drawn on (row, col), left of its letter."""
    x, y = viz.cell_box(row, col).center
    return x - 16, y + F.PLAYER_DROP - 10


def tile_corner(row: int, col: int) -> tuple[float, float]:
    """A point inside a block's or the exit's tile, below its label, left of its middle."""
    box = viz.cell_box(row, col)
    return box.left + 12, box.top + 34


def test_frame_shape_and_dtype_are_fixed():
    for state in (bare_state(), reset(jax.random.key(3))[0]):
        frame = viz.draw_frame(state)
        assert frame.shape == (viz.FRAME_HEIGHT, viz.FRAME_WIDTH, 3) and frame.dtype == np.uint8
    assert viz.FRAME_WIDTH % 16 == 0 and viz.FRAME_HEIGHT % 16 == 0


def test_row_zero_is_drawn_at_the_bottom_and_column_zero_on_the_left():
    assert viz.cell_box(0, 0).top > viz.cell_box(5, 0).top
    assert viz.cell_box(0, 0).left < viz.cell_box(0, 5).left
    frame = viz.draw_frame(bare_state(0, 0))            # player at (0, 0), exit at (5, 5)
    assert pixel(frame, *token_body(0, 0)) == F.PLAYER_COLOR
    assert pixel(frame, *tile_corner(5, 5)) == F.EXIT_COLOR
    box = viz.cell_box(5, 5)                            # the top-right cell of the picture
    assert box.right == F.MARGIN + F.BOARD_SIZE and box.top == F.BOARD_TOP


def test_moving_the_player_changes_only_the_two_cells():
    a, b = viz.draw_frame(bare_state(2, 2)), viz.draw_frame(bare_state(2, 3))
    changed = np.any(a != b, axis=-1)
    assert changed.any()
    inside = np.zeros_like(changed)
    for col in (2, 3):
        box = viz.cell_box(2, col)
        inside[box.top:box.bottom, box.left:box.right] = True
    assert not (changed & ~inside).any()
    assert pixel(b, *token_body(2, 3)) == F.PLAYER_COLOR and pixel(b, *token_body(2, 2)) == F.CELL_COLOR


def test_enemies_are_coloured_by_type_and_hidden_cryptogs_are_faded():
    enemies = [{"type": name, "row": 3, "col": col, "hp": 1} for col, name in enumerate(C.ENEMY_NAMES)]
    # Player at (0, 5): the cryptog at (3, 3) is in neither its row nor its column (§15).
    frame = frame_of({"player": {"row": 0, "col": 5}, "enemies": enemies})
    for kind in range(C.NUM_ENEMY_TYPES - 1):
        assert pixel(frame, *token_body(3, kind)) == F.ENEMY_COLORS[kind], C.ENEMY_NAMES[kind]
    hidden = pixel(frame, *token_body(3, C.CRYPTOG))
    assert hidden == F._mix(F.ENEMY_COLORS[C.CRYPTOG], F.CELL_COLOR, 0.35)
    shown = frame_of({"player": {"row": 0, "col": 3}, "enemies": enemies})    # same column: observed
    assert pixel(shown, *token_body(3, C.CRYPTOG)) == F.ENEMY_COLORS[C.CRYPTOG]


def test_enemy_flags_change_the_token():
    virus = {"type": "virus", "row": 3, "col": 3, "hp": 2}
    plain = frame_of({"enemies": [virus]})
    for flag in ({"stunned": True}, {"hp": 1}, {"disabledTurns": 1}, {"spawnedFromSiphon": True}):
        assert (frame_of({"enemies": [virus | flag]}) != plain).any(), flag


def test_blocks_by_kind_and_siphoned():
    blocks = [{"row": 2, "col": 1, "type": "data", "points": 4},
              {"row": 2, "col": 2, "type": "program", "programType": "crash"},
              {"row": 2, "col": 3, "type": "question", "hidden": "data", "points": 6},
              {"row": 2, "col": 4, "type": "data", "points": 4, "siphoned": True, "spawnCount": 0}]
    frame = frame_of({"blocks": blocks})
    assert pixel(frame, *tile_corner(2, 1)) == F.DATA_BLOCK_COLOR
    assert pixel(frame, *tile_corner(2, 2)) == F.PROGRAM_BLOCK_COLOR
    assert pixel(frame, *tile_corner(2, 3)) == F.QUESTION_BLOCK_COLOR
    assert pixel(frame, *tile_corner(2, 4)) == F._mix(F.DATA_BLOCK_COLOR, F.CELL_COLOR, 0.45)
    more_points = frame_of({"blocks": [blocks[0] | {"points": 5}, *blocks[1:]]})
    changed = np.argwhere(np.any(frame != more_points, axis=-1))
    box = viz.cell_box(2, 1)
    assert changed.size and all(box.top <= y < box.bottom and box.left <= x < box.right for y, x in changed)


def test_cell_marks_resources_pickups_and_transmissions_are_drawn():
    empty = frame_of({})
    siphoned = frame_of({"siphonedCells": [[1, 1]]})
    tile = viz.cell_box(1, 1).inset(4)
    colours = {tuple(c) for c in siphoned[tile.top:tile.bottom, tile.left:tile.right].reshape(-1, 3)}
    assert F.SIPHONED_COLOR in colours and F.CELL_COLOR not in colours
    for scenario in ({"siphonCenters": [[1, 1]], "siphonedCells": [[1, 1]]},
                     {"resources": [{"row": 1, "col": 1, "credits": 2}]},
                     {"resources": [{"row": 1, "col": 1, "energy": 2}]},
                     {"resources": [{"row": 1, "col": 1, "dataSiphon": True}]},
                     {"transmissions": [{"row": 1, "col": 1, "turnsRemaining": 2, "enemyType": "daemon"}]}):
        frame = frame_of(scenario)
        base = siphoned if "siphonCenters" in scenario else empty
        changed = np.argwhere(np.any(frame != base, axis=-1))
        box = viz.cell_box(1, 1)
        assert changed.size, scenario
        assert all(box.top <= y < box.bottom and box.left <= x < box.right for y, x in changed), scenario


def test_hud_and_programs_follow_the_state():
    base = frame_of({"player": {"row": 0, "col": 0}})
    board = slice(F.BOARD_TOP, F.BOARD_TOP + F.BOARD_SIZE)
    changes = [{"player": {"row": 0, "col": 0, **player}} for player in ({"hp": 1}, {"credits": 9}, {"score": 40})]
    changes += [{"stage": 4}, {"showActivated": True}, {"pendingSiphonTransmissions": 2}, {"turn": 3}]
    for change in changes:
        frame = frame_of({"player": {"row": 0, "col": 0}, **change})
        assert (frame[:F.BOARD_TOP] != base[:F.BOARD_TOP]).any(), change
        np.testing.assert_array_equal(frame[board], base[board])
    owned = frame_of({"player": {"row": 0, "col": 0}, "ownedPrograms": [C.PROGRAM_ACTION_OFFSET + C.CRASH]})
    below = slice(F.PROGRAMS_TOP, None)
    assert (owned[below] != base[below]).any()
    np.testing.assert_array_equal(owned[:F.PROGRAMS_TOP], base[:F.PROGRAMS_TOP])


def test_action_arrow_points_the_way_of_a_move():
    state = bare_state(2, 2)
    plain = viz.draw_frame(state)
    x, y = viz.cell_box(2, 2).center
    y += F.PLAYER_DROP
    for direction, (dx, dy) in enumerate(((0, -1), (0, 1), (-1, 0), (1, 0))):    # up is up on screen
        frame = viz.draw_frame(state, action=direction)
        assert pixel(frame, x + 40 * dx, y + 40 * dy) == F.ARROW_COLOR, C.DIRECTION_NAMES[direction]
        assert pixel(frame, x - 40 * dx, y - 40 * dy) != F.ARROW_COLOR
    np.testing.assert_array_equal(viz.draw_frame(state, action=C.ACTION_SIPHON), plain)


def test_device_and_host_states_draw_alike_and_batches_are_refused():
    state = reset(jax.random.key(5))[0]
    np.testing.assert_array_equal(viz.draw_frame(state), viz.draw_frame(jax.device_get(state)))
    batch = jax.tree.map(lambda x: np.stack([x, x]), jax.device_get(state))
    with pytest.raises(ValueError, match="one game"):
        viz.draw_frame(batch)


def test_legend_draws_every_entry():
    entries = viz.legend()
    texts = [text for _, text in entries]
    assert len(set(texts)) == len(texts) >= 15
    for icon, _ in entries:
        assert icon.size == (F.CELL, F.CELL)
    pictures = {icon.tobytes() for icon, _ in entries}
    assert len(pictures) == len(entries)          # no two symbols look the same
