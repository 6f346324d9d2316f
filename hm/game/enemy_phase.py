"""The enemy phase (docs/rules.md#enemy-phase, §10) and how an enemy moves
(docs/rules.md#enemy-movement, §10.1). Section numbers (§) are those of docs/rules.md.

`enemy_phase` runs the steps of §10 in order: STEP swallowing the phase, the turn count,
the countdown and hatching (`_hatch`), the activations (`_activate`: attack if adjacent,
else move by rule A, B or C in `_activation`), the scheduled and siphon transmissions
(placed by `generation.maybe_place_transmissions`), and the stun and disabled updates.
Step 7, the UNDO push (docs/rules.md#undo), is `push_snapshot`, also here: the one place
a snapshot is taken and pushed. `core.step` calls it last, once it knows the step stands.

Why it is shaped so. Activations are strictly sequential (each sees the moves before
it), so within one game they form a loop; what can be vectorised is the games. Under
`vmap` the games of a batch become the *lanes* of one activation loop
(`_run_phase_lanes`): an activation step visits its enemies in the order of random
keys, one activation per loop iteration, and the loop stops as soon as no game of the
batch has an activation left. Every cell set is a bitboard (two uint32 words per game),
so an activation is a few dozen operations on `[batch]` vectors: movement rule A is a
breadth-first search from the player that stops, batch-wide, once every game has found
its enemy's neighbours; rule B ignores occupancy, so its two distance fields (glitches
or not) are computed once per phase as bit planes; rule C is arithmetic.
"""

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int32, Key, UInt32

from hm.game import batching, bitboard, entities, generation
from hm.game import constants as C
from hm.game.bitboard import Bitboard
from hm.game.state import Enemies, GameState, besides_snapshots, pack_snapshot, snapshot_of

_UNREACHED = 1_000
_SPEED = C.ENEMY_SPEED.astype(np.int32)
_MAX_HP = C.ENEMY_MAX_HP


def _hatch(state: GameState, runs: Bool[Array, ""]) -> GameState:
    """Step 2: transmissions at timer ≤ 1 become enemies (appended in list order); the
    others count down. Under `vmap` only the games where `runs` and some transmission
    hatches move entries between the lists (about one game in ten)."""
    t = state.transmissions
    ticked = eqx.tree_at(lambda x: x.timer, t, jnp.where(t.alive, t.timer - 1, t.timer))
    state = eqx.tree_at(lambda s: s.transmissions, state, ticked)
    return _hatch_where(state, runs & jnp.any(ticked.alive & (ticked.timer <= 0)))


def _hatch_ticked(state: GameState, active: Bool[Array, ""]) -> GameState:
    """`_hatch` once the timers have counted down: those at 0 or less hatch."""
    del active  # with nothing at timer 0 this changes nothing
    t = state.transmissions
    hatching = t.alive & (t.timer <= 0)
    kind = t.kind.astype(jnp.int32)
    newborn = Enemies(
        alive=hatching, kind=t.kind, row=t.row, col=t.col,
        hp=jnp.asarray(_MAX_HP)[kind], disabled=jnp.ones_like(t.kind),
        stunned=jnp.zeros_like(hatching), from_task=t.from_task, from_siphon=t.from_siphon)
    enemies = entities.append(state.enemies, newborn)      # compact since the action
    transmissions = entities.compact(eqx.tree_at(lambda x: x.alive, t, t.alive & ~hatching))
    return eqx.tree_at(lambda s: (s.enemies, s.transmissions), state, (enemies, transmissions))


_hatch_where = batching.where_selected(_hatch_ticked, ("enemies", "transmissions"), 16, 8)


# ---------------------------------------------------------------------------------------
# Step 3, activations. The loop is written once for a batch of games held in *lanes*:
# per-game values are `[B]` vectors and per-slot values `[36, B]` (the batch innermost,
# so picking the next enemy is a minimum across rows, which vectorises). Unbatched, it
# runs with one lane. Every cell set is a bitboard held as two `[B]` uint32 words, so an
# activation is a few dozen operations on `[B]` vectors plus one gather and one scatter:
# no per-game work over 36 cells.

_NO_KEY = np.uint32(0xFFFFFFFF)
_GLITCH_KEY = np.uint32(64)
# Enemies per cell are counted in bit planes (plane j = bit j of the count), so that an
# enemy leaving a cell it shares with another (PUSH/PULL can stack them) leaves it
# occupied. 6 planes count up to 63, past the 36-enemy capacity.
_PLANES = 6
# (activations up to, lane divisor): activations `previous stop .. stop − 1` run on about
# B / divisor lanes, the games that have them (most games have one or two activations).
_TIERS = ((2, 1), (2 * C.MAX_ENEMIES, 16))
_MIN_LANES = 8


def _only(on: Bool[Array, "*s"], board: Bitboard) -> Bitboard:
    """`board` where `on`, else empty."""
    return jax.tree.map(lambda w: jnp.where(on, w, np.uint32(0)), board)


def _bit(cell: Int32[Array, "*s"], on: Bool[Array, "*s"]) -> Bitboard:
    """The bitboard of `cell` where `on`, else empty."""
    return _only(on, bitboard.of_cell(cell))


def _count_add(planes: list[Bitboard], b: Bitboard, sign: int) -> list[Bitboard]:
    """Add (`sign` 1) or remove (−1) one enemy on each cell of `b` in the count planes."""
    out = []
    carry = b
    for plane in planes:
        out.append(plane ^ carry)
        keep = plane if sign > 0 else ~plane
        carry = carry & keep
    return out


def _move_counts(planes: list[Bitboard], moved_from: Bitboard, moved_to: Bitboard
                 ) -> list[Bitboard]:
    """The counts after one enemy moved from the cell of `moved_from` to that of
    `moved_to` (both empty: no move)."""
    return _count_add(_count_add(planes, moved_from, -1), moved_to, 1)


def _search(source: Bitboard, passable: Bitboard, stop: Callable, levels: Callable, carry):
    """Breadth-first search from `source` over `passable` cells, level by level.

    `levels(level, frontier, carry)` sees each new frontier; the search of a lane ends when
    its frontier is empty or `stop(carry)` holds, and the loop ends when every lane's has
    (`batching.while_needed`: the levels not needed cost a few skipped `cond`s).
    """
    def level(state):
        i, visited, frontier, carry = state
        frontier = bitboard.dilate(frontier) & passable & ~visited
        return i + 1, visited | frontier, frontier, levels(i + 1, frontier, carry)

    def going(state):
        _, _, frontier, carry = state
        return jnp.any(bitboard.nonempty(frontier) & ~stop(carry))

    _, visited, frontier, carry = batching.while_needed(
        bitboard.MAX_DISTANCE, going, level, (jnp.int32(0), source, source, carry))
    return visited, frontier, carry


def _distance_planes(source: Bitboard, passable: Bitboard) -> tuple[Bitboard, list[Bitboard]]:
    """Rule B's field: the cells reached from `source` and their distances as bit planes."""
    def levels(level, frontier, planes):
        return [plane | _only(((level >> j) & 1) == 1, frontier) for j, plane in enumerate(planes)]

    zero = jnp.zeros_like(source[0])
    never = lambda planes: jnp.zeros(zero.shape, bool)
    reached, _, planes = _search(source, passable, never, levels,
                                 [Bitboard(zero, zero)] * _PLANES)
    return reached, planes


def _distance_at(reached: Bitboard, planes: list[Bitboard], at: Bitboard) -> Int32[Array, " B"]:
    """The distance at the one cell of `at` (a large number if unreached or none)."""
    d = jnp.zeros(at.lo.shape, jnp.int32)
    for j, plane in enumerate(planes):
        d = d | (bitboard.meets(plane, at).astype(jnp.int32) << j)
    return jnp.where(bitboard.meets(reached, at), d, _UNREACHED)


class _Lanes(eqx.Module):
    """A phase's activations for B games: what the loop reads (fixed) and carries."""

    player_row: Int32[Array, " B"]
    player_col: Int32[Array, " B"]
    player: Bitboard                  # the player's cell
    blocks: Bitboard
    transmissions: Bitboard
    field_b: tuple                    # per "may enter blocks": (reached, planes)
    keys: UInt32[Array, "72 B"]       # activation order, both steps (see `_activation_keys`)
    count: Int32[Array, " B"]         # activations of each game, both steps


class _Activations(NamedTuple):
    """What the activation loop carries from one activation to the next, for B games.

    Per slot `[36, B]`, per game `[B]`; the bitboards are `[B]` words.
    """

    position: Int32[Array, "36 B"]    # each enemy's cell as `row << 3 | col`
    keys: UInt32[Array, "72 B"]       # the activation keys not yet taken (`_activation_keys`)
    counts: list[Bitboard]            # enemies per cell, bit plane j = bit j of the count
    hp: Int32[Array, " B"]            # the player's hp
    attacked: Bitboard                # the slots (as cell numbers) that attacked this phase
    # The previous activation's move, applied to `counts` by the next activation: as a
    # loop-carried value it is computed once, where applying it at the end of its own
    # activation had XLA recompute the whole movement decision inside every plane update.
    moved_from: Bitboard
    moved_to: Bitboard


def _activation(i, carry: _Activations, lanes: _Lanes) -> _Activations:
    """Activation `i` of an activation step in every lane (§10 step 3): attack if adjacent,
    else move (§10.1).

    Integer division is not vectorised on CPU, so rows and columns are carried apart.
    """
    position, keys, hp, attacked = carry.position, carry.keys, carry.hp, carry.attacked
    planes = _move_counts(carry.counts, carry.moved_from, carry.moved_to)
    lane = jnp.arange(hp.shape[0])
    # The next enemy: the smallest key not yet taken (taken keys are set to _NO_KEY).
    key = jnp.min(keys, axis=0)
    active = i < lanes.count
    slot = (key & np.uint32(63)).astype(jnp.int32).clip(0, C.MAX_ENEMIES - 1)
    second_step = (key >> 31).astype(jnp.int32)
    keys = keys.at[slot + C.MAX_ENEMIES * second_step, lane].set(_NO_KEY)
    me = _bit(slot, active)
    # A virus that attacked in the first activation step does nothing in its second.
    active = active & ~bitboard.meets(attacked, me)
    at = position[slot, lane]
    r, c = at >> 3, at & 7
    p = r * C.COLS + c
    glitch = (key & _GLITCH_KEY) != 0
    pr, pc = lanes.player_row, lanes.player_col
    adjacent = jnp.abs(r - pr) + jnp.abs(c - pc) == 1
    strikes = active & adjacent
    hp = jnp.where(strikes, jnp.maximum(hp - 1, 0), hp)
    attacked = attacked | _only(strikes, me)

    moving = active & ~adjacent
    here = _bit(p, moving)
    occupied = planes[0]
    for plane in planes[1:]:
        occupied = occupied | plane
    occupied = occupied | lanes.transmissions
    allowed = bitboard.where(glitch, bitboard.EVERY_CELL, ~lanes.blocks)
    enterable = allowed & (~occupied | lanes.player)
    steps = bitboard.neighbours(here)
    around = (steps[0] | steps[1]) | (steps[2] | steps[3])

    # Rule A: the neighbours first reached by a breadth-first search from the player.
    def first_hit(_, frontier, hit):
        return bitboard.where(bitboard.nonempty(hit), hit, frontier & around)

    zero = jnp.zeros_like(hp, jnp.uint32)
    source = _only(moving, lanes.player & enterable)
    _, _, hit = _search(source, enterable, bitboard.nonempty, first_hit, Bitboard(zero, zero))

    # Rule B: the same choice ignoring occupancy (a field fixed for the phase), taken only
    # if that cell is free. Rule C: greedy by Manhattan distance, strictly smallest.
    reached, b_planes = jax.tree.map(lambda g, n: jnp.where(glitch, g, n),
                                     lanes.field_b[1], lanes.field_b[0])
    a_choice = jnp.full_like(hp, -1)
    b_choice, b_best = jnp.full_like(hp, -1), jnp.full_like(hp, _UNREACHED)
    c_choice, c_best = jnp.full_like(hp, -1), jnp.full_like(hp, _UNREACHED)
    b_free = jnp.zeros_like(moving)
    for d, n in enumerate(steps):
        a_choice = jnp.where((a_choice < 0) & bitboard.meets(hit, n), d, a_choice)
        distance = _distance_at(reached, b_planes, n)
        closer = distance < b_best
        b_choice = jnp.where(closer, d, b_choice)
        b_best = jnp.where(closer, distance, b_best)
        b_free = jnp.where(closer, ~bitboard.meets(occupied, n), b_free)
        open_ = bitboard.meets(allowed & ~occupied, n)
        dr, dc = (int(x) for x in C.DIRECTION_DELTAS[d])
        greedy = jnp.where(open_, jnp.abs(r + dr - pr) + jnp.abs(c + dc - pc), _UNREACHED)
        closer = greedy < c_best
        c_choice = jnp.where(closer, d, c_choice)
        c_best = jnp.where(closer, greedy, c_best)
    choice = jnp.where(a_choice >= 0, a_choice,
                       jnp.where((b_choice >= 0) & b_free, b_choice, c_choice))
    # Computed once: XLA would otherwise copy the whole decision into each consumer's
    # fusion (six copies of about 450 operations each).
    choice = jax.lax.optimization_barrier(choice)
    moves = moving & (choice >= 0)
    delta = jnp.asarray(C.DIRECTION_DELTAS)[choice.clip(0, 3)]
    tr, tc = r + delta[:, 0], c + delta[:, 1]
    position = position.at[slot, lane].set(jnp.where(moves, (tr << 3) | tc, at))
    return _Activations(position=position, keys=keys, counts=planes, hp=hp, attacked=attacked,
                        moved_from=_only(moves, here), moved_to=_bit(tr * C.COLS + tc, moves))


def _take_lanes(tree, lane):
    return jax.tree.map(lambda x: x[..., lane], tree)


def _put_lanes(tree, lane, part):
    return jax.tree.map(lambda x, y: x.at[..., lane].set(y, mode="drop"), tree, part)


def _run_tier(carry: _Activations, lanes: _Lanes, start: int, stop: int, divisor: int
              ) -> _Activations:
    """Activations `start .. stop − 1` of every lane, on about B / `divisor` lanes.

    Few games have many activations, so the later activations run on a narrower batch:
    the games that still have some are gathered (a chunk of lanes at a time; chunks that
    no game needs are skipped), run, and scattered back.
    """
    batch = lanes.count.shape[0]
    width = min(batch, max(_MIN_LANES, batch // divisor))

    def run(carry, lanes):
        # The next activation's number rides in the carry: the loop stops, batch-wide, at
        # the first activation that no lane has.
        def needed(numbered):
            return jnp.any(numbered[0] < lanes.count)

        def activate(numbered):
            i, carry = numbered
            return i + 1, _activation(i, carry, lanes)

        return batching.while_needed(stop - start, needed, activate, (jnp.int32(start), carry))[1]

    if width == batch:
        return run(carry, lanes)

    def chunk(index, carry):
        source = jnp.minimum(index, batch - 1)
        part = _take_lanes(lanes, source)
        part = eqx.tree_at(lambda x: x.count, part, jnp.where(index < batch, part.count, 0))
        return _put_lanes(carry, index, run(_take_lanes(carry, source), part))

    return batching.for_selected_chunks(lanes.count > start, width, chunk, carry)


def _run_lanes(row: Int32[Array, "36 B"], col: Int32[Array, "36 B"], alive: Bool[Array, "36 B"],
               hp: Int32[Array, " B"], lanes: _Lanes):
    """Every activation of the phase for B games: the enemies' rows, columns, player hp."""
    zero = jnp.zeros_like(hp, jnp.uint32)
    lane = jnp.arange(hp.shape[0])[None, :]
    crowd = (jnp.zeros(row.shape, jnp.int32)
             .at[row * C.COLS + col, lane].add(alive.astype(jnp.int32)))
    empty = Bitboard(zero, zero)
    carry = _Activations(
        position=(row << 3) | col, keys=lanes.keys,
        counts=[bitboard.from_mask(((crowd >> j) & 1) == 1, axis=0) for j in range(_PLANES)],
        hp=hp, attacked=empty, moved_from=empty, moved_to=empty)
    start = 0
    for stop, divisor in _TIERS:
        carry = _run_tier(carry, lanes, start, stop, divisor)
        start = stop
    return carry.position >> 3, carry.position & 7, carry.hp


def _activation_keys(state: GameState, key: Key[Array, ""]) -> tuple[UInt32[Array, "72"], Int32[Array, ""]]:
    """Step 3's activation order, both activation steps, as keys whose increasing order
    is the order of the activations; and how many activations there are.

    Each activation step visits the enemies in a fresh uniform order; an enemy that is
    disabled or stunned, or whose speed is below the step, is skipped, so only those
    that can act need an activation: the ready enemies in a uniform random order, then
    the ready viruses (speed 2) in another. The restriction of a uniform permutation to a
    subset is a uniform permutation of that subset, so this is the same distribution.
    (Whether a virus already attacked is known only while the first step runs; such a
    virus is visited and does nothing.)

    Key = step (1 bit) | 24 random bits | glitch (1 bit) | slot (6 bits), in rows
    `36 * step + slot`: the step bit puts the first step's keys before the second's, and
    within a step increasing keys visit the enemies in a uniform random order (up to ties
    of 24 random bits). An enemy that may not act has no key (`_NO_KEY`, above all). The
    key carries what the activation needs to know of the enemy besides its position.
    The next enemy is found by a minimum when its turn comes, not by a sort up front:
    sorts are slow under `vmap`, and most keys are never reached.
    """
    e = state.enemies
    ready = e.alive & (e.disabled == 0) & ~e.stunned
    second = ready & (jnp.asarray(_SPEED)[e.kind.astype(jnp.int32)] > 1)
    random = generation.hashed_bits(key, 2 * C.MAX_ENEMIES) & np.uint32(0x7FFFFF80)
    step = jnp.repeat(jnp.asarray([0, 1 << 31], jnp.uint32), C.MAX_ENEMIES)
    slot = jnp.tile(jnp.arange(C.MAX_ENEMIES, dtype=jnp.uint32), 2)
    glitch = jnp.tile(jnp.where(e.kind == C.GLITCH, _GLITCH_KEY, np.uint32(0)), 2)
    can = jnp.concatenate([ready, second])
    return (jnp.where(can, step | random | glitch | slot, _NO_KEY),
            jnp.sum(can, dtype=jnp.int32))


class _PhaseInput(eqx.Module):
    """What the activations of one game's phase start from (per game, no lane axis)."""

    row: Int32[Array, "36"]
    col: Int32[Array, "36"]
    alive: Bool[Array, "36"]
    hp: Int32[Array, ""]
    player_row: Int32[Array, ""]
    player_col: Int32[Array, ""]
    is_block: Bool[Array, "36"]
    transmission_here: Bool[Array, "36"]
    keys: UInt32[Array, "72"]
    count: Int32[Array, ""]


def _run_phase_lanes(x: _PhaseInput):
    """All activations of B games' phases; `x` has a trailing lane axis on every leaf."""
    player = _bit(x.player_row * C.COLS + x.player_col, jnp.ones_like(x.hp, bool))
    blocks = bitboard.from_mask(x.is_block, axis=0)
    everywhere = Bitboard(*(jnp.full_like(x.hp, bitboard.FULL_WORD, jnp.uint32),) * 2)
    # Rule B ignores occupancy: its two fields (blocks barred or not) hold for the phase.
    fields = tuple(_distance_planes(player & passable, passable)
                   for passable in (~blocks, everywhere))
    lanes = _Lanes(
        player_row=x.player_row, player_col=x.player_col, player=player, blocks=blocks,
        transmissions=bitboard.from_mask(x.transmission_here, axis=0), field_b=fields,
        keys=x.keys, count=x.count)
    return _run_lanes(x.row, x.col, x.alive, x.hp, lanes)


def _lanes_last(x):
    return jax.tree.map(lambda a: jnp.moveaxis(a, 0, -1), x)


@batching.custom_batching(
    lambda _, x: jax.tree.map(lambda a: jnp.moveaxis(a, -1, 0), _run_phase_lanes(_lanes_last(x))))
def _phase_moves(x: _PhaseInput) -> tuple[Int32[Array, "36"], Int32[Array, "36"], Int32[Array, ""]]:
    """The enemies' rows and columns and the player's hp after the phase's activations.

    Under `vmap` the games become the lanes of one loop (see `_run_phase_lanes`).
    """
    return jax.tree.map(lambda a: a[..., 0],
                        _run_phase_lanes(jax.tree.map(lambda a: a[..., None], x)))


def _activate(state: GameState, key: Key[Array, ""]) -> GameState:
    """Step 3: every enemy activation of both activation steps, in random order."""
    e, p = state.enemies, state.player
    keys, count = _activation_keys(state, key)
    row, col, hp = _phase_moves(_PhaseInput(
        row=e.row.astype(jnp.int32), col=e.col.astype(jnp.int32), alive=e.alive, hp=p.hp,
        player_row=p.row, player_col=p.col, is_block=state.board.content == C.BLOCK,
        transmission_here=entities.occupancy(state.transmissions), keys=keys, count=count))
    enemies = eqx.tree_at(lambda x: (x.row, x.col), e,
                          (row.astype(jnp.int8), col.astype(jnp.int8)))
    player = eqx.tree_at(lambda x: x.hp, p, hp)
    return eqx.tree_at(lambda s: (s.enemies, s.player), state, (enemies, player))


def push_snapshot(state: GameState, executed: Bool[Array, ""]) -> GameState:
    """Step 7, the UNDO snapshot (docs/rules.md#undo, §9.10; what a snapshot holds:
    §17.5): where `executed`, push `state` as it is onto the bounded UNDO stack, the
    oldest snapshot dropped once the stack is full. The one place a snapshot is taken.

    `core.step` calls it on the step's final state, once it knows that the step stands
    (a legal action whose phase ran): the push writes the stack in place, which it could
    not do while the state before the step is still needed.
    """
    h = state.history
    slot = (h.top + 1) % C.HISTORY_CAPACITY
    # An out-of-range slot drops the write: in place, with no read of the old entry.
    write = jnp.where(executed, slot, C.HISTORY_CAPACITY)
    small, wide = pack_snapshot(snapshot_of(state))
    history = eqx.tree_at(
        lambda x: (x.small, x.wide, x.top, x.depth), h,
        (h.small.at[write].set(small, mode="drop"), h.wide.at[write].set(wide, mode="drop"),
         jnp.where(executed, slot, h.top),
         jnp.where(executed, jnp.minimum(h.depth + 1, C.HISTORY_CAPACITY), h.depth)))
    return eqx.tree_at(lambda s: s.history, state, history)


def enemy_phase(state: GameState, runs: Bool[Array, ""], key: Key[Array, ""]
                ) -> tuple[GameState, Bool[Array, ""]]:
    """Run the enemy phase of §10 where `runs` (a turn-ending action), else keep `state`.

    STEP swallows a running phase whole (step 0). Returns the state after the phase and
    whether the phase executed; step 7, the UNDO push, is the caller's (`push_snapshot`).
    """
    swallowed = runs & state.step_active
    executed = runs & ~state.step_active
    key_order, key_place = jax.random.split(key)

    phase = eqx.tree_at(lambda s: s.turn, state, state.turn + 1)
    with jax.named_scope("hatch"):
        phase = _hatch(phase, executed)
    with jax.named_scope("activate"):
        phase = _activate(phase, key_order)
    task = ~phase.calm & (phase.turn >= phase.next_task)
    phase = eqx.tree_at(lambda s: s.next_task, phase,
                        jnp.where(task, phase.turn + phase.interval, phase.next_task))
    with jax.named_scope("place"):
        phase = generation.maybe_place_transmissions(
            phase, key_place, task.astype(jnp.int32), phase.pending, jnp.asarray(0, jnp.int32))
    e = phase.enemies
    phase = eqx.tree_at(
        lambda s: (s.pending, s.enemies.disabled, s.enemies.stunned), phase,
        (jnp.asarray(0, jnp.int32), jnp.maximum(e.disabled - 1, 0).astype(jnp.int8),
         jnp.zeros_like(e.stunned)))

    # The phase leaves the history alone (the caller pushes the snapshot in place).
    merged = besides_snapshots(lambda a, b: batching.select(executed, a, b), phase, state)
    merged = eqx.tree_at(lambda s: s.step_active, merged, state.step_active & ~swallowed)
    return merged, executed
