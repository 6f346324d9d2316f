"""The enemy phase (GAME_RULES.md §10, §10.1).

Activations are strictly sequential (each sees the moves before it), so they run as a
fixed-count `lax.scan` over `2 × MAX_ENEMIES` activation slots: both activation steps,
each in a fresh random order, with inactive slots doing nothing. Movement rule A needs a
breadth-first search over the cells the mover may enter, with the occupancy as it stands
at that moment: a 35-level bitboard dilation. Rule B ignores occupancy, so its distance
fields (one for glitches, one for the rest) are computed once per phase.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float32, Int32, Key, UInt32

from jax.custom_batching import custom_vmap

from hm.game import batching, bitboard, entities, generation, geometry
from hm.game import constants as C
from hm.game.state import Enemies, GameState, Snapshot, snapshot_of

_UNREACHED = 1_000
_NEIGHBOURS = geometry.NEIGHBOURS
_MANHATTAN = geometry.MANHATTAN
_SPEED = C.ENEMY_SPEED.astype(np.int32)
_MAX_HP = C.ENEMY_MAX_HP


def _distance_field(source: Bool[Array, "36"], passable: Bool[Array, "36"]) -> Int32[Array, "36"]:
    """Breadth-first distance from `source` over `passable` cells (unreached: large)."""
    passable_bb = bitboard.from_mask(passable)
    start = bitboard.from_mask(source & passable)

    def level(i, carry):
        v_lo, v_hi, f_lo, f_hi, distance = carry
        f_lo, f_hi = bitboard.dilate_words(f_lo, f_hi)
        f_lo, f_hi = f_lo & passable_bb[0] & ~v_lo, f_hi & passable_bb[1] & ~v_hi
        reached = bitboard.to_mask(jnp.stack([f_lo, f_hi]))
        distance = jnp.where(reached, i + 1, distance)
        return v_lo | f_lo, v_hi | f_hi, f_lo, f_hi, distance

    distance = jnp.where(source & passable, 0, _UNREACHED).astype(jnp.int32)
    carry = (start[0], start[1], start[0], start[1], distance)
    return jax.lax.fori_loop(0, bitboard.MAX_DISTANCE, level, carry)[-1]


def _first_step(source: UInt32[Array, "2"], passable: UInt32[Array, "2"],
                neighbours: UInt32[Array, "2"]) -> UInt32[Array, "2"]:
    """Rule A's search: the neighbours of the mover first reached from the player.

    Returns the set of `neighbours` cells at the smallest finite distance (empty if none).
    """
    p_lo, p_hi = passable[0], passable[1]
    n_lo, n_hi = neighbours[0], neighbours[1]

    def level(_, carry):
        v_lo, v_hi, f_lo, f_hi, h_lo, h_hi = carry
        f_lo, f_hi = bitboard.dilate_words(f_lo, f_hi)
        f_lo, f_hi = f_lo & p_lo & ~v_lo, f_hi & p_hi & ~v_hi
        searching = (h_lo | h_hi) == 0
        h_lo = jnp.where(searching, f_lo & n_lo, h_lo)
        h_hi = jnp.where(searching, f_hi & n_hi, h_hi)
        return v_lo | f_lo, v_hi | f_hi, f_lo, f_hi, h_lo, h_hi

    zero = jnp.zeros((), jnp.uint32)
    carry = (source[0], source[1], source[0], source[1], zero, zero)
    carry = jax.lax.fori_loop(0, bitboard.MAX_DISTANCE, level, carry, unroll=5)
    return jnp.stack(carry[4:])


def _hatch(state: GameState) -> GameState:
    """Step 2: transmissions at timer ≤ 1 become enemies (appended in list order)."""
    t = state.transmissions
    hatching = t.alive & (t.timer <= 1)
    kind = t.kind.astype(jnp.int32)
    newborn = Enemies(
        alive=hatching, kind=t.kind, row=t.row, col=t.col,
        hp=jnp.asarray(_MAX_HP)[kind], disabled=jnp.ones_like(t.kind),
        stunned=jnp.zeros_like(hatching), from_task=t.from_task, from_siphon=t.from_siphon)
    enemies = entities.append(state.enemies, newborn)      # compact since the action
    transmissions = entities.compact(eqx.tree_at(
        lambda x: (x.alive, x.timer), t, (t.alive & ~hatching, t.timer - 1)))
    return eqx.tree_at(lambda s: (s.enemies, s.transmissions), state, (enemies, transmissions))


def _pick(onehot: Bool[Array, "N"], values: Array) -> Array:
    """`values[i]` for the one set position `i` of `onehot`, without a gather.

    Per-game gathers and scatters with data-dependent indices are slow inside a
    vmapped loop on CPU (and on TPU); a masked reduction over 36 lanes vectorises.
    """
    return jnp.sum(jnp.where(onehot, values, jnp.zeros((), values.dtype)), dtype=values.dtype)


def _activation_keys(state: GameState, key: Key[Array, ""]) -> tuple[Float32[Array, "2 36"], Int32[Array, ""], Int32[Array, ""]]:
    """Step 3's activation order, as random keys, and how many activations there are.

    Each activation step visits the enemies in a fresh uniform order; an enemy that is
    disabled or stunned, or whose speed is below the step, is skipped — so only those
    that can act need an activation: the ready enemies, visited in increasing order of
    a uniform key, then the ready viruses (speed 2) in increasing order of a second key.
    The restriction of a uniform permutation to a subset is a uniform permutation of
    that subset, so this is the same distribution. (Whether a virus already attacked is
    only known while the first step runs; such a virus is visited and does nothing.)
    The next enemy is found by a minimum over the keys when its turn comes, not by
    sorting up front: a sort is slow under `vmap`, and most slots are never reached.
    """
    e = state.enemies
    ready = e.alive & (e.disabled == 0) & ~e.stunned
    second = ready & (jnp.asarray(_SPEED)[e.kind.astype(jnp.int32)] > 1)
    u = jax.random.uniform(key, (2, C.MAX_ENEMIES))
    keys = jnp.stack([jnp.where(ready, u[0], 2.0), jnp.where(second, u[1], 2.0)])
    return keys, jnp.sum(ready, dtype=jnp.int32), jnp.sum(second, dtype=jnp.int32)


class _Board(eqx.Module):
    """What every activation of one phase reads and nothing in it changes."""

    player_row: Int32[Array, ""]
    player_col: Int32[Array, ""]
    is_block: Bool[Array, "36"]
    transmission_here: Bool[Array, "36"]
    field_b: Int32[Array, "2 36"]
    kind: Int32[Array, "36"]
    first_step_count: Int32[Array, ""]
    second_step_count: Int32[Array, ""]


def _activation(carry, fixed: _Board, i: Int32[Array, ""]):
    """Activation `i` of the phase (§10 step 3): attack if adjacent, else move (§10.1)."""
    row, col, crowd, hp, attacked, keys = carry
    pr, pc = fixed.player_row, fixed.player_col
    cell_ids = jnp.arange(C.NUM_CELLS, dtype=jnp.int32)
    is_q = cell_ids == pr * C.COLS + pc
    activation_step = (i >= fixed.first_step_count).astype(jnp.int32)
    due = i < fixed.first_step_count + fixed.second_step_count
    step_keys = jnp.where(activation_step == 0, keys[0], keys[1])
    slot = jnp.argmin(step_keys)
    sel = (jnp.arange(C.MAX_ENEMIES) == slot) & due
    keys = jnp.where(sel[None, :] & (jnp.arange(2) == activation_step)[:, None], 2.0, keys)
    r, c = _pick(sel, row), _pick(sel, col)
    glitch = _pick(sel, fixed.kind) == C.GLITCH
    # The keys list only ready enemies fast enough for the step, so the chosen one can
    # act unless it already attacked in the first step.
    active = _pick(sel, ~attacked)
    adjacent = jnp.abs(r - pr) + jnp.abs(c - pc) == 1
    strikes = active & adjacent
    hp = jnp.where(strikes, jnp.maximum(hp - 1, 0), hp)
    attacked = attacked | (sel & strikes)

    occupied = (crowd > 0) | fixed.transmission_here
    allowed = ~fixed.is_block | glitch
    enterable = allowed & (~occupied | is_q)
    deltas = jnp.asarray(C.DIRECTION_DELTAS)
    nr = r + deltas[:, 0]
    nc = c + deltas[:, 1]
    on_board = (nr >= 0) & (nr < C.ROWS) & (nc >= 0) & (nc < C.COLS)
    n = jnp.where(on_board, nr * C.COLS + nc, -1)
    at_n = cell_ids[None, :] == n[:, None]                      # [4, 36] one-hot
    n_allowed = jnp.any(at_n & allowed[None, :], axis=1)
    n_occupied = jnp.any(at_n & occupied[None, :], axis=1)
    # Rule A: first step of a breadth-first search from the player.
    passable = bitboard.from_mask(enterable)
    found = _first_step(bitboard.from_mask(is_q) & passable, passable,
                        bitboard.from_mask(jnp.any(at_n, axis=0)))
    rule_a = jnp.any(at_n & bitboard.to_mask(found)[None, :], axis=1)
    # Rule B: the same choice ignoring occupancy, taken only if that cell is free.
    field = jnp.where(glitch, fixed.field_b[1], fixed.field_b[0])
    distance_b = jnp.where(n_allowed, jnp.max(jnp.where(at_n, field[None, :], 0), axis=1),
                           _UNREACHED)
    best_b = jnp.argmin(distance_b)
    rule_b = ((jnp.min(distance_b) < _UNREACHED)
              & ~jnp.any((jnp.arange(4) == best_b) & n_occupied))
    # Rule C: greedy by Manhattan distance, strictly smallest, first in order.
    greedy = jnp.where(n_allowed & ~n_occupied, jnp.abs(nr - pr) + jnp.abs(nc - pc),
                       _UNREACHED)
    best_c = jnp.argmin(greedy)
    rule_c = jnp.min(greedy) < _UNREACHED
    choice = jnp.where(jnp.any(rule_a), jnp.argmax(rule_a), jnp.where(rule_b, best_b, best_c))
    moves = active & ~adjacent & (jnp.any(rule_a) | rule_b | rule_c)
    step_to = jnp.arange(4) == choice
    tr = jnp.where(moves, jnp.sum(jnp.where(step_to, nr, 0)), r)
    tc = jnp.where(moves, jnp.sum(jnp.where(step_to, nc, 0)), c)
    leave = (cell_ids == r * C.COLS + c) & moves
    enter = (cell_ids == tr * C.COLS + tc) & moves
    crowd = crowd - leave.astype(jnp.int32) + enter.astype(jnp.int32)
    row = jnp.where(sel, tr, row)
    col = jnp.where(sel, tc, col)
    return row, col, crowd, hp, attacked, keys


@custom_vmap
def _run_activations(carry, fixed: _Board):
    """All activations of a phase in sequence; those past the count are skipped."""
    count = fixed.first_step_count + fixed.second_step_count

    def body(i, carry):
        return jax.lax.cond(i < count, lambda c: _activation(c, fixed, i), lambda c: c, carry)

    return jax.lax.fori_loop(0, 2 * C.MAX_ENEMIES, body, carry)


@_run_activations.def_vmap
def _run_activations_batched(axis_size, in_batched, carry, fixed):
    # Activation i runs only while some game of the batch still has an i-th activation:
    # a batch pays for its busiest game's enemies, not for 72 slots.
    carry, fixed = batching.broadcast_unbatched(axis_size, in_batched, (carry, fixed))
    count = fixed.first_step_count + fixed.second_step_count
    each = jax.vmap(_activation, in_axes=(0, 0, None))

    def body(i, carry):
        return jax.lax.cond(jnp.any(i < count), lambda c: each(c, fixed, i), lambda c: c, carry)

    out = jax.lax.fori_loop(0, 2 * C.MAX_ENEMIES, body, carry)
    return out, batching.all_batched(out)


def _activate(state: GameState, key: Key[Array, ""]) -> GameState:
    """Step 3: every enemy activation of both activation steps, in random order."""
    e, b = state.enemies, state.board
    is_block = b.content == C.BLOCK
    cell_ids = jnp.arange(C.NUM_CELLS, dtype=jnp.int32)
    is_q = cell_ids == state.player.row * C.COLS + state.player.col
    kind = e.kind.astype(jnp.int32)
    keys, first_step_count, second_step_count = _activation_keys(state, key)
    # Rule B fields ignore occupancy: one per "may enter blocks" flag.
    fixed = _Board(
        player_row=state.player.row, player_col=state.player.col, is_block=is_block,
        transmission_here=entities.occupancy(state.transmissions),
        field_b=jnp.stack([_distance_field(is_q, ~is_block),
                           _distance_field(is_q, jnp.ones(C.NUM_CELLS, bool))]),
        kind=kind,
        first_step_count=first_step_count, second_step_count=second_step_count)
    crowd = jnp.sum((entities.cells(e)[:, None] == cell_ids[None, :]) & e.alive[:, None],
                    axis=0, dtype=jnp.int32)
    init = (e.row.astype(jnp.int32), e.col.astype(jnp.int32), crowd, state.player.hp,
            jnp.zeros(C.MAX_ENEMIES, bool), keys)
    row, col, _, hp, _, _ = _run_activations(init, fixed)
    enemies = eqx.tree_at(lambda x: (x.row, x.col), e, (row.astype(jnp.int8), col.astype(jnp.int8)))
    player = eqx.tree_at(lambda x: x.hp, state.player, hp)
    return eqx.tree_at(lambda s: (s.enemies, s.player), state, (enemies, player))


def push_snapshot(state: GameState, snapshot: Snapshot, executed: Bool[Array, ""]) -> GameState:
    """Step 7: push `snapshot` onto the bounded UNDO stack when `executed` (§9.10)."""
    h = state.history
    slot = (h.top + 1) % C.HISTORY_CAPACITY
    snapshots = jax.tree.map(
        lambda stack, x: stack.at[slot].set(jnp.where(executed, x, stack[slot])),
        h.snapshots, snapshot)
    history = eqx.tree_at(
        lambda x: (x.snapshots, x.top, x.depth), h,
        (snapshots, jnp.where(executed, slot, h.top),
         jnp.where(executed, jnp.minimum(h.depth + 1, C.HISTORY_CAPACITY), h.depth)))
    return eqx.tree_at(lambda s: s.history, state, history)


def enemy_phase(state: GameState, runs: Bool[Array, ""], key: Key[Array, ""]) -> GameState:
    """Run the enemy phase of §10 where `runs` (a turn-ending action), else return `state`.

    STEP swallows a running phase whole (step 0).
    """
    swallowed = runs & state.step_active
    executed = runs & ~state.step_active
    key_order, key_place = jax.random.split(key)

    phase = eqx.tree_at(lambda s: s.turn, state, state.turn + 1)
    phase = _hatch(phase)
    phase = _activate(phase, key_order)
    task = ~phase.calm & (phase.turn >= phase.next_task)
    phase = eqx.tree_at(lambda s: s.next_task, phase,
                        jnp.where(task, phase.turn + phase.interval, phase.next_task))
    phase = generation.maybe_place_transmissions(
        phase, key_place, task.astype(jnp.int32), phase.pending, jnp.asarray(0, jnp.int32))
    e = phase.enemies
    phase = eqx.tree_at(
        lambda s: (s.pending, s.enemies.disabled, s.enemies.stunned), phase,
        (jnp.asarray(0, jnp.int32), jnp.maximum(e.disabled - 1, 0).astype(jnp.int8),
         jnp.zeros_like(e.stunned)))

    # Select everything but the history, then push the snapshot in place.
    keep = lambda s: eqx.tree_at(lambda x: x.history, s, None)  # noqa: E731
    merged = batching.select(executed, keep(phase), keep(state))
    merged = eqx.tree_at(lambda s: (s.step_active, s.history), merged,
                         (state.step_active & ~swallowed, state.history),
                         is_leaf=lambda x: x is None)
    return push_snapshot(merged, snapshot_of(merged), executed)
