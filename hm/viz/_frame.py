"""One game state as a picture: the board, a HUD above it, the programs below it.

The picture shows what `hm.game.render` shows, as shapes and colours: row 5 at the top
and row 0 at the bottom (docs/rules.md#board, §1), so `up` (row + 1) points up. Like the text
board it is a debugging view: it also shows what the agent cannot see (hidden
cryptogs, question-block payloads, transmission types), marked as such. Every frame has
the same size, `FRAME_HEIGHT` x `FRAME_WIDTH`, whatever the state holds (Gymnasium's
`rgb_array` needs one shape; both sides are multiples of 16, which video encoders want).
Pure Pillow on host values, so it runs anywhere the game does.
"""

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import UInt8
from PIL import Image, ImageDraw, ImageFont

from hm.game import constants as C
from hm.game.observation import cryptog_visible
from hm.game.scenario import program_name
from hm.game.state import GameState

CELL = 88                     # side of one board cell, pixels
MARGIN = 24                   # left and right of the board (row numbers on the left)
HUD_HEIGHT = 88               # three lines of game facts above the board
BOARD_TOP = HUD_HEIGHT + 8
BOARD_SIZE = CELL * C.ROWS
PROGRAMS_TOP = BOARD_TOP + BOARD_SIZE + 26    # below the column numbers
PROGRAM_COLUMNS = 8
PROGRAM_CHIP_HEIGHT = 22
FRAME_WIDTH = MARGIN + BOARD_SIZE + MARGIN                 # 576
FRAME_HEIGHT = 768
PROGRAM_ROWS = -(-C.NUM_PROGRAMS // PROGRAM_COLUMNS)
assert PROGRAMS_TOP + 18 + PROGRAM_ROWS * (PROGRAM_CHIP_HEIGHT + 4) <= FRAME_HEIGHT
assert FRAME_WIDTH % 16 == 0 and FRAME_HEIGHT % 16 == 0

Color = tuple[int, int, int]
Px = int | float           # a coordinate or length in pixels (Pillow takes either)
BACKGROUND: Color = (14, 17, 26)
CELL_COLOR: Color = (32, 38, 54)
SIPHONED_COLOR: Color = (22, 58, 66)      # a cell inside a siphon's reach this stage
HATCH_COLOR: Color = (34, 84, 94)
TEXT: Color = (228, 232, 242)
DIM_TEXT: Color = (128, 138, 160)
DARK_TEXT: Color = (14, 17, 26)
PLAYER_COLOR: Color = (92, 235, 120)
EXIT_COLOR: Color = (26, 92, 56)
EXIT_EDGE: Color = (80, 225, 130)
PICKUP_COLOR: Color = (40, 205, 235)
CREDITS_COLOR: Color = (245, 200, 64)
ENERGY_COLOR: Color = (96, 170, 255)
SIPHON_CENTER_COLOR: Color = (255, 214, 90)
DATA_BLOCK_COLOR: Color = (56, 92, 170)
PROGRAM_BLOCK_COLOR: Color = (128, 76, 178)
QUESTION_BLOCK_COLOR: Color = (176, 122, 34)
STUNNED_COLOR: Color = (255, 236, 110)
HP_COLOR: Color = (235, 72, 92)
ARROW_COLOR: Color = (255, 255, 255)
# By enemy type (VIRUS, DAEMON, GLITCH, CRYPTOG): a transmission of a type has its colour too.
ENEMY_COLORS: tuple[Color, ...] = ((232, 66, 66), (242, 142, 40), (222, 80, 222), (150, 112, 255))
ENEMY_LETTERS = "VDGC"


@functools.cache
def font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    """Pillow's bundled font at `size` pixels: the same on every machine, no font files needed."""
    return ImageFont.load_default(size=size)


def _mix(color: Color, other: Color, weight: float) -> Color:
    """`weight` of `color` and the rest of `other` (for dimmed and hidden things)."""
    return tuple(round(weight * a + (1 - weight) * b) for a, b in zip(color, other))


class Box(NamedTuple):
    """A rectangle in pixels: left, top, right, bottom."""

    left: int
    top: int
    right: int
    bottom: int

    @property
    def center(self) -> tuple[Px, Px]:
        return (self.left + self.right) / 2, (self.top + self.bottom) / 2

    def inset(self, by: int) -> "Box":
        return Box(self.left + by, self.top + by, self.right - by, self.bottom - by)


def cell_box(row: int, col: int) -> Box:
    """Where board cell (row, col) is drawn; row 5 is the top row (docs/rules.md#board)."""
    left = MARGIN + col * CELL
    top = BOARD_TOP + (C.ROWS - 1 - row) * CELL
    return Box(left, top, left + CELL, top + CELL)


# --- what a cell holds ---------------------------------------------------------------------


def draw_cell_ground(draw: ImageDraw.ImageDraw, box: Box, siphoned: bool) -> None:
    """The cell's tile; a cell siphoned this stage is tinted and hatched."""
    tile = box.inset(2)
    draw.rounded_rectangle(tile, radius=6, fill=SIPHONED_COLOR if siphoned else CELL_COLOR)
    if siphoned:
        for offset in range(-CELL, CELL, 14):    # diagonal hatch lines, clipped to the tile
            x0, y0, x1, y1 = tile.left + offset, tile.bottom, tile.left + offset + CELL, tile.bottom - CELL
            if x0 < tile.left:
                y0, x0 = y0 - (tile.left - x0), tile.left
            if x1 > tile.right:
                y1, x1 = y1 + (x1 - tile.right), tile.right
            if x0 < x1:
                draw.line((x0, y0 - 3, x1, y1 + 3), fill=HATCH_COLOR, width=1)


def draw_exit(draw: ImageDraw.ImageDraw, box: Box) -> None:
    tile = box.inset(5)
    draw.rounded_rectangle(tile, radius=6, fill=EXIT_COLOR, outline=EXIT_EDGE, width=3)
    draw.text((box.center[0], box.top + 17), "EXIT", font=font(14), fill=EXIT_EDGE, anchor="mm")


def draw_pickup(draw: ImageDraw.ImageDraw, box: Box) -> None:
    """A data-siphon pickup: a diamond marked S."""
    x, y = box.center
    r = 20
    draw.polygon([(x, y - r), (x + r, y), (x, y + r), (x - r, y)], fill=PICKUP_COLOR, outline=TEXT)
    draw.text((x, y), "S", font=font(18), fill=DARK_TEXT, anchor="mm")


def block_label(program: int, points: int, question: bool) -> str:
    """A block's payload in words: `7` data points, a program's name; a question mark first
    when the payload is hidden from the agent."""
    payload = str(points) if program < 0 else program_name(program)
    return f"?{payload}" if question else payload


def block_color(program: int, question: bool, siphoned: bool) -> Color:
    color = QUESTION_BLOCK_COLOR if question else DATA_BLOCK_COLOR if program < 0 else PROGRAM_BLOCK_COLOR
    return _mix(color, CELL_COLOR, 0.45) if siphoned else color


def draw_block(draw: ImageDraw.ImageDraw, box: Box, *, program: int, points: int, question: bool,
               spawn: int, siphoned: bool, crowded: bool) -> None:
    """A block: its payload large in the middle (small at the top when an enemy stands on it),
    and its spawn count (transmissions siphoning it creates) in the bottom-right corner."""
    tile = box.inset(6)
    color = block_color(program, question, siphoned)
    draw.rounded_rectangle(tile, radius=4, fill=color, outline=_mix(TEXT, color, 0.35), width=2)
    text_color = DIM_TEXT if siphoned else TEXT
    label = block_label(program, points, question)
    if crowded:
        draw.text((box.center[0], box.top + 15), label, font=font(12), fill=text_color, anchor="mm")
    else:
        size = 30 if program < 0 else 15
        draw.text((box.center[0], box.center[1] - 4), label, font=font(size), fill=text_color, anchor="mm")
    if spawn > 0:
        draw.text((tile.right - 4, tile.bottom - 3), f"x{spawn}", font=font(12), fill=text_color, anchor="rd")


def draw_resource(draw: ImageDraw.ImageDraw, box: Box, kind: str, amount: int) -> None:
    """Credits (a gold coin) or energy (a blue bolt) with the amount, in the top-left corner
    (clear of the tokens below it; the top centre holds the EXIT and block labels, which
    never share a cell with a resource in generated stages)."""
    x, y = box.left + 16, box.top + 15
    if kind == "credits":
        draw.ellipse((x - 9, y - 9, x + 9, y + 9), fill=CREDITS_COLOR, outline=_mix(CREDITS_COLOR, DARK_TEXT, 0.6), width=2)
        draw.text((x, y), "c", font=font(13), fill=DARK_TEXT, anchor="mm")
        color = CREDITS_COLOR
    else:
        draw.polygon([(x + 3, y - 10), (x - 7, y + 2), (x, y + 2), (x - 3, y + 10), (x + 7, y - 2), (x, y - 2)],
                     fill=ENERGY_COLOR)
        color = ENERGY_COLOR
    draw.text((x + 13, y), str(amount), font=font(16), fill=color, anchor="lm")


def draw_siphon_center(draw: ImageDraw.ImageDraw, box: Box) -> None:
    """Where the player stood when siphoning: a gold crosshair in the top-right corner."""
    x, y = box.right - 14, box.top + 14
    draw.ellipse((x - 7, y - 7, x + 7, y + 7), outline=SIPHON_CENTER_COLOR, width=2)
    draw.line((x - 10, y, x + 10, y), fill=SIPHON_CENTER_COLOR, width=2)
    draw.line((x, y - 10, x, y + 10), fill=SIPHON_CENTER_COLOR, width=2)


# --- who stands on a cell ------------------------------------------------------------------


class Token(NamedTuple):
    """Something standing on a cell: the player, an enemy or a transmission."""

    kind: str                 # "player", "enemy" or "transmission"
    enemy_type: int = 0
    hp: int = 0
    timer: int = 0
    stunned: bool = False
    disabled: bool = False
    from_siphon: bool = False
    hidden: bool = False      # a cryptog the agent does not observe (docs/rules.md#observation)


def _dashed_circle(draw: ImageDraw.ImageDraw, x: Px, y: Px, r: Px, color: Color, width: int) -> None:
    for start in range(0, 360, 30):
        draw.arc((x - r, y - r, x + r, y + r), start, start + 18, fill=color, width=width)


def draw_token(draw: ImageDraw.ImageDraw, x: Px, y: Px, r: Px, token: Token) -> None:
    """One token centred at (x, y), `r` pixels from the centre to its edge."""
    big = r >= 20
    if token.kind == "player":
        draw.ellipse((x - r, y - r, x + r, y + r), fill=PLAYER_COLOR, outline=TEXT, width=2)
        draw.text((x, y), "@", font=font(round(r * 1.2)), fill=DARK_TEXT, anchor="mm")
        return
    color = ENEMY_COLORS[token.enemy_type]
    letter = ENEMY_LETTERS[token.enemy_type]
    if token.kind == "transmission":
        # Not yet an enemy: a dashed ring of its future type, with the turns until it hatches.
        _dashed_circle(draw, x, y, r - 1, color, 3 if big else 2)
        draw.text((x, y), f"{letter.lower()}{token.timer}", font=font(round(r * 0.8)), fill=color, anchor="mm")
        return
    fill = _mix(color, CELL_COLOR, 0.35) if token.hidden else _mix(color, CELL_COLOR, 0.5) if token.disabled else color
    edge = STUNNED_COLOR if token.stunned else _mix(TEXT, fill, 0.6)
    draw.rounded_rectangle((x - r, y - r, x + r, y + r), radius=r // 3, fill=fill, outline=edge,
                           width=3 if token.stunned else 1)
    if token.hidden:
        _dashed_circle(draw, x, y, r + 2, TEXT, 1)
    draw.text((x, y - r * 0.15), letter, font=font(round(r * 1.05)), fill=TEXT, anchor="mm")
    # HP as pips along the bottom edge.
    pip, gap = max(2, round(r / 7)), max(3, round(r / 3.2))
    first = x - gap * (token.hp - 1) / 2
    for i in range(token.hp):
        px, py = first + i * gap, y + r * 0.68
        draw.ellipse((px - pip, py - pip, px + pip, py + pip), fill=TEXT)
    if token.stunned:
        draw.text((x + r - 1, y - r + 1), "z", font=font(round(r * 0.8)), fill=STUNNED_COLOR, anchor="mm",
                  stroke_width=2, stroke_fill=DARK_TEXT)
    if token.from_siphon:
        draw.ellipse((x - r + 2, y - r + 2, x - r + 2 + 2 * pip + 2, y - r + 2 + 2 * pip + 2), fill=PICKUP_COLOR)


# A lone token sits a little below the cell's centre, clear of the labels at the top.
PLAYER_DROP = 6


def draw_tokens(draw: ImageDraw.ImageDraw, box: Box, tokens: Sequence[Token]) -> None:
    """One token large in the middle; two to four in a 2x2 grid; more: three and `+n`."""
    if not tokens:
        return
    x, y = box.center
    if len(tokens) == 1:
        draw_token(draw, x, y + PLAYER_DROP, 22, tokens[0])
        return
    spots = [(x - 19, y - 6), (x + 19, y - 6), (x - 19, y + 26), (x + 19, y + 26)]
    shown = tokens if len(tokens) <= 4 else tokens[:3]
    for (tx, ty), token in zip(spots, shown):
        draw_token(draw, tx, ty, 15, token)
    if len(tokens) > 4:
        draw.text(spots[3], f"+{len(tokens) - 3}", font=font(15), fill=TEXT, anchor="mm")


def draw_action_arrow(draw: ImageDraw.ImageDraw, x: Px, y: Px, direction: int, *, start: Px = 28,
                      tip: Px = 56) -> None:
    """An arrow from the player at (x, y) towards the neighbour it moves to or attacks,
    from `start` to `tip` pixels away from the player's centre."""
    d_row, d_col = (int(v) for v in C.DIRECTION_DELTAS[direction])
    dx, dy = d_col, -d_row           # screen y grows downwards, rows grow upwards
    start = (x + dx * start, y + dy * start)
    tip = (x + dx * tip, y + dy * tip)
    draw.line((*start, *tip), fill=ARROW_COLOR, width=5)
    side = (-dy * 9, dx * 9)
    back = (tip[0] - dx * 13, tip[1] - dy * 13)
    draw.polygon([tip, (back[0] + side[0], back[1] + side[1]), (back[0] - side[0], back[1] - side[1])],
                 fill=ARROW_COLOR)


# --- the whole frame ------------------------------------------------------------------------


def _cell_tokens(s: GameState) -> list[list[Token]]:
    """Per cell: the player, then enemies and transmissions in list order (as `render`)."""
    tokens: list[list[Token]] = [[] for _ in range(C.NUM_CELLS)]
    prow, pcol = int(s.player.row), int(s.player.col)
    tokens[prow * C.COLS + pcol].append(Token("player"))
    e = s.enemies
    visible = np.asarray(cryptog_visible(jax.tree.map(jnp.asarray, s)))  # the rule lives there once
    for i in np.flatnonzero(e.alive):
        kind, row, col = int(e.kind[i]), int(e.row[i]), int(e.col[i])
        tokens[row * C.COLS + col].append(Token(
            "enemy", enemy_type=kind, hp=int(e.hp[i]), stunned=bool(e.stunned[i]), disabled=int(e.disabled[i]) > 0,
            from_siphon=bool(e.from_siphon[i]), hidden=not visible[i]))
    t = s.transmissions
    for i in np.flatnonzero(t.alive):
        tokens[int(t.row[i]) * C.COLS + int(t.col[i])].append(
            Token("transmission", enemy_type=int(t.kind[i]), timer=int(t.timer[i]), from_siphon=bool(t.from_siphon[i])))
    return tokens


def _draw_board(draw: ImageDraw.ImageDraw, s: GameState) -> None:
    b = s.board
    tokens = _cell_tokens(s)
    for row in range(C.ROWS):
        for col in range(C.COLS):
            cell, box = row * C.COLS + col, cell_box(row, col)
            if bool(b.siphoned[cell]):          # the plain ground is in `_blank_frame`
                draw_cell_ground(draw, box, True)
            content = int(b.content[cell])
            if content == C.EXIT:
                draw_exit(draw, box)
            elif content == C.PICKUP:
                draw_pickup(draw, box)
            elif content == C.BLOCK:
                draw_block(draw, box, program=int(b.block_program[cell]), points=int(b.block_points[cell]),
                           question=bool(b.block_question[cell]), spawn=int(b.block_spawn[cell]),
                           siphoned=bool(b.siphoned[cell]), crowded=bool(tokens[cell]))
            if int(b.credits[cell]) > 0:
                draw_resource(draw, box, "credits", int(b.credits[cell]))
            if int(b.energy[cell]) > 0:
                draw_resource(draw, box, "energy", int(b.energy[cell]))
            if bool(b.siphon_center[cell]):
                draw_siphon_center(draw, box)
            draw_tokens(draw, box, tokens[cell])


def _heart(draw: ImageDraw.ImageDraw, x: Px, y: Px, full: bool) -> None:
    color = HP_COLOR if full else _mix(HP_COLOR, BACKGROUND, 0.3)
    draw.ellipse((x - 8, y - 7, x, y + 1), fill=color)
    draw.ellipse((x, y - 7, x + 8, y + 1), fill=color)
    draw.polygon([(x - 8, y - 2), (x + 8, y - 2), (x, y + 8)], fill=color)


def _draw_line(draw: ImageDraw.ImageDraw, x: Px, y: Px, items: Sequence[tuple[str, Color, int]]) -> Px:
    """Texts (text, colour, size) left to right from (x, y); returns where the line ends."""
    for text, color, size in items:
        draw.text((x, y), text, font=font(size), fill=color, anchor="lm")
        x += draw.textlength(text, font=font(size)) + 16
    return x


def _draw_hud(draw: ImageDraw.ImageDraw, s: GameState) -> None:
    """Line 1: stage, HP hearts, score, flags. Line 2: resources, attack. Line 3: the clock."""
    p = s.player
    y1, y2, y3 = 20, 50, 74
    x = _draw_line(draw, MARGIN, y1, [(f"STAGE {int(s.stage)}/{C.NUM_STAGES}", TEXT, 20), ("HP", DIM_TEXT, 16)])
    for i in range(C.MAX_HP):
        _heart(draw, x + 8 + 22 * i, y1, i < int(p.hp))
    _draw_line(draw, x + 22 * C.MAX_HP + 12, y1, [("score", DIM_TEXT, 16), (str(int(p.score)), TEXT, 20)])
    flags = [name for name, on in (("SHOW", s.show), ("CALM", s.calm), ("STEP", s.step_active), ("WON", s.won))
             if bool(on)]
    right = FRAME_WIDTH - MARGIN
    for name in reversed(flags):     # chips from the right edge leftwards
        width = draw.textlength(name, font=font(13)) + 12
        draw.rounded_rectangle((right - width, y1 - 10, right, y1 + 10), radius=5, outline=SIPHON_CENTER_COLOR, width=1)
        draw.text((right - width / 2, y1), name, font=font(13), fill=SIPHON_CENTER_COLOR, anchor="mm")
        right -= width + 6
    _draw_line(draw, MARGIN, y2, [(f"credits {int(p.credits)}", CREDITS_COLOR, 16),
                                  (f"energy {int(p.energy)}", ENERGY_COLOR, 16),
                                  (f"siphons {int(p.data_siphons)}", PICKUP_COLOR, 16),
                                  (f"attack {int(p.attack)}", TEXT, 16)])
    clock = [(f"turn {int(s.turn)}", DIM_TEXT, 14), (f"next task at turn {int(s.next_task)}", DIM_TEXT, 14)]
    if int(s.pending) > 0:
        clock.append((f"{int(s.pending)} siphon transmissions pending", ENEMY_COLORS[C.VIRUS], 14))
    _draw_line(draw, MARGIN, y3, clock)


def _draw_program_chip(draw: ImageDraw.ImageDraw, program: int, owned: bool) -> None:
    """A program's chip below the board, in id order: lit if owned, an outline if not."""
    width = BOARD_SIZE // PROGRAM_COLUMNS
    row, col = divmod(program, PROGRAM_COLUMNS)
    left = MARGIN + col * width
    top = PROGRAMS_TOP + 16 + row * (PROGRAM_CHIP_HEIGHT + 4)
    chip = (left + 2, top, left + width - 2, top + PROGRAM_CHIP_HEIGHT)
    if owned:
        draw.rounded_rectangle(chip, radius=5, fill=PROGRAM_BLOCK_COLOR, outline=TEXT, width=1)
        color = TEXT
    else:
        draw.rounded_rectangle(chip, radius=5, fill=BACKGROUND, outline=_mix(DIM_TEXT, BACKGROUND, 0.4), width=1)
        color = _mix(DIM_TEXT, BACKGROUND, 0.7)
    draw.text(((chip[0] + chip[2]) / 2, (chip[1] + chip[3]) / 2), program_name(program), font=font(12),
              fill=color, anchor="mm")


@functools.cache
def _blank_frame() -> Image.Image:
    """What every frame shares: empty cells, row and column numbers, unowned programs.
    Drawn once; a frame starts as a copy and draws only what differs (text is the slow part)."""
    image = Image.new("RGB", (FRAME_WIDTH, FRAME_HEIGHT), BACKGROUND)
    draw = ImageDraw.Draw(image)
    for row in range(C.ROWS):
        for col in range(C.COLS):
            draw_cell_ground(draw, cell_box(row, col), False)
    for i in range(C.ROWS):
        draw.text((MARGIN / 2, cell_box(i, 0).center[1]), str(i), font=font(14), fill=DIM_TEXT, anchor="mm")
        draw.text((cell_box(0, i).center[0], BOARD_TOP + BOARD_SIZE + 12), str(i), font=font(14), fill=DIM_TEXT,
                  anchor="mm")
    draw.text((MARGIN, PROGRAMS_TOP + 6), "PROGRAMS", font=font(12), fill=DIM_TEXT, anchor="lm")
    for program in range(C.NUM_PROGRAMS):
        _draw_program_chip(draw, program, False)
    return image


def draw_frame(state: GameState, *, action: int | None = None) -> UInt8[np.ndarray, "height width 3"]:
    """Draw one unbatched game as an RGB picture.

    Args:
        state: one game (device or host arrays; not batched).
        action: if given and a move/attack (0-3), an arrow from the player shows its
            direction: the action about to be taken in this state.

    Returns:
        `uint8` array of shape `(FRAME_HEIGHT, FRAME_WIDTH, 3)`.
    """
    image = draw_image(state, action=action)
    return np.asarray(image, dtype=np.uint8)


def draw_image(state: GameState, *, action: int | None = None) -> Image.Image:
    """`draw_frame` as a Pillow image (for writing PNG and GIF files)."""
    if np.ndim(state.stage) != 0:
        raise ValueError(f"draw_frame draws one game; got a batch of shape {np.shape(state.stage)}")
    s = jax.device_get(state)
    image = _blank_frame().copy()
    draw = ImageDraw.Draw(image)
    _draw_hud(draw, s)
    _draw_board(draw, s)
    for program in np.flatnonzero(s.player.owned):
        _draw_program_chip(draw, int(program), True)
    if action is not None and 0 <= action < C.ACTION_SIPHON:
        x, y = cell_box(int(s.player.row), int(s.player.col)).center
        draw_action_arrow(draw, x, y + PLAYER_DROP, action)
    return image


# --- the legend ------------------------------------------------------------------------------


def _icon(paint: Callable[[ImageDraw.ImageDraw, Box], None], siphoned: bool = False) -> Image.Image:
    image = Image.new("RGB", (CELL, CELL), BACKGROUND)
    draw = ImageDraw.Draw(image)
    box = Box(0, 0, CELL, CELL)
    draw_cell_ground(draw, box, siphoned)
    paint(draw, box)
    return image


def _block_icon(**payload) -> Callable[[ImageDraw.ImageDraw, Box], None]:
    return lambda draw, box: draw_block(draw, box, crowded=False, **payload)


def _token_icon(token: Token) -> Callable[[ImageDraw.ImageDraw, Box], None]:
    return lambda draw, box: draw_tokens(draw, box, [token])


def legend() -> list[tuple[Image.Image, str]]:
    """Every kind of thing the frame draws, drawn by the same code, with what it means."""
    entries: list[tuple[Callable[[ImageDraw.ImageDraw, Box], None], str, bool]] = [
        (_token_icon(Token("player")), "you, the player (@)", False),
        *[(_token_icon(Token("enemy", enemy_type=kind, hp=int(C.ENEMY_MAX_HP[kind]))),
           f"{C.ENEMY_NAMES[kind]} ({ENEMY_LETTERS[kind]}); dots are its HP", False) for kind in range(C.NUM_ENEMY_TYPES)],
        (_token_icon(Token("enemy", enemy_type=C.DAEMON, hp=2, stunned=True)), "stunned enemy (yellow edge, z)", False),
        (_token_icon(Token("enemy", enemy_type=C.VIRUS, hp=2, disabled=True)), "disabled enemy (faded): neither moves nor attacks", False),
        (_token_icon(Token("enemy", enemy_type=C.GLITCH, hp=2, from_siphon=True)), "enemy from a siphon (cyan dot)", False),
        (_token_icon(Token("enemy", enemy_type=C.CRYPTOG, hp=2, hidden=True)),
         "cryptog hidden from the agent (dashed ring): not in its row or column, no SHOW", False),
        (_token_icon(Token("transmission", enemy_type=C.DAEMON, timer=2)),
         "transmission: becomes a daemon (d) in 2 turns", False),
        (_block_icon(program=-1, points=7, question=False, spawn=7, siphoned=False),
         "data block: 7 points, siphoning it spawns 7 transmissions (x7)", False),
        (_block_icon(program=C.CRASH, points=0, question=False, spawn=6, siphoned=False),
         "program block: siphoning it gives CRASH", False),
        (_block_icon(program=-1, points=4, question=True, spawn=4, siphoned=False),
         "question block: payload hidden from the agent (here 4 points)", False),
        (_block_icon(program=-1, points=7, question=False, spawn=0, siphoned=True), "block already siphoned", True),
        (draw_exit, "exit: step on it to finish the stage", False),
        (draw_pickup, "data-siphon pickup", False),
        (lambda draw, box: draw_resource(draw, box, "credits", 2), "2 credits", False),
        (lambda draw, box: draw_resource(draw, box, "energy", 3), "3 energy", False),
        (lambda draw, box: None, "cell inside a siphon's reach this stage (hatched)", True),
        (draw_siphon_center, "siphon centre: where the player siphoned", True),
        (lambda draw, box: (draw_token(draw, 26, 44, 18, Token("player")),
                            draw_action_arrow(draw, 26, 44, C.DIRECTION_NAMES.index("right"), start=22, tip=64)),
         "the move or attack about to be made", False),
    ]
    return [(_icon(paint, siphoned), text) for paint, text, siphoned in entries]
