"""The 23 programs (GAME_RULES.md §9), as one vectorised update.

Under `vmap` every branch of a `switch` runs, so instead of 23 functions producing 23
states this module computes, for the chosen program id, a few field-level effects (a
damage vector over enemies, removal masks, new enemy positions, scalar deltas) by table
look-up and `where`, and applies them once.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int32, Key

from hm.game import constants as C
from hm.game import entities, geometry
from hm.game.actions import ActionOutcome, no_outcome, player_cell
from hm.game.state import GameState

_MAX_HP = C.ENEMY_MAX_HP.astype(np.int32)
_E = np.arange(C.MAX_ENEMIES)


def _remove_all_at(alive: Bool[Array, "N"], from_task: Bool[Array, "N"], cells: Int32[Array, "N"],
                   targets: Int32[Array, "K"]) -> tuple[Bool[Array, "N"], Int32[Array, ""]]:
    """"Remove all at cell X" (§9) for each X of `targets` (−1 = none).

    Returns the removal mask and the kills: one per cell whose first entity in list order
    is not `fromTask`.
    """
    here = alive[None, :] & (cells[None, :] == targets[:, None]) & (targets[:, None] >= 0)
    removed = jnp.any(here, axis=0)
    first = jnp.argmax(here, axis=1)
    kills = jnp.sum(jnp.any(here, axis=1) & ~from_task[first], dtype=jnp.int32)
    return removed, kills


def _displacement_targets(state: GameState, away: bool) -> tuple[Bool[Array, "36"], Int32[Array, "36"], Int32[Array, "36"]]:
    """PUSH (away) / PULL (toward) targets per enemy, from the pre-program positions."""
    p, e = state.player, state.enemies
    row, col = e.row.astype(jnp.int32), e.col.astype(jnp.int32)
    sign = 1 if away else -1
    sr = sign * jnp.sign(row - p.row)
    sc = sign * jnp.sign(col - p.col)
    cand_r = jnp.stack([row + sr, row + sr, row], axis=1)
    cand_c = jnp.stack([col + sc, col, col + sc], axis=1)
    ok = jnp.stack([jnp.ones_like(sr, bool), sr != 0, sc != 0], axis=1)
    ok &= (cand_r >= 0) & (cand_r < C.ROWS) & (cand_c >= 0) & (cand_c < C.COLS)
    dist = jnp.abs(cand_r - p.row) + jnp.abs(cand_c - p.col)
    if away:
        score = jnp.where(ok, dist, -1)
        best = jnp.argmax(score, axis=1)            # ties to the earliest candidate
    else:
        ok &= dist > 0                              # never onto the player's cell
        score = jnp.where(ok, dist, 1_000)
        best = jnp.argmin(score, axis=1)
    has = jnp.any(ok, axis=1) & e.alive
    tr = jnp.take_along_axis(cand_r, best[:, None], axis=1)[:, 0]
    tc = jnp.take_along_axis(cand_c, best[:, None], axis=1)[:, 0]
    return has, tr, tc


def _displace(state: GameState, away: bool) -> tuple[Int32[Array, "36"], Int32[Array, "36"]]:
    """Apply PUSH/PULL targets in list order: the first enemy bound for a cell moves there,
    later ones bound for the same cell stay (§9.1)."""
    e = state.enemies
    has, tr, tc = _displacement_targets(state, away)
    target = tr * C.COLS + tc
    earlier = _E[None, :] < _E[:, None]                              # [i, j]: j before i
    taken = jnp.any(earlier & has[None, :] & (target[None, :] == target[:, None]), axis=1)
    moves = has & ~taken
    return (jnp.where(moves, tr, e.row.astype(jnp.int32)),
            jnp.where(moves, tc, e.col.astype(jnp.int32)))


def run_program(state: GameState, program: Int32[Array, ""], key: Key[Array, ""]) -> tuple[GameState, ActionOutcome]:
    """Pay the cost of `program` and apply its effect (§9). Legality is the caller's."""
    p, b, e, t = state.player, state.board, state.enemies, state.transmissions
    is_ = lambda g: program == g  # noqa: E731
    here = player_cell(state)
    ecells = entities.cells(e)
    tcells = entities.cells(t)
    is_block = b.content == C.BLOCK
    ehp = e.hp.astype(jnp.int32)
    kind = e.kind.astype(jnp.int32)
    key_warp, key_poly = jax.random.split(key)

    credits = p.credits - jnp.asarray(C.PROGRAM_CREDIT_COST)[program]
    energy = p.energy - jnp.asarray(C.PROGRAM_ENERGY_COST)[program]

    # --- removals by cell: CRASH (8 surrounding cells) and WARP (the landing cell) ---
    n_enemies = entities.count(e)
    n_targets = n_enemies + entities.count(t)
    pick = jax.random.randint(key_warp, (), 0, jnp.maximum(n_targets, 1))
    warp_to_enemy = pick < n_enemies
    warp_cell = jnp.where(warp_to_enemy, ecells[jnp.minimum(pick, C.MAX_ENEMIES - 1)],
                          tcells[jnp.clip(pick - n_enemies, 0, C.MAX_TRANSMISSIONS - 1)])
    around = jnp.asarray(geometry.SURROUNDING)[here]
    none8 = jnp.full(8, -1, jnp.int32)
    enemy_sweep = jnp.where(is_(C.CRASH), around,
                            jnp.where(is_(C.WARP) & warp_to_enemy, none8.at[0].set(warp_cell), none8))
    transmission_sweep = jnp.where(is_(C.CRASH), around,
                                   jnp.where(is_(C.WARP) & ~warp_to_enemy,
                                             none8.at[0].set(warp_cell), none8))
    e_swept, sweep_kills_e = _remove_all_at(e.alive, e.from_task, ecells, enemy_sweep)
    t_swept, sweep_kills_t = _remove_all_at(t.alive, t.from_task, tcells, transmission_sweep)

    # --- D_BOM: the nearest daemon (earliest on ties) is removed outright ---
    pr, pc = p.row, p.col
    manhattan = jnp.abs(e.row.astype(jnp.int32) - pr) + jnp.abs(e.col.astype(jnp.int32) - pc)
    daemon = e.alive & (kind == C.DAEMON)
    bomb = jnp.argmin(jnp.where(daemon, manhattan, 1_000))
    bombed = is_(C.D_BOM) & jnp.any(daemon) & (_E == bomb)
    bomb_cell = ecells[bomb]
    near_bomb = jnp.maximum(jnp.abs(e.row.astype(jnp.int32) - e.row[bomb].astype(jnp.int32)),
                            jnp.abs(e.col.astype(jnp.int32) - e.col[bomb].astype(jnp.int32))) == 1
    bomb_kills = jnp.sum(bombed & ~e.from_task, dtype=jnp.int32)

    # --- damage (ROW, COL, DEBUG, HACK with attack; ANTI-V and D_BOM splash with 1) ---
    attack = p.attack
    damage = jnp.select(
        [is_(C.ROW), is_(C.COL), is_(C.DEBUG), is_(C.HACK), is_(C.ANTI_V), is_(C.D_BOM)],
        [jnp.where(e.row.astype(jnp.int32) == pr, attack, 0),
         jnp.where(e.col.astype(jnp.int32) == pc, attack, 0),
         jnp.where(is_block[ecells], attack, 0),
         jnp.where(b.siphoned[ecells], attack, 0),
         jnp.where(kind == C.VIRUS, 1, 0),
         jnp.where(near_bomb & ~bombed & (ecells != bomb_cell), 1, 0)],
        jnp.zeros(C.MAX_ENEMIES, jnp.int32))
    damage = jnp.where(e.alive, damage, 0)

    # --- POLY: same damage taken, new type drawn from the three others ---
    new_kind = (kind + 1 + jax.random.randint(key_poly, (C.MAX_ENEMIES,), 0, 3)) % 4
    poly_hp = jnp.asarray(_MAX_HP)[new_kind] - (jnp.asarray(_MAX_HP)[kind] - ehp)
    hp = jnp.where(is_(C.POLY), poly_hp, jnp.maximum(ehp - damage, 0))
    kind = jnp.where(is_(C.POLY) & e.alive, new_kind, kind)
    stunned = e.stunned | ((damage > 0) & (hp > 0))
    dead = e.alive & (hp <= 0) & ~bombed & ~e_swept
    death_kills = jnp.sum(dead & ~e.from_task, dtype=jnp.int32)
    e_alive = e.alive & ~dead & ~bombed & ~e_swept

    # --- PUSH / PULL positions ---
    push_r, push_c = _displace(state, away=True)
    pull_r, pull_c = _displace(state, away=False)
    erow = jnp.select([is_(C.PUSH), is_(C.PULL)], [push_r, pull_r], e.row.astype(jnp.int32))
    ecol = jnp.select([is_(C.PUSH), is_(C.PULL)], [push_c, pull_c], e.col.astype(jnp.int32))

    enemies = eqx.tree_at(
        lambda x: (x.alive, x.kind, x.row, x.col, x.hp, x.stunned), e,
        (e_alive, kind.astype(jnp.int8), erow.astype(jnp.int8), ecol.astype(jnp.int8),
         jnp.where(e_alive, hp, 0).astype(jnp.int8), stunned))
    transmissions = eqx.tree_at(
        lambda x: (x.alive, x.timer), t,
        (t.alive & ~t_swept, t.timer + jnp.where(is_(C.DELAY), C.DELAY_TURNS, 0)))

    # --- board: CRASH removes surrounding blocks; REDUC lowers unsiphoned spawn counts ---
    crashed = is_(C.CRASH) & jnp.asarray(geometry.SURROUNDING_MASK)[here] & is_block
    reduced = is_(C.REDUC) & is_block & ~b.siphoned
    board = eqx.tree_at(
        lambda x: (x.content, x.block_points, x.block_program, x.block_question, x.block_spawn),
        b,
        (jnp.where(crashed, jnp.int8(C.EMPTY), b.content),
         jnp.where(crashed, jnp.int8(0), b.block_points),
         jnp.where(crashed, jnp.int8(-1), b.block_program),
         b.block_question & ~crashed,
         jnp.where(crashed, jnp.int8(0),
                   jnp.where(reduced, jnp.maximum(b.block_spawn - 1, 0), b.block_spawn)
                   .astype(jnp.int8))))

    # --- player and global scalars ---
    warp = is_(C.WARP)
    player = eqx.tree_at(
        lambda x: (x.row, x.col, x.hp, x.credits, x.energy, x.data_siphons, x.attack, x.score),
        p,
        (jnp.where(warp, warp_cell // C.COLS, p.row), jnp.where(warp, warp_cell % C.COLS, p.col),
         jnp.where(is_(C.RESET), C.MAX_HP, p.hp),
         credits,
         energy + jnp.where(is_(C.EXCH), 4, 0),
         p.data_siphons + is_(C.SIPH_PLUS).astype(jnp.int32),
         p.attack + is_(C.ATK_PLUS).astype(jnp.int32),
         p.score + jnp.where(is_(C.SCORE), C.NUM_STAGES - state.stage, 0)))
    new = eqx.tree_at(
        lambda s: (s.player, s.board, s.enemies, s.transmissions, s.show, s.calm,
                   s.step_active, s.atk_uses),
        state,
        (player, board, enemies, transmissions, state.show | is_(C.SHOW),
         state.calm | is_(C.CALM), state.step_active | is_(C.STEP),
         state.atk_uses + is_(C.ATK_PLUS).astype(jnp.int32)))
    new = jax.tree.map(lambda u, s: jnp.where(is_(C.UNDO), u, s), undo(state), new)

    kills = jnp.where(is_(C.UNDO), 0, sweep_kills_e + sweep_kills_t + bomb_kills + death_kills)
    reached_exit = warp & (b.content[warp_cell] == C.EXIT)
    outcome = eqx.tree_at(lambda o: (o.kills, o.reached_exit), no_outcome(), (kills, reached_exit))
    return new, outcome


def undo(state: GameState) -> GameState:
    """Pay 1 credit, pop the top snapshot and restore it (§9.10); origin flags come back false."""
    h = state.history
    snap = jax.tree.map(lambda x: x[h.top], h.snapshots)
    enemies = eqx.tree_at(lambda x: (x.from_task, x.from_siphon), snap.enemies,
                          (jnp.zeros_like(snap.enemies.from_task),
                           jnp.zeros_like(snap.enemies.from_siphon)))
    transmissions = eqx.tree_at(lambda x: (x.from_task, x.from_siphon), snap.transmissions,
                                (jnp.zeros_like(snap.transmissions.from_task),
                                 jnp.zeros_like(snap.transmissions.from_siphon)))
    history = eqx.tree_at(lambda x: (x.top, x.depth), h,
                          ((h.top - 1) % C.HISTORY_CAPACITY, h.depth - 1))
    return eqx.tree_at(
        lambda s: (s.board, s.player, s.enemies, s.transmissions, s.turn, s.show, s.calm,
                   s.atk_uses, s.history),
        state,
        (snap.board, snap.player, enemies, transmissions, snap.turn, snap.show, snap.calm,
         snap.atk_uses, history))
