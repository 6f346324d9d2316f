"""Reference model of HackMatrix: a literal, plain-Python reading of the rules.

This module shares no code with `hm.game`. It is written to be read side by side with
docs/rules.md (section numbers in comments are its sections, which keep the numbering
of the HackMatrix rules specification the model was written from) and with the scenario
format of `hm/game/scenario.py`, and is used as the oracle of the differential tests.
No JAX, no numpy.

Public API
----------
* `from_scenario(d, history_cap=None) -> RefState`, `to_scenario(s) -> dict` (docs/scenarios.md).
* `legal_actions(s) -> list[bool]` (28 entries, §5).
* `step(s, action, rng) -> (s2, obs, reward, done, info)` (§6). `s` is never mutated.
  `rng` is a `random.Random` (or any object with `below(n)` / `weighted(ws)`, see
  `enumerate_outcomes`). `info` has `reward_terms` (the 15 named terms of §14.1),
  `stage_completed`, `won`, `died`, `illegal`, plus model-only bookkeeping
  (`snapshot_pushed`, `history_cleared`, and on stage completion `transmissions_kept`).
* `observe(s) -> (player[10], programs[23], grid[6][6][42])` (§15), float32-rounded.
* `new_game(rng) -> RefState` (§12.5).
* `enumerate_outcomes(s, action, budget)`: every outcome the rules allow, by exploring
  every branch of every random draw (None if there are more than `budget` branches).

Randomness (§16) goes through two primitives only: `below(n)` (uniform in 0..n-1) and
`weighted(ws)` (index drawn with the given probabilities). A draw with a single option is
not a draw. Enemy activation order is drawn as a uniform ordering of the enemies that
are *eligible* to act in that activation step (disabled / stunned / already-attacked /
too-slow enemies are skipped whatever their position in the permutation, so only the
relative order of the eligible ones matters; the distribution is the same as a full
uniform permutation). This keeps the branching small enough to enumerate.

Interpretations
---------------
Places where the spec left a choice; the reading taken here:

1. Exit position vs content. "The player stands on the exit" / "the player's new cell
   is the exit" is read as: the player's cell has content EXIT (the cell at `exit`).
2. Stage initialisation when the player is not on a corner (only reachable from
   hand-written scenarios with a non-corner exit): the exit is drawn uniformly from
   the corners other than the player's cell (4 of them) and every other such corner
   gets a pickup. Generated games always have the player on a corner.
3. §10.1 rule A when the enemy stands on the player's cell (only after WARP onto a
   transmission cell that a PUSH/PULL stacked an enemy onto): the BFS source is q
   (= p), `p` is never entered; the enemy then steps to the first enterable neighbour.
   Rule C is "first neighbour in canonical order with the minimum Manhattan distance"
   (no requirement to get closer than the current cell).
4. The scheduled task (§10 step 4) sets `nextTask := turn + interval` even when the
   placement fails for lack of free cells.
5. Victory: `won` stays true; a later step (not normally made) again reports
   `done = died or won` = True. Actions are not made illegal by `won`.
6. UNDO restores nothing that §9.10 does not list: `won`, `stage`, `exit`, `interval`,
   `nextTask`, `pending`, `stepActive` keep their current values.
7. Siphon quality when the player stands on a block (after WARP): the yield of a
   block cell is (0, 0, {}, {}) by §14.3, so Y0 is empty and every non-block cell is a
   candidate, even though the actual siphon does collect the block.
8. Resources on a block cell (not generated; possible in scenarios and after CRASH
   keeps the field): the observation shows them only if the cell is siphoned; walking
   never collects; siphoning a block cell does not collect them; the siphon-quality
   yield of a block cell `y` in a cross counts the block, not the resource.
9. Entities whose enemy count would exceed a capacity are not modelled: the model's
   lists are unbounded (the engine's are 36). Only the UNDO history is optionally
   bounded (`history_cap`, oldest entry dropped), to mirror the engine's ring buffer.
10. Stage generation draws, in this order: exit corner, K, then per attempt K ordered
    distinct cells and per chosen cell (isData, isQuestion, points|program), then
    resources in cell-index order (amount, kind), then `stage` transmissions (cell,
    type). Only the distribution matters; the order is not observable.
11. `info["won"]` is "won on this step". The engine reports the state's `won` flag after
    the step; the two differ only for a state that was already won (the differential
    harness compares the engine's flag with the model state's `won`).
12. A dead player is written by `to_scenario` with `hp` 0, which the scenario reader (docs/scenarios.md)
    must reject (player hp 1..3), so `from_dict(to_dict(s)) == s` cannot hold for a
    terminal death state. `from_scenario(..., strict=False)` reads it back.
13. Scenario-expressible states that no play reaches are not given a meaning beyond the
    literal rules and are not generated by the differential tests: a siphoned question
    block, a resource on the exit, an exit off the corners, the player on the exit
    without `won`.
"""

from __future__ import annotations

import operator
import random
import struct
from dataclasses import dataclass, field, replace
from typing import Optional

# ---------------------------------------------------------------------------
# Tables (§1, §2.3, §4, §14.1)
# ---------------------------------------------------------------------------

ROWS = COLS = 6
CORNERS = ((0, 0), (0, 5), (5, 0), (5, 5))
ALL_CELLS = tuple((r, c) for r in range(6) for c in range(6))
# canonical direction order: up, down, left, right (= action index)
DIRECTIONS = ((1, 0), (-1, 0), (0, -1), (0, 1))

EMPTY, BLOCK, PICKUP, EXIT = "EMPTY", "BLOCK", "PICKUP", "EXIT"

VIRUS, DAEMON, GLITCH, CRYPTOG = 0, 1, 2, 3
ENEMY_NAMES = ("virus", "daemon", "glitch", "cryptog")
ENEMY_MAX_HP = (2, 3, 2, 2)
ENEMY_SPEED = (2, 1, 1, 1)

# (scenario name, credits, energy, block spawn count), in program id order
PROGRAM_TABLE = (
    ("push", 0, 2, 4), ("pull", 0, 2, 4), ("crash", 3, 2, 6), ("warp", 2, 2, 5),
    ("poly", 1, 1, 3), ("wait", 0, 1, 1), ("debug", 3, 0, 4), ("row", 3, 1, 2),
    ("col", 3, 1, 2), ("undo", 1, 0, 3), ("step", 0, 3, 4), ("siph+", 5, 0, 7),
    ("exch", 4, 0, 3), ("show", 2, 0, 2), ("reset", 0, 4, 2), ("calm", 2, 4, 6),
    ("d_bom", 3, 0, 4), ("delay", 1, 2, 4), ("anti-v", 3, 0, 4), ("score", 0, 5, 5),
    ("reduc", 2, 1, 3), ("atk+", 4, 4, 8), ("hack", 2, 2, 4),
)
NUM_PROGRAMS = 23
PROGRAM_NAMES = tuple(t[0] for t in PROGRAM_TABLE)
CREDIT_COST = tuple(t[1] for t in PROGRAM_TABLE)
ENERGY_COST = tuple(t[2] for t in PROGRAM_TABLE)
SPAWN_COUNT = tuple(t[3] for t in PROGRAM_TABLE)
(PUSH, PULL, CRASH, WARP, POLY, WAIT, DEBUG, ROW, COL, UNDO, STEP, SIPH_PLUS, EXCH,
 SHOW, RESET, CALM, D_BOM, DELAY, ANTI_V, SCORE, REDUC, ATK_PLUS, HACK) = range(23)
PROGRAM_ALIASES = {
    "siphplus": SIPH_PLUS, "siph_plus": SIPH_PLUS, "dbom": D_BOM, "d_bomb": D_BOM,
    "antiv": ANTI_V, "anti_v": ANTI_V, "atkplus": ATK_PLUS, "atk_plus": ATK_PLUS,
}

NUM_ACTIONS = 28
ACTION_SIPHON = 4

# §14.1 stage completion rewards T[1..8] ([RESOLUTION]: 100 for stage 8)
STAGE_REWARD = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 100.0)
REWARD_TERMS = (
    "step", "stage", "score", "kills", "pickup", "distance", "victory", "death",
    "resources", "holding", "damage", "recovery", "siphon_quality", "program_waste",
    "siphon_death",
)


# ---------------------------------------------------------------------------
# State (§1.1, §2)
# ---------------------------------------------------------------------------

@dataclass
class Block:
    """A block payload (§2.4). `kind` is the real payload ('data' | 'program');
    `question` marks a QUESTION block hiding it."""

    kind: str
    points: int = 0
    program: Optional[int] = None
    spawn: int = 0
    question: bool = False


@dataclass
class Cell:
    content: str = EMPTY
    block: Optional[Block] = None
    credits: int = 0
    energy: int = 0
    siphoned: bool = False
    siphon_center: bool = False

    def copy(self) -> "Cell":
        return Cell(self.content, None if self.block is None else replace(self.block),
                    self.credits, self.energy, self.siphoned, self.siphon_center)


@dataclass
class Player:
    row: int
    col: int
    hp: int = 3
    credits: int = 0
    energy: int = 0
    siphons: int = 0
    attack: int = 1
    score: int = 0


@dataclass
class Enemy:
    type: int
    row: int
    col: int
    hp: int
    disabled: int = 0
    stunned: bool = False
    from_task: bool = False
    from_siphon: bool = False


@dataclass
class Transmission:
    row: int
    col: int
    timer: int
    type: int
    from_task: bool = False
    from_siphon: bool = False


@dataclass(frozen=True)
class Snapshot:
    """What UNDO restores (§9.10, §17.5). Never mutated; restored by copying."""

    cells: tuple
    player: Player
    turn: int
    owned: frozenset
    enemies: tuple
    transmissions: tuple
    show: bool
    calm: bool
    atk_uses: int


@dataclass
class RefState:
    cells: list            # 36 Cells, index row * 6 + col
    player: Player
    enemies: list = field(default_factory=list)        # list order = creation order
    transmissions: list = field(default_factory=list)
    owned: set = field(default_factory=set)            # program ids
    stage: int = 1
    turn: int = 0
    show: bool = False
    calm: bool = False
    step_active: bool = False
    atk_uses: int = 0
    exit: tuple = (5, 5)
    interval: int = 12
    next_task: int = 12
    pending: int = 0
    won: bool = False
    history: list = field(default_factory=list)        # of Snapshot, top = last
    history_cap: Optional[int] = None                  # None: unbounded (canonical)

    def cell(self, r, c) -> Cell:
        return self.cells[r * COLS + c]

    def clone(self) -> "RefState":
        return RefState(
            cells=[c.copy() for c in self.cells], player=replace(self.player),
            enemies=[replace(e) for e in self.enemies],
            transmissions=[replace(t) for t in self.transmissions],
            owned=set(self.owned), stage=self.stage, turn=self.turn, show=self.show,
            calm=self.calm, step_active=self.step_active, atk_uses=self.atk_uses,
            exit=self.exit, interval=self.interval, next_task=self.next_task,
            pending=self.pending, won=self.won, history=list(self.history),
            history_cap=self.history_cap)


def bare(r, c) -> RefState:
    """The bare fixture F(r, c) of §19."""
    s = RefState(cells=[Cell() for _ in range(36)], player=Player(r, c))
    s.cell(5, 5).content = EXIT
    return s


# ---------------------------------------------------------------------------
# Small geometry helpers
# ---------------------------------------------------------------------------

def on_board(r, c) -> bool:
    return 0 <= r < ROWS and 0 <= c < COLS


def neighbours(r, c):
    """Orthogonal on-board neighbours in canonical order (up, down, left, right)."""
    return [(r + dr, c + dc) for dr, dc in DIRECTIONS if on_board(r + dr, c + dc)]


def surrounding8(r, c):
    """The 8 surrounding cells, row offset -1..+1 then column offset -1..+1 (§9.3)."""
    return [(r + dr, c + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)
            if (dr or dc) and on_board(r + dr, c + dc)]


def cross(r, c):
    """The cell plus its orthogonal neighbours: self, up, down, left, right (§8)."""
    return [(r, c)] + neighbours(r, c)


def manhattan(a, b) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def _sign(x) -> int:
    return (x > 0) - (x < 0)


def is_block(s, r, c) -> bool:
    return s.cell(r, c).content == BLOCK


def enemies_at(s, r, c):
    return [e for e in s.enemies if e.row == r and e.col == c]


def transmissions_at(s, r, c):
    return [t for t in s.transmissions if t.row == r and t.col == c]


def _remove(lst, items):
    ids = {id(x) for x in items}
    return [x for x in lst if id(x) not in ids]


def f32(x: float) -> float:
    """Round a Python float to the nearest float32 value."""
    return struct.unpack("f", struct.pack("f", x))[0]


# ---------------------------------------------------------------------------
# Randomness (§16)
# ---------------------------------------------------------------------------

class _Random:
    """Adapter from `random.Random` to the two draw primitives."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def below(self, n: int) -> int:
        return 0 if n <= 1 else self.rng.randrange(n)

    def weighted(self, ws) -> int:
        x = self.rng.random() * sum(ws)
        acc = 0.0
        for i, w in enumerate(ws):
            acc += w
            if x < acc and w > 0:
                return i
        return max(i for i, w in enumerate(ws) if w > 0)


def _chance(rng):
    if isinstance(rng, random.Random):
        return _Random(rng)
    if hasattr(rng, "below") and hasattr(rng, "weighted"):
        return rng
    if isinstance(rng, int):
        return _Random(random.Random(rng))
    raise TypeError(f"not a random source: {rng!r}")


def _bern(R, p) -> bool:
    return R.weighted((1.0 - p, p)) == 1


def _uniform_order(R, items):
    """A uniformly random ordering of `items`."""
    rest = list(items)
    out = []
    while rest:
        out.append(rest.pop(R.below(len(rest))))
    return out


# ---------------------------------------------------------------------------
# §5 Legal-action mask
# ---------------------------------------------------------------------------

def _program_condition(s: RefState, g: int) -> bool:
    p = s.player
    if g in (PUSH, PULL, POLY):
        return bool(s.enemies)
    if g == CRASH:
        return any(is_block(s, r, c) or enemies_at(s, r, c) or transmissions_at(s, r, c)
                   for r, c in surrounding8(p.row, p.col))
    if g == WARP:
        return bool(s.enemies) or bool(s.transmissions)
    if g in (WAIT, STEP, SIPH_PLUS):
        return True
    if g == DEBUG:
        return any(is_block(s, e.row, e.col) for e in s.enemies)
    if g == ROW:
        return any(e.row == p.row for e in s.enemies)
    if g == COL:
        return any(e.col == p.col for e in s.enemies)
    if g == UNDO:
        return bool(s.history)
    if g == EXCH:
        return p.credits >= 4
    if g == SHOW:
        return not s.show
    if g == RESET:
        return p.hp < 3
    if g == CALM:
        return not s.calm
    if g == D_BOM:
        return any(e.type == DAEMON for e in s.enemies)
    if g == DELAY:
        return bool(s.transmissions)
    if g == ANTI_V:
        return any(e.type == VIRUS for e in s.enemies)
    if g == SCORE:
        return s.stage < 8
    if g == REDUC:
        return any(c.content == BLOCK and not c.siphoned and c.block.spawn > 0
                   for c in s.cells)
    if g == ATK_PLUS:
        return s.atk_uses < 2
    if g == HACK:
        return any(c.siphoned for c in s.cells)
    raise AssertionError(g)


def is_legal(s: RefState, a) -> bool:
    try:
        a = operator.index(a)
    except TypeError:
        return False
    if isinstance(a, bool) or not 0 <= a < NUM_ACTIONS:
        return False
    p = s.player
    if a < 4:
        dr, dc = DIRECTIONS[a]
        r, c = p.row + dr, p.col + dc
        if not on_board(r, c):
            return False
        return not is_block(s, r, c) or bool(enemies_at(s, r, c))
    if a == ACTION_SIPHON:
        return p.siphons > 0
    g = a - 5
    return (g in s.owned and p.credits >= CREDIT_COST[g] and p.energy >= ENERGY_COST[g]
            and _program_condition(s, g))


def legal_actions(s: RefState) -> list:
    return [is_legal(s, a) for a in range(NUM_ACTIONS)]


# ---------------------------------------------------------------------------
# §14.2 exit distance
# ---------------------------------------------------------------------------

def exit_distance(s: RefState, src) -> int:
    """BFS path length from `src` to the exit; 0 if `src` is the exit or no path."""
    if tuple(src) == tuple(s.exit):
        return 0
    dist = {tuple(src): 0}
    frontier = [tuple(src)]
    while frontier:
        nxt = []
        for x in frontier:
            for n in neighbours(*x):
                if n in dist:
                    continue
                if n == tuple(s.exit):
                    return dist[x] + 1
                if is_block(s, *n):
                    continue
                dist[n] = dist[x] + 1
                nxt.append(n)
        frontier = nxt
    return 0


# ---------------------------------------------------------------------------
# §14.3 siphon quality
# ---------------------------------------------------------------------------

def _yield(s: RefState, x):
    """(credits, energy, sorted data points, frozenset of unowned programs)."""
    if is_block(s, *x):
        return (0, 0, (), frozenset())
    credits = energy = 0
    data, programs = [], set()
    for y in cross(*x):
        cy = s.cell(*y)
        if cy.siphoned:
            continue
        if cy.content == BLOCK:
            b = cy.block
            if b.kind == "data":
                data.append(b.points)
            elif b.program not in s.owned:
                programs.add(b.program)
        else:
            credits += cy.credits
            energy += cy.energy
    return (credits, energy, tuple(sorted(data)), frozenset(programs))


def siphon_quality(s: RefState):
    """(missedCredits, missedEnergy) of siphoning now (§14.3), on the untouched state."""
    q = (s.player.row, s.player.col)
    y0 = _yield(s, q)
    c0, e0, data0, prog0 = y0
    non_block = [(r, c) for r in range(ROWS) for c in range(COLS) if not is_block(s, r, c)]
    if data0 or prog0:
        B = [y for y in cross(*q) if is_block(s, *y) and not s.cell(*y).siphoned]
        candidates = [x for x in non_block
                      if all(x == b or manhattan(x, b) == 1 for b in B)]
    else:
        candidates = non_block
    better = []
    for x in candidates:
        cx, ex, datax, progx = _yield(s, x)
        if datax == data0 and progx == prog0 and cx >= c0 and ex >= e0 and (cx > c0 or ex > e0):
            better.append((cx, ex))
    if not better:
        return 0, 0
    return max(b[0] for b in better) - c0, max(b[1] for b in better) - e0


# ---------------------------------------------------------------------------
# §11 transmission placement
# ---------------------------------------------------------------------------

def _in_line_of_fire(s: RefState, x) -> bool:
    pr, pc = s.player.row, s.player.col
    r, c = x
    if r != pr and c != pc:
        return False
    dr, dc = _sign(r - pr), _sign(c - pc)
    y = (pr + dr, pc + dc)
    while y != (r, c):
        if is_block(s, *y) or enemies_at(s, *y):
            return False
        y = (y[0] + dr, y[1] + dc)
    return True


def place_transmission(s: RefState, R, from_task=False, from_siphon=False) -> bool:
    occupied = {(e.row, e.col) for e in s.enemies} | {(t.row, t.col) for t in s.transmissions}
    free = [(r, c) for r in range(ROWS) for c in range(COLS)
            if (r, c) != (s.player.row, s.player.col) and (r, c) not in occupied
            and not is_block(s, r, c)]
    pool = [x for x in free if not _in_line_of_fire(s, x)] or free
    if not pool:
        return False
    r, c = pool[R.below(len(pool))]
    kind = R.below(4)
    s.transmissions.append(Transmission(r, c, 1, kind, from_task, from_siphon))
    return True


# ---------------------------------------------------------------------------
# §12 stages
# ---------------------------------------------------------------------------

def layout_is_valid(s: RefState, blocks: set) -> bool:
    """§12.4 layoutIsValid for the tentative block cells `blocks`."""
    ex = tuple(s.exit)
    visited = {(0, 0)}
    queue = [(0, 0)]
    while queue:
        x = queue.pop(0)
        for n in neighbours(*x):
            if n in blocks or n in visited:
                continue
            visited.add(n)
            if n != ex:
                queue.append(n)
    for r in range(ROWS):
        for c in range(COLS):
            if (r, c) not in blocks and (r, c) not in visited:
                return False
    return all(any(n not in blocks for n in neighbours(*b)) for b in blocks)


def place_blocks(s: RefState, R) -> None:
    K = 5 + R.below(7)
    entity_cells = {(e.row, e.col) for e in s.enemies} | {(t.row, t.col) for t in s.transmissions}
    eligible = [(r, c) for r in range(ROWS) for c in range(COLS)
                if (r, c) not in CORNERS and (r, c) not in entity_cells]
    K = min(K, len(eligible))          # [RESOLUTION §12.4]
    for _attempt in range(100):
        pool = list(eligible)
        chosen = [pool.pop(R.below(len(pool))) for _ in range(K)]
        used = set()
        payloads = []
        for _x in chosen:
            is_data = _bern(R, 0.5)
            is_question = _bern(R, 0.1)
            if is_data:
                p = 1 + R.below(9)
                payloads.append(Block("data", points=p, spawn=p, question=is_question))
            else:
                avail = [g for g in range(NUM_PROGRAMS) if g not in used]
                g = avail[R.below(len(avail))]
                used.add(g)
                payloads.append(Block("program", program=g, spawn=SPAWN_COUNT[g],
                                      question=is_question))
        if layout_is_valid(s, set(chosen)):
            for x, b in zip(chosen, payloads):
                cell = s.cell(*x)
                cell.content = BLOCK
                cell.block = b
            return
    # all attempts failed: the stage has no blocks


def place_resources(s: RefState, R) -> None:
    for cell in s.cells:
        if cell.content in (EMPTY, PICKUP):
            amount = (1, 2, 3)[R.weighted((0.45, 0.45, 0.10))]
            if R.below(2) == 0:
                cell.credits = amount
            else:
                cell.energy = amount


def initialise_stage(s: RefState, R) -> None:
    s.turn = 0
    s.next_task = s.interval
    s.show = s.calm = s.step_active = False
    s.atk_uses = 0
    s.history = []                                  # [RESOLUTION §9.10]
    s.cells = [Cell() for _ in range(36)]
    q = (s.player.row, s.player.col)
    others = [x for x in CORNERS if x != q]
    s.exit = others[R.below(len(others))]
    s.cell(*s.exit).content = EXIT
    for x in others:
        if x != s.exit:
            s.cell(*x).content = PICKUP
    place_blocks(s, R)
    place_resources(s, R)
    for _ in range(s.stage):
        place_transmission(s, R)


def complete_stage(s: RefState, R) -> None:
    s.player.hp = min(3, s.player.hp + 1)
    if s.stage < 8:
        s.stage += 1
        s.interval = 13 - s.stage
        initialise_stage(s, R)
    else:
        s.won = True


def new_game(rng) -> RefState:
    R = _chance(rng)
    r, c = CORNERS[R.below(4)]
    s = RefState(cells=[Cell() for _ in range(36)], player=Player(r, c))
    bonus = R.below(3)
    if bonus == 0:
        s.player.credits = 10
    elif bonus == 1:
        s.player.energy = 11
    else:
        s.player.siphons = 1
    s.stage, s.interval, s.pending = 1, 12, 0
    initialise_stage(s, R)
    return s


# ---------------------------------------------------------------------------
# §7 directional actions
# ---------------------------------------------------------------------------

def _directional(s: RefState, a: int):
    """Returns (kills, reachedExit, pickupCollected)."""
    p = s.player
    dr, dc = DIRECTIONS[a]
    r, c = p.row + dr, p.col + dc
    while on_board(r, c):
        ts = transmissions_at(s, r, c)
        if ts:
            t = ts[0]
            s.transmissions = _remove(s.transmissions, [t])
            return (0 if t.from_task else 1), False, False
        es = enemies_at(s, r, c)
        if es:
            e = es[0]
            e.hp = max(0, e.hp - p.attack)
            if e.hp > 0:
                e.stunned = True
                return 0, False, False
            s.enemies = _remove(s.enemies, [e])
            return (0 if e.from_task else 1), False, False
        if is_block(s, r, c):
            break
        r, c = r + dr, c + dc
    p.row, p.col = p.row + dr, p.col + dc
    cell = s.cell(p.row, p.col)
    if cell.content == PICKUP:
        p.siphons += 1
        cell.content = EMPTY
        return 0, False, True
    if cell.content == EXIT:
        return 0, True, False
    return 0, False, False


# ---------------------------------------------------------------------------
# §8 siphon
# ---------------------------------------------------------------------------

def _siphon(s: RefState) -> None:
    p = s.player
    s.cell(p.row, p.col).siphon_center = True
    for x in cross(p.row, p.col):
        cell = s.cell(*x)
        if cell.siphoned:
            continue
        if cell.content == BLOCK:
            b = cell.block
            if b.kind == "data":
                p.score += b.points
            else:
                s.owned.add(b.program)
            s.pending += b.spawn
            cell.block = Block(b.kind, points=b.points, program=b.program, spawn=0)
        else:
            p.credits += cell.credits
            p.energy += cell.energy
            cell.credits = cell.energy = 0
        cell.siphoned = True
    p.siphons -= 1
    s.interval = max(4, s.interval - 1)
    s.next_task = s.next_task + 5


# ---------------------------------------------------------------------------
# §9 programs
# ---------------------------------------------------------------------------

def _remove_dead(s: RefState) -> int:
    dead = [e for e in s.enemies if e.hp <= 0]
    s.enemies = _remove(s.enemies, dead)
    return sum(0 if e.from_task else 1 for e in dead)


def _damage(s: RefState, victims, k: int) -> int:
    """Damage k, stun survivors, remove dead; returns kills."""
    for e in victims:
        e.hp = max(0, e.hp - k)
        if e.hp > 0:
            e.stunned = True
    return _remove_dead(s)


def _remove_all_enemies_at(s, x) -> int:
    es = enemies_at(s, *x)
    if not es:
        return 0
    s.enemies = _remove(s.enemies, es)
    return 0 if es[0].from_task else 1


def _remove_all_transmissions_at(s, x) -> int:
    ts = transmissions_at(s, *x)
    if not ts:
        return 0
    s.transmissions = _remove(s.transmissions, ts)
    return 0 if ts[0].from_task else 1


def _push_pull(s: RefState, pull: bool) -> None:
    q = (s.player.row, s.player.col)
    targets = []
    for e in s.enemies:
        sr, sc = _sign(e.row - q[0]), _sign(e.col - q[1])
        if pull:
            sr, sc = -sr, -sc
        cands = [(e.row + sr, e.col + sc)]
        if sr != 0:
            cands.append((e.row + sr, e.col))
        if sc != 0:
            cands.append((e.row, e.col + sc))
        cands = [x for x in cands if on_board(*x)]
        if pull:
            cands = [x for x in cands if x != q]
        best = None
        for x in cands:
            d = manhattan(x, q)
            if best is None or (d < manhattan(best, q) if pull else d > manhattan(best, q)):
                best = x
        targets.append(best)
    moved_into = set()
    for e, t in zip(s.enemies, targets):
        if t is None or t in moved_into:
            continue
        e.row, e.col = t
        moved_into.add(t)


def _program(s: RefState, g: int, R):
    """Apply program g's effect (cost already paid). Returns (kills, reachedExit)."""
    p = s.player
    q = (p.row, p.col)
    kills = 0
    if g in (PUSH, PULL):
        _push_pull(s, pull=(g == PULL))
    elif g == CRASH:
        for x in surrounding8(*q):
            cell = s.cell(*x)
            if cell.content == BLOCK:
                cell.content = EMPTY
                cell.block = None
            kills += _remove_all_enemies_at(s, x)
            kills += _remove_all_transmissions_at(s, x)
    elif g == WARP:
        entries = [("enemy", e) for e in s.enemies] + [("transmission", t) for t in s.transmissions]
        kind, ent = entries[R.below(len(entries))]
        p.row, p.col = ent.row, ent.col
        if kind == "enemy":
            kills += _remove_all_enemies_at(s, (p.row, p.col))
        else:
            kills += _remove_all_transmissions_at(s, (p.row, p.col))
        return kills, s.cell(p.row, p.col).content == EXIT
    elif g == POLY:
        for e in s.enemies:
            dmg = ENEMY_MAX_HP[e.type] - e.hp
            others = [t for t in range(4) if t != e.type]
            e.type = others[R.below(3)]
            e.hp = ENEMY_MAX_HP[e.type] - dmg
        kills += _remove_dead(s)
    elif g == WAIT:
        pass
    elif g == DEBUG:
        kills += _damage(s, [e for e in s.enemies if is_block(s, e.row, e.col)], p.attack)
    elif g == ROW:
        kills += _damage(s, [e for e in s.enemies if e.row == p.row], p.attack)
    elif g == COL:
        kills += _damage(s, [e for e in s.enemies if e.col == p.col], p.attack)
    elif g == UNDO:
        _restore(s, s.history.pop())
    elif g == STEP:
        s.step_active = True
    elif g == SIPH_PLUS:
        p.siphons += 1
    elif g == EXCH:
        p.energy += 4
    elif g == SHOW:
        s.show = True
    elif g == RESET:
        p.hp = 3
    elif g == CALM:
        s.calm = True
    elif g == D_BOM:
        daemons = [e for e in s.enemies if e.type == DAEMON]
        d = min(daemons, key=lambda e: manhattan((e.row, e.col), q))  # first on ties
        x = (d.row, d.col)
        s.enemies = _remove(s.enemies, [d])
        kills += 0 if d.from_task else 1
        ring = set(surrounding8(*x))
        kills += _damage(s, [e for e in s.enemies if (e.row, e.col) in ring], 1)
    elif g == DELAY:
        for t in s.transmissions:
            t.timer += 3
    elif g == ANTI_V:
        kills += _damage(s, [e for e in s.enemies if e.type == VIRUS], 1)
    elif g == SCORE:
        p.score += 8 - s.stage
    elif g == REDUC:
        for cell in s.cells:
            if cell.content == BLOCK and not cell.siphoned:
                cell.block.spawn = max(0, cell.block.spawn - 1)
    elif g == ATK_PLUS:
        p.attack += 1
        s.atk_uses += 1
    elif g == HACK:
        kills += _damage(s, [e for e in s.enemies if s.cell(e.row, e.col).siphoned], p.attack)
    else:
        raise AssertionError(g)
    return kills, False


# ---------------------------------------------------------------------------
# §9.10 UNDO snapshots
# ---------------------------------------------------------------------------

def snapshot(s: RefState) -> Snapshot:
    return Snapshot(
        cells=tuple(c.copy() for c in s.cells), player=replace(s.player), turn=s.turn,
        owned=frozenset(s.owned),
        enemies=tuple(replace(e, from_task=False, from_siphon=False) for e in s.enemies),
        transmissions=tuple(replace(t, from_task=False, from_siphon=False)
                            for t in s.transmissions),
        show=s.show, calm=s.calm, atk_uses=s.atk_uses)


def _restore(s: RefState, snap: Snapshot) -> None:
    s.cells = [c.copy() for c in snap.cells]
    s.player = replace(snap.player)
    s.turn = snap.turn
    s.owned = set(snap.owned)
    # [QUIRK] origin flags come back false (they are not saved)
    s.enemies = [replace(e, from_task=False, from_siphon=False) for e in snap.enemies]
    s.transmissions = [replace(t, from_task=False, from_siphon=False) for t in snap.transmissions]
    s.show, s.calm, s.atk_uses = snap.show, snap.calm, snap.atk_uses


def _push_snapshot(s: RefState) -> None:
    s.history.append(snapshot(s))
    if s.history_cap is not None and len(s.history) > s.history_cap:
        del s.history[0]


# ---------------------------------------------------------------------------
# §10 enemy phase
# ---------------------------------------------------------------------------

def _bfs_distance(q, p, enterable):
    """Distances to q over enterable cells, never passing through p (§10.1 rule A)."""
    if not enterable(q):
        return {}
    dist = {q: 0}
    queue = [q]
    i = 0
    while i < len(queue):
        x = queue[i]
        i += 1
        for n in neighbours(*x):
            if n != p and n not in dist and enterable(n):
                dist[n] = dist[x] + 1
                queue.append(n)
    return dist


def _move_enemy(s: RefState, e: Enemy) -> None:
    q = (s.player.row, s.player.col)
    p = (e.row, e.col)
    glitch = e.type == GLITCH
    occ = {(o.row, o.col) for o in s.enemies if o is not e} | \
          {(t.row, t.col) for t in s.transmissions}

    def passable(x):
        return on_board(*x) and (glitch or not is_block(s, *x))

    def first_step(enterable):
        dist = _bfs_distance(q, p, enterable)
        best = None
        for n in neighbours(*p):
            if enterable(n) and n in dist and (best is None or dist[n] < dist[best]):
                best = n
        return best

    # A: shortest path around occupied cells
    n = first_step(lambda x: passable(x) and (x == q or x not in occ))
    if n is not None:
        e.row, e.col = n
        return
    # B: shortest path ignoring occupancy, if its first step is free
    n = first_step(passable)
    if n is not None and n not in occ:
        e.row, e.col = n
        return
    # C: greedy fallback
    best = None
    for n in neighbours(*p):
        if passable(n) and n not in occ:
            if best is None or manhattan(n, q) < manhattan(best, q):
                best = n
    if best is not None:
        e.row, e.col = best


def enemy_phase(s: RefState, R) -> bool:
    """§10. Returns True iff the phase executed (was not swallowed by STEP)."""
    # 0. STEP swallows the whole phase
    if s.step_active:
        s.step_active = False
        return False
    # 1.
    s.turn += 1
    # 2. transmission countdown, in list order
    survivors = []
    for t in s.transmissions:
        if t.timer <= 1:
            s.enemies.append(Enemy(t.type, t.row, t.col, ENEMY_MAX_HP[t.type], disabled=1,
                                   stunned=False, from_task=t.from_task,
                                   from_siphon=t.from_siphon))
        else:
            t.timer -= 1
            survivors.append(t)
    s.transmissions = survivors
    # 3. activations
    S = 2 if any(e.type == VIRUS for e in s.enemies) else 1
    attacked = set()
    q = (s.player.row, s.player.col)
    for step_index in range(S):
        eligible = [e for e in s.enemies
                    if not (e.disabled > 0 or e.stunned or id(e) in attacked
                            or step_index >= ENEMY_SPEED[e.type])]
        for e in _uniform_order(R, eligible):
            if manhattan((e.row, e.col), q) == 1:
                s.player.hp = max(0, s.player.hp - 1)
                attacked.add(id(e))
            else:
                _move_enemy(s, e)
    # 4. scheduled task
    if not s.calm and s.turn >= s.next_task:
        place_transmission(s, R, from_task=True)
        s.next_task = s.turn + s.interval
    # 5. siphon spawns
    if s.pending > 0:
        for _ in range(s.pending):
            place_transmission(s, R, from_siphon=True)
        s.pending = 0
    # 6.
    for e in s.enemies:
        e.disabled = max(0, e.disabled - 1)
        e.stunned = False
    # 7.
    _push_snapshot(s)
    return True


# ---------------------------------------------------------------------------
# §6 step and §14 reward
# ---------------------------------------------------------------------------

def _zero_terms():
    return {name: 0.0 for name in REWARD_TERMS}


def step(s: RefState, action, rng):
    """One environment step (§6). Returns (s2, obs, reward, done, info)."""
    info = {"illegal": False, "stage_completed": False, "won": False, "died": False,
            "snapshot_pushed": False, "history_cleared": False}
    if not is_legal(s, action):
        s2 = s.clone()
        info["illegal"] = True
        info["reward_terms"] = _zero_terms()
        return s2, observe(s2), 0.0, True, info
    action = operator.index(action)
    R = _chance(rng)
    s = s.clone()
    p = s.player
    score0, hp0, cr0, en0 = p.score, p.hp, p.credits, p.energy
    stage0 = s.stage
    d0 = exit_distance(s, (p.row, p.col))
    wasteful = action == 5 + RESET and hp0 == 2
    missed = (0, 0)
    kills, reached_exit, pickup = 0, False, False

    if action < 4:
        kills, reached_exit, pickup = _directional(s, action)
    elif action == ACTION_SIPHON:
        missed = siphon_quality(s)
        _siphon(s)
    else:
        g = action - 5
        p.credits -= CREDIT_COST[g]
        p.energy -= ENERGY_COST[g]
        kills, reached_exit = _program(s, g, R)
    p = s.player  # UNDO replaces the player record

    ends_turn = (action <= ACTION_SIPHON or action == 5 + WAIT) and not reached_exit
    won_now = False
    if reached_exit:
        info["transmissions_kept"] = len(s.transmissions)
        complete_stage(s, R)
        won_now = stage0 == 8
        info["stage_completed"] = True
        info["history_cleared"] = stage0 < 8
    elif ends_turn:
        info["snapshot_pushed"] = enemy_phase(s, R)
    p = s.player

    died = p.hp == 0
    t = _zero_terms()
    t["step"] = -0.01
    if reached_exit:
        t["stage"] = STAGE_REWARD[stage0 - 1]
    t["score"] = 0.5 * (p.score - score0)
    t["kills"] = 0.3 * kills
    t["pickup"] = 1.0 if pickup else 0.0
    if died:
        dd = 0
    elif reached_exit:
        dd = d0
    else:
        dd = d0 - exit_distance(s, (p.row, p.col))
    t["distance"] = 0.05 * max(0, dd)
    if won_now:
        t["victory"] = 500.0 + 100.0 * p.score
    if died:
        t["death"] = -0.5 * sum(STAGE_REWARD[: s.stage - 1])
    t["resources"] = 0.05 * (p.credits - cr0) + 0.05 * (p.energy - en0)
    if reached_exit:
        t["holding"] = 0.01 * p.credits + 0.01 * p.energy
    t["damage"] = -1.0 * max(0, hp0 - p.hp)
    t["recovery"] = 1.0 * max(0, p.hp - hp0)
    t["siphon_quality"] = -0.5 * (0.05 * missed[0] + 0.05 * missed[1])
    if wasteful:
        t["program_waste"] = -0.3
    if died and any(e.from_siphon and manhattan((e.row, e.col), (p.row, p.col)) == 1
                    for e in s.enemies):
        t["siphon_death"] = -10.0
    reward = sum(t[name] for name in REWARD_TERMS)
    info.update(reward_terms=t, won=won_now, died=died)
    done = died or s.won
    return s, observe(s), reward, done, info


# ---------------------------------------------------------------------------
# §15 observation
# ---------------------------------------------------------------------------

def observe(s: RefState):
    p = s.player
    player = [f32(x) for x in (
        p.row / 5, p.col / 5, p.hp / 3, min(p.credits / 50, 1.0), min(p.energy / 50, 1.0),
        (s.stage - 1) / 7, p.siphons / 10, (p.attack - 1) / 2,
        1.0 if s.show else 0.0, 1.0 if s.calm else 0.0)]
    programs = [1 if g in s.owned else 0 for g in range(NUM_PROGRAMS)]
    grid = [[[0.0] * 42 for _ in range(COLS)] for _ in range(ROWS)]
    for r in range(ROWS):
        for c in range(COLS):
            ch = grid[r][c]
            cell = s.cell(r, c)
            es = enemies_at(s, r, c)
            if es:
                e = es[0]
                visible = e.type != CRYPTOG or s.show or r == p.row or c == p.col
                if visible:
                    ch[e.type] = 1.0
                    ch[4] = f32(e.hp / 3)
                    ch[5] = 1.0 if e.stunned else 0.0
                    ch[6] = 1.0 if e.from_siphon else 0.0
            if cell.content == BLOCK:
                b = cell.block
                if b.question:
                    ch[9] = 1.0
                elif b.kind == "data":
                    ch[7] = 1.0
                    ch[10] = f32(b.points / 9)
                    ch[35] = f32(b.spawn / 9)
                else:
                    ch[8] = 1.0
                    ch[12 + b.program] = 1.0
                    ch[35] = f32(b.spawn / 9)
                ch[11] = 1.0 if cell.siphoned else 0.0
            ts = transmissions_at(s, r, c)
            if ts:
                ch[36] = f32(min(ts[0].timer / 4, 1.0))
            if cell.content != BLOCK or cell.siphoned:
                ch[37] = f32(cell.credits / 3)
                ch[38] = f32(cell.energy / 3)
            ch[39] = 1.0 if cell.content == PICKUP else 0.0
            ch[40] = 1.0 if cell.content == EXIT else 0.0
            ch[41] = 1.0 if cell.siphon_center else 0.0
    return player, programs, grid


def flat_observation(obs) -> list:
    player, programs, grid = obs
    return (list(player) + [float(x) for x in programs]
            + [v for row in grid for cellv in row for v in cellv])


# ---------------------------------------------------------------------------
# Enumeration of every outcome of one step
# ---------------------------------------------------------------------------

class _Script:
    """A random source that replays `prefix` and then takes option 0, recording every
    draw as (choice, number of options)."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.trace = []

    def below(self, n):
        if n <= 1:
            return 0
        i = len(self.trace)
        k = self.prefix[i] if i < len(self.prefix) else 0
        self.trace.append((k, n))
        return k

    def weighted(self, ws):
        support = [i for i, w in enumerate(ws) if w > 0]
        return support[self.below(len(support))]


def enumerate_outcomes(s: RefState, action, budget: int = 512):
    """All outcomes of `step(s, action, ·)` over every branch of every draw.

    Returns a list of (s2, obs, reward, done, info), one per branch (duplicates kept),
    or None if the branching exceeds `budget` (then the step is 'too random to list').
    """
    outcomes = []
    prefix = []
    while True:
        script = _Script(prefix)
        outcomes.append(step(s, action, script))
        tr = script.trace
        size = 1
        for _, n in tr:
            size *= n
            if size > budget:
                return None         # this branch alone has more leaves than the budget
        if len(outcomes) > budget:
            return None
        j = len(tr) - 1
        while j >= 0 and tr[j][0] + 1 >= tr[j][1]:
            j -= 1
        if j < 0:
            return outcomes
        prefix = [k for k, _ in tr[:j]] + [tr[j][0] + 1]


# ---------------------------------------------------------------------------
# Scenario I/O (docs/scenarios.md)
# ---------------------------------------------------------------------------

_TOP_KEYS = {
    "player", "enemies", "transmissions", "blocks", "resources", "ownedPrograms", "stage",
    "turn", "showActivated", "scheduledTasksDisabled", "exit", "scheduledTaskInterval",
    "nextScheduledTaskTurn", "pendingSiphonTransmissions", "stepActive", "atkPlusUses",
    "won", "siphonedCells", "siphonCenters", "undoDepth",
}
_PLAYER_KEYS = {"row", "col", "hp", "credits", "energy", "dataSiphons", "attackDamage", "score"}
_ENEMY_KEYS = {"type", "row", "col", "hp", "stunned", "spawnedFromSiphon",
               "isFromScheduledTask", "disabledTurns"}
_TRANSMISSION_KEYS = {"row", "col", "turnsRemaining", "enemyType", "spawnedFromSiphon",
                      "isFromScheduledTask"}
_BLOCK_KEYS = {"row", "col", "type", "points", "spawnCount", "siphoned", "programType",
               "programActionIndex", "hidden"}
_RESOURCE_KEYS = {"row", "col", "credits", "energy", "dataSiphon"}


def _get(d, key, default):
    v = d.get(key)
    return default if v is None else v


def _check_keys(d, allowed, where):
    unknown = set(d) - allowed
    if unknown:
        raise ValueError(f"unknown key(s) {sorted(unknown)} in {where}")


def _int(d, key, default, where, lo=None, hi=None):
    v = _get(d, key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{where}.{key} must be an int, got {v!r}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{where}.{key} = {v} out of range")
    return v


def _bool(d, key, where):
    v = _get(d, key, False)
    if not isinstance(v, bool):
        raise ValueError(f"{where}.{key} must be a bool, got {v!r}")
    return v


def _pos(d, where):
    r = _int(d, "row", None, where, 0, 5) if d.get("row") is not None else None
    c = _int(d, "col", None, where, 0, 5) if d.get("col") is not None else None
    if r is None or c is None:
        raise ValueError(f"{where} needs row and col")
    return r, c


def _cell_list(v, where):
    out = []
    for x in v or []:
        if not (isinstance(x, (list, tuple)) and len(x) == 2 and all(
                isinstance(i, int) and 0 <= i < 6 for i in x)):
            raise ValueError(f"{where}: bad cell {x!r}")
        out.append((x[0], x[1]))
    return out


def _enemy_type(name, where):
    if not isinstance(name, str) or name.lower() not in ENEMY_NAMES:
        raise ValueError(f"{where}: unknown enemy type {name!r}")
    return ENEMY_NAMES.index(name.lower())


def _program_id(b, where):
    name, idx = b.get("programType"), b.get("programActionIndex")
    g = None
    if name is not None:
        if not isinstance(name, str):
            raise ValueError(f"{where}.programType {name!r}")
        n = name.lower()
        if n in PROGRAM_NAMES:
            g = PROGRAM_NAMES.index(n)
        elif n in PROGRAM_ALIASES:
            g = PROGRAM_ALIASES[n]
        else:
            raise ValueError(f"{where}: unknown programType {name!r}")
    if idx is not None:
        if isinstance(idx, bool) or not isinstance(idx, int) or not 5 <= idx <= 27:
            raise ValueError(f"{where}.programActionIndex {idx!r}")
        if g is not None and g != idx - 5:
            raise ValueError(f"{where}: programType and programActionIndex disagree")
        g = idx - 5
    if g is None:
        raise ValueError(f"{where}: program block without a program")
    return g


def from_scenario(d: dict, history_cap: Optional[int] = None, strict: bool = True) -> RefState:
    """Build a state from a scenario dict. `strict=False` also reads what `to_scenario`
    writes for states that are not valid inputs (a dead player, hp 0)."""
    _check_keys(d, _TOP_KEYS, "scenario")
    pd = d.get("player")
    if not isinstance(pd, dict):
        raise ValueError("scenario.player is required")
    _check_keys(pd, _PLAYER_KEYS, "player")
    pr, pc = _pos(pd, "player")
    player = Player(
        pr, pc, hp=_int(pd, "hp", 3, "player", 1 if strict else 0, 3),
        credits=_int(pd, "credits", 0, "player", 0), energy=_int(pd, "energy", 0, "player", 0),
        siphons=_int(pd, "dataSiphons", 0, "player", 0),
        attack=_int(pd, "attackDamage", 1, "player", 1), score=_int(pd, "score", 0, "player"))
    s = RefState(cells=[Cell() for _ in range(36)], player=player, history_cap=history_cap)
    ex = _get(d, "exit", [5, 5])
    s.exit = _cell_list([ex], "exit")[0]
    s.cell(*s.exit).content = EXIT

    for i, ed in enumerate(_get(d, "enemies", [])):
        w = f"enemies[{i}]"
        _check_keys(ed, _ENEMY_KEYS, w)
        kind = _enemy_type(ed.get("type"), w)
        r, c = _pos(ed, w)
        s.enemies.append(Enemy(
            kind, r, c, hp=_int(ed, "hp", ENEMY_MAX_HP[kind], w, 1, ENEMY_MAX_HP[kind]),
            disabled=_int(ed, "disabledTurns", 0, w, 0), stunned=_bool(ed, "stunned", w),
            from_task=_bool(ed, "isFromScheduledTask", w),
            from_siphon=_bool(ed, "spawnedFromSiphon", w)))
    for i, td in enumerate(_get(d, "transmissions", [])):
        w = f"transmissions[{i}]"
        _check_keys(td, _TRANSMISSION_KEYS, w)
        r, c = _pos(td, w)
        if td.get("enemyType") is None:
            raise ValueError(f"{w}.enemyType is required")
        s.transmissions.append(Transmission(
            r, c, timer=_int(td, "turnsRemaining", 1, w, 1),
            type=_enemy_type(td["enemyType"], w),
            from_task=_bool(td, "isFromScheduledTask", w),
            from_siphon=_bool(td, "spawnedFromSiphon", w)))

    for i, bd in enumerate(_get(d, "blocks", [])):
        w = f"blocks[{i}]"
        _check_keys(bd, _BLOCK_KEYS, w)
        r, c = _pos(bd, w)
        cell = s.cell(r, c)
        if cell.content == BLOCK:
            raise ValueError(f"{w}: two blocks on ({r},{c})")
        if cell.content == EXIT:
            raise ValueError(f"{w}: block on the exit")
        kind = _get(bd, "type", None)
        kind = kind.lower() if isinstance(kind, str) else kind
        question = kind == "question"
        if question:
            kind = _get(bd, "hidden", None)
            kind = kind.lower() if isinstance(kind, str) else kind
        if kind == "data":
            points = _int(bd, "points", 5, w, 0)
            b = Block("data", points=points, spawn=_int(bd, "spawnCount", points, w, 0))
        elif kind == "program":
            b = Block("program", program=_program_id(bd, w),
                      spawn=_int(bd, "spawnCount", 2, w, 0))
        else:
            raise ValueError(f"{w}: bad block type {bd.get('type')!r}/{bd.get('hidden')!r}")
        b.question = question
        cell.content = BLOCK
        cell.block = b
        cell.siphoned = _bool(bd, "siphoned", w)

    amounts = {}
    for i, rd in enumerate(_get(d, "resources", [])):
        w = f"resources[{i}]"
        _check_keys(rd, _RESOURCE_KEYS, w)
        r, c = _pos(rd, w)
        cr = _int(rd, "credits", 0, w, 0)
        en = _int(rd, "energy", 0, w, 0)
        pick = _bool(rd, "dataSiphon", w)
        if cr > 0 and en > 0:
            raise ValueError(f"{w}: both credits and energy")
        if pick:
            if s.cell(r, c).content in (BLOCK, EXIT):
                raise ValueError(f"{w}: pickup on a block or the exit")
            s.cell(r, c).content = PICKUP
        if cr > 0 or en > 0:
            if (r, c) in amounts and amounts[(r, c)] != (cr, en):
                raise ValueError(f"{w}: two different resources on ({r},{c})")
            amounts[(r, c)] = (cr, en)
            s.cell(r, c).credits, s.cell(r, c).energy = cr, en

    for a in _get(d, "ownedPrograms", []):
        if isinstance(a, bool) or not isinstance(a, int) or not 5 <= a <= 27:
            raise ValueError(f"ownedPrograms: bad action index {a!r}")
        s.owned.add(a - 5)
    s.stage = _int(d, "stage", 1, "scenario", 1, 8)
    s.turn = _int(d, "turn", 0, "scenario", 0)
    s.show = _bool(d, "showActivated", "scenario")
    s.calm = _bool(d, "scheduledTasksDisabled", "scenario")
    s.interval = _int(d, "scheduledTaskInterval", 12, "scenario", 0)
    s.next_task = _int(d, "nextScheduledTaskTurn", 12, "scenario", 0)
    s.pending = _int(d, "pendingSiphonTransmissions", 0, "scenario", 0)
    s.step_active = _bool(d, "stepActive", "scenario")
    s.atk_uses = _int(d, "atkPlusUses", 0, "scenario", 0)
    s.won = _bool(d, "won", "scenario")
    for x in _cell_list(_get(d, "siphonedCells", []), "siphonedCells"):
        s.cell(*x).siphoned = True
    for x in _cell_list(_get(d, "siphonCenters", []), "siphonCenters"):
        s.cell(*x).siphon_center = True
    return s


def to_scenario(s: RefState) -> dict:
    """Every key, fully populated; blocks/resources/cell lists sorted by cell."""
    p = s.player
    blocks, resources, siphoned_cells, centers = [], [], [], []
    for r in range(ROWS):
        for c in range(COLS):
            cell = s.cell(r, c)
            if cell.content == BLOCK:
                b = cell.block
                bd = {"row": r, "col": c}
                if b.question:
                    bd["type"] = "question"
                    bd["hidden"] = b.kind
                else:
                    bd["type"] = b.kind
                if b.kind == "data":
                    bd["points"] = b.points
                else:
                    bd["programType"] = PROGRAM_NAMES[b.program]
                    bd["programActionIndex"] = 5 + b.program
                bd["spawnCount"] = b.spawn
                bd["siphoned"] = cell.siphoned
                blocks.append(bd)
            elif cell.siphoned:
                siphoned_cells.append([r, c])
            if cell.content == PICKUP:
                resources.append({"row": r, "col": c, "dataSiphon": True})
            if cell.credits:
                resources.append({"row": r, "col": c, "credits": cell.credits})
            if cell.energy:
                resources.append({"row": r, "col": c, "energy": cell.energy})
            if cell.siphon_center:
                centers.append([r, c])
    return {
        "player": {"row": p.row, "col": p.col, "hp": p.hp, "credits": p.credits,
                   "energy": p.energy, "dataSiphons": p.siphons, "attackDamage": p.attack,
                   "score": p.score},
        "enemies": [{"type": ENEMY_NAMES[e.type], "row": e.row, "col": e.col, "hp": e.hp,
                     "stunned": e.stunned, "spawnedFromSiphon": e.from_siphon,
                     "isFromScheduledTask": e.from_task, "disabledTurns": e.disabled}
                    for e in s.enemies],
        "transmissions": [{"row": t.row, "col": t.col, "turnsRemaining": t.timer,
                           "enemyType": ENEMY_NAMES[t.type],
                           "spawnedFromSiphon": t.from_siphon,
                           "isFromScheduledTask": t.from_task}
                          for t in s.transmissions],
        "blocks": blocks,
        "resources": resources,
        "ownedPrograms": sorted(5 + g for g in s.owned),
        "stage": s.stage,
        "turn": s.turn,
        "showActivated": s.show,
        "scheduledTasksDisabled": s.calm,
        "exit": [s.exit[0], s.exit[1]],
        "scheduledTaskInterval": s.interval,
        "nextScheduledTaskTurn": s.next_task,
        "pendingSiphonTransmissions": s.pending,
        "stepActive": s.step_active,
        "atkPlusUses": s.atk_uses,
        "won": s.won,
        "siphonedCells": siphoned_cells,
        "siphonCenters": centers,
        "undoDepth": len(s.history),
    }


def canonical(d: dict) -> dict:
    """A scenario dict in canonical form (parsed and re-written by this model), without
    the read-only `undoDepth`. Two dicts describe the same state iff these are equal."""
    out = to_scenario(from_scenario({k: v for k, v in d.items() if k != "undoDepth"},
                                    strict=False))
    del out["undoDepth"]
    return out
