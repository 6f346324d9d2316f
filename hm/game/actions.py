"""Legal-action mask (§5), directional actions (§7) and siphoning (§8, §14.3)."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int32

from hm.game import constants as C
from hm.game import entities, geometry
from hm.game.state import GameState

_CREDIT_COST = C.PROGRAM_CREDIT_COST
_ENERGY_COST = C.PROGRAM_ENERGY_COST
_CELL_IDS = np.arange(C.NUM_CELLS, dtype=np.int32)
_PROGRAM_IDS = np.arange(C.NUM_PROGRAMS, dtype=np.int8)


def player_cell(state: GameState) -> Int32[Array, ""]:
    return state.player.row * C.COLS + state.player.col


def _on(mask_cells: Bool[Array, "36"], cells: Int32[Array, "N"]) -> Bool[Array, "N"]:
    """Whether each of `cells` (−1 = off board) is set in a per-cell mask."""
    return (cells >= 0) & mask_cells[jnp.maximum(cells, 0)]


def program_conditions(state: GameState) -> Bool[Array, "23"]:
    """Each program's own legality condition of §4 (ownership and cost aside)."""
    p, b, e, t = state.player, state.board, state.enemies, state.transmissions
    is_block = b.content == C.BLOCK
    ecell = entities.cells(e)
    any_enemy = jnp.any(e.alive)
    any_transmission = jnp.any(t.alive)
    enemy_here = entities.occupancy(e)
    transmission_here = entities.occupancy(t)
    around = jnp.asarray(geometry.SURROUNDING_MASK)[player_cell(state)]
    crash = jnp.any(around & (is_block | enemy_here | transmission_here))
    kinds = jnp.where(e.alive, e.kind, -1)
    conditions = [
        any_enemy,                                                    # PUSH
        any_enemy,                                                    # PULL
        crash,                                                        # CRASH
        any_enemy | any_transmission,                                 # WARP
        any_enemy,                                                    # POLY
        jnp.asarray(True),                                            # WAIT
        jnp.any(e.alive & is_block[ecell]),                           # DEBUG
        jnp.any(e.alive & (e.row.astype(jnp.int32) == p.row)),        # ROW
        jnp.any(e.alive & (e.col.astype(jnp.int32) == p.col)),        # COL
        state.history.depth > 0,                                      # UNDO
        jnp.asarray(True),                                            # STEP
        jnp.asarray(True),                                            # SIPH+
        p.credits >= 4,                                               # EXCH
        ~state.show,                                                  # SHOW
        p.hp < C.MAX_HP,                                              # RESET
        ~state.calm,                                                  # CALM
        jnp.any(kinds == C.DAEMON),                                   # D_BOM
        any_transmission,                                             # DELAY
        jnp.any(kinds == C.VIRUS),                                    # ANTI-V
        state.stage < C.NUM_STAGES,                                   # SCORE
        jnp.any(is_block & ~b.siphoned & (b.block_spawn > 0)),        # REDUC
        state.atk_uses < C.MAX_ATK_USES,                              # ATK+
        jnp.any(b.siphoned),                                          # HACK
    ]
    return jnp.stack(conditions)


def legal_actions(state: GameState) -> Bool[Array, "28"]:
    """The legal-action mask of §5."""
    p, b = state.player, state.board
    targets = jnp.asarray(geometry.NEIGHBOURS)[player_cell(state)]
    is_block = b.content == C.BLOCK
    enemy_here = entities.occupancy(state.enemies)
    directional = (targets >= 0) & ~_on(is_block & ~enemy_here, targets)
    siphon = (p.data_siphons > 0)[None]
    programs = (p.owned & (p.credits >= _CREDIT_COST) & (p.energy >= _ENERGY_COST)
                & program_conditions(state))
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


def directional(state: GameState, direction: Int32[Array, ""]) -> tuple[GameState, ActionOutcome]:
    """Attack the first target in the line of fire, or step one cell (§7)."""
    p, b, e, t = state.player, state.board, state.enemies, state.transmissions
    delta = jnp.asarray(C.DIRECTION_DELTAS)[direction]
    reach = jnp.arange(1, C.ROWS, dtype=jnp.int32)
    rows = p.row + reach * delta[0]
    cols = p.col + reach * delta[1]
    on_board = (rows >= 0) & (rows < C.ROWS) & (cols >= 0) & (cols < C.COLS)
    ray = jnp.where(on_board, rows * C.COLS + cols, -1)
    transmission_here = _on(entities.occupancy(t), ray)
    enemy_here = _on(entities.occupancy(e), ray)
    block_here = _on(b.content == C.BLOCK, ray)
    stops = ~on_board | transmission_here | enemy_here | block_here
    first = jnp.argmax(stops)            # always some stop: the ray leaves the board
    target_cell = jnp.maximum(ray[first], 0)
    hit_transmission = transmission_here[first]
    hit_enemy = enemy_here[first] & ~hit_transmission

    # Transmission target: delete it.
    tslot = entities.first_at(t, target_cell)
    t_removed = hit_transmission & (jnp.arange(C.MAX_TRANSMISSIONS) == tslot)
    t_kill = hit_transmission & ~t.from_task[jnp.minimum(tslot, C.MAX_TRANSMISSIONS - 1)]
    transmissions = eqx.tree_at(lambda x: x.alive, t, t.alive & ~t_removed)

    # Enemy target: damage, stun or remove.
    eslot = entities.first_at(e, target_cell)
    hit = hit_enemy & (jnp.arange(C.MAX_ENEMIES) == eslot)
    hp = jnp.maximum(e.hp.astype(jnp.int32) - jnp.where(hit, p.attack, 0), 0)
    dead = hit & (hp == 0)
    e_kill = jnp.any(dead & ~e.from_task)
    enemies = eqx.tree_at(lambda x: (x.hp, x.stunned, x.alive), e,
                          (hp.astype(jnp.int8), e.stunned | (hit & (hp > 0)), e.alive & ~dead))

    # No target: step (the mask guarantees the adjacent cell is on board and free of blocks).
    moves = ~hit_transmission & ~hit_enemy
    new_row = jnp.where(moves, p.row + delta[0], p.row)
    new_col = jnp.where(moves, p.col + delta[1], p.col)
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


def missed_resources(state: GameState) -> tuple[Int32[Array, ""], Int32[Array, ""]]:
    """Siphon quality (§14.3): (missedCredits, missedEnergy), zero when optimal."""
    p, b = state.player, state.board
    is_block = b.content == C.BLOCK
    cross = geometry.CROSS                                        # [36, 5]
    valid = jnp.asarray(cross >= 0)
    y = jnp.asarray(np.maximum(cross, 0))
    counted = valid & ~b.siphoned[y]                              # unsiphoned cells in the cross
    block_y = counted & is_block[y]
    program_y = block_y & (b.block_program[y] >= 0)
    data_y = block_y & (b.block_program[y] < 0)
    # Yield of each position x (a block position yields nothing).
    open_x = ~is_block[:, None]
    # Data multisets as sorted lists (−1 pads the cells without data).
    data_sets = jnp.sort(jnp.where(data_y & open_x, b.block_points[y].astype(jnp.int32), -1),
                         axis=1)
    program_id = jnp.maximum(b.block_program[y].astype(jnp.int32), 0)
    new_program = program_y & ~p.owned[program_id] & open_x
    program_sets = jnp.any((program_id[:, :, None] == _CELL_IDS[None, None, :C.NUM_PROGRAMS])
                           & new_program[:, :, None], axis=1)
    resource_y = counted & ~is_block[y] & open_x
    credits = jnp.sum(jnp.where(resource_y, b.credits[y].astype(jnp.int32), 0), axis=1)
    energy = jnp.sum(jnp.where(resource_y, b.energy[y].astype(jnp.int32), 0), axis=1)

    here = player_cell(state)
    has_blocks = jnp.any(data_sets[here] >= 0) | jnp.any(program_sets[here])
    # Positions whose cross covers every unsiphoned block cell of the player's cross.
    cross_here = jnp.asarray(geometry.CROSS_MASK)[here]
    blocks_here = cross_here & is_block & ~b.siphoned
    covers_all = jnp.all(geometry.CROSS_MASK | ~blocks_here[None, :], axis=1)
    candidate = ~is_block & jnp.where(has_blocks, covers_all, True)
    better = (candidate
              & jnp.all(data_sets == data_sets[here][None, :], axis=1)
              & jnp.all(program_sets == program_sets[here][None, :], axis=1)
              & (credits >= credits[here]) & (energy >= energy[here])
              & ((credits > credits[here]) | (energy > energy[here])))
    suboptimal = jnp.any(better)
    missed_credits = jnp.max(jnp.where(better, credits, credits[here])) - credits[here]
    missed_energy = jnp.max(jnp.where(better, energy, energy[here])) - energy[here]
    zero = jnp.asarray(0, jnp.int32)
    return (jnp.where(suboptimal, missed_credits, zero),
            jnp.where(suboptimal, missed_energy, zero))


def siphon(state: GameState) -> tuple[GameState, ActionOutcome]:
    """Drain the whole cross around the player (§8)."""
    missed_credits, missed_energy = missed_resources(state)
    p, b = state.player, state.board
    here = player_cell(state)
    in_cross = jnp.asarray(geometry.CROSS_MASK)[here]
    drained = in_cross & ~b.siphoned
    block = drained & (b.content == C.BLOCK)
    open_cell = drained & (b.content != C.BLOCK)
    is_program = block & (b.block_program >= 0)
    is_data = block & (b.block_program < 0)
    score = p.score + jnp.sum(jnp.where(is_data, b.block_points.astype(jnp.int32), 0))
    pending = state.pending + jnp.sum(jnp.where(block, b.block_spawn.astype(jnp.int32), 0))
    gained = jnp.any((b.block_program[:, None] == _PROGRAM_IDS[None, :]) & is_program[:, None],
                     axis=0)
    credits = p.credits + jnp.sum(jnp.where(open_cell, b.credits.astype(jnp.int32), 0))
    energy = p.energy + jnp.sum(jnp.where(open_cell, b.energy.astype(jnp.int32), 0))
    board = eqx.tree_at(
        lambda x: (x.block_spawn, x.block_question, x.credits, x.energy, x.siphoned,
                   x.siphon_center),
        b,
        (jnp.where(block, jnp.int8(0), b.block_spawn), b.block_question & ~block,
         jnp.where(open_cell, jnp.int8(0), b.credits), jnp.where(open_cell, jnp.int8(0), b.energy),
         b.siphoned | in_cross, b.siphon_center | (_CELL_IDS == here)))
    player = eqx.tree_at(lambda x: (x.score, x.owned, x.credits, x.energy, x.data_siphons), p,
                         (score, p.owned | gained, credits, energy, p.data_siphons - 1))
    state = eqx.tree_at(
        lambda s: (s.player, s.board, s.pending, s.interval, s.next_task), state,
        (player, board, pending, jnp.maximum(C.MIN_INTERVAL, state.interval - 1),
         state.next_task + C.SIPHON_TASK_DELAY))
    outcome = eqx.tree_at(lambda o: o.missed_resources, no_outcome(),
                          missed_credits + missed_energy)
    return state, outcome
