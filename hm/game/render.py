"""A text picture of one state for humans (`bin/play`, `bin/watch`).

Each board cell is two lines of `CELL_WIDTH` characters inside a grid, row 5 at the
top (docs/rules.md#board). The first line shows who stands there (player, enemies,
transmissions) and ends with the siphon-center mark; the second shows what the cell
holds (exit, pickup, block, resource) and ends with the siphoned mark. This is a
debugging view, so it shows what the agent cannot see too (hidden cryptogs, question
block payloads, transmission types), marked as such. Pure Python on host values;
the output is deterministic and fits an 80-column terminal.
"""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np

from hm.game import constants as C
from hm.game.observation import cryptog_visible
from hm.game.scenario import program_name
from hm.game.state import GameState

CELL_WIDTH = 11          # characters inside the grid lines
ROW_PREFIX = 3           # "5 |"
ENEMY_LETTERS = "VDGC"
SIPHON_CENTER_MARK = "*"
SIPHONED_MARK = "~"
OVERFLOW_MARK = "+"      # a cell's line was cut short

LEGEND = (
    "@ player  V D G C virus/daemon/glitch/cryptog + hp, z stunned, d disabled,",
    "(C2) cryptog hidden from the agent  Tvn transmission of type v due in n turns",
    "#p/s data block points/spawn  #name/s program  #?.. question (hidden payload)",
    f"EXIT exit  [S] siphon pickup  cN eN credits/energy  {SIPHONED_MARK} siphoned  "
    f"{SIPHON_CENTER_MARK} siphon center",
)


def cell_origin(row: int, col: int) -> tuple[int, int]:
    """Line and column in `render`'s output of the first character of a cell.

    The cell's entity line starts there, its terrain line one line below.
    """
    return 2 + 3 * (C.ROWS - 1 - row), ROW_PREFIX + (CELL_WIDTH + 1) * col


def _fit(tokens: list[str], mark: str) -> str:
    text = " ".join(tokens)
    room = CELL_WIDTH - 1
    if len(text) > room:
        text = text[:room - 1] + OVERFLOW_MARK
    return text.ljust(room) + mark


def _block_token(b, cell: int) -> str:
    program = int(b.block_program[cell])
    payload = (str(int(b.block_points[cell])) if program < 0
               else program_name(program))
    question = "?" if bool(b.block_question[cell]) else ""
    return f"#{question}{payload}/{int(b.block_spawn[cell])}"


def _terrain_tokens(b, cell: int) -> list[str]:
    content = int(b.content[cell])
    tokens = []
    if content == C.EXIT:
        tokens.append("EXIT")
    elif content == C.PICKUP:
        tokens.append("[S]")
    elif content == C.BLOCK:
        tokens.append(_block_token(b, cell))
    if int(b.credits[cell]) > 0:
        tokens.append(f"c{int(b.credits[cell])}")
    if int(b.energy[cell]) > 0:
        tokens.append(f"e{int(b.energy[cell])}")
    return tokens


def _entity_tokens(s: GameState) -> list[list[str]]:
    """Per cell: the player, then enemies and transmissions in list order."""
    tokens: list[list[str]] = [[] for _ in range(C.NUM_CELLS)]
    prow, pcol = int(s.player.row), int(s.player.col)
    tokens[prow * C.COLS + pcol].append("@")
    e = s.enemies
    visible = np.asarray(cryptog_visible(jax.tree.map(jnp.asarray, s)))  # the rule lives there once
    for i in np.flatnonzero(e.alive):
        kind, row, col = int(e.kind[i]), int(e.row[i]), int(e.col[i])
        flags = ("z" if bool(e.stunned[i]) else "") + ("d" if int(e.disabled[i]) > 0 else "")
        token = f"{ENEMY_LETTERS[kind]}{int(e.hp[i])}{flags}"
        if not visible[i]:
            token = f"({token})"
        tokens[row * C.COLS + col].append(token)
    t = s.transmissions
    for i in np.flatnonzero(t.alive):
        letter = ENEMY_LETTERS[int(t.kind[i])].lower()
        tokens[int(t.row[i]) * C.COLS + int(t.col[i])].append(f"T{letter}{int(t.timer[i])}")
    return tokens


def _board_lines(s: GameState) -> list[str]:
    b = s.board
    entities = _entity_tokens(s)
    header = " " * ROW_PREFIX + "".join(
        f"{col:^{CELL_WIDTH}} " for col in range(C.COLS)).rstrip()
    rule = " " * (ROW_PREFIX - 1) + "+" + ("-" * CELL_WIDTH + "+") * C.COLS
    lines = [header, rule]
    for row in reversed(range(C.ROWS)):
        cells = [row * C.COLS + col for col in range(C.COLS)]
        top = [_fit(entities[cell], SIPHON_CENTER_MARK if b.siphon_center[cell] else " ")
               for cell in cells]
        bottom = [_fit(_terrain_tokens(b, cell), SIPHONED_MARK if b.siphoned[cell] else " ")
                  for cell in cells]
        lines.append(f"{row} |" + "".join(text + "|" for text in top))
        lines.append("  |" + "".join(text + "|" for text in bottom))
        lines.append(rule)
    return lines


def _stats_lines(s: GameState) -> list[str]:
    p = s.player
    flags = [name for name, on in (("SHOW", s.show), ("CALM", s.calm),
                                   ("STEP", s.step_active), ("WON", s.won)) if bool(on)]
    owned = [program_name(int(i)) for i in np.flatnonzero(p.owned)]
    paragraphs = [
        f"stage {int(s.stage)}/{C.NUM_STAGES}  turn {int(s.turn)}  hp {int(p.hp)}/{C.MAX_HP}"
        f"  credits {int(p.credits)}  energy {int(p.energy)}  siphons {int(p.data_siphons)}"
        f"  attack {int(p.attack)}  score {int(p.score)}",
        f"next task {int(s.next_task)} (interval {int(s.interval)})  pending"
        f" {int(s.pending)}  atk+ uses {int(s.atk_uses)}  undo {int(s.history.depth)}"
        f"  flags {' '.join(flags) if flags else '-'}",
        "programs " + (" ".join(owned) if owned else "-"),
    ]
    return [line for text in paragraphs
            for line in textwrap.wrap(text, width=79, subsequent_indent="  ",
                                      break_on_hyphens=False)]


def render(state: GameState, legend: bool = True) -> str:
    """Draw an unbatched state as text (board, then stats, then optionally the legend).

    Args:
        state: one game state (device or host arrays).
        legend: append the key to the glyphs.

    Returns:
        Lines joined by newlines, none longer than 79 characters, no trailing newline.
    """
    s = jax.device_get(state)
    lines = _board_lines(s) + _stats_lines(s)
    if legend:
        lines += LEGEND
    return "\n".join(lines)
