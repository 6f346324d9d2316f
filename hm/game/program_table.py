"""The 23 programs, one entry each: cost, spawn count, condition and effect
(docs/rules.md#program-table, §4; docs/rules.md#program-effects, §9).

`PROGRAMS[id]` is one `Program`: what it costs, how many transmissions its block spawns,
when it is legal (`condition`, besides ownership and cost) and what it does (`effect`,
after the cost is paid), with the section of docs/rules.md it implements and the state
fields its effect writes. Section numbers (§) are those of docs/rules.md. Program ids and
names are `constants.PROGRAM_NAMES` (action = 5 + id).

Who uses the table: `actions.legal_actions` (costs and conditions), `programs.run_program`
(cost and effect), `generation` (spawn counts).

How the entries are written. A condition is `condition(state, occupancy)`, on one game,
where `occupancy` (`actions._Occupancy`) holds the bitboards and flags of what the board
holds. An effect is `effect(game, given) -> Result` on *rows* of games: every leaf of
`game` has a leading axis R, one row per game (see `programs.py` for why), and `given`
holds what else an effect may read (`Given`). An effect is computed for rows that do not
run it too; `programs.py` keeps each row's result from its own program's entry, field by
field, for the fields the entry declares in `writes` (tests/game/test_batching.py fails
if an effect writes an undeclared field, which would be dropped). Entries share the
rules' common terms as helpers: `strike` (damage, stun survivors, remove the dead),
`clear_cells` ("clear a cell"), `displace` (PUSH and PULL).

Entity lists are compact (state.py): live entities fill slots `0 .. n-1`, dead slots are
all zero, and live enemies have hp > 0.
"""

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int, Int32, UInt32

from hm.game import bitboard, geometry, random_draws
from hm.game import constants as C
from hm.game.bitboard import Bitboard
from hm.game.state import GameState, Snapshot

# Bitboards of static cell sets, indexed by cell: its row, its column, its 8 surrounding
# cells (§9.3).
_ROW_OF, _COL_OF = geometry.ROW_OF, geometry.COL_OF
_ROW = bitboard.table(_ROW_OF[:, None] == _ROW_OF[None, :])
_COL = bitboard.table(_COL_OF[:, None] == _COL_OF[None, :])
_SURROUNDING = bitboard.table(geometry.SURROUNDING_MASK)
_SLOTS = np.arange(C.MAX_ENEMIES, dtype=np.int32)
_CELLS = np.arange(C.NUM_CELLS, dtype=np.int32)
_U32 = jnp.uint32


class Given(NamedTuple):
    """What an effect may read besides the game, one row per game."""

    runs: Bool[Array, " R"]           # the rows that run this program (the others' results are dropped)
    key: UInt32[Array, "R 2"]         # the program's key (raw data; `random_draws`)
    impl: object                      # the key's PRNG implementation, or None (`random_draws.key_parts`)
    snapshot: Snapshot | None         # the top UNDO snapshot (given to UNDO, §9.10)


class Result(NamedTuple):
    """An effect's result: the game, and for the reward (§14) the kills it scored and
    whether the player reached the exit (None: none, no)."""

    game: GameState
    kills: Int32[Array, " R"] | None = None
    reached_exit: Bool[Array, " R"] | None = None


class Program(NamedTuple):
    """One program: its row of the §4 table and its §9 effect."""

    id: int                  # constants.PUSH, ...: its name is constants.PROGRAM_NAMES[id]
    credits: int             # cost, paid before the effect (§9)
    energy: int
    spawn: int               # transmissions its program block spawns when siphoned (§12.4)
    rules: str               # the section of docs/rules.md its effect implements
    condition: Callable      # (state, occupancy) -> Bool[]: legal besides ownership and cost (§4, §5)
    effect: Callable         # (game rows, Given) -> Result
    writes: tuple[str, ...]  # the fields (paths in GameState) the effect may change, besides the cost

    @property
    def name(self) -> str:
        return C.PROGRAM_NAMES[self.id]


# --------------------------------------------------------------------------- shared terms

def _column(x: Array) -> Array:
    """A per-row `[R]` value as `[R, 1]`, to combine with per-slot `[R, N]` values."""
    return x[:, None]


def _take(x: Array, index: Int32[Array, " R"]) -> Array:
    """`x[r, index[r]]` for every row r."""
    return jnp.take_along_axis(x, _column(index), axis=1)[:, 0]


def _player_cell(g: GameState) -> Int32[Array, "*R"]:
    return g.player.row * C.COLS + g.player.col


def _cells(entities) -> Int32[Array, "R N"]:
    """Each slot's cell."""
    return entities.row.astype(jnp.int32) * C.COLS + entities.col.astype(jnp.int32)


def _settle(g: GameState, hp: Int32[Array, "R 36"], damaged: Bool[Array, "R 36"]) -> Result:
    """Enemies at `hp` after `damaged` ones took damage: stun survivors, remove the dead;
    each removal is a kill unless the enemy came from a scheduled task (§9)."""
    e = g.enemies
    dead = e.alive & (hp <= 0)
    alive = e.alive & ~dead
    enemies = eqx.tree_at(
        lambda x: (x.alive, x.hp, x.stunned), e,
        (alive, jnp.where(alive, hp, 0).astype(jnp.int8), e.stunned | (damaged & (hp > 0))))
    kills = jnp.sum(dead & ~e.from_task, axis=1, dtype=jnp.int32)
    return Result(eqx.tree_at(lambda s: s.enemies, g, enemies), kills)


def strike(g: GameState, hit: Bool[Array, "R 36"], amount: Int[Array, "R 1"] | int) -> Result:
    """Damage `amount` to every live enemy `hit`, stun survivors, remove the dead (§9)."""
    e = g.enemies
    damage = jnp.where(e.alive & hit, amount, 0)
    return _settle(g, jnp.maximum(e.hp.astype(jnp.int32) - damage, 0), damage > 0)


def clear_cells(g: GameState, enemy_cells: Bitboard, transmission_cells: Bitboard) -> Result:
    """Clear cells (§9): remove every enemy on `enemy_cells` and every transmission on
    `transmission_cells` (one set per row). A cleared cell counts one kill if the first
    of its entities in list order did not come from a scheduled task."""
    e, t = g.enemies, g.transmissions
    e_cell, t_cell = _cells(e), _cells(t)
    e_gone = e.alive & _holds(enemy_cells, e_cell)
    t_gone = t.alive & _holds(transmission_cells, t_cell)
    # One kill per cleared cell: its first entity, if that one is not from a task.
    kills = (jnp.sum(_first_on_cell(e_cell, e.alive) & e_gone & ~e.from_task, axis=1, dtype=jnp.int32)
             + jnp.sum(_first_on_cell(t_cell, t.alive) & t_gone & ~t.from_task, axis=1, dtype=jnp.int32))
    e_alive, t_alive = e.alive & ~e_gone, t.alive & ~t_gone
    game = eqx.tree_at(lambda s: (s.enemies.alive, s.enemies.hp, s.transmissions.alive), g,
                       (e_alive, jnp.where(e_alive, e.hp, jnp.int8(0)), t_alive))
    return Result(game, kills)


def displace(g: GameState, runs: Bool[Array, " R"], away: bool) -> Result:
    """Every enemy one step away from the player (PUSH, §9.1) or toward it (PULL, §9.2),
    from the positions before the program; in list order an enemy moves unless an
    earlier one already moved into the same cell.

    The §9.1 candidates (diagonal, row-only, column-only; PUSH keeps the farthest, PULL
    the nearest and never the player's cell, ties to the earliest) reduce to one step per
    axis:
    * PUSH: one step away from the player along each axis where it stays on the board.
      An enemy with no step stays (an enemy on the player's cell "moves" onto its own
      cell, which no other PUSH target can be).
    * PULL: one step toward the player along each axis, except that a diagonal neighbour
      of the player moves onto the player's row only; the player's cell and its four
      neighbours stay.
    (This equals the candidate rule for every player and enemy cell: checked exhaustively.)
    The movers are the first of each target cell (`_first_of_cell`), a pass run only when
    some row runs the program.
    """
    e = g.enemies

    def steps(row, col, alive, player_row, player_col):
        dr = row - _column(player_row.astype(jnp.int8))
        dc = col - _column(player_col.astype(jnp.int8))
        sr, sc = jnp.sign(dr), jnp.sign(dc)
        if away:
            on_board = lambda x: (x >= 0) & (x < C.ROWS)  # (ROWS == COLS)
            step_r = jnp.where(on_board(row + sr), sr, 0)
            step_c = jnp.where(on_board(col + sc), sc, 0)
            return alive & ((step_r != 0) | (step_c != 0)), step_r, step_c
        diagonal_neighbour = (jnp.abs(dr) == 1) & (jnp.abs(dc) == 1)
        step_c = jnp.where(diagonal_neighbour, 0, -sc)
        return alive & (jnp.abs(dr) + jnp.abs(dc) > 1), -sr, step_c

    args = (e.row, e.col, e.alive, g.player.row, g.player.col)

    def targets(row, col, *rest):
        has, step_r, step_c = steps(row, col, *rest)
        return jnp.where(has, (row + step_r) * C.COLS + (col + step_c), -1)

    # `_first_of_cell` in a `cond` materialises its two words; the steps, elementwise,
    # are recomputed outside rather than stored.
    first = jax.lax.cond(jnp.any(runs),
                         lambda *args: _first_of_cell(targets, args, alive=args[2]),
                         lambda *_: _no_slots(runs.shape[0]), *args)
    _, step_r, step_c = steps(*args)
    moves = _slot_bit(first, C.MAX_ENEMIES)         # only entries with a target are set
    game = eqx.tree_at(lambda s: (s.enemies.row, s.enemies.col), g,
                       (jnp.where(moves, e.row + step_r, e.row), jnp.where(moves, e.col + step_c, e.col)))
    return Result(game)


# --------------------------------------------------------------------------- the effects, in id order

def push(g: GameState, given: Given) -> Result:
    """§9.1 PUSH: every enemy one cell away from the player (`displace`)."""
    return displace(g, given.runs, away=True)


def pull(g: GameState, given: Given) -> Result:
    """§9.2 PULL: every enemy one cell toward the player (`displace`)."""
    return displace(g, given.runs, away=False)


def crash(g: GameState, given: Given) -> Result:
    """§9.3 CRASH: destroy the blocks on the 8 surrounding cells, then clear those cells
    of enemies and transmissions."""
    around = bitboard.take(_SURROUNDING, _player_cell(g))
    cleared = clear_cells(g, around, around)
    b = g.board
    cells = jnp.broadcast_to(jnp.asarray(_CELLS)[None], b.content.shape)
    crashed = _holds(around, cells) & (b.content == C.BLOCK)
    board = eqx.tree_at(
        lambda x: (x.content, x.block_points, x.block_program, x.block_question, x.block_spawn), b,
        (jnp.where(crashed, jnp.int8(C.EMPTY), b.content),
         jnp.where(crashed, jnp.int8(0), b.block_points),
         jnp.where(crashed, jnp.int8(-1), b.block_program),
         b.block_question & ~crashed,
         jnp.where(crashed, jnp.int8(0), b.block_spawn)))
    return cleared._replace(game=eqx.tree_at(lambda s: s.board, cleared.game, board))


def warp(g: GameState, given: Given) -> Result:
    """§9.4 WARP: pick one of the enemies then transmissions uniformly, move the player to
    its cell and clear that cell of its kind; landing on the exit completes the stage."""
    e, t = g.enemies, g.transmissions
    n_enemies = jnp.sum(e.alive, axis=1, dtype=jnp.int32)
    n_targets = n_enemies + jnp.sum(t.alive, axis=1, dtype=jnp.int32)
    pick = random_draws.warp_pick(given.key, jnp.maximum(n_targets, 1), given.impl)
    # Lists are compact: entry k of the list is slot k.
    to_enemy = pick < n_enemies
    cell = jnp.where(to_enemy, _take(_cells(e), jnp.minimum(pick, C.MAX_ENEMIES - 1)),
                     _take(_cells(t), jnp.clip(pick - n_enemies, 0, C.MAX_TRANSMISSIONS - 1)))
    landing, nowhere = bitboard.of_cell(cell), Bitboard(jnp.zeros_like(cell, _U32), jnp.zeros_like(cell, _U32))
    cleared = clear_cells(g, bitboard.where(to_enemy, landing, nowhere),
                          bitboard.where(to_enemy, nowhere, landing))
    game = eqx.tree_at(lambda s: (s.player.row, s.player.col), cleared.game,
                       (cell // C.COLS, cell % C.COLS))
    return cleared._replace(game=game, reached_exit=_take(g.board.content, cell) == C.EXIT)


def poly(g: GameState, given: Given) -> Result:
    """§9.5 POLY: every enemy becomes one of the three other types, keeping the damage it
    had taken; then remove the dead."""
    e = g.enemies
    kind, hp = e.kind.astype(jnp.int32), e.hp.astype(jnp.int32)
    new_kind = (kind + 1 + random_draws.poly_offsets(given.key, given.impl)) % 4
    max_hp = jnp.asarray(C.ENEMY_MAX_HP.astype(np.int32))
    g = eqx.tree_at(lambda s: s.enemies.kind, g, jnp.where(e.alive, new_kind, kind).astype(jnp.int8))
    return _settle(g, max_hp[new_kind] - (max_hp[kind] - hp), jnp.zeros_like(e.alive))


def wait(g: GameState, given: Given) -> Result:
    """§9.6 WAIT: no effect (it ends the turn: `core.step`)."""
    return Result(g)


def debug(g: GameState, given: Given) -> Result:
    """§9.7 DEBUG: every enemy on a block takes the player's attack."""
    on_block = jnp.take_along_axis(g.board.content == C.BLOCK, _cells(g.enemies), axis=1)
    return strike(g, on_block, _column(g.player.attack))


def row(g: GameState, given: Given) -> Result:
    """§9.8 ROW: every enemy in the player's row takes the player's attack."""
    return strike(g, g.enemies.row.astype(jnp.int32) == _column(g.player.row), _column(g.player.attack))


def col(g: GameState, given: Given) -> Result:
    """§9.8 COL: every enemy in the player's column takes the player's attack."""
    return strike(g, g.enemies.col.astype(jnp.int32) == _column(g.player.col), _column(g.player.attack))


def undo(g: GameState, given: Given) -> Result:
    """§9.10 UNDO: pop the top snapshot, which replaces what it holds (credits included);
    restored enemies and transmissions have their origin flags off."""
    snap = given.snapshot

    def no_origin(x):
        return eqx.tree_at(lambda y: (y.from_task, y.from_siphon), x,
                           (jnp.zeros_like(x.from_task), jnp.zeros_like(x.from_siphon)))

    restored = {f.name: getattr(snap, f.name) for f in dataclasses.fields(Snapshot)}
    restored.update(enemies=no_origin(snap.enemies), transmissions=no_origin(snap.transmissions))
    h = g.history
    return Result(eqx.tree_at(
        lambda s: (*(getattr(s, name) for name in restored), s.history.top, s.history.depth),
        g, (*restored.values(), (h.top - 1) % C.HISTORY_CAPACITY, h.depth - 1)))


def step(g: GameState, given: Given) -> Result:
    """§9.9 STEP: arm STEP (the next enemy phase is skipped)."""
    return Result(eqx.tree_at(lambda s: s.step_active, g, jnp.ones_like(g.step_active)))


def siph_plus(g: GameState, given: Given) -> Result:
    """§9.11 SIPH+: one more data siphon."""
    return Result(eqx.tree_at(lambda s: s.player.data_siphons, g, g.player.data_siphons + 1))


def exch(g: GameState, given: Given) -> Result:
    """§9.12 EXCH: 4 credits (the cost) become 4 energy."""
    return Result(eqx.tree_at(lambda s: s.player.energy, g, g.player.energy + 4))


def show(g: GameState, given: Given) -> Result:
    """§9.13 SHOW: on until the stage ends."""
    return Result(eqx.tree_at(lambda s: s.show, g, jnp.ones_like(g.show)))


def reset(g: GameState, given: Given) -> Result:
    """§9.14 RESET: hp becomes the maximum."""
    return Result(eqx.tree_at(lambda s: s.player.hp, g, jnp.full_like(g.player.hp, C.MAX_HP)))


def calm(g: GameState, given: Given) -> Result:
    """§9.15 CALM: on until the stage ends (no scheduled transmissions)."""
    return Result(eqx.tree_at(lambda s: s.calm, g, jnp.ones_like(g.calm)))


def d_bom(g: GameState, given: Given) -> Result:
    """§9.16 D_BOM: remove the daemon nearest the player (Manhattan, earliest on ties)
    outright, then every enemy on the 8 cells around where it stood, except on its own
    cell, takes damage 1."""
    e, p = g.enemies, g.player
    e_row, e_col = e.row.astype(jnp.int32), e.col.astype(jnp.int32)
    slots = jnp.asarray(_SLOTS)[None]
    distance = jnp.abs(e_row - _column(p.row)) + jnp.abs(e_col - _column(p.col))
    nearest = jnp.min(jnp.where(e.alive & (e.kind == C.DAEMON), distance * 64 + slots, 1 << 20), axis=1)
    any_daemon = nearest < (1 << 20)
    bomb = jnp.where(any_daemon, nearest % 64, 0)
    bombed = _column(any_daemon) & (slots == _column(bomb))
    bomb_row, bomb_col = _column(_take(e_row, bomb)), _column(_take(e_col, bomb))
    around = jnp.maximum(jnp.abs(e_row - bomb_row), jnp.abs(e_col - bomb_col)) == 1
    removed = eqx.tree_at(lambda s: (s.enemies.alive, s.enemies.hp), g,
                          (e.alive & ~bombed, jnp.where(bombed, jnp.int8(0), e.hp)))
    splash = strike(removed, around & ~bombed, 1)
    return splash._replace(
        kills=splash.kills + jnp.sum(e.alive & bombed & ~e.from_task, axis=1, dtype=jnp.int32))


def delay(g: GameState, given: Given) -> Result:
    """§9.17 DELAY: every transmission's timer grows by 3."""
    return Result(eqx.tree_at(lambda s: s.transmissions.timer, g, g.transmissions.timer + C.DELAY_TURNS))


def anti_v(g: GameState, given: Given) -> Result:
    """§9.18 ANTI-V: every virus takes damage 1."""
    return strike(g, g.enemies.kind == C.VIRUS, 1)


def score(g: GameState, given: Given) -> Result:
    """§9.19 SCORE: score grows by 8 − stage."""
    return Result(eqx.tree_at(lambda s: s.player.score, g, g.player.score + C.NUM_STAGES - g.stage))


def reduc(g: GameState, given: Given) -> Result:
    """§9.20 REDUC: every unsiphoned block's spawn count drops by 1 (not below 0)."""
    b = g.board
    reduced = (b.content == C.BLOCK) & ~b.siphoned
    return Result(eqx.tree_at(lambda s: s.board.block_spawn, g,
                              jnp.where(reduced, jnp.maximum(b.block_spawn - 1, 0), b.block_spawn)))


def atk_plus(g: GameState, given: Given) -> Result:
    """§9.21 ATK+: attack and this stage's ATK+ uses grow by 1."""
    return Result(eqx.tree_at(lambda s: (s.player.attack, s.atk_uses), g,
                              (g.player.attack + 1, g.atk_uses + 1)))


def hack(g: GameState, given: Given) -> Result:
    """§9.22 HACK: every enemy on a siphoned cell takes the player's attack."""
    on_siphoned = jnp.take_along_axis(g.board.siphoned, _cells(g.enemies), axis=1)
    return strike(g, on_siphoned, _column(g.player.attack))


# --------------------------------------------------------------------------- the table

def _always(state, o) -> Bool[Array, ""]:
    return jnp.asarray(True)


def _crash_legal(state, o) -> Bool[Array, ""]:
    """A block, enemy or transmission on one of the 8 surrounding cells."""
    return bitboard.meets(o.blocks | o.enemies | o.transmissions,
                          bitboard.take(_SURROUNDING, _player_cell(state)))


_ENEMY_WRITES = ("enemies.alive", "enemies.hp", "enemies.stunned")
_UNDO_WRITES = tuple(f.name for f in dataclasses.fields(Snapshot)) + ("history.top", "history.depth")

PROGRAMS: tuple[Program, ...] = (
    Program(C.PUSH, credits=0, energy=2, spawn=4, rules="§9.1 docs/rules.md#push",
            condition=lambda s, o: o.any_enemy,
            effect=push, writes=("enemies.row", "enemies.col")),
    Program(C.PULL, credits=0, energy=2, spawn=4, rules="§9.2 docs/rules.md#pull",
            condition=lambda s, o: o.any_enemy,
            effect=pull, writes=("enemies.row", "enemies.col")),
    Program(C.CRASH, credits=3, energy=2, spawn=6, rules="§9.3 docs/rules.md#crash",
            condition=_crash_legal,
            effect=crash, writes=("board.content", "board.block_points", "board.block_program",
                                  "board.block_question", "board.block_spawn", "enemies.alive",
                                  "enemies.hp", "transmissions.alive")),
    Program(C.WARP, credits=2, energy=2, spawn=5, rules="§9.4 docs/rules.md#warp",
            condition=lambda s, o: o.any_enemy | o.any_transmission,
            effect=warp, writes=("player.row", "player.col", "enemies.alive", "enemies.hp",
                                 "transmissions.alive")),
    Program(C.POLY, credits=1, energy=1, spawn=3, rules="§9.5 docs/rules.md#poly",
            condition=lambda s, o: o.any_enemy,
            effect=poly, writes=("enemies.kind",) + _ENEMY_WRITES),
    Program(C.WAIT, credits=0, energy=1, spawn=1, rules="§9.6 docs/rules.md#wait",
            condition=_always,
            effect=wait, writes=()),
    Program(C.DEBUG, credits=3, energy=0, spawn=4, rules="§9.7 docs/rules.md#debug",
            condition=lambda s, o: bitboard.meets(o.enemies, o.blocks),
            effect=debug, writes=_ENEMY_WRITES),
    Program(C.ROW, credits=3, energy=1, spawn=2, rules="§9.8 docs/rules.md#row-col",
            condition=lambda s, o: bitboard.meets(o.enemies, bitboard.take(_ROW, _player_cell(s))),
            effect=row, writes=_ENEMY_WRITES),
    Program(C.COL, credits=3, energy=1, spawn=2, rules="§9.8 docs/rules.md#row-col",
            condition=lambda s, o: bitboard.meets(o.enemies, bitboard.take(_COL, _player_cell(s))),
            effect=col, writes=_ENEMY_WRITES),
    Program(C.UNDO, credits=1, energy=0, spawn=3, rules="§9.10 docs/rules.md#undo",
            condition=lambda s, o: s.history.depth > 0,
            effect=undo, writes=_UNDO_WRITES),
    Program(C.STEP, credits=0, energy=3, spawn=4, rules="§9.9 docs/rules.md#step-program",
            condition=_always,
            effect=step, writes=("step_active",)),
    Program(C.SIPH_PLUS, credits=5, energy=0, spawn=7, rules="§9.11 docs/rules.md#siph-plus",
            condition=_always,
            effect=siph_plus, writes=("player.data_siphons",)),
    Program(C.EXCH, credits=4, energy=0, spawn=3, rules="§9.12",
            condition=_always,       # "credits ≥ 4" is its cost
            effect=exch, writes=("player.energy",)),
    Program(C.SHOW, credits=2, energy=0, spawn=2, rules="§9.13",
            condition=lambda s, o: ~s.show,
            effect=show, writes=("show",)),
    Program(C.RESET, credits=0, energy=4, spawn=2, rules="§9.14",
            condition=lambda s, o: s.player.hp < C.MAX_HP,
            effect=reset, writes=("player.hp",)),
    Program(C.CALM, credits=2, energy=4, spawn=6, rules="§9.15",
            condition=lambda s, o: ~s.calm,
            effect=calm, writes=("calm",)),
    Program(C.D_BOM, credits=3, energy=0, spawn=4, rules="§9.16 docs/rules.md#d-bom",
            condition=lambda s, o: o.any_daemon,
            effect=d_bom, writes=_ENEMY_WRITES),
    Program(C.DELAY, credits=1, energy=2, spawn=4, rules="§9.17",
            condition=lambda s, o: o.any_transmission,
            effect=delay, writes=("transmissions.timer",)),
    Program(C.ANTI_V, credits=3, energy=0, spawn=4, rules="§9.18",
            condition=lambda s, o: o.any_virus,
            effect=anti_v, writes=_ENEMY_WRITES),
    Program(C.SCORE, credits=0, energy=5, spawn=5, rules="§9.19",
            condition=lambda s, o: s.stage < C.NUM_STAGES,
            effect=score, writes=("player.score",)),
    Program(C.REDUC, credits=2, energy=1, spawn=3, rules="§9.20",
            condition=lambda s, o: o.any_reducible,    # an unsiphoned block with spawn > 0
            effect=reduc, writes=("board.block_spawn",)),
    Program(C.ATK_PLUS, credits=4, energy=4, spawn=8, rules="§9.21",
            condition=lambda s, o: s.atk_uses < C.MAX_ATK_USES,
            effect=atk_plus, writes=("player.attack", "atk_uses")),
    Program(C.HACK, credits=2, energy=2, spawn=4, rules="§9.22 docs/rules.md#hack",
            condition=lambda s, o: o.any_siphoned,
            effect=hack, writes=_ENEMY_WRITES),
)
assert [p.id for p in PROGRAMS] == list(range(C.NUM_PROGRAMS)), "PROGRAMS must be in id order"

# The table's columns, indexed by program id (closed over by jitted code as constants).
CREDIT_COST = np.array([p.credits for p in PROGRAMS], dtype=np.int32)
ENERGY_COST = np.array([p.energy for p in PROGRAMS], dtype=np.int32)
SPAWN_COUNT = np.array([p.spawn for p in PROGRAMS], dtype=np.int8)


# --------------------------------------------------------------------------- how the shared terms are computed
#
# "The first entity of each cell in list order" for PUSH/PULL collisions, which run for
# every game of a batch, is a sequential pass over the slots that carries the bitboard of
# the cells seen so far: each step is elementwise over the rows, so XLA fuses the pass
# into one loop, where a `[36, 36]` compare per game or a reduction over slots would be
# scalar code (docs/performance.md §5).

# Slots the first-of-cell pass always visits (the rest only when some list is longer),
# and the bits of the first of its two words (`_slot_bit`).
_SHORT_PASS = 16


def _holds(board: Bitboard, cell: Int32[Array, "R N"]) -> Bool[Array, "R N"]:
    """Whether each row's set holds each of its `cell`s (outside 0..35: no)."""
    return bitboard.holds(Bitboard(_column(board.lo), _column(board.hi)), cell)


def _slot_bit(flags: tuple[UInt32[Array, " R"], UInt32[Array, " R"]], n: int) -> Bool[Array, "R N"]:
    """Unpack a slot bitmask to flags: bit `i` of the first word for slot `i <
    _SHORT_PASS`, bit `i - _SHORT_PASS` of the second for the others."""
    low, high = flags
    slot = _SLOTS[None, :n]
    word = jnp.where(slot < _SHORT_PASS, low[:, None], high[:, None])
    shift = jnp.where(slot < _SHORT_PASS, slot, slot - _SHORT_PASS).astype(np.uint32)
    return ((word >> shift) & _U32(1)) != 0


def _no_slots(rows: int) -> tuple[UInt32[Array, " R"], UInt32[Array, " R"]]:
    return jnp.zeros(rows, _U32), jnp.zeros(rows, _U32)


def _first_of_cell(cells: Callable[..., Int[Array, "R N"]], args: tuple, alive: Bool[Array, "R N"]
                   ) -> tuple[UInt32[Array, " R"], UInt32[Array, " R"]]:
    """Slot bitmask (as `_slot_bit` reads it) of the entries that come first, in slot
    order, among those with the same cell; `cells(*args)` gives the cells, elementwise
    from per-slot `[R, N]` and per-row `[R]` arguments (outside 0..35: no entry).

    Call it inside a `lax.cond` branch, so that its words are materialised: fused into a
    per-slot consumer, the pass would run once per slot. Entries only come from the live
    slots of the compact list `alive`: the first word (slots below `_SHORT_PASS`) takes a
    short pass; the second, a full pass, runs only when some list of the rows is longer.
    Each pass computes the cells itself, slot by slot, so that XLA fuses them in rather
    than storing them.
    """
    rows, slots = alive.shape

    def pass_(stop, start, *args):
        """Slots `start .. stop - 1` of the mask, bit 0 for slot `start`."""
        seen_lo = seen_hi = first = jnp.zeros(rows, _U32)
        for i in range(stop):
            # Slot i's cell from slot i's inputs (per-slot `[R, N]`, per-row `[R]`).
            cell = cells(*(x[:, i:i + 1] if x.ndim == 2 else x for x in args))[:, 0]
            lo, hi = bitboard.of_cell(cell)
            if i >= start:
                new = ((lo & ~seen_lo) | (hi & ~seen_hi)) != 0
                first = first | (new.astype(_U32) << (i - start))
            seen_lo, seen_hi = seen_lo | lo, seen_hi | hi
        return first

    short = min(_SHORT_PASS, slots)
    low = pass_(short, 0, *args)
    high = jnp.zeros(rows, _U32)
    if short < slots:
        high = jax.lax.cond(jnp.any(alive[:, short]), lambda *a: pass_(slots, short, *a),
                            lambda *_: high, *args)
    return low, high


def _first_on_cell(cell: Int32[Array, "R N"], alive: Bool[Array, "R N"]) -> Bool[Array, "R N"]:
    """Whether each live entry is the first, in list order, of the live entries on its
    cell. Clearing cells runs only on gathered rows (`programs.SPARSE_ROWS`), where one
    `[R, N, N]` compare is cheap."""
    earlier = jnp.asarray(np.tri(cell.shape[1], k=-1, dtype=bool))     # [i, j]: j < i
    shared = (cell[:, :, None] == cell[:, None, :]) & alive[:, None, :] & earlier[None]
    return alive & ~jnp.any(shared, axis=2)
