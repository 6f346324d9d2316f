"""Stage generation (docs/rules.md §11, §12, §16; checks 14–15 of §19) over thousands of stages.

Each generator is compiled once per shape and vmapped over `N` keys; the checks run in
numpy on the host. The layout rules are re-implemented here independently (a plain
breadth-first search), and the statistical checks use fixed keys, so they are
deterministic; their bounds are 5-sigma (binomial) or p > 1e-4 (chi-square).
"""

from collections import deque

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from hm.game import generation
from hm.game.state import bare_state

# Numbers from the spec, spelled out rather than read from hm.game.constants.
CORNERS = (0, 5, 30, 35)                                 # §1, as cells row * 6 + col
EMPTY, BLOCK, PICKUP, EXIT = 0, 1, 2, 3                  # §1.1
SPAWN = (4, 4, 6, 5, 3, 1, 4, 2, 2, 3, 4, 7, 3, 2, 2, 6, 4, 4, 4, 5, 3, 8, 4)   # §4
N = 4096                                                 # stages per batch


def to_numpy(tree):
    return jax.tree.map(np.asarray, tree)


def game(states, i):
    return jax.tree.map(lambda x: x[i], states)


def neighbours(cell):
    r, c = divmod(cell, 6)
    for dr, dc in ((1, 0), (-1, 0), (0, -1), (0, 1)):
        if 0 <= r + dr < 6 and 0 <= c + dc < 6:
            yield (r + dr) * 6 + c + dc


def layout_is_valid(blocks, exit_cell):
    """§12.4 layoutIsValid, written independently: BFS from (0,0), the exit visited but
    not expanded unless it is (0,0); every block needs a non-block orthogonal neighbour."""
    blocks = set(blocks)
    visited, queue = {0}, deque([0])
    while queue:
        cell = queue.popleft()
        if cell == exit_cell and cell != 0:
            continue
        for n in neighbours(cell):
            if n not in blocks and n not in visited:
                visited.add(n)
                queue.append(n)
    connected = len(visited) == 36 - len(blocks)
    reachable = all(any(n not in blocks for n in neighbours(b)) for b in blocks)
    return connected and reachable


def line_of_fire(player, obstacles):
    """§11: cells sharing the player's row or column with no obstacle strictly between."""
    pr, pc = divmod(player, 6)
    cells = set()
    for dr, dc in ((1, 0), (-1, 0), (0, -1), (0, 1)):
        r, c = pr + dr, pc + dc
        while 0 <= r < 6 and 0 <= c < 6:
            cells.add(r * 6 + c)
            if r * 6 + c in obstacles:
                break
            r, c = r + dr, c + dc
    return cells


def entity_cells(entities):
    """Cells of the live entries of a (numpy, unbatched) entity list, in list order."""
    alive = entities.alive
    return list(entities.row[alive].astype(int) * 6 + entities.col[alive].astype(int))


def with_entities(state, enemies=(), transmissions=()):
    """`state` with the given enemy (cell, kind, hp) and transmission (cell, timer) lists."""
    e, t = state.enemies, state.transmissions
    for i, (cell, kind, hp) in enumerate(enemies):
        e = eqx.tree_at(lambda x: (x.alive, x.kind, x.row, x.col, x.hp), e,
                        (e.alive.at[i].set(True), e.kind.at[i].set(kind),
                         e.row.at[i].set(cell // 6), e.col.at[i].set(cell % 6),
                         e.hp.at[i].set(hp)))
    for i, (cell, timer) in enumerate(transmissions):
        t = eqx.tree_at(lambda x: (x.alive, x.row, x.col, x.timer), t,
                        (t.alive.at[i].set(True), t.row.at[i].set(cell // 6),
                         t.col.at[i].set(cell % 6), t.timer.at[i].set(timer)))
    return eqx.tree_at(lambda s: (s.enemies, s.transmissions), state, (e, t))


def binomial_ok(hits, n, p, sigmas=5.0):
    return abs(hits - n * p) <= sigmas * np.sqrt(n * p * (1 - p))


def uniform_ok(counts):
    counts = np.asarray(counts)
    return stats.chisquare(counts).pvalue > 1e-4


def keys(seed, n=N):
    return jax.random.split(jax.random.key(seed), n)


# Each program is compiled once for the module: every call below uses these shapes.
new_games_of = jax.jit(jax.vmap(generation.new_game))                    # N keys
complete_stages = jax.jit(jax.vmap(generation.complete_stage))           # N games
maybe_complete_stages = jax.jit(jax.vmap(generation.maybe_complete_stage))
place_each = jax.jit(jax.vmap(generation.place_transmissions))           # N games
maybe_place_each = jax.jit(jax.vmap(generation.maybe_place_transmissions))
maybe_new_games = jax.jit(jax.vmap(generation.maybe_new_game))
# One state, many keys (placement statistics, layouts of a fixed board).
PLACEMENTS = 8192
place_many = jax.jit(jax.vmap(generation.place_transmissions, in_axes=(None, 0, None, None, None)))
initialise_many = jax.jit(jax.vmap(generation.initialise_stage, in_axes=(None, 0)))
initialise_one = jax.jit(generation.initialise_stage)


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def new_games():
    return to_numpy(new_games_of(keys(1)))


def _advance_inputs(games):
    """The new games at stage 1..8 (8: the advance is a victory) and hp 1..3, each with three
    enemies and three more transmissions on random free cells (corners included) that
    must survive the stage advance. Built in numpy from `new_games`."""
    rng = np.random.default_rng(0)
    games = jax.tree.map(np.copy, games)
    e, t, p = games.enemies, games.transmissions, games.player
    for i in range(N):
        taken = {int(p.row[i]) * 6 + int(p.col[i])}
        taken |= {int(r) * 6 + int(c) for r, c in zip(t.row[i][t.alive[i]], t.col[i][t.alive[i]])}
        cells = rng.permutation([c for c in range(36) if c not in taken])[:6]
        e.alive[i, :3] = True
        e.kind[i, :3] = (0, 1, 2)
        e.hp[i, :3] = (1, 3, 2)
        e.row[i, :3], e.col[i, :3] = cells[:3] // 6, cells[:3] % 6
        n = int(t.alive[i].sum())
        t.alive[i, n:n + 3] = True
        t.row[i, n:n + 3], t.col[i, n:n + 3] = cells[3:] // 6, cells[3:] % 6
        t.timer[i, n:n + 3] = 5
    stage = rng.integers(1, 9, N).astype(np.int32)
    games = eqx.tree_at(
        lambda s: (s.stage, s.interval, s.player.hp, s.pending, s.turn, s.show, s.atk_uses),
        games, (stage, 13 - stage, rng.integers(1, 4, N).astype(np.int32),
                np.full(N, 3, np.int32), np.full(N, 7, np.int32), np.ones(N, bool),
                np.full(N, 2, np.int32)))
    return jax.tree.map(jnp.asarray, games)


@pytest.fixture(scope="module")
def advanced(new_games):
    """(before, after) of `complete_stage` on N games with persisting entities."""
    before = _advance_inputs(new_games)
    return before, complete_stages(before, keys(3))


# --------------------------------------------------------------------------- invariants

def check_stage(state, persisting_enemies=(), persisting_transmissions=()):
    """Every per-stage rule of §12.2–12.4 and §19.14 for one freshly initialised stage."""
    b = state.board
    player = int(state.player.row) * 6 + int(state.player.col)
    content = b.content.astype(int)
    blocks = [c for c in range(36) if content[c] == BLOCK]
    exits = [c for c in range(36) if content[c] == EXIT]
    # §12.2 exit and pickups
    assert player in CORNERS
    assert len(exits) == 1 and exits[0] in CORNERS and exits[0] != player
    assert {c for c in range(36) if content[c] == PICKUP} == set(CORNERS) - {player, exits[0]}
    # §12.4 blocks: off corners and persisting entities; valid layout; payloads
    assert not set(blocks) & set(CORNERS)
    assert not set(blocks) & (set(persisting_enemies) | set(persisting_transmissions))
    assert len(blocks) == 0 or 5 <= len(blocks) <= 11
    if blocks:
        assert layout_is_valid(blocks, exits[0])
    programs = []
    for c in range(36):
        points, program = int(b.block_points[c]), int(b.block_program[c])
        spawn, question = int(b.block_spawn[c]), bool(b.block_question[c])
        if content[c] != BLOCK:
            assert (points, program, spawn, question) == (0, -1, 0, False)
        elif program < 0:                       # data, visible or hidden
            assert 1 <= points <= 9 and spawn == points
        else:                                   # program, visible or hidden
            assert points == 0 and spawn == SPAWN[program] and 0 <= program < 23
            programs.append(program)
    assert len(programs) == len(set(programs))
    # §12.3 resources: exactly one on every EMPTY or PICKUP cell, none elsewhere
    credits, energy = b.credits.astype(int), b.energy.astype(int)
    for c in range(36):
        if content[c] in (EMPTY, PICKUP):
            assert (credits[c] == 0) != (energy[c] == 0)
            assert 1 <= credits[c] + energy[c] <= 3
        else:
            assert credits[c] == 0 and energy[c] == 0
    assert not b.siphoned.any() and not b.siphon_center.any()
    # §12.2 globals
    assert int(state.turn) == 0 and int(state.next_task) == int(state.interval)
    assert int(state.interval) == 13 - int(state.stage)
    assert not state.show and not state.calm and not state.step_active
    assert int(state.atk_uses) == 0 and not state.won
    assert int(state.history.depth) == 0
    assert all(not np.any(x) for x in (state.history.small, state.history.wide))
    # §11 the stage's transmissions: after the persisting ones, on free cells, off the
    # line of fire while a free cell off it exists
    t = state.transmissions
    cells = entity_cells(t)
    old = len(persisting_transmissions)
    assert cells[:old] == list(persisting_transmissions)
    new = cells[old:]
    assert len(new) == int(state.stage)
    assert len(set(cells)) == len(cells)
    taken = set(blocks) | set(persisting_enemies) | {player}
    assert not set(new) & taken
    obstacles = set(blocks) | set(persisting_enemies)
    lof = line_of_fire(player, obstacles)
    off_line_free = set(range(36)) - taken - lof - set(cells)
    assert not set(new) & lof or not off_line_free
    alive = t.alive
    assert np.all(t.timer[alive][old:] == 1)
    assert not t.from_task[alive][old:].any() and not t.from_siphon[alive][old:].any()
    return blocks, exits[0], programs


def test_new_games_follow_the_stage_rules(new_games):
    for i in range(N):
        state = game(new_games, i)
        check_stage(state)
        assert int(state.stage) == 1 and int(state.interval) == 12
        assert int(state.player.hp) == 3 and int(state.player.attack) == 1
        assert int(state.player.score) == 0 and not state.player.owned.any()
        assert int(state.pending) == 0 and not state.enemies.alive.any()


def test_stage_advance_follows_the_stage_rules(advanced):
    """§12.1–12.2 and §19.15: persisting enemies and transmissions keep everything, no
    block lands on them, and the new stage adds `stage` transmissions after them. After
    stage 8 the game is won and nothing but hp and `won` changes."""
    before, after = to_numpy(advanced[0]), to_numpy(advanced[1])
    won = before.stage == 8
    assert 0 < int(won.sum()) < N
    np.testing.assert_array_equal(after.player.hp, np.minimum(3, before.player.hp + 1))
    np.testing.assert_array_equal(after.won, won)
    np.testing.assert_array_equal(after.stage, np.where(won, 8, before.stage + 1))
    # Victory: nothing but hp and `won` changes.
    victory = eqx.tree_at(lambda s: (s.won, s.player.hp), before, (after.won, after.player.hp))
    for x, y in zip(jax.tree.leaves(after), jax.tree.leaves(victory), strict=True):
        np.testing.assert_array_equal(x[won], y[won])
    # Advance: the player's belongings, `pending`, the enemies and the old transmissions
    # carry over unchanged.
    for name in ("credits", "energy", "data_siphons", "attack", "score", "owned"):
        np.testing.assert_array_equal(getattr(after.player, name), getattr(before.player, name))
    np.testing.assert_array_equal(after.pending, before.pending)
    for x, y in zip(jax.tree.leaves(after.enemies), jax.tree.leaves(before.enemies)):
        np.testing.assert_array_equal(x, y)
    old = before.transmissions.alive
    for x, y in zip(jax.tree.leaves(after.transmissions), jax.tree.leaves(before.transmissions)):
        np.testing.assert_array_equal(x[old], y[old])
    for i in np.flatnonzero(~won):
        b, a = game(before, i), game(after, i)
        check_stage(a, entity_cells(b.enemies), entity_cells(b.transmissions))


# --------------------------------------------------------------------------- statistics

def test_block_and_resource_statistics(new_games):
    """§16: K uniform on 5..11; 50 % data; 10 % question; points uniform on 1..9; programs
    uniform; resources 45/45/10 and credits/energy 1/2 each."""
    b = new_games.board
    block = b.content == BLOCK
    k = block.sum(axis=1)
    assert (k == 0).sum() <= 2                # all 100 attempts failing is very rare
    assert uniform_ok(np.bincount(k[k > 0], minlength=12)[5:12])
    n_blocks = int(block.sum())
    data = block & (b.block_program < 0)
    assert binomial_ok(int(data.sum()), n_blocks, 0.5)
    assert binomial_ok(int((block & b.block_question).sum()), n_blocks, 0.1)
    for kind in (data, block & ~data):         # question independent of data/program
        assert binomial_ok(int((kind & b.block_question).sum()), int(kind.sum()), 0.1)
    assert uniform_ok(np.bincount(b.block_points[data], minlength=10)[1:])
    assert uniform_ok(np.bincount(b.block_program[block & ~data], minlength=23))
    has_resource = (b.content == EMPTY) | (b.content == PICKUP)
    amount = (b.credits + b.energy)[has_resource].astype(int)
    counts = np.bincount(amount, minlength=4)[1:]
    for n_amount, p in zip(counts, (0.45, 0.45, 0.10)):
        assert binomial_ok(int(n_amount), amount.size, p)
    assert binomial_ok(int((b.credits[has_resource] > 0).sum()), amount.size, 0.5)


def test_block_cells_uniform_over_eligible(new_games):
    """Every non-corner cell is a block about equally often (the layout rule favours no
    cell strongly, but does shift the odds, so compare cells that mirror each other)."""
    block = new_games.board.content == BLOCK
    per_cell = block.sum(axis=0).reshape(6, 6)
    assert per_cell[0, 0] == per_cell[0, 5] == per_cell[5, 0] == per_cell[5, 5] == 0
    # The layout rule is symmetric under transposition, and flood-from-(0,0) under
    # swapping rows and columns; exits are drawn uniformly per player corner. So the
    # block frequency of (r, c) and (c, r) agree within noise.
    for r in range(6):
        for c in range(r + 1, 6):
            if (r, c) in ((0, 5), (5, 0)):
                continue
            n1, n2 = per_cell[r, c], per_cell[c, r]
            assert binomial_ok(int(n1), int(n1 + n2), 0.5)


def test_new_game_distribution(new_games):
    """§12.5: the starting corner is uniform, the bonus uniform over its 3 options, and the
    exit uniform over the 3 other corners."""
    p = new_games.player
    corner = p.row.astype(int) * 6 + p.col.astype(int)
    assert set(np.unique(corner)) <= set(CORNERS)
    assert uniform_ok([np.sum(corner == c) for c in CORNERS])
    bonus = np.stack([p.credits == 10, p.energy == 11, p.data_siphons == 1], axis=1)
    assert np.all(bonus.sum(axis=1) == 1)
    assert np.all((p.credits == 0) | (p.credits == 10))
    assert np.all((p.energy == 0) | (p.energy == 11))
    assert uniform_ok(bonus.sum(axis=0))
    exit_cell = np.argmax(new_games.board.content == EXIT, axis=1)
    for c in CORNERS:
        exits = exit_cell[corner == c]
        assert uniform_ok([np.sum(exits == x) for x in CORNERS if x != c])


def test_stage_transmission_statistics(advanced):
    """§11: the stage's transmissions are uniform over the enemy types."""
    before, after = to_numpy(advanced[0]), to_numpy(advanced[1])
    types = []
    for i in range(N):
        n = int(before.transmissions.alive[i].sum())
        alive = after.transmissions.alive[i]
        types.extend(after.transmissions.kind[i][alive][n:].tolist())
    assert uniform_ok(np.bincount(types, minlength=4))


# --------------------------------------------------------------------------- §11 placement

def _placements(state, n_task, n_siphon, n_plain, seed=7):
    """`PLACEMENTS` independent placements into one state."""
    return to_numpy(place_many(state, keys(seed, PLACEMENTS), jnp.int32(n_task),
                               jnp.int32(n_siphon), jnp.int32(n_plain)))


def _placement_state():
    """Player (2,2); daemon (2,4) and block (4,2) shelter parts of the row and column;
    an old transmission at (0,2) (in the line of fire, since transmissions don't shelter)."""
    state = with_entities(bare_state(2, 2), enemies=[(2 * 6 + 4, 1, 3), (5 * 6 + 5, 0, 2)],
                          transmissions=[(0 * 6 + 2, 4), (3 * 6 + 3, 2)])
    content = state.board.content.at[4 * 6 + 2].set(BLOCK)
    return eqx.tree_at(lambda s: s.board.content, state, content)


def test_placement_is_uniform_off_the_line_of_fire():
    state = _placement_state()
    out = _placements(state, 0, 0, 1)
    t = out.transmissions
    assert np.all(t.alive[:, :2]) and np.all(t.alive[:, 2]) and not np.any(t.alive[:, 3:])
    cell = t.row[:, 2].astype(int) * 6 + t.col[:, 2].astype(int)
    taken = {2 * 6 + 2, 2 * 6 + 4, 5 * 6 + 5, 0 * 6 + 2, 3 * 6 + 3, 4 * 6 + 2}
    lof = line_of_fire(2 * 6 + 2, {2 * 6 + 4, 5 * 6 + 5, 4 * 6 + 2})
    assert 2 * 6 + 5 not in lof and 5 * 6 + 2 not in lof and 0 * 6 + 2 in lof
    eligible = sorted(set(range(36)) - taken - lof)
    counts = np.bincount(cell, minlength=36)
    assert counts[[c for c in range(36) if c not in eligible]].sum() == 0
    assert uniform_ok(counts[eligible])
    assert uniform_ok(np.bincount(t.kind[:, 2], minlength=4))
    assert np.all(t.timer[:, 2] == 1)
    # the old entries are untouched
    np.testing.assert_array_equal(t.row[:, :2], np.broadcast_to([0, 3], (PLACEMENTS, 2)))


def test_placement_falls_back_to_the_line_of_fire():
    """With every cell off the line of fire taken, placements go uniformly into the free
    cells of the line of fire; with no free cell left they are dropped."""
    player = 2 * 6 + 2
    lof = line_of_fire(player, set())
    off_line = [c for c in range(36) if c not in lof and c != player]
    line_cells = sorted(lof)
    state = with_entities(bare_state(2, 2), enemies=[(c, 1, 3) for c in off_line])
    out = _placements(state, 0, 0, 3)
    t = out.transmissions
    cells = t.row[:, :3].astype(int) * 6 + t.col[:, :3].astype(int)
    assert np.all(t.alive[:, :3]) and not np.any(t.alive[:, 3:])
    assert np.all(np.isin(cells, line_cells))
    assert np.all((cells[:, 0] != cells[:, 1]) & (cells[:, 1] != cells[:, 2])
                  & (cells[:, 0] != cells[:, 2]))
    assert uniform_ok([np.sum(cells == c) for c in line_cells])
    # all cells taken but one: 3 requested, 1 placed
    full = with_entities(bare_state(2, 2),
                         enemies=[(c, 1, 3) for c in off_line + line_cells[1:]])
    t = _placements(full, 0, 0, 3).transmissions
    assert np.all(t.alive[:, 0]) and not np.any(t.alive[:, 1:])
    assert np.all(t.row[:, 0].astype(int) * 6 + t.col[:, 0] == line_cells[0])


def test_placement_order_flags_and_capacity():
    state = _placement_state()
    t = _placements(state, 1, 2, 3).transmissions
    assert np.all(t.alive[:, :8]) and not np.any(t.alive[:, 8:])
    np.testing.assert_array_equal(t.from_task[0, :8], [0, 0, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(t.from_siphon[0, :8], [0, 0, 0, 1, 1, 0, 0, 0])
    cells = t.row[:, 2:8].astype(int) * 6 + t.col[:, 2:8]
    assert all(len(set(row)) == 6 for row in cells)
    # no capacity: a full list (36 stacked transmissions) takes nothing more
    full = with_entities(bare_state(2, 2), transmissions=[(0, 1)] * 36)
    out = _placements(full, 1, 1, 1).transmissions
    assert np.all(out.alive) and np.all(out.row == 0) and np.all(out.col == 0)
    # room for two more: the task one and the first siphon one are kept
    room = with_entities(bare_state(2, 2), transmissions=[(0, 1)] * 34)
    out = _placements(room, 1, 2, 3).transmissions
    assert np.all(out.alive) and np.all(out.from_task[:, 34]) and np.all(out.from_siphon[:, 35])


# --------------------------------------------------------------------------- §12.4 corner cases

def _blocks_only_on(cells, seed=11):
    """Stage 1 generated with enemies on every non-corner cell except `cells`, by the
    batched (pooled) search for 512 keys and by the unbatched search for one."""
    blocked = [c for c in range(36) if c not in CORNERS and c not in cells]
    state = with_entities(bare_state(0, 0), enemies=[(c, 1, 3) for c in blocked])
    batched = to_numpy(initialise_many(state, keys(seed, 512)))
    single = to_numpy(initialise_one(state, keys(seed, 512)[0]))
    return batched.board.content == BLOCK, single.board.content == BLOCK


def test_block_count_reduced_to_the_eligible_cells():
    """§12.4 [RESOLUTION]: with 4 eligible cells (a valid layout), K := 4, always."""
    cells = [1 * 6 + 1, 1 * 6 + 4, 3 * 6 + 2, 4 * 6 + 4]
    assert all(layout_is_valid(cells, exit_cell) for exit_cell in CORNERS)
    batched, single = _blocks_only_on(cells)
    expected = np.isin(np.arange(36), cells)
    assert np.all(batched == expected) and np.all(single == expected)


def test_no_blocks_when_all_attempts_fail():
    """Only invalid layouts exist (the 5 eligible cells wall (0,0)-(0,3) off), so all 100
    attempts fail and the stage has no blocks; likewise when blocking both neighbours of
    (0,0) is the only choice."""
    wall = [1 * 6 + 0, 1 * 6 + 1, 1 * 6 + 2, 1 * 6 + 3, 0 * 6 + 4]
    assert not any(layout_is_valid(wall, exit_cell) for exit_cell in CORNERS)
    for cells in (wall, [1, 6]):
        batched, single = _blocks_only_on(cells)
        assert not batched.any() and not single.any()


def test_batched_search_matches_unbatched():
    """The pooled batching rule commits exactly the layout the per-game search commits."""
    state = bare_state(0, 5)
    ks = keys(14, 512)
    batched = initialise_many(state, ks)
    for i in range(24):
        assert_same(initialise_one(state, ks[i]), game(batched, i))


# --------------------------------------------------------------------------- the maybe_ API

def assert_same(got, want):
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def where(pred, a, b):
    return jax.tree.map(
        lambda x, y: jnp.where(pred.reshape((-1,) + (1,) * (x.ndim - 1)), x, y), a, b)


def test_maybe_complete_stage_matches_where(advanced):
    """Batched `maybe_complete_stage` = `where(completed, complete_stage, state)`; a batch
    with no completion is returned as it was."""
    before, after = advanced
    completed = jnp.arange(N) % 3 == 0
    assert_same(maybe_complete_stages(before, completed, keys(3)), where(completed, after, before))
    assert_same(maybe_complete_stages(before, jnp.zeros(N, bool), keys(3)), before)


def test_complete_stage_inside_a_batched_cond(advanced):
    """`complete_stage` under a `lax.cond` whose predicate is batched (its table constants
    get batched, which a bare `custom_vmap` rejects)."""
    before, after = jax.tree.map(lambda x: x[:48], advanced)
    completed = jnp.arange(48) % 3 == 0
    in_cond = jax.jit(jax.vmap(lambda s, c, k: jax.lax.cond(
        c, lambda: generation.complete_stage(s, k), lambda: s)))
    assert_same(in_cond(before, completed, keys(3)[:48]), where(completed, after, before))


def test_maybe_place_transmissions_and_new_game_match_their_rules(new_games):
    states = jax.tree.map(jnp.asarray, new_games)
    n = jnp.arange(N, dtype=jnp.int32) % 5 // 3            # 0 0 0 1 1 0 0 0 1 1 ...
    ks = keys(13)
    assert_same(maybe_place_each(states, ks, n, n, jnp.zeros_like(n)),
                place_each(states, ks, n, n, jnp.zeros_like(n)))
    reset = n == 1
    assert_same(maybe_new_games(states, reset, ks), where(reset, new_games_of(ks), states))
