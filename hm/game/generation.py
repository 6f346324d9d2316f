"""Stage generation and transmission placement: docs/rules.md#stages (§12: completing and
initialising a stage, resources, blocks, a new game) and
docs/rules.md#transmission-placement (§11). Section numbers (§) are those of docs/rules.md.

Everything here is an unbatched rule `f(state, ..., key) -> state`; batching is `jax.vmap`
at the call site. Generation is the one expensive rule of the game (up to 100 block-layout
attempts, each a flood fill), and it runs only for the few games of a batch that start a
stage, so it is built to cost little under `vmap`:

* **Bitboards.** A layout attempt is a bitboard: its K cells are a uniform K-subset of the
  32 non-corner cells drawn with Floyd's algorithm on one uint32 and moved onto the
  eligible cells by a software `pdep` (`_expand`); its validity (§12.4) is a
  shift-and-mask flood fill (`bitboard.dilate`).
* **Cheap randomness.** Each game's key is hashed into a few seed words; the many values a
  stage needs are a keyed 32-bit integer hash of a counter (`_words`). Integer draws are
  exact up to a bias of n / 2**32 (`_below`); random orders (transmission cells, programs)
  are ranks of random keys (docs/rules.md#departures lists what this changes).
* **Attempts are indexed.** Attempt `a` of a game depends only on (seed, a), so the
  committed layout — the first valid attempt among attempts 0..99 — does not depend on how
  attempts are scheduled. Unbatched, attempts run in rounds of `_ROUND`, each round skipped
  by `lax.cond` once a valid attempt is known. Under `vmap`, a custom batching rule
  (`_search_layout`) pools the attempts of the whole batch: each round hands a fixed pool
  of attempt slots to the games still searching, more to games whose K makes valid layouts
  rare, and a round runs only while some game of the batch is still searching. The result
  is bit-identical to the unbatched search.
* **Skipping games that need nothing.** `maybe_complete_stage`, `maybe_place_transmissions`
  and `maybe_new_game` apply a rule only where a per-game predicate holds. Unbatched that is
  a `lax.cond`; under `vmap` their batching rule gathers the selected games into chunks,
  runs the rule on those only and scatters the changed fields back, so a batch in which no
  game completes a stage pays (almost) nothing, and one in which a few do pays for those
  few. Prefer these to `jnp.where(pred, complete_stage(...), state)`, which under `vmap`
  generates a stage for every game on every step.

Every loop has a fixed trip count (no `while`). The batch-level ones (pool rounds, chunks)
are `fori_loop`s of `lax.cond` on a batch-wide predicate, so under one `vmap` the rounds
and chunks no game needs are skipped; under a second, outer `vmap` they still give the same
results (the conds become selects).
"""

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float32, Int32, PRNGKeyArray, UInt32

from hm.game import batching, bitboard, entities, program_table
from hm.game import constants as C
from hm.game.state import (
    EMPTY_TOP,
    GameState,
    Transmissions,
    bare_state,
)

_MAX_BLOCKS = C.BLOCK_COUNT_MAX
_U32 = jnp.uint32
Bitboard = bitboard.Bitboard


def _cells_mask(cells) -> np.ndarray:
    """Host-side: the per-cell mask of the cells listed."""
    return np.isin(np.arange(C.NUM_CELLS), list(cells))


_ORIGIN = bitboard.table(_cells_mask([0]))         # (0,0): where the §12.4 flood starts
_CORNERS = bitboard.table(_cells_mask(C.CORNER_CELLS))
_CORNER_CELLS = np.array(C.CORNER_CELLS, np.int32)


def _np_line_of_fire_tables() -> tuple[np.ndarray, Bitboard]:
    """`same_line[p, c]`: c ≠ p shares p's row or column; `between[p, c]`: cells strictly
    between them (a bitboard), for the §11 line-of-fire test."""
    same_line = np.zeros((C.NUM_CELLS, C.NUM_CELLS), bool)
    between = np.zeros((C.NUM_CELLS, C.NUM_CELLS, C.NUM_CELLS), bool)
    for p in range(C.NUM_CELLS):
        pr, pc = divmod(p, C.COLS)
        for c in range(C.NUM_CELLS):
            cr, cc = divmod(c, C.COLS)
            if c == p or (cr != pr and cc != pc):
                continue
            same_line[p, c] = True
            steps = max(abs(cr - pr), abs(cc - pc))
            dr, dc = np.sign(cr - pr), np.sign(cc - pc)
            between[p, c] = _cells_mask(
                (pr + k * dr) * C.COLS + pc + k * dc for k in range(1, steps))
    return same_line, bitboard.table(between)


_SAME_LINE, _BETWEEN = _np_line_of_fire_tables()

# ---------------------------------------------------------------------------------------
# Randomness: a keyed hash of a counter.

_GOLDEN = np.uint32(0x9E3779B9)
_NUM_STREAMS = 8
(_STREAM_EXIT, _STREAM_BLOCK_COUNT, _STREAM_LAYOUT, _STREAM_BLOCK_KIND, _STREAM_POINTS,
 _STREAM_PROGRAM, _STREAM_RESOURCE, _STREAM_START) = range(_NUM_STREAMS)
_TRANSMISSION_STREAMS = 2
_STREAM_ORDER, _STREAM_TYPE = range(_TRANSMISSION_STREAMS)


def _mix(x: UInt32[Array, "*s"]) -> UInt32[Array, "*s"]:
    """`lowbias32` (C. Wellons): a 32-bit integer hash with very low avalanche bias."""
    x = x ^ (x >> 16)
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _seeds(key: PRNGKeyArray, streams: int) -> UInt32[Array, "streams 2"]:
    """Two seed words per stream, hashed from the key's own words.

    A key's data is already uniformly random (it comes out of `split`/`fold_in`); hashing
    it instead of calling `jax.random.bits` saves a Threefry evaluation per game.
    """
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    words = key.reshape(-1).astype(_U32)
    first, second = words[0], words[-1] ^ np.uint32(0x5BD1E995)
    for word in words[1:-1]:                        # keys of more than two words
        second = _mix(second ^ word)
    stream = jnp.arange(streams, dtype=_U32) * _GOLDEN
    return jnp.stack([_mix(_mix(first + stream) ^ second),
                      _mix(_mix(second + stream) ^ first)], axis=-1)


def hashed_bits(key: PRNGKeyArray, n: int) -> UInt32[Array, " n"]:
    """`n` uniform 32-bit words from `key`, by the keyed hash (no Threefry per game)."""
    return _words(_seeds(key, 1)[0], jnp.arange(n, dtype=jnp.int32))


def _words(seed: UInt32[Array, "*s 2"], counter: Int32[Array, "*t"]) -> UInt32[Array, "*t"]:
    """Uniform 32-bit words, one per counter value, of the stream keyed by `seed`.

    `seed` must have the leading shape of `counter` or be a single `[2]` seed.
    """
    x = counter.astype(_U32) * _GOLDEN + seed[..., 0]
    return _mix(_mix(x) ^ seed[..., 1])


def _below(word: UInt32[Array, "*s"], n: UInt32[Array, "*s"] | int) -> UInt32[Array, "*s"]:
    """floor(word · n / 2**32): uniform over 0..n−1 (bias ≤ n / 2**32), for n < 2**16.

    Computed exactly in 32-bit arithmetic from the 16-bit halves of `word`.
    """
    n = jnp.asarray(n, _U32)
    high = (word >> 16) * n
    low = ((word & np.uint32(0xFFFF)) * n) >> 16
    return (high + low) >> 16


def _threshold(p: float) -> np.uint32:
    """`word < _threshold(p)` is a Bern(p) coin (error below 2**-32)."""
    return np.uint32(round(p * 2 ** 32))


_P_QUESTION = _threshold(C.P_QUESTION_BLOCK)
_P_DATA = _threshold(C.P_DATA_BLOCK)
_P_CREDITS = _threshold(0.5)                  # §12.3 credits or energy, 1/2 each
_RESOURCE_CDF = tuple(   # amount 1 below the first, 2 below the second, else 3
    _threshold(p) for p in np.round(np.cumsum(C.RESOURCE_AMOUNT_PROBS[:2], dtype=np.float64), 6))

# ---------------------------------------------------------------------------------------
# Counting and ordering.


def _ranks(order_key: UInt32[Array, " n"]) -> Int32[Array, " n"]:
    """Rank of each (distinct) key among all of them; a uniformly random order when the
    keys are random. Unrolled comparisons: `jnp.argsort` and a `[n, n]` comparison reduced
    by XLA are several times slower under `vmap` on CPU."""
    rank = jnp.zeros(order_key.shape, jnp.int32)
    for other in range(order_key.shape[0]):
        rank = rank + (order_key[other] < order_key).astype(jnp.int32)
    return rank


# ---------------------------------------------------------------------------------------
# §12.4 block layout.
#
# Blocks never sit on corners, so a layout attempt works on the 32 non-corner cells,
# numbered in cell order, as one uint32 ("inner" bits): cells 1–4 are bits 0–3, cells
# 6–17 bits 4–15, cells 18–29 bits 16–27 and cells 31–34 bits 28–31.

_MASK4 = np.uint32(0xF)
_MASK12 = np.uint32(0xFFF)


def _to_inner(board: Bitboard) -> UInt32[Array, "*s"]:
    low, high = board
    return (((low >> 1) & _MASK4) | (((low >> 6) & _MASK12) << 4)
            | ((high & _MASK12) << 16) | (((high >> 13) & _MASK4) << 28))


def _from_inner(inner: UInt32[Array, "*s"]) -> Bitboard:
    low = ((inner & _MASK4) << 1) | (((inner >> 4) & _MASK12) << 6)
    high = ((inner >> 16) & _MASK12) | ((inner >> 28) << 13)
    return Bitboard(low, high)


def _expansion(mask: UInt32[Array, "*s"]) -> UInt32[Array, "*s 5"]:
    """The five move masks with which `_expand` deposits bits into the set bits of `mask`
    (Hacker's Delight §7-5); computed once per game, used by every attempt."""
    moving = ~mask << 1
    steps = []
    for i in range(5):
        prefix = moving ^ (moving << 1)
        for shift in (2, 4, 8, 16):
            prefix = prefix ^ (prefix << shift)
        step = prefix & mask
        steps.append(step)
        mask = (mask ^ step) | (step >> (1 << i))
        moving = moving & ~prefix
    return jnp.stack(steps, axis=-1)


def _expand(bits: UInt32[Array, "*s"], mask: UInt32[Array, "*s"],
            steps: UInt32[Array, "*s 5"]) -> UInt32[Array, "*s"]:
    """Bit i of `bits` moved to the i-th set bit of `mask` (x86 `pdep`)."""
    for i in reversed(range(5)):
        step = steps[..., i]
        bits = (bits & ~step) | ((bits << (1 << i)) & step)
    return bits & mask


def _draw_layout(seed: UInt32[Array, "*#s 2"], eligible: UInt32[Array, "*s"],
                 steps: UInt32[Array, "*s 5"], k: Int32[Array, "*s"],
                 attempt: Int32[Array, "*s"]) -> Bitboard:
    """Layout attempt `attempt`: `k` distinct cells, uniform among the `eligible` inner cells.

    Floyd's algorithm draws a uniform k-subset of the ranks 0..n−1 (n eligible cells) with
    exactly k draws; `_expand` maps ranks to cells. Attempt `a` depends only on (seed, a).
    """
    n = bitboard.popcount(eligible)
    attempt_word = _words(seed, attempt)
    ranks = jnp.zeros_like(eligible)
    for i in range(_MAX_BLOCKS):
        word = _mix(attempt_word + np.uint32(i * int(_GOLDEN) % 2 ** 32))
        top = jnp.clip(n - k + i, 0, 31).astype(_U32)     # draw i is uniform on 0..top
        drawn = np.uint32(1) << _below(word, top + np.uint32(1))
        drawn = jnp.where((ranks & drawn) != 0, np.uint32(1) << top, drawn)
        ranks = ranks | jnp.where(i < k, drawn, np.uint32(0))
    return _from_inner(_expand(ranks, eligible, steps))


def _layout_valid(blocks: Bitboard, exit_cell: Bitboard) -> Bool[Array, "*s"]:
    """§12.4 `layoutIsValid`: connectivity from (0,0) with the exit reached but not passed
    through, and every block next to a non-block cell.

    The flood runs the 35 levels any 36-cell search needs, five per loop iteration.
    """
    origin = jax.tree.map(lambda w: jnp.broadcast_to(w, blocks.lo.shape), _ORIGIN)
    open_cells = ~blocks
    expandable = open_cells & ~(exit_cell & ~origin)     # (0,0) expands even as the exit

    def five_levels(_, reach):
        for _ in range(5):
            reach = reach | (bitboard.dilate(reach & expandable) & open_cells)
        return reach

    reach = jax.lax.fori_loop(0, bitboard.MAX_DISTANCE // 5, five_levels, origin)
    connected = (reach.lo == open_cells.lo) & (reach.hi == open_cells.hi)
    reachable = ~bitboard.nonempty(blocks & ~bitboard.dilate(open_cells))
    return connected & reachable


# Attempts per round of the unbatched search; rounds after the first valid attempt are skipped.
_ROUND = 20
# Batched search: attempt slots per game per round, and the share of the pool a game
# searching with a given K asks for first: ≈ 1.2 / P(attempt valid | K), measured on 32
# eligible cells (≈ .85 .74 .63 .48 .31 .19 .09 for K = 5..11). Only speed depends on
# these; they were the fastest of the settings tried (64 games, 41 searching).
_POOL_PER_GAME = 2
_SLOTS_WANTED = np.array([1, 1, 1, 1, 1, 1, 2, 2, 3, 4, 7, 14], np.int32)   # by K = 0..11


def _search_layout_unbatched(seed, eligible, exit_cell, k, active):
    inner = _to_inner(eligible)
    steps = _expansion(inner)

    def run_round(r, carry):
        def attempts(_):
            attempt = r * _ROUND + jnp.arange(_ROUND, dtype=jnp.int32)
            layouts = _draw_layout(
                seed, jnp.broadcast_to(inner, (_ROUND,)), jnp.broadcast_to(steps, (_ROUND, 5)),
                jnp.broadcast_to(k, (_ROUND,)), attempt)
            valid = _layout_valid(layouts, exit_cell)
            valid = valid & (attempt < C.LAYOUT_ATTEMPTS)
            return jnp.any(valid), bitboard.take(layouts, jnp.argmax(valid))

        found, _ = carry
        return jax.lax.cond(found, lambda _: carry, attempts, None)

    rounds = math.ceil(C.LAYOUT_ATTEMPTS / _ROUND)
    no_blocks = Bitboard(jnp.zeros((), _U32), jnp.zeros((), _U32))
    found, layout = jax.lax.fori_loop(0, rounds, run_round, (~active, no_blocks))
    return bitboard.where(found & active, layout, no_blocks)


def _search_layout_pooled(seed, eligible, exit_cell, k, active):
    games = k.shape[0]
    pool = _POOL_PER_GAME * games
    slot = jnp.arange(pool, dtype=jnp.int32)
    wanted_by_k = jnp.asarray(_SLOTS_WANTED)[k]
    none_found = jnp.int32(C.LAYOUT_ATTEMPTS)
    inner = _to_inner(eligible)
    steps = _expansion(inner)

    def searching(carry):
        next_attempt, found, _ = carry
        return jnp.any(~found & (next_attempt < C.LAYOUT_ATTEMPTS))

    def share_out(wanted, capacity):
        """Slots per game, handed out in game order until `capacity` runs out."""
        end = jnp.minimum(batching.prefix_sum(wanted), capacity)
        return end - jnp.concatenate([jnp.zeros(1, jnp.int32), end[:-1]])

    def run_round(carry):
        next_attempt, found, layout = carry
        left = jnp.where(found, 0, C.LAYOUT_ATTEMPTS - next_attempt)
        share = share_out(jnp.minimum(left, wanted_by_k), pool)
        share = share + share_out(left - share, pool - jnp.sum(share))  # spare slots
        end = batching.prefix_sum(share)
        start = end - share
        method = "compare_all" if games <= 256 else "scan"    # cheapest for small batches
        game = jnp.minimum(
            jnp.searchsorted(end, slot, side="right", method=method).astype(jnp.int32),
            games - 1)
        used = slot < end[-1]
        attempt = next_attempt[game] + slot - start[game]
        layouts = _draw_layout(seed[game], inner[game], steps[game], k[game], attempt)
        valid = _layout_valid(layouts, bitboard.take(exit_cell, game)) & used
        first = jnp.full(games, none_found).at[game].min(
            jnp.where(valid, attempt, none_found))
        hit = first < none_found
        first_slot = jnp.where(hit, start + first - next_attempt, 0)
        layout = bitboard.where(hit, bitboard.take(layouts, first_slot), layout)
        return next_attempt + share, found | hit, layout

    # A round either fills the pool or gives every searching game all its remaining
    # attempts, so this many rounds always finish.
    rounds = C.LAYOUT_ATTEMPTS * games // pool + 1
    init = (jnp.zeros(games, jnp.int32), ~active,
            Bitboard(jnp.zeros(games, _U32), jnp.zeros(games, _U32)))
    _, _, layout = batching.while_needed(rounds, searching, run_round, init)
    return layout


@batching.custom_batching(lambda _, *args: _search_layout_pooled(*args))
def _search_layout(seed: UInt32[Array, "2"], eligible: Bitboard, exit_cell: Bitboard,
                   k: Int32[Array, ""], active: Bool[Array, ""]) -> Bitboard:
    """§12.4: the first valid one of layout attempts 0..99 (no blocks if none is valid).

    An inactive search returns no blocks at once (games padded into a batch).
    """
    return _search_layout_unbatched(seed, eligible, exit_cell, k, active)


# ---------------------------------------------------------------------------------------
# §11 transmissions.


def place_transmissions(state: GameState, key: PRNGKeyArray, n_task: Int32[Array, ""],
                        n_siphon: Int32[Array, ""], n_plain: Int32[Array, ""]) -> GameState:
    """§11: place `n_task` + `n_siphon` + `n_plain` transmissions, one after another.

    They are appended to the transmission list in that order: the first `n_task` flagged
    `fromTask`, the next `n_siphon` flagged `fromSiphon`, the rest unflagged; each with
    timer 1 and a uniform enemy type. Placing one never changes which cells are in the line
    of fire (transmissions do not shelter) and only removes its own cell from the free set,
    so placing them in sequence is the same as taking the first ones of a uniform random
    order of the free cells off the line of fire followed by a uniform random order of the
    free cells in it. Transmissions that find no free cell, or no room in the list, are
    dropped.
    """
    return _place(state, _seeds(key, _TRANSMISSION_STREAMS), n_task, n_siphon, n_plain)


def _place(state: GameState, seeds: UInt32[Array, "2 2"], n_task: Int32[Array, ""],
           n_siphon: Int32[Array, ""], n_plain: Int32[Array, ""]) -> GameState:
    player = state.player.row * C.COLS + state.player.col
    cell = jnp.arange(C.NUM_CELLS, dtype=jnp.int32)
    enemy = entities.occupancy(state.enemies)
    block = state.board.content == C.BLOCK
    free = ~(enemy | block | entities.occupancy(state.transmissions) | (cell == player))
    obstacles = bitboard.from_mask(enemy | block)
    sheltered = bitboard.meets(bitboard.take(_BETWEEN, player), obstacles)
    in_line = jnp.asarray(_SAME_LINE)[player] & ~sheltered

    # Order key: class (0 free off the line, 1 free in it, 2 not free) | 24 random bits |
    # cell (which makes keys distinct; ties of the random bits have probability ~2**-24).
    group = jnp.where(free, in_line.astype(_U32), np.uint32(2))
    noise = _words(seeds[_STREAM_ORDER], cell) >> 8
    order_key = (group << 30) | (noise << 6) | cell.astype(_U32)
    cell_by_rank = jnp.zeros(C.NUM_CELLS, jnp.int32).at[_ranks(order_key)].set(cell)

    placed = jnp.minimum(n_task + n_siphon + n_plain, bitboard.count(bitboard.from_mask(free)))
    slot = cell                                   # slot t takes the cell of rank t
    kind = (_words(seeds[_STREAM_TYPE], slot) >> 30).astype(jnp.int8)
    new = Transmissions(
        alive=slot < placed,
        kind=kind,
        row=(cell_by_rank // C.COLS).astype(jnp.int8),
        col=(cell_by_rank % C.COLS).astype(jnp.int8),
        timer=jnp.ones(C.NUM_CELLS, jnp.int32),
        from_task=slot < n_task,
        from_siphon=(slot >= n_task) & (slot < n_task + n_siphon))
    return eqx.tree_at(lambda s: s.transmissions, state,
                       entities.append(state.transmissions, new))


# ---------------------------------------------------------------------------------------
# §12.2–12.4 stages.


def _pick(options: Bool[Array, " n"], word: UInt32[Array, ""]) -> Int32[Array, ""]:
    """Index of a uniform choice among the true entries of `options` (at least one)."""
    rank = _below(word, jnp.sum(options, dtype=jnp.int32).astype(_U32)).astype(jnp.int32)
    return jnp.argmax(options & (batching.prefix_sum(options) == rank + 1)).astype(
        jnp.int32)


def _stage_board(state: GameState, seeds: UInt32[Array, "streams 2"],
                 active: Bool[Array, ""]):
    """§12.2–12.4 board of a new stage (exit, pickups, blocks, resources)."""
    cell = jnp.arange(C.NUM_CELLS, dtype=jnp.int32)
    player = state.player.row * C.COLS + state.player.col
    corner_options = jnp.asarray(_CORNER_CELLS) != player
    exit_cell = jnp.asarray(_CORNER_CELLS)[
        _pick(corner_options, _words(seeds[_STREAM_EXIT], jnp.int32(0)))]

    occupied = entities.occupancy(state.enemies) | entities.occupancy(state.transmissions)
    eligible = ~(_CORNERS | bitboard.from_mask(occupied))
    k = (C.BLOCK_COUNT_MIN + _below(_words(seeds[_STREAM_BLOCK_COUNT], jnp.int32(0)),
                                    C.BLOCK_COUNT_MAX - C.BLOCK_COUNT_MIN + 1)).astype(jnp.int32)
    k = jnp.minimum(k, bitboard.popcount(_to_inner(eligible)))
    layout = _search_layout(seeds[_STREAM_LAYOUT], eligible, bitboard.of_cell(exit_cell), k,
                            active)
    block = bitboard.to_mask(layout)

    # Payloads, drawn once for the committed cells. Kinds, question flags and points are
    # independent per block and the programs come in a uniformly random order, so the
    # payload sequence is exchangeable: handing it out in cell order instead of the order
    # the cells were drawn in changes no distribution.
    is_data = _words(seeds[_STREAM_BLOCK_KIND], cell) < _P_DATA
    question = block & (_words(seeds[_STREAM_BLOCK_KIND], cell + C.NUM_CELLS) < _P_QUESTION)
    points = (C.DATA_POINTS_MIN + _below(
        _words(seeds[_STREAM_POINTS], cell),
        C.DATA_POINTS_MAX - C.DATA_POINTS_MIN + 1)).astype(jnp.int8)
    program = _draw_programs(seeds[_STREAM_PROGRAM])
    is_program = block & ~is_data
    program_index = batching.prefix_sum(is_program) - 1
    program = jnp.where(is_program, program[jnp.clip(program_index, 0, C.NUM_PROGRAMS - 1)], -1)
    spawn = jnp.where(is_data, points,
                      jnp.asarray(program_table.SPAWN_COUNT)[jnp.maximum(program, 0)])

    pickup = jnp.zeros(C.NUM_CELLS, bool).at[jnp.asarray(_CORNER_CELLS)].set(corner_options)
    content = jnp.where(block, C.BLOCK, jnp.where(pickup, C.PICKUP, C.EMPTY))
    content = jnp.where(cell == exit_cell, C.EXIT, content).astype(jnp.int8)

    amount_word = _words(seeds[_STREAM_RESOURCE], cell)
    amount = (1 + (amount_word >= _RESOURCE_CDF[0]).astype(jnp.int8)
              + (amount_word >= _RESOURCE_CDF[1]).astype(jnp.int8))
    is_credits = _words(seeds[_STREAM_RESOURCE], cell + C.NUM_CELLS) < _P_CREDITS
    gets_resource = (content == C.EMPTY) | (content == C.PICKUP)
    zero = jnp.zeros(C.NUM_CELLS, jnp.int8)
    false = jnp.zeros(C.NUM_CELLS, bool)
    return eqx.tree_at(
        lambda b: (b.content, b.block_points, b.block_program, b.block_question,
                   b.block_spawn, b.credits, b.energy, b.siphoned, b.siphon_center),
        state.board,
        (content,
         jnp.where(block & is_data, points, zero),
         jnp.where(block, program, -1).astype(jnp.int8),
         question,
         jnp.where(block, spawn, zero).astype(jnp.int8),
         jnp.where(gets_resource & is_credits, amount, zero),
         jnp.where(gets_resource & ~is_credits, amount, zero),
         false, false))


def _draw_programs(seed: UInt32[Array, "2"]) -> Int32[Array, "23"]:
    """A uniformly random order of the 23 programs: the j-th program block of a stage gets
    entry j, so each is uniform over the programs not drawn before it (§12.4
    `usedPrograms`). Ranks of random keys (ties broken by id)."""
    program = jnp.arange(C.NUM_PROGRAMS, dtype=jnp.int32)
    order_key = ((_words(seed, program) >> 5) << 5) | program.astype(_U32)
    return jnp.zeros(C.NUM_PROGRAMS, jnp.int32).at[_ranks(order_key)].set(program)


def _initialise_stage(state: GameState, active: Bool[Array, ""], key: PRNGKeyArray) -> GameState:
    seeds = _seeds(key, _NUM_STREAMS + _TRANSMISSION_STREAMS)
    board = _stage_board(state, seeds[:_NUM_STREAMS], active)
    false = jnp.asarray(False)
    zero = jnp.int32(0)
    # The history is emptied without touching its snapshots (see `empty_history`), which
    # keeps them out of the batched update of `batching.where_selected`.
    state = eqx.tree_at(
        lambda s: (s.board, s.turn, s.next_task, s.show, s.calm, s.step_active, s.atk_uses,
                   s.history.top, s.history.depth),
        state,
        (board, zero, state.interval, false, false, false, zero,
         jnp.int32(EMPTY_TOP), zero))
    plain = jnp.where(active, state.stage, 0)
    return _place(state, seeds[_NUM_STREAMS:], zero, zero, plain)


def initialise_stage(state: GameState, key: PRNGKeyArray) -> GameState:
    """§12.2 `initialiseStage`: a fresh board around the persisting entities.

    Turn 0, `nextTask := interval`, SHOW/CALM/STEP off, no ATK+ uses, history cleared; every
    cell reset; the exit on a uniform corner other than the player's cell and pickups on
    the other corners; blocks (§12.4), resources (§12.3), then `stage` unflagged
    transmissions (§11). Enemies, transmissions, the player and `pending` carry over.
    If the player is not on a corner (never the case in play), the exit is uniform over all
    four corners and the other three get pickups.
    """
    return _initialise_stage(state, jnp.asarray(True), key)


def _complete_stage(state: GameState, active: Bool[Array, ""], key: PRNGKeyArray) -> GameState:
    hp = jnp.minimum(state.player.hp + 1, C.MAX_HP)
    state = eqx.tree_at(lambda s: s.player.hp, state, hp)
    advance = state.stage < C.NUM_STAGES
    stage = jnp.minimum(state.stage + 1, C.NUM_STAGES)
    next_stage = _initialise_stage(
        eqx.tree_at(lambda s: (s.stage, s.interval), state, (stage, C.INTERVAL_BASE - stage)),
        active & advance, key)
    victory = eqx.tree_at(lambda s: s.won, state, jnp.asarray(True))
    return batching.select(advance, next_stage, victory)


def complete_stage(state: GameState, key: PRNGKeyArray) -> GameState:
    """§12.1 `completeStage`: hp + 1 (at most 3); then the next stage (interval 13 − stage,
    §12.2), or after stage 8 victory (`won`; nothing else changes)."""
    return _complete_stage(state, jnp.asarray(True), key)


def new_game(key: PRNGKeyArray, active: Bool[Array, ""] | bool = True) -> GameState:
    """§12.5 `newGame`: the player on a uniform corner with a uniform starting bonus
    (10 credits, 11 energy or 1 data siphon), stage 1, interval 12, then §12.2.

    `active` false makes the block layout search return at once and the result no valid
    game: for padding entries of a batched rule (`batching.where_selected`), discarded.
    """
    return _new_game(key, jnp.asarray(active))


def _new_game(key: PRNGKeyArray, active: Bool[Array, ""]) -> GameState:
    return _initialise_stage(_starting_state(key), active, key)


def _starting_state(key: PRNGKeyArray) -> GameState:
    """§12.5 before the stage is initialised: the player on a corner with the bonus."""
    # The start stream is one that stage generation (same key) does not use.
    words = _words(_seeds(key, _NUM_STREAMS)[_STREAM_START], jnp.arange(2, dtype=jnp.int32))
    corner = jnp.asarray(_CORNER_CELLS)[_below(words[0], 4).astype(jnp.int32)]
    bonus = _below(words[1], 3).astype(jnp.int32)
    state = bare_state(corner // C.COLS, corner % C.COLS)
    player = state.player
    state = eqx.tree_at(
        lambda s: (s.player.credits, s.player.energy, s.player.data_siphons), state,
        (jnp.where(bonus == 0, C.STARTING_BONUS_CREDITS, player.credits),
         jnp.where(bonus == 1, C.STARTING_BONUS_ENERGY, player.energy),
         jnp.where(bonus == 2, C.STARTING_BONUS_SIPHONS, player.data_siphons)))
    return state


# ---------------------------------------------------------------------------------------
# Applying a rule to the games that need it.


def _place_where_active(state, active, key, n_task, n_siphon, n_plain):
    zero = jnp.int32(0)
    return place_transmissions(state, key, jnp.where(active, n_task, zero),
                               jnp.where(active, n_siphon, zero),
                               jnp.where(active, n_plain, zero))


def _new_game_where_active(state, active, key):
    del state
    return _new_game(key, active)


# What each rule writes (`batching.where_selected` scatters back only these fields).
_STAGE_WRITES = ("board", "player.hp", "transmissions", "stage", "turn", "interval", "next_task",
                 "atk_uses", "show", "calm", "step_active", "won", "history.top", "history.depth")
_maybe_complete_stage = batching.where_selected(_complete_stage, _STAGE_WRITES, 32, 8)
_maybe_place_transmissions = batching.where_selected(_place_where_active, ("transmissions",), 8, 8)
_maybe_new_game = batching.where_selected(
    _new_game_where_active, [f.name for f in dataclasses.fields(GameState)], 64, 8)


def maybe_complete_stage(state: GameState, completed: Bool[Array, ""],
                         key: PRNGKeyArray) -> GameState:
    """`complete_stage(state, key)` if `completed`, else `state`; under `vmap` only the
    completing games do any work (see the module docstring)."""
    return _maybe_complete_stage(state, completed, key)


def maybe_place_transmissions(state: GameState, key: PRNGKeyArray, n_task: Int32[Array, ""],
                              n_siphon: Int32[Array, ""], n_plain: Int32[Array, ""]) -> GameState:
    """`place_transmissions(...)`, doing work under `vmap` only for games placing any."""
    n_task, n_siphon, n_plain = (jnp.asarray(n, jnp.int32) for n in (n_task, n_siphon, n_plain))
    return _maybe_place_transmissions(state, n_task + n_siphon + n_plain > 0, key, n_task,
                                      n_siphon, n_plain)


def maybe_new_game(state: GameState, reset: Bool[Array, ""], key: PRNGKeyArray) -> GameState:
    """`new_game(key)` if `reset`, else `state` (auto-reset); under `vmap` only the games
    being reset do any work."""
    return _maybe_new_game(state, reset, key)


# ---------------------------------------------------------------------------------------
# Curriculum starts (docs/rules.md#curriculum-starts). Not a rule of the game: a way for a
# trainer to begin some episodes at a later stage. Stage 1 is `new_game`, exactly.

# What a player who reached stage k is given, drawn once per completed stage j = 1..k-1:
CURRICULUM_CREDITS_MAX = 8        # credits + U{0..8}
CURRICULUM_ENERGY_MAX = 8         # energy + U{0..8}
CURRICULUM_SCORE_MAX = 9          # score + U{0..9}: one data block's points
CURRICULUM_P_PROGRAM = 0.5        # one more owned program (distinct, uniform), probability ½
# ... and once:
CURRICULUM_SIPHONS_MAX = 2        # data siphons + U{0..2}, still held on arrival
CURRICULUM_P_HURT = 0.25          # hp 2 instead of 3
# Enemies that survived earlier stages, as extra plain transmissions: U{0..k // 2}.

# Counters of the start stream (`_STREAM_START`; `_starting_state` uses 0 and 1).
_CURRICULUM_COIN, _CURRICULUM_STAGE, _CURRICULUM_HURT, _CURRICULUM_SIPHONS, _CURRICULUM_CARRIED = range(2, 7)
_CURRICULUM_PER_STAGE = 8         # then 4 blocks of NUM_STAGES - 1 words: credits, energy, score, program
# Streams past those `_initialise_stage` uses: the carried transmissions' order and type
# (as `_place` takes them), and the owned programs' order.
_STREAM_CARRIED = _NUM_STREAMS + _TRANSMISSION_STREAMS
_STREAM_OWNED = _STREAM_CARRIED + _TRANSMISSION_STREAMS
_P_PROGRAM = _threshold(CURRICULUM_P_PROGRAM)
_P_HURT = _threshold(CURRICULUM_P_HURT)


def _start_words(key: PRNGKeyArray, first: int, count: int) -> UInt32[Array, " count"]:
    return _words(_seeds(key, _NUM_STREAMS)[_STREAM_START], first + jnp.arange(count, dtype=jnp.int32))


def curriculum_stage(key: PRNGKeyArray, share: Float32[Array, ""] | float,
                     max_stage: Int32[Array, ""] | int) -> Int32[Array, ""]:
    """The stage a curriculum start begins at: with probability `share` uniform over
    2..`max_stage` (clipped to 2..8), else 1.

    `share` 0 gives stage 1 for every key, `share` 1 a later stage for every key. Drawn
    from `key`'s start stream, on counters that neither `new_game` nor stage generation
    read, so the same key then makes the game (`curriculum_game(key, stage)`).
    """
    coin, which = _start_words(key, _CURRICULUM_COIN, 2)
    later = (coin >> 8).astype(jnp.float32) * np.float32(2.0 ** -24) < share
    top = jnp.clip(jnp.asarray(max_stage, jnp.int32), 2, C.NUM_STAGES)
    stage = 2 + _below(which, (top - 1).astype(_U32)).astype(jnp.int32)
    return jnp.where(later, stage, 1).astype(jnp.int32)


def curriculum_game(key: PRNGKeyArray, stage: Int32[Array, ""] | int,
                    active: Bool[Array, ""] | bool = True) -> GameState:
    """A new game that begins at `stage` (1..8) with what a player who got there might hold.

    Stage 1 is `new_game(key, active)`, bit for bit. For stage k ≥ 2 the game starts as
    `new_game` does (corner, starting bonus), the player is given, for each of the k − 1
    stages it is taken to have completed, U{0..8} credits, U{0..8} energy, U{0..9} score
    and, with probability ½, one more program (distinct programs, uniformly drawn); and
    once U{0..2} data siphons and hp 2 with probability ¼ (else 3). Then stage k is
    initialised as on an advance (§12.2: interval 13 − k, its k transmissions) and
    U{0..k // 2} more plain transmissions are placed (§11) for the enemies that would
    have survived the earlier stages. Attack stays 1, pending 0, the history empty.

    The rule is not the game's (docs/rules.md#curriculum-starts): it is a starting
    distribution for training. Every state it makes is a valid game.
    """
    stage = jnp.clip(jnp.asarray(stage, jnp.int32), 1, C.NUM_STAGES)
    completed = stage - 1
    state = _starting_state(key)
    hurt, siphons, carried = _start_words(key, _CURRICULUM_HURT, 3)
    per_stage = _start_words(key, _CURRICULUM_PER_STAGE, 4 * (C.NUM_STAGES - 1)).reshape(4, -1)
    counted = jnp.arange(C.NUM_STAGES - 1) < completed

    def total(words, most):
        return jnp.sum(jnp.where(counted, _below(words, most + 1).astype(jnp.int32), 0))

    programs = jnp.sum(counted & (per_stage[3] < _P_PROGRAM), dtype=jnp.int32)
    seeds = _seeds(key, _STREAM_OWNED + 1)
    order = _draw_programs(seeds[_STREAM_OWNED])
    owned = jnp.zeros(C.NUM_PROGRAMS, bool).at[order].set(jnp.arange(C.NUM_PROGRAMS) < programs)
    later = completed > 0
    player = state.player
    state = eqx.tree_at(
        lambda s: (s.player.credits, s.player.energy, s.player.score, s.player.data_siphons,
                   s.player.hp, s.player.owned, s.stage, s.interval),
        state,
        (player.credits + total(per_stage[0], CURRICULUM_CREDITS_MAX),
         player.energy + total(per_stage[1], CURRICULUM_ENERGY_MAX),
         player.score + total(per_stage[2], CURRICULUM_SCORE_MAX),
         player.data_siphons + jnp.where(later, _below(siphons, CURRICULUM_SIPHONS_MAX + 1).astype(jnp.int32), 0),
         jnp.where(later & (hurt < _P_HURT), player.hp - 1, player.hp),
         owned,
         stage,
         jnp.where(later, C.INTERVAL_BASE - stage, state.interval)))
    state = _initialise_stage(state, jnp.asarray(active), key)
    extra = jnp.where(later, _below(carried, (stage // 2 + 1).astype(_U32)).astype(jnp.int32), 0)
    zero = jnp.int32(0)
    return _place(state, seeds[_STREAM_CARRIED:_STREAM_OWNED], zero, zero, extra)
