"""The player's own actions: the legal-action mask (docs/rules.md#legal-actions, §5),
moving and attacking (docs/rules.md#moving-and-attacking, §7), siphoning
(docs/rules.md#siphon, §8) and the reward's siphon-quality check
(docs/rules.md#siphon-quality, §14.3). Section numbers (§) in this module are those of
docs/rules.md.

Every rule here asks a question about the player's surroundings ("is there an enemy in
this line?", "what does this cross hold?"). Under `jax.vmap` over thousands of games the
cost is any per-game work over all 36 cells (docs/performance.md), so the questions are
answered without it:

* entity lists are summarised by ONE variadic OR-reduction into bitboard words
  (two uint32 words of occupancy, bit `cell % 18` of word `cell // 18`, as in
  `bitboard.py`) plus flag bits; "is there an X at / around / in line with the player"
  then becomes a bit test against static per-cell masks;
* the player's cross, neighbours and ray are read by gathers of a few cells;
* the siphon-quality check compares no multisets and sorts nothing: it is one small
  matrix product (sums over every cross) and one max-reduction (see `_cross_view` for
  why this is exact).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int32

from hm.game import bitboard, entities, geometry
from hm.game import constants as C
from hm.game.bitboard import CELLS_PER_WORD
from hm.game.program_table import CREDIT_COST, ENERGY_COST, PROGRAMS
from hm.game.state import GameState

_CELL_IDS = np.arange(C.NUM_CELLS, dtype=np.int32)
_PROGRAM_IDS = np.arange(C.NUM_PROGRAMS, dtype=np.int32)
_ROW_OF = geometry.ROW_OF
_COL_OF = geometry.COL_OF

# Bitboards of static cell sets, indexed by cell: its cross (§8).
_CROSS = bitboard.table(geometry.CROSS_MASK)
# Bit `cell % 18` (in word `cell // 18`) of every cell; the shifts of a per-cell OR-reduction.
_CELL_SHIFT = (_CELL_IDS % CELLS_PER_WORD).astype(np.uint32)
_IN_LO = _CELL_IDS < CELLS_PER_WORD


def player_cell(state: GameState) -> Int32[Array, ""]:
    return state.player.row * C.COLS + state.player.col


class _Occupancy(eqx.Module):
    """Bitboards and flags the legality rules need, each from one pass over a list."""

    blocks: bitboard.Bitboard
    any_siphoned: Bool[Array, ""]
    any_reducible: Bool[Array, ""]
    enemies: bitboard.Bitboard
    any_enemy: Bool[Array, ""]
    any_daemon: Bool[Array, ""]
    any_virus: Bool[Array, ""]
    transmissions: bitboard.Bitboard
    any_transmission: Bool[Array, ""]


def _occupancy(state: GameState) -> _Occupancy:
    b, e, t = state.board, state.enemies, state.transmissions
    is_block = b.content == C.BLOCK
    reducible = is_block & ~b.siphoned & (b.block_spawn > 0)
    bit = np.uint32(1) << _CELL_SHIFT
    # Word 0 also carries two board flags above its 18 cell bits.
    board_lo = (jnp.where(is_block & _IN_LO, bit, np.uint32(0))
                | (b.siphoned.astype(jnp.uint32) << CELLS_PER_WORD)
                | (reducible.astype(jnp.uint32) << (CELLS_PER_WORD + 1)))
    board_hi = jnp.where(is_block & ~_IN_LO, bit, np.uint32(0))
    block_lo, block_hi = bitboard.or_reduce(board_lo, board_hi)
    enemies, e_flags = entities.occupancy_words(e, e.kind == C.DAEMON, e.kind == C.VIRUS)
    transmissions, t_flags = entities.occupancy_words(t)
    one = np.uint32(1)
    return _Occupancy(
        blocks=bitboard.Bitboard(block_lo & bitboard.FULL_WORD, block_hi),
        any_siphoned=((block_lo >> CELLS_PER_WORD) & one) != 0,
        any_reducible=((block_lo >> (CELLS_PER_WORD + 1)) & one) != 0,
        enemies=enemies, any_enemy=(e_flags & one) != 0,
        any_daemon=((e_flags >> 1) & one) != 0, any_virus=((e_flags >> 2) & one) != 0,
        transmissions=transmissions, any_transmission=(t_flags & one) != 0)


def _program_conditions(state: GameState, o: _Occupancy) -> Bool[Array, "23"]:
    """Each program's own condition (`program_table.PROGRAMS`, §4), by program id."""
    # Packed into one word and unpacked in one elementwise op: stacking 23 scalars
    # would cost one small fusion each under `vmap`.
    word = jnp.asarray(0, jnp.uint32)
    for program in PROGRAMS:
        word = word | (jnp.asarray(program.condition(state, o)).astype(jnp.uint32) << program.id)
    return ((word >> _PROGRAM_IDS.astype(np.uint32)) & np.uint32(1)) != 0


@jax.jit
def legal_actions(state: GameState) -> Bool[Array, "28"]:
    """The legal-action mask of §5: a direction is legal unless it leads off the board or
    into a block that no enemy stands on (§7 attacks such an enemy)."""
    p = state.player
    o = _occupancy(state)
    targets = jnp.asarray(geometry.NEIGHBOURS)[player_cell(state)]
    blocked = bitboard.holds(o.blocks, targets) & ~bitboard.holds(o.enemies, targets)
    directional = (targets >= 0) & ~blocked
    siphon = (p.data_siphons > 0)[None]
    programs = (p.owned & (p.credits >= CREDIT_COST) & (p.energy >= ENERGY_COST)
                & _program_conditions(state, o))
    return jnp.concatenate([directional, siphon, programs])


class ActionOutcome(eqx.Module):
    """What the player's action did, beyond the new state, for the reward (§14)."""

    kills: Int32[Array, ""]
    pickup: Bool[Array, ""]
    reached_exit: Bool[Array, ""]
    missed_resources: Int32[Array, ""]   # siphon quality: missedCredits + missedEnergy


def no_outcome() -> ActionOutcome:
    zero = jnp.asarray(0, jnp.int32)
    false = jnp.asarray(False)
    return ActionOutcome(kills=zero, pickup=false, reached_exit=false, missed_resources=zero)


_NO_HIT = 1 << 20     # ray key of an entity that is not in the line of fire


def _ray_keys(entities, row, col, dr, dc) -> Int32[Array, " N"]:
    """Per slot, k·64 + slot if the live entity there is k ≥ 1 cells along direction
    (dr, dc) from (row, col), else `_NO_HIT`.

    The offset of such an entity is k·(dr, dc): its along-component Δr·dr + Δc·dc is
    k ≥ 1 and its perpendicular one Δr·dc − Δc·dr is 0. The minimum key is the nearest
    entity in the line of fire, the first in list order among those on its cell.
    """
    d_row = entities.row.astype(jnp.int32) - row
    d_col = entities.col.astype(jnp.int32) - col
    k = d_row * dr + d_col * dc
    on_ray = entities.alive & (k >= 1) & (d_row * dc - d_col * dr == 0)
    slot = jnp.arange(entities.alive.shape[0], dtype=jnp.int32)
    return jnp.where(on_ray, k * 64 + slot, _NO_HIT)


def directional(state: GameState, direction: Int32[Array, ""]) -> tuple[GameState, ActionOutcome]:
    """Attack the first target in the line of fire, or step one cell (§7).

    The line stops at the first cell that is off the board or holds a transmission, an
    enemy or a block; a transmission there is the target, else an enemy, else nothing.
    """
    p, b, e, t = state.player, state.board, state.enemies, state.transmissions
    delta = jnp.asarray(C.DIRECTION_DELTAS)[direction]
    dr, dc = delta[0], delta[1]
    # Both lists in one pass (a variadic min-reduction).
    t_first, e_first = jax.lax.reduce(
        (_ray_keys(t, p.row, p.col, dr, dc), _ray_keys(e, p.row, p.col, dr, dc)),
        (np.int32(_NO_HIT), np.int32(_NO_HIT)),
        lambda a, b: (jnp.minimum(a[0], b[0]), jnp.minimum(a[1], b[1])), (0,))
    t_dist, tslot = t_first >> 6, t_first & 63
    e_dist, eslot = e_first >> 6, e_first & 63
    reach = jnp.arange(1, C.ROWS, dtype=jnp.int32)
    rows = p.row + reach * dr
    cols = p.col + reach * dc
    on_board = (rows >= 0) & (rows < C.ROWS) & (cols >= 0) & (cols < C.COLS)
    ray = jnp.where(on_board, rows * C.COLS + cols, 0)
    wall = ~on_board | (b.content[ray] == C.BLOCK)        # off board or a block
    wall_dist = jnp.min(jnp.where(wall, reach, C.ROWS))    # C.ROWS: past the 5-cell ray
    stop = jnp.minimum(jnp.minimum(t_dist, e_dist), wall_dist)
    hit_transmission = t_dist == stop
    hit_enemy = (e_dist == stop) & ~hit_transmission

    # Transmission target: delete it.
    t_removed = hit_transmission & (jnp.arange(C.MAX_TRANSMISSIONS) == tslot)
    t_kill = hit_transmission & ~t.from_task[tslot]
    transmissions = eqx.tree_at(lambda x: x.alive, t, t.alive & ~t_removed)

    # Enemy target: damage, stun or remove. (Other slots keep max(hp, 0), as written
    # for every slot by the rule hp := max(0, hp − attack · [hit]).)
    hit = hit_enemy & (jnp.arange(C.MAX_ENEMIES) == eslot)
    hit_hp = jnp.maximum(e.hp[eslot].astype(jnp.int32) - p.attack, 0)
    killed = hit_enemy & (hit_hp == 0)
    e_kill = killed & ~e.from_task[eslot]
    enemies = eqx.tree_at(
        lambda x: (x.hp, x.stunned, x.alive), e,
        (jnp.where(hit, hit_hp.astype(jnp.int8), jnp.maximum(e.hp, jnp.int8(0))),
         e.stunned | (hit & (hit_hp > 0)), e.alive & ~(hit & killed)))

    # No target: step (the mask guarantees the adjacent cell is on board and free of blocks).
    moves = ~hit_transmission & ~hit_enemy
    new_row = jnp.where(moves, p.row + dr, p.row)
    new_col = jnp.where(moves, p.col + dc, p.col)
    new_cell = new_row * C.COLS + new_col
    content = b.content[new_cell]
    pickup = moves & (content == C.PICKUP)
    reached_exit = moves & (content == C.EXIT)
    board = eqx.tree_at(lambda x: x.content, b,
                        jnp.where(pickup & (_CELL_IDS == new_cell), jnp.int8(C.EMPTY), b.content))
    player = eqx.tree_at(lambda x: (x.row, x.col, x.data_siphons), p,
                         (new_row, new_col, p.data_siphons + pickup.astype(jnp.int32)))
    state = eqx.tree_at(lambda s: (s.player, s.board, s.enemies, s.transmissions), state,
                        (player, board, enemies, transmissions))
    kills = t_kill.astype(jnp.int32) + e_kill.astype(jnp.int32)
    return state, ActionOutcome(kills=kills, pickup=pickup, reached_exit=reached_exit,
                                missed_resources=jnp.asarray(0, jnp.int32))


# CROSS_MASK as a matrix: (v @ _CROSS_MATRIX)[x] sums v over the cross of x.
_CROSS_MATRIX = geometry.CROSS_MASK.astype(np.float32)
_POWERS_OF_TWO = (2.0 ** np.arange(C.NUM_PROGRAMS)).astype(np.float32)
# Fields of the packed per-cell value summed over crosses in `_cross_view`.
_ENERGY_SHIFT, _BAD_SHIFT, _FIELD = 10, 20, (1 << 10) - 1


def _exact_dot(x: Array, matrix: np.ndarray) -> Int32[Array, "..."]:
    """`x @ matrix` of small non-negative integers, exact.

    On XLA CPU one small matrix product beats any per-cell stencil or reduction fused
    under `vmap`. float32 represents every integer below 2**24 exactly, so the sum is
    exact in any order when the result stays below 2**24 (callers check); HIGHEST keeps
    accelerators from rounding the operands to bfloat16.
    """
    return jnp.dot(x.astype(jnp.float32), matrix,
                   precision=jax.lax.Precision.HIGHEST).astype(jnp.int32)


class _CrossView(eqx.Module):
    """What siphoning at the player's cell sees, shared by `siphon` and §14.3."""

    missed_credits: Int32[Array, ""]
    missed_energy: Int32[Array, ""]
    resources: Int32[Array, ""]     # packed credits | energy << 10 of the open cross cells
    blocks: Int32[Array, "5"]       # per cross cell, the packed `_block_code` (0: none)


def _block_code(board) -> Int32[Array, "36"]:
    """Per cell: 0 unless an unsiphoned block, else (program + 2) | points << 5 |
    spawn << 12 (program −1 = data; each field below 2**7: int8 payloads are ≥ 0)."""
    payload = ((board.block_program.astype(jnp.int32) + 2)
               | (board.block_points.astype(jnp.int32) << 5)
               | (board.block_spawn.astype(jnp.int32) << 12))
    return jnp.where(~board.siphoned & (board.content == C.BLOCK), payload, 0)


def missed_resources(state: GameState) -> tuple[Int32[Array, ""], Int32[Array, ""]]:
    """Siphon quality (§14.3): (missedCredits, missedEnergy), zero when optimal."""
    view = _cross_view(state)
    return view.missed_credits, view.missed_energy


def _cross_view(state: GameState) -> _CrossView:
    """Siphon quality (§14.3) and the cross of the player's cell.

    Equivalent reformulation, without building or sorting any multiset. Let q be the
    player's cell and Y0 the yield at q. Call has_blocks the rule's case "Y0 has a data
    point or a program"; it implies q is not a block, so the unsiphoned blocks B of q's
    cross are neighbours of q. Let B' := B if has_blocks else ∅, let P0 be Y0's program
    set (∅ unless has_blocks), and call a cell *bad* when it is an unsiphoned block
    outside B' holding data, or a program that is neither owned nor in P0.

    Claim: a non-block x whose cross contains B' (every candidate does) has Y0's data
    multiset and program set iff no cell of x's cross is bad. Indeed the blocks of B' are
    all counted in x's yield, so x's data multiset is Y0's plus the points of the other
    unsiphoned data blocks of x's cross, and its program set is P0 plus the unowned
    programs of the other unsiphoned program blocks. Adding any element makes a multiset
    bigger, hence unequal whatever the values (so points are never compared, and equal
    values in other cells or in another order cannot fool the test); a set grows exactly
    by the programs not already in it. If has_blocks fails, B' = P0 = ∅ and "no bad cell"
    says x yields no data and no program, like Y0.

    So x is strictly better iff x is not a block, x's cross covers B', holds no bad cell,
    and x's resources dominate Y0's with one strict inequality. Then each maximum of
    §14.3 is `max(credits(x) − credits(Y0))` over those x (≥ 0; 0 when there is none).

    Per-cell sums over crosses come from one exact matrix product of a packed value:
    credits (bits 0–9), energy (10–19) and "bad" (20–22). A cell holds at most 127 of a
    resource (int8, never negative), so a sum over 5 cells (≤ 635) fits its 10 bits, and
    the packed sum stays below 5·2**20 + 2**20 < 2**24.
    """
    p, b = state.player, state.board
    here = player_cell(state)
    is_block = b.content == C.BLOCK
    fresh = ~b.siphoned
    program = b.block_program.astype(jnp.int32)
    owned = _exact_dot(p.owned, _POWERS_OF_TWO)                     # bit g: g owned

    # Y0's blocks, from one gather over the player's cross (q, then its 4 neighbours):
    # code 0 = no unsiphoned block, 1 = data, 2 + g = program g.
    cross = jnp.asarray(geometry.CROSS)[here]
    y = jnp.maximum(cross, 0)
    blocks_y = jnp.where(cross >= 0, _block_code(b)[y], 0)
    code_y = blocks_y & 31
    program_y = jnp.maximum(code_y - 2, 0)
    unowned_y = (code_y >= 2) & (((owned >> program_y) & 1) == 0)
    block_here = is_block[here]
    p0 = jnp.where(unowned_y, np.int32(1) << program_y, 0)
    p0 = jnp.where(block_here, 0, p0[1] | p0[2] | p0[3] | p0[4])    # P0 as a bit set
    has_blocks = ~block_here & (jnp.any(code_y == 1) | (p0 != 0))
    in_b = has_blocks & (code_y > 0)                                 # B' (q: never)

    d_row = _ROW_OF - p.row
    d_col = _COL_OF - p.col
    neighbour_of_here = jnp.abs(d_row) + jnp.abs(d_col) == 1
    wanted = (program < 0) | ((((owned | p0) >> jnp.maximum(program, 0)) & 1) == 0)
    bad = fresh & is_block & wanted & ~(has_blocks & neighbour_of_here)
    resource = fresh & ~is_block
    packed = (jnp.where(resource, b.credits.astype(jnp.int32)
                        | (b.energy.astype(jnp.int32) << _ENERGY_SHIFT), 0)
              | (bad.astype(jnp.int32) << _BAD_SHIFT))
    sums = _exact_dot(packed, _CROSS_MATRIX)                         # per position x
    credits = sums & _FIELD
    energy = (sums >> _ENERGY_SHIFT) & _FIELD
    yield_here = jnp.where(block_here, 0, sums[here])
    credits0 = yield_here & _FIELD
    energy0 = (yield_here >> _ENERGY_SHIFT) & _FIELD

    # Positions whose cross contains every cell of B' (the cells whose cross contains
    # a cell are that cell's cross), as a bitboard: scalar work.
    cover = bitboard.where(in_b, bitboard.take(_CROSS, y), bitboard.EVERY_CELL)
    cover = jax.tree.map(lambda w: w[1] & w[2] & w[3] & w[4], cover)      # q's entry left out
    covers = ((jnp.where(_IN_LO, cover.lo, cover.hi) >> _CELL_SHIFT) & np.uint32(1)) != 0
    better = (~is_block & covers & (sums < (1 << _BAD_SHIFT))
              & (credits >= credits0) & (energy >= energy0)
              & ((credits > credits0) | (energy > energy0)))
    zero = np.int32(0)
    missed_credits, missed_energy = jax.lax.reduce(
        (jnp.where(better, credits - credits0, 0), jnp.where(better, energy - energy0, 0)),
        (zero, zero), lambda a, c: (jnp.maximum(a[0], c[0]), jnp.maximum(a[1], c[1])), (0,))
    return _CrossView(missed_credits=missed_credits, missed_energy=missed_energy,
                      resources=sums[here] & ((1 << _BAD_SHIFT) - 1), blocks=blocks_y)


def siphon(state: GameState) -> tuple[GameState, ActionOutcome]:
    """Drain the whole cross around the player (§8).

    What is gained is read from the five cross cells by one gather (and the cross sums
    of §14.3); the board is updated by one elementwise pass with the cross as a mask.
    """
    view = _cross_view(state)
    p, b = state.player, state.board
    here = player_cell(state)
    code = view.blocks & 31                    # 0 none, 1 data, 2 + g program g
    points = (view.blocks >> 5) & 127
    spawn = view.blocks >> 12
    score = p.score + jnp.sum(jnp.where(code == 1, points, 0))
    pending = state.pending + jnp.sum(spawn)
    gained = p.owned
    for k in range(code.shape[0]):
        gained = gained | (code[k] - 2 == _PROGRAM_IDS)
    credits = p.credits + (view.resources & _FIELD)
    energy = p.energy + (view.resources >> _ENERGY_SHIFT)

    in_cross = jnp.abs(_ROW_OF - p.row) + jnp.abs(_COL_OF - p.col) <= 1
    drained = in_cross & ~b.siphoned
    block = drained & (b.content == C.BLOCK)
    open_cell = drained & (b.content != C.BLOCK)
    board = eqx.tree_at(
        lambda x: (x.block_spawn, x.block_question, x.credits, x.energy, x.siphoned,
                   x.siphon_center),
        b,
        (jnp.where(block, jnp.int8(0), b.block_spawn), b.block_question & ~block,
         jnp.where(open_cell, jnp.int8(0), b.credits), jnp.where(open_cell, jnp.int8(0), b.energy),
         b.siphoned | in_cross, b.siphon_center | (_CELL_IDS == here)))
    player = eqx.tree_at(lambda x: (x.score, x.owned, x.credits, x.energy, x.data_siphons), p,
                         (score, gained, credits, energy, p.data_siphons - 1))
    state = eqx.tree_at(
        lambda s: (s.player, s.board, s.pending, s.interval, s.next_task), state,
        (player, board, pending, jnp.maximum(C.MIN_INTERVAL, state.interval - 1),
         state.next_task + C.SIPHON_TASK_DELAY))
    outcome = eqx.tree_at(lambda o: o.missed_resources, no_outcome(),
                          view.missed_credits + view.missed_energy)
    return state, outcome
