"""The batching layer (`hm.game.batching`) and the rules built on it.

* Every batched rule gives, game by game, what it gives for each game alone (a Python
  loop over single games), for the selected and the unselected games, in batches where
  none, some and all games are selected.
* Every `where_selected` rule writes only the fields it declares (a write outside them
  is dropped under `vmap`), and so does every program's effect (`Program.writes`).
* `vmap(step)` takes every batched rule (`batching.batched_traces`), so the fast paths
  cannot silently stop being taken.
"""

import importlib
import pkgutil

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxprs import primitives

import hm.game
import hm.game as game
from hm.game import batching, core, enemy_phase, generation, program_table, programs, random_draws, reward
from hm.game import constants as C
from hm.game.actions import player_cell
from hm.train import distributions

GAMES = 24          # chunks of 8 for the 16-divisor rules: three when all are selected


@pytest.fixture(scope="module")
def played():
    """`GAMES` games after a few dozen random legal steps (auto-reset), and their
    observations: enemies, transmissions, UNDO history, some later stages."""
    step = jax.vmap(game.step)

    @jax.jit
    def run(key):
        state, obs = jax.vmap(game.reset)(jax.random.split(key, GAMES))

        def body(carry, key):
            state, obs = carry
            k_act, k_step, k_reset = jax.random.split(key, 3)
            mask = jax.vmap(game.legal_actions)(state)
            action = distributions.sample_legal(mask, jax.random.uniform(k_act, (GAMES,)))
            state, obs, _, done, _ = step(state, action, jax.random.split(k_step, GAMES))
            state, obs = jax.vmap(game.reset_where)(done, state, obs,
                                                    jax.random.split(k_reset, GAMES))
            return (state, obs), None

        return jax.lax.scan(body, (state, obs), jax.random.split(key, 40))[0]

    return run(jax.random.key(5))


def one(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def keys(seed):
    return jax.random.split(jax.random.key(seed), GAMES)


SELECTIONS = {
    "none": np.zeros(GAMES, bool),
    "some": np.arange(GAMES) % 3 == 1,
    "all": np.ones(GAMES, bool),
}


def assert_same_per_game(batched, alone, what):
    for i, single in enumerate(alone):
        for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(single),
                                jax.tree.leaves(one(batched, i))):
            np.testing.assert_array_equal(
                np.asarray(x), np.asarray(y), err_msg=f"{what}: game {i}, {jax.tree_util.keystr(path)}")


# --------------------------------------------------------------------------- where_selected

def where_selected_cases(played):
    """Every `where_selected` rule of the engine, with arguments for `GAMES` games."""
    state, obs = played
    counts = jax.random.randint(jax.random.key(3), (3, GAMES), 0, 3)
    return {
        "core._compact_where": (core._compact_where, (state,), ()),
        "core._fresh_game_where": (core._fresh_game_where, ((state, obs.values),), (keys(1),)),
        "enemy_phase._hatch_where": (enemy_phase._hatch_where, (state,), ()),
        "generation._maybe_complete_stage": (generation._maybe_complete_stage, (state,), (keys(2),)),
        "generation._maybe_place_transmissions": (
            generation._maybe_place_transmissions, (state,), (keys(3), *counts)),
        "generation._maybe_new_game": (generation._maybe_new_game, (state,), (keys(4),)),
    }


def engine_where_selected_rules():
    """The `where_selected` rules found in the modules of `hm.game`, by module and name."""
    found = set()
    for info in pkgutil.iter_modules(hm.game.__path__):
        module = importlib.import_module(f"hm.game.{info.name}")
        for name, value in vars(module).items():
            if callable(value) and hasattr(value, "writes") and hasattr(value, "rule"):
                found.add(f"{info.name}.{name}")
    return found


def test_every_where_selected_rule_is_tested(played):
    assert engine_where_selected_rules() == set(where_selected_cases(played))


@pytest.mark.parametrize("name", sorted([
    "core._compact_where", "core._fresh_game_where", "enemy_phase._hatch_where",
    "generation._maybe_complete_stage", "generation._maybe_place_transmissions",
    "generation._maybe_new_game"]))
def test_where_selected_batched_equals_alone(played, name):
    """For none, some and all games selected: `vmap(maybe)` equals `maybe` on each game
    alone, which is `rule` for a selected game and the game unchanged for the others; and
    the rule changes no field outside its declaration (`writes`)."""
    maybe, (state,), args = where_selected_cases(played)[name]
    batched = jax.jit(jax.vmap(maybe))
    alone = jax.jit(maybe)
    for selection, pred in SELECTIONS.items():
        out = batched(state, jnp.asarray(pred), *args)
        singles = [alone(one(state, i), jnp.asarray(pred[i]), *one(args, i)) for i in range(GAMES)]
        assert_same_per_game(out, singles, f"{name}, {selection} selected")
        for i, single in enumerate(singles):
            before = one(state, i)
            if pred[i]:
                assert batching.undeclared_changes(maybe.writes, before, single) == [], (name, i)
            else:
                assert_same_per_game(jax.tree.map(lambda x: x[None], before), [single],
                                     f"{name}, unselected game {i}")


def _turn_too(state, active):
    """Writes `turn`, but its `where_selected` below declares only the enemies."""
    del active
    return eqx.tree_at(lambda s: (s.enemies.hp, s.turn), state,
                       (state.enemies.hp + 1, state.turn + 1))


def test_a_rule_writing_an_undeclared_field_is_caught(played):
    state, _ = played
    bad = batching.where_selected(_turn_too, ("enemies",), 4, 2)
    selected = jnp.ones(GAMES, bool)
    game0 = one(state, 0)
    alone = jax.jit(bad)(game0, jnp.asarray(True))
    assert batching.undeclared_changes(bad.writes, game0, alone) == ["turn"]
    # What the check guards against: under `vmap` the undeclared write is dropped.
    batched = jax.jit(jax.vmap(bad))(state, selected)
    np.testing.assert_array_equal(batched.turn, state.turn)
    np.testing.assert_array_equal(batched.enemies.hp, state.enemies.hp + 1)


def test_writes_naming_no_field_is_an_error(played):
    state, _ = played
    bad = batching.where_selected(_turn_too, ("enemies", "turns"), 4, 2)
    with pytest.raises(ValueError, match="turns"):
        jax.eval_shape(jax.vmap(bad), state, jnp.ones(GAMES, bool))


# --------------------------------------------------------------------------- custom_batching

PROGRAM_MIXES = {
    "none": [C.WAIT, C.PUSH, C.PULL, C.SHOW, C.DELAY, C.REDUC],
    "some": [C.WAIT, C.CRASH, C.PUSH, C.UNDO, C.SHOW, C.WARP],
    "all": sorted(programs.SPARSE_PROGRAMS),
}


@pytest.mark.parametrize("mix", sorted(PROGRAM_MIXES))
def test_run_program_batched_equals_alone(played, mix):
    """Games running no, some and only sparse programs (the gathered chunks)."""
    state, _ = played
    program = jnp.asarray(np.resize(PROGRAM_MIXES[mix], GAMES), jnp.int32)
    out = jax.jit(jax.vmap(programs.run_program))(state, program, keys(6))
    alone = jax.jit(programs.run_program)
    singles = [alone(one(state, i), program[i], keys(6)[i]) for i in range(GAMES)]
    assert_same_per_game(out, singles, f"run_program, {mix} sparse")


@pytest.mark.parametrize("program", range(C.NUM_PROGRAMS), ids=C.PROGRAM_NAMES)
def test_every_program_writes_only_declared_fields(played, program):
    """Each entry's effect, on every game: the fields outside its declaration
    (`Program.writes`, the cost and the outcome) come back as they were. `run_program`
    keeps only the declared fields of an entry's result, so an undeclared write would be
    dropped."""
    state, _ = played
    entry = program_table.PROGRAMS[program]
    g = programs._paid(programs._game(state), jnp.full(GAMES, program, jnp.int32))
    snapshot = jax.vmap(lambda h: programs.unpack_snapshot(h.small[h.top], h.wide[h.top]))(state.history)
    _, impl = random_draws.key_parts(keys(0)[0])
    key = jax.random.key_data(keys(program)).astype(jnp.uint32)

    @jax.jit
    def effect(g, key, snapshot):
        given = program_table.Given(runs=jnp.ones(GAMES, bool), key=key, impl=impl, snapshot=snapshot)
        return programs._complete(entry.effect(g, given), GAMES)

    before = programs._complete(program_table.Result(g), GAMES)
    after = effect(g, key, snapshot)
    writes = programs.result_writes(entry)
    assert batching.undeclared_changes(writes, before, after) == [], entry.name


def test_every_declared_write_is_a_field():
    """Each entry's `writes` names fields of the state (a typo would declare nothing)."""
    result = jax.eval_shape(lambda: programs._complete(program_table.Result(
        programs._game(game.reset(jax.random.key(0))[0])), 1))
    for entry in program_table.PROGRAMS:
        batching.written_leaves(result, programs.result_writes(entry), entry.name)
    assert "game.board.content" in programs.SPARSE_WRITES         # CRASH
    assert "game.turn" in programs.SPARSE_WRITES                  # UNDO
    assert "game.step_active" not in programs.SPARSE_WRITES       # STEP is dense


def test_the_table_is_the_one_source_of_costs():
    """The table's columns are the §4 numbers, in id order, and the legal mask uses them."""
    table = program_table.PROGRAMS
    assert [p.name for p in table] == list(C.PROGRAM_NAMES)
    np.testing.assert_array_equal(program_table.CREDIT_COST, [p.credits for p in table])
    np.testing.assert_array_equal(program_table.ENERGY_COST, [p.energy for p in table])
    np.testing.assert_array_equal(program_table.SPAWN_COUNT, [p.spawn for p in table])


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_enemy_phase_batched_equals_alone(played, selection):
    """The activations' lanes (`_phase_moves`), hatching and placement, for games whose
    phase runs (selected) or not."""
    state, _ = played
    runs = jnp.asarray(SELECTIONS[selection])
    out = jax.jit(jax.vmap(enemy_phase.enemy_phase))(state, runs, keys(7))
    alone = jax.jit(enemy_phase.enemy_phase)
    singles = [alone(one(state, i), runs[i], keys(7)[i]) for i in range(GAMES)]
    assert_same_per_game(out, singles, f"enemy_phase, {selection} running")


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_keep_legal_batched_equals_alone(played, selection):
    """The select that is skipped when every game's action was legal."""
    state, _ = played
    acted = jax.tree.map(lambda x: jnp.roll(x, 1, axis=0), state)
    legal = jnp.asarray(SELECTIONS[selection])
    out = jax.jit(jax.vmap(core._keep_legal))(legal, acted, state)
    alone = jax.jit(core._keep_legal)
    singles = [alone(legal[i], one(acted, i), one(state, i)) for i in range(GAMES)]
    assert_same_per_game(out, singles, f"keep_legal, {selection} legal")


def test_exit_distance_batched_equals_alone(played):
    """The breadth-first search whose lanes are the games (`bitboard.distance_to`)."""
    state, _ = played
    cells = jax.vmap(player_cell)(state)
    out = jax.jit(jax.vmap(reward.exit_distance))(state.board, cells)
    alone = jax.jit(reward.exit_distance)
    assert_same_per_game(out, [alone(one(state.board, i), cells[i]) for i in range(GAMES)],
                         "exit_distance")


# --------------------------------------------------------------------------- no silent fallback


BATCHED_RULES = {
    "hm.game.core._compact", "hm.game.generation._complete_stage",
    "hm.game.core._select_unless_all", "hm.game.enemy_phase._hatch_ticked",
    "hm.game.enemy_phase._phase_moves", "hm.game.generation._place_where_active",
    "hm.game.generation._search_layout", "hm.game.programs.run_program.<locals>.run_one",
    "hm.game.bitboard.distance_to.<locals>.one",
}


def test_vmap_of_step_takes_every_batched_rule(played):
    """Tracing `vmap(step)` (and `vmap(reset_where)`) runs every batched rule's batched
    version, and leaves no `custom_vmap` call to run game by game."""
    state, obs = played
    jax.clear_caches()      # `step` and `reset_where` are jitted: trace them anew, not from the cache
    before = dict(batching.batched_traces)
    stepped = jax.make_jaxpr(jax.vmap(game.step))(state, jnp.zeros(GAMES, jnp.int32), keys(8))
    reset = jax.make_jaxpr(jax.vmap(game.reset_where))(jnp.ones(GAMES, bool), state, obs, keys(9))
    traced = {name for name, n in batching.batched_traces.items() if n > before.get(name, 0)}
    assert BATCHED_RULES <= traced, BATCHED_RULES - traced
    assert "hm.game.core._fresh_game" in traced
    for closed in (stepped, reset):
        assert "custom_vmap_call" not in primitives(closed.jaxpr)


def test_complete_stage_inside_a_batched_cond_takes_the_batched_search(played):
    """A batched `lax.cond` batches its branches after tracing them: the layout search
    inside `complete_stage` still runs its batched rule (not the per-game search)."""
    state, _ = played
    before = batching.batched_traces["hm.game.generation._search_layout"]
    jax.make_jaxpr(jax.vmap(lambda s, c, k: jax.lax.cond(
        c, lambda: generation.complete_stage(s, k), lambda: s)))(
        state, jnp.asarray(SELECTIONS["some"]), keys(10))
    assert batching.batched_traces["hm.game.generation._search_layout"] > before
