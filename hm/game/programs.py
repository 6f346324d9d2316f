"""The 23 programs (docs/rules.md#program-effects, §9): pay the cost, then apply the effect.

`run_program(state, program, key)` runs one program in one game; legality (ownership,
cost, each program's condition, docs/rules.md#program-table) is the caller's. Section
numbers (§) are those of docs/rules.md.

Why it is shaped so. Under `vmap` every branch of a `switch` runs, so the effects are
computed by table look-up and `where` for the chosen program id of each game, and:

* **Batch view.** `run_program` has a custom batching rule (`batching.custom_batching`): under
  `vmap` it sees the whole batch at once, so it can ask batch-wide questions (`lax.cond`
  on "does any game need this?") and gather the few games that need expensive work.
  Unbatched, it is the same code run on a batch of one: there is one implementation.
* **Dense and sparse programs.** The cheap programs and PUSH/PULL (`DENSE_PROGRAMS`) are
  computed for every game with elementwise `[B, 36]` arithmetic; PUSH/PULL's collision
  pass is skipped when no game of the batch pushes or pulls (the step runs WAIT for
  actions that are not programs). The other ten (CRASH, WARP, POLY, DEBUG, ROW, COL,
  UNDO, D_BOM, ANTI-V, HACK) are rare per game but costly for a whole batch (random
  draws, snapshot gathers, per-list sums): only the games running one of them are
  gathered, `SPARSE_ROWS` at a time, computed, and scattered back. Further chunks run
  only when more games need them.
* **No `[36, 36]` compares, few reductions over a game's 36 slots.** "The first entity of
  each cell in list order" (PUSH/PULL collisions, kills of "clear a cell") is a sequential
  pass over the slots that carries the bitboard of the cells seen so far (two `uint32`
  words per game, as in `bitboard.py`); each step is elementwise over the batch, and XLA
  fuses the pass into one loop.
* **Random draws.** WARP's and POLY's `jax.random.randint` outcomes are computed by
  `_threefry2x32`, the hash of JAX's default PRNG written out unrolled (JAX's own lowering
  is a rolled loop of small kernels on CPU), with JAX's exact
  `split`/`randint` arithmetic, for the gathered games only: the same keys give the same
  outcomes. Another PRNG implementation, or non-partitionable threefry, falls back to
  `jax.random` itself.

Lists are compact (state.py): the live entities fill slots `0 .. n-1` and dead slots are
all zero. WARP's target list relies on this (entry k is slot k), as it always has, and
the dense programs rely on live enemies having hp > 0 (they kill no one).
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int, Int8, Int32, Key, UInt32

from hm.game import batching, bitboard, geometry
from hm.game import constants as C
from hm.game.actions import ActionOutcome, no_outcome
from hm.game.state import GameState, Player, Snapshot, unpack_snapshot

# Programs run for the whole batch (cheap, or common as PUSH is) and the rest, run only
# for the games that chose them.
DENSE_PROGRAMS = frozenset((C.PUSH, C.PULL, C.WAIT, C.STEP, C.SIPH_PLUS, C.EXCH, C.SHOW,
                            C.RESET, C.CALM, C.DELAY, C.SCORE, C.REDUC, C.ATK_PLUS))
SPARSE_PROGRAMS = frozenset(range(C.NUM_PROGRAMS)) - DENSE_PROGRAMS
_IS_SPARSE = np.array([g in SPARSE_PROGRAMS for g in range(C.NUM_PROGRAMS)])
# Games gathered per sparse chunk.
SPARSE_ROWS = 64
# Slots the first-of-cell pass always visits (the rest only when some list is longer),
# and the bits of the first of its two words (`_slot_bit`).
_SHORT_PASS = 16
_U32 = jnp.uint32
_SLOTS = np.arange(C.MAX_ENEMIES, dtype=np.int32)
_CELLS = np.arange(C.NUM_CELLS, dtype=np.int32)


_SURROUNDING = bitboard.table(geometry.SURROUNDING_MASK)           # [36 cells]


# --------------------------------------------------------------------------- bitboards

def _holds(lo: UInt32[Array, " R"], hi: UInt32[Array, " R"],
           cell: Int32[Array, "R N"]) -> Bool[Array, "R N"]:
    """Whether the bitboard (one per row) holds each of `cell` (outside 0..35: no)."""
    return bitboard.holds(bitboard.Bitboard(lo[:, None], hi[:, None]), cell)


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
    from per-slot `[R, N]` and per-game `[R]` arguments (outside 0..35: no entry).

    One pass over the slots carrying the bitboard of the cells seen so far: elementwise
    over the batch, so XLA fuses it into one loop (a `[36, 36]` compare per game, or a
    reduction over slots, would be scalar code). Call it inside a `lax.cond` branch, so
    that its words are materialised: fused into a per-slot consumer, the pass would run
    once per slot. Entries only come from the live slots of the compact list `alive`: the
    first word (slots below `_SHORT_PASS`) takes a short pass; the second, a full pass,
    runs only when some list of the batch is longer. Each pass computes the cells itself,
    slot by slot, so that XLA fuses them in rather than storing them.
    """
    rows, slots = alive.shape

    def pass_(stop, start, *args):
        """Slots `start .. stop - 1` of the mask, bit 0 for slot `start`."""
        seen_lo = seen_hi = first = jnp.zeros(rows, _U32)
        for i in range(stop):
            # Slot i's cell from slot i's inputs (per-slot `[R, N]`, per-game `[R]`).
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
        high = jax.lax.cond(jnp.any(alive[:, short]), functools.partial(pass_, slots, short),
                            lambda *_: high, *args)
    return low, high


def _cells_first_free(cell: Int32[Array, "R N"], alive: Bool[Array, "R N"],
                      from_task: Bool[Array, "R N"]
                      ) -> tuple[UInt32[Array, " R"], UInt32[Array, " R"]]:
    """Bitboard of the cells whose first live entity (list order) is not `fromTask`:
    "remove all at X" scores one kill exactly for these cells (§9)."""
    rows = cell.shape[0]
    seen_lo = seen_hi = free_lo = free_hi = jnp.zeros(rows, _U32)
    for i in range(cell.shape[1]):
        lo, hi = bitboard.of_cell(jnp.where(alive[:, i], cell[:, i], -1))
        keep = jnp.where(from_task[:, i], _U32(0), ~_U32(0))
        free_lo = free_lo | (lo & ~seen_lo & keep)
        free_hi = free_hi | (hi & ~seen_hi & keep)
        seen_lo, seen_hi = seen_lo | lo, seen_hi | hi
    return free_lo, free_hi


# --------------------------------------------------------------------------- random draws

def _rotl(x, d: int):
    return (x << _U32(d)) | (x >> _U32(32 - d))


def _threefry2x32(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds: the hash of JAX's default PRNG (`threefry2x32`),
    unrolled so that XLA fuses it (on CPU, JAX lowers it to a rolled loop)."""
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    ks = (k1, k2, k1 ^ k2 ^ _U32(0x1BD11BDA))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for r in range(5):
        for d in rotations[r % 2]:
            x1 = x1 + x2
            x2 = _rotl(x2, d) ^ x1
        x1 = x1 + ks[(r + 1) % 3]
        x2 = x2 + ks[(r + 2) % 3] + _U32(r + 1)
    return x1, x2


def _split2(key: UInt32[Array, "R 2"]) -> tuple[UInt32[Array, "R 2"], UInt32[Array, "R 2"]]:
    """`jax.random.split(key)` (two keys) on raw threefry key data, one key per row."""
    k1, k2 = key[:, 0:1], key[:, 1:2]
    a, b = _threefry2x32(k1, k2, jnp.zeros((1, 2), _U32), jnp.arange(2, dtype=_U32)[None])
    return jnp.stack([a[:, 0], b[:, 0]], 1), jnp.stack([a[:, 1], b[:, 1]], 1)


def _randint(key: UInt32[Array, "R 2"], n: int, span: Int32[Array, " R"]) -> Int32[Array, "R n"]:
    """`jax.random.randint(key, (n,), 0, span)` per row (int32, `span >= 1`), as JAX
    computes it with partitionable threefry: two 32-bit draws per value, combined modulo
    `span`."""
    high_key, low_key = _split2(key)
    count = jnp.arange(n, dtype=_U32)[None]

    def bits(k):
        a, b = _threefry2x32(k[:, 0:1], k[:, 1:2], jnp.zeros((1, n), _U32), count)
        return a ^ b

    span = span.astype(_U32)[:, None]
    multiplier = (_U32(1 << 16) % span) * (_U32(1 << 16) % span) % span
    offset = ((bits(high_key) % span) * multiplier + bits(low_key) % span) % span
    return offset.astype(jnp.int32)


def _fast_draws_ok() -> bool:
    return bool(jax.config.jax_threefry_partitionable)


def _draws(key: UInt32[Array, "R 2"], n_targets: Int32[Array, " R"], impl
           ) -> tuple[Int32[Array, " R"], Int32[Array, "R 36"]]:
    """WARP's target pick and POLY's 36 type offsets, exactly as
    `key_warp, key_poly = split(key)`, `randint(key_warp, (), 0, max(n_targets, 1))`,
    `randint(key_poly, (36,), 0, 3)`."""
    span = jnp.maximum(n_targets, 1)
    if impl is None:
        key_warp, key_poly = _split2(key)
        pick = _randint(key_warp, 1, span)[:, 0]
        offsets = _randint(key_poly, C.MAX_ENEMIES, jnp.full_like(span, 3))
        return pick, offsets

    def draw(k, s):
        key_warp, key_poly = jax.random.split(jax.random.wrap_key_data(k, impl=impl))
        return (jax.random.randint(key_warp, (), 0, s),
                jax.random.randint(key_poly, (C.MAX_ENEMIES,), 0, 3))

    return jax.vmap(draw)(key, span)


# --------------------------------------------------------------------------- effects

# The programs read and return a `GameState` without its UNDO snapshots (`_game`): no
# program writes them (UNDO reads the top one and moves `top`), and the batched programs
# gather and scatter every other leaf.
_Game = GameState


class _Changed(NamedTuple):
    """A program's result: the game (without its UNDO snapshots) and its outcome."""

    game: _Game
    kills: Array
    reached_exit: Array


def _stacks(state: GameState) -> tuple:
    return state.history.small, state.history.wide


def _game(state: GameState) -> _Game:
    """`state` with `None` for its UNDO snapshots."""
    return eqx.tree_at(_stacks, state, (None, None))


# What the sparse programs write, by field path in `_Changed` (`batching.leaf_paths`):
# the programs other than UNDO write `_SPARSE_WRITES`; UNDO writes what a snapshot holds
# (`Snapshot`'s fields) and the stack's top and depth. Every other field of the dense
# result stands. tests/game/test_batching.py runs the sparse programs on random games and
# fails if one writes a field outside its declaration (the batch would drop the write).
_SPARSE_WRITES = (
    "game.board.content", "game.board.block_points", "game.board.block_program",
    "game.board.block_question", "game.board.block_spawn", "game.player.row", "game.player.col",
    "game.player.credits", "game.player.energy", "game.enemies.alive", "game.enemies.kind",
    "game.enemies.hp", "game.enemies.stunned", "game.transmissions.alive", "kills", "reached_exit")
_UNDO_WRITES = tuple(f"game.{f.name}" for f in dataclasses.fields(Snapshot)) + (
    "game.history.top", "game.history.depth")


def _column(x: Array) -> Array:
    """A per-game `[R]` value as `[R, 1]`, to combine with per-slot `[R, 36]` values."""
    return x[:, None]


def _paid(g: _Game, program: Int32[Array, " R"]) -> Player:
    """The player after paying the program's cost (§9: paid first)."""
    p = g.player
    return eqx.tree_at(
        lambda x: (x.credits, x.energy), p,
        (p.credits - jnp.asarray(C.PROGRAM_CREDIT_COST)[program],
         p.energy - jnp.asarray(C.PROGRAM_ENERGY_COST)[program]))


def _displaced(g: _Game, program: Int32[Array, " R"]
               ) -> tuple[Int8[Array, "R 36"], Int8[Array, "R 36"]]:
    """Enemy rows and columns after PUSH (away) / PULL (toward) (§9.1, §9.2); for any
    other program, unchanged.

    The §9.1 candidates (diagonal, row-only, column-only; PUSH keeps the farthest, PULL
    the nearest and never the player's cell, ties to the earliest) reduce to one step per
    axis, from the pre-program positions:
    * PUSH: one step away from the player along each axis where it stays on the board.
      An enemy with no step stays (an enemy on the player's cell "moves" onto its own
      cell, which no other PUSH target can be).
    * PULL: one step toward the player along each axis, except that a diagonal neighbour
      of the player moves onto the player's row only; the player's cell and its four
      neighbours stay.
    (This equals the candidate rule for every player and enemy cell: checked exhaustively.)
    Then, in list order, an enemy moves unless an earlier one already moved into the same
    cell: the movers are the first of each target cell (`_first_of_cell`).
    """
    e = g.enemies

    def steps(row, col, alive, player_row, player_col, program):
        dr = row - _column(player_row.astype(jnp.int8))
        dc = col - _column(player_col.astype(jnp.int8))
        sr, sc = jnp.sign(dr), jnp.sign(dc)
        push, pull = _column(program == C.PUSH), _column(program == C.PULL)
        on_board = lambda x: (x >= 0) & (x < C.ROWS)  # (ROWS == COLS)
        diagonal_neighbour = (jnp.abs(dr) == 1) & (jnp.abs(dc) == 1)
        step_r = jnp.where(push, jnp.where(on_board(row + sr), sr, 0), -sr)
        step_c = jnp.where(push, jnp.where(on_board(col + sc), sc, 0),
                           jnp.where(diagonal_neighbour, 0, -sc))
        has = alive & jnp.where(push, (step_r != 0) | (step_c != 0),
                                pull & (jnp.abs(dr) + jnp.abs(dc) > 1))
        return has, step_r, step_c

    args = (e.row, e.col, e.alive, g.player.row, g.player.col, program)

    def targets(row, col, *rest):
        has, step_r, step_c = steps(row, col, *rest)
        return jnp.where(has, (row + step_r) * C.COLS + (col + step_c), -1)

    # `_first_of_cell` in a `cond` (skipped when no game pushes or pulls) materialises its
    # two words; the steps, elementwise, are recomputed outside rather than stored.
    first = jax.lax.cond(jnp.any((program == C.PUSH) | (program == C.PULL)),
                         lambda *args: _first_of_cell(targets, args, alive=args[2]),
                         lambda *_: _no_slots(program.shape[0]), *args)
    _, step_r, step_c = steps(*args)
    moves = _slot_bit(first, C.MAX_ENEMIES)         # only entries with a target are set
    return (jnp.where(moves, e.row + step_r, e.row), jnp.where(moves, e.col + step_c, e.col))


def _dense(g: _Game, program: Int32[Array, " R"]) -> _Changed:
    """Every game's result if its program is a dense one (for the others: replaced)."""
    is_ = lambda k: program == k
    b, e, t, p = g.board, g.enemies, g.transmissions, g.player
    paid = _paid(g, program)
    player = eqx.tree_at(
        lambda x: (x.hp, x.energy, x.data_siphons, x.attack, x.score), paid,
        (jnp.where(is_(C.RESET), C.MAX_HP, p.hp),
         paid.energy + jnp.where(is_(C.EXCH), 4, 0),
         p.data_siphons + is_(C.SIPH_PLUS).astype(jnp.int32),
         p.attack + is_(C.ATK_PLUS).astype(jnp.int32),
         p.score + jnp.where(is_(C.SCORE), C.NUM_STAGES - g.stage, 0)))
    enemies = eqx.tree_at(lambda x: (x.row, x.col), e, _displaced(g, program))
    transmissions = eqx.tree_at(
        lambda x: x.timer, t,
        t.timer + _column(jnp.where(is_(C.DELAY), C.DELAY_TURNS, 0)))
    reduced = _column(is_(C.REDUC)) & (b.content == C.BLOCK) & ~b.siphoned
    board = eqx.tree_at(lambda x: x.block_spawn, b,
                        jnp.where(reduced, jnp.maximum(b.block_spawn - 1, 0), b.block_spawn))
    game = eqx.tree_at(
        lambda s: (s.board, s.player, s.enemies, s.transmissions, s.show, s.calm,
                   s.step_active, s.atk_uses), g,
        (board, player, enemies, transmissions, g.show | is_(C.SHOW), g.calm | is_(C.CALM),
         g.step_active | is_(C.STEP), g.atk_uses + is_(C.ATK_PLUS).astype(jnp.int32)))
    return _Changed(game=game, kills=jnp.zeros_like(program), reached_exit=jnp.zeros_like(g.show))


def _take(x: Array, index: Int32[Array, " R"]) -> Array:
    """`x[r, index[r]]` for every row r."""
    return jnp.take_along_axis(x, _column(index), axis=1)[:, 0]


def _sparse(g: _Game, snap: Snapshot, program: Int32[Array, " R"],
            key: UInt32[Array, "R 2"], impl) -> tuple[_Changed, _Changed]:
    """The results of the sparse programs (§9.3-9.8, 9.16, 9.18, 9.22) for a few gathered
    games, and the state UNDO (§9.10) would restore for them."""
    is_ = lambda k: program == k
    col_ = lambda k: _column(program == k)
    b, e, t, p = g.board, g.enemies, g.transmissions, g.player
    here = p.row * C.COLS + p.col
    erow, ecol = e.row.astype(jnp.int32), e.col.astype(jnp.int32)
    ecell = erow * C.COLS + ecol
    tcell = t.row.astype(jnp.int32) * C.COLS + t.col.astype(jnp.int32)
    ehp, kind = e.hp.astype(jnp.int32), e.kind.astype(jnp.int32)
    is_block = b.content == C.BLOCK
    slots = jnp.asarray(_SLOTS)[None]

    # --- random draws; WARP's landing cell (lists are compact: entry k is slot k) ---
    n_enemies = jnp.sum(e.alive, axis=1, dtype=jnp.int32)
    n_targets = n_enemies + jnp.sum(t.alive, axis=1, dtype=jnp.int32)
    pick, offsets = _draws(key, n_targets, impl)
    warp_to_enemy = pick < n_enemies
    warp_cell = jnp.where(warp_to_enemy, _take(ecell, jnp.minimum(pick, C.MAX_ENEMIES - 1)),
                          _take(tcell, jnp.clip(pick - n_enemies, 0, C.MAX_TRANSMISSIONS - 1)))

    # --- "remove all at X": CRASH (the 8 surrounding cells), WARP (the landing cell) ---
    crash, warp = is_(C.CRASH), is_(C.WARP)
    around_lo, around_hi = bitboard.take(_SURROUNDING, here)
    warp_lo, warp_hi = bitboard.of_cell(warp_cell)
    none = jnp.zeros_like(warp_lo)

    def sweep(lands_here):
        return (jnp.where(crash, around_lo, jnp.where(warp & lands_here, warp_lo, none)),
                jnp.where(crash, around_hi, jnp.where(warp & lands_here, warp_hi, none)))

    e_sweep, t_sweep = sweep(warp_to_enemy), sweep(~warp_to_enemy)
    e_swept = e.alive & _holds(*e_sweep, ecell)
    t_swept = t.alive & _holds(*t_sweep, tcell)
    e_free = _cells_first_free(ecell, e.alive, e.from_task)
    t_free = _cells_first_free(tcell, t.alive, t.from_task)
    sweep_kills = (bitboard.popcount(e_free[0] & e_sweep[0]) + bitboard.popcount(e_free[1] & e_sweep[1])
                   + bitboard.popcount(t_free[0] & t_sweep[0]) + bitboard.popcount(t_free[1] & t_sweep[1]))

    # --- D_BOM: the nearest daemon (earliest on ties) is removed outright ---
    manhattan = jnp.abs(erow - _column(p.row)) + jnp.abs(ecol - _column(p.col))
    daemon = e.alive & (kind == C.DAEMON)
    nearest = jnp.min(jnp.where(daemon, manhattan * 64 + slots, 1 << 20), axis=1)
    any_daemon = nearest < (1 << 20)
    bomb = jnp.where(any_daemon, nearest % 64, 0)
    bombed = col_(C.D_BOM) & _column(any_daemon) & (slots == _column(bomb))
    bomb_row, bomb_col = _column(_take(erow, bomb)), _column(_take(ecol, bomb))
    near_bomb = jnp.maximum(jnp.abs(erow - bomb_row), jnp.abs(ecol - bomb_col)) == 1
    bomb_cell = bomb_row * C.COLS + bomb_col

    # --- damage (ROW, COL, DEBUG, HACK with attack; ANTI-V and D_BOM splash with 1) ---
    attack = _column(p.attack)
    damage = jnp.select(
        [col_(C.ROW), col_(C.COL), col_(C.DEBUG), col_(C.HACK), col_(C.ANTI_V), col_(C.D_BOM)],
        [jnp.where(erow == _column(p.row), attack, 0),
         jnp.where(ecol == _column(p.col), attack, 0),
         jnp.where(jnp.take_along_axis(is_block, ecell, axis=1), attack, 0),
         jnp.where(jnp.take_along_axis(b.siphoned, ecell, axis=1), attack, 0),
         jnp.where(kind == C.VIRUS, 1, 0),
         jnp.where(near_bomb & ~bombed & (ecell != bomb_cell), 1, 0)],
        jnp.zeros_like(ehp))
    damage = jnp.where(e.alive, damage, 0)

    # --- POLY: same damage taken, new type drawn from the three others ---
    new_kind = (kind + 1 + offsets) % 4
    max_hp = jnp.asarray(C.ENEMY_MAX_HP.astype(np.int32))
    hp = jnp.where(col_(C.POLY), max_hp[new_kind] - (max_hp[kind] - ehp),
                   jnp.maximum(ehp - damage, 0))
    kind = jnp.where(col_(C.POLY) & e.alive, new_kind, kind)
    stunned = e.stunned | ((damage > 0) & (hp > 0))
    dead = e.alive & (hp <= 0) & ~bombed & ~e_swept
    alive = e.alive & ~dead & ~bombed & ~e_swept
    kills = sweep_kills + jnp.sum((dead | bombed) & ~e.from_task, axis=1, dtype=jnp.int32)
    enemies = eqx.tree_at(
        lambda x: (x.alive, x.kind, x.hp, x.stunned), e,
        (alive, kind.astype(jnp.int8), jnp.where(alive, hp, 0).astype(jnp.int8), stunned))
    transmissions = eqx.tree_at(lambda x: x.alive, t, t.alive & ~t_swept)

    # --- board: CRASH removes the surrounding blocks ---
    cells = jnp.broadcast_to(jnp.asarray(_CELLS)[None], is_block.shape)
    crashed = _column(crash) & _holds(around_lo, around_hi, cells) & is_block
    board = eqx.tree_at(
        lambda x: (x.content, x.block_points, x.block_program, x.block_question, x.block_spawn),
        b,
        (jnp.where(crashed, jnp.int8(C.EMPTY), b.content),
         jnp.where(crashed, jnp.int8(0), b.block_points),
         jnp.where(crashed, jnp.int8(-1), b.block_program),
         b.block_question & ~crashed,
         jnp.where(crashed, jnp.int8(0), b.block_spawn)))

    player = eqx.tree_at(lambda x: (x.row, x.col), _paid(g, program),
                         (jnp.where(warp, warp_cell // C.COLS, p.row),
                          jnp.where(warp, warp_cell % C.COLS, p.col)))
    effect = _Changed(
        game=eqx.tree_at(lambda s: (s.board, s.player, s.enemies, s.transmissions), g,
                         (board, player, enemies, transmissions)),
        kills=kills, reached_exit=warp & (_take(b.content, warp_cell) == C.EXIT))

    # --- UNDO (§9.10): the top snapshot replaces the state; origin flags come back false ---
    def no_origin(x):
        return eqx.tree_at(lambda y: (y.from_task, y.from_siphon), x,
                           (jnp.zeros_like(x.from_task), jnp.zeros_like(x.from_siphon)))

    restored = {f.name: getattr(snap, f.name) for f in dataclasses.fields(Snapshot)}
    restored.update(enemies=no_origin(snap.enemies), transmissions=no_origin(snap.transmissions))
    h = g.history
    undone = _Changed(
        game=eqx.tree_at(
            lambda s: (*(getattr(s, name) for name in restored), s.history.top, s.history.depth),
            g, (*restored.values(), (h.top - 1) % C.HISTORY_CAPACITY, h.depth - 1)),
        kills=jnp.zeros_like(kills), reached_exit=jnp.zeros_like(effect.reached_exit))
    return effect, undone


# --------------------------------------------------------------------------- batch

def _sparse_roles(changed: _Changed) -> _Changed:
    """What the sparse programs do to each leaf: "effect" (some program other than UNDO
    may change it), "undo" (only UNDO changes it: elsewhere the dense result stands) or
    "kept" (no sparse program changes it), from `_SPARSE_WRITES` and `_UNDO_WRITES`."""
    effect = batching.written_leaves(changed, _SPARSE_WRITES, "_SPARSE_WRITES")
    undo = batching.written_leaves(changed, _UNDO_WRITES, "_UNDO_WRITES")
    roles = ["effect" if e else "undo" if u else "kept" for e, u in zip(effect, undo)]
    return jax.tree.unflatten(jax.tree.structure(changed), roles)


def _run_batch(state: GameState, program: Int32[Array, " B"], key: UInt32[Array, "B 2"],
               impl=None) -> _Changed:
    """All games' results: the dense programs for every game, then the sparse ones for
    the games that run one, gathered `SPARSE_ROWS` at a time and scattered back."""
    batch = program.shape[0]
    g = _game(state)
    out = _dense(g, program)
    history = state.history

    def chunk(index, out):
        safe = jnp.minimum(index, batch - 1)
        games = jax.tree.map(lambda x: x[safe], g)
        # One row per game of the flattened `[B * H, ...]` stack: a plain row gather.
        at = safe * C.HISTORY_CAPACITY + history.top[safe]
        snap = unpack_snapshot(*(x.reshape((-1, x.shape[-1]))[at]
                                 for x in (history.small, history.wide)))
        effect, undone = _sparse(games, snap, program[safe], key[safe], impl)
        undo = program[safe] == C.UNDO
        undo_index = jnp.where(undo, index, batch)

        def put(role, x, changed, restored):
            if role == "kept":
                return x
            if role == "effect":
                value = jnp.where(undo.reshape((-1,) + (1,) * (x.ndim - 1)), restored, changed)
                return x.at[index].set(value, mode="drop")
            return x.at[undo_index].set(restored, mode="drop")

        return jax.tree.map(put, _sparse_roles(out), out, effect, undone)

    # One instance of the sparse programs (they are most of this module's compiled code),
    # run once per chunk of games that need them.
    sparse = jnp.asarray(_IS_SPARSE)[program]
    return batching.for_selected_chunks(sparse, min(SPARSE_ROWS, batch), chunk, out)


# --------------------------------------------------------------------------- entry point

def _key_parts(key: Key[Array, ""]) -> tuple[UInt32[Array, "2"], object]:
    """Raw key data and, unless it is the default threefry with partitionable draws
    (then `None`: `_draws` computes them itself), the PRNG implementation."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        data, impl = jax.random.key_data(key), jax.random.key_impl(key)
        name = str(impl)
    else:
        data, name = key, jax.config.jax_default_prng_impl
        impl = name
    fast = name == "threefry2x32" and _fast_draws_ok()
    return data.astype(_U32), (None if fast else impl)


def run_program(state: GameState, program: Int32[Array, ""], key: Key[Array, ""]
                ) -> tuple[GameState, ActionOutcome]:
    """Pay the cost of `program` and apply its effect (§9). Legality is the caller's.

    Batch with `jax.vmap` as usual: a custom batching rule then runs `_run_batch` on the
    whole batch; unbatched, `_run_batch` runs on a batch of one.
    """
    data, impl = _key_parts(key)
    program = jnp.asarray(program, jnp.int32)

    @batching.custom_batching(lambda _, *args: _run_batch(*args, impl=impl))
    def run_one(state, program, data):
        batch_of_one = jax.tree.map(lambda x: x[None], (state, program, data))
        return jax.tree.map(lambda x: x[0], _run_batch(*batch_of_one, impl=impl))

    changed = run_one(state, program, data)

    # The snapshots, which no program writes, come back from `state`.
    new = eqx.tree_at(_stacks, changed.game, _stacks(state), is_leaf=lambda x: x is None)
    outcome = eqx.tree_at(lambda o: (o.kills, o.reached_exit), no_outcome(),
                          (changed.kills, changed.reached_exit))
    return new, outcome
