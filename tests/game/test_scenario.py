"""Scenario I/O (docs/scenarios.md) and the text renderer.

`from_dict` must accept every valid scenario (defaults, leniencies, aliases), reject
every bad one with a `ValueError` naming the key, and agree with `to_dict` so that
dict -> state -> dict -> state is lossless. Host code only: nothing here is jitted.
"""

import copy
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hm.game import constants as C
from hm.game.render import CELL_WIDTH, cell_origin, render
from hm.game.scenario import PROGRAM_IDS, from_dict, states_equal, to_dict
from hm.game.state import bare_state

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

ALL_CELLS = [(r, c) for r in range(C.ROWS) for c in range(C.COLS)]


def cell(r, c):
    return r * C.COLS + c


def minimal(r=3, c=3, **top):
    return {"player": {"row": r, "col": c}, **top}


# A scenario touching every key, used as the base of the bad-input cases.
BASE = {
    "player": {"row": 3, "col": 3, "hp": 2, "credits": 4, "energy": 5, "dataSiphons": 1,
               "attackDamage": 2, "score": 7},
    "enemies": [{"type": "virus", "row": 5, "col": 3, "hp": 2, "stunned": False,
                 "spawnedFromSiphon": False, "isFromScheduledTask": False,
                 "disabledTurns": 0}],
    "transmissions": [{"row": 1, "col": 1, "turnsRemaining": 2, "enemyType": "daemon",
                       "spawnedFromSiphon": False, "isFromScheduledTask": False}],
    "blocks": [{"row": 4, "col": 3, "type": "data", "points": 5, "spawnCount": 5,
                "siphoned": False},
               {"row": 2, "col": 2, "type": "program", "programType": "push",
                "programActionIndex": 5, "spawnCount": 4, "siphoned": False},
               {"row": 1, "col": 4, "type": "question", "hidden": "data", "points": 3}],
    "resources": [{"row": 0, "col": 1, "credits": 2}, {"row": 0, "col": 2, "energy": 1},
                  {"row": 0, "col": 5, "dataSiphon": True}],
    "ownedPrograms": [5, 10],
    "stage": 2, "turn": 3, "showActivated": False, "scheduledTasksDisabled": False,
    "exit": [5, 5], "scheduledTaskInterval": 11, "nextScheduledTaskTurn": 11,
    "pendingSiphonTransmissions": 0, "stepActive": False, "atkPlusUses": 0, "won": False,
    "siphonedCells": [[3, 3]], "siphonCenters": [[3, 3]], "undoDepth": 0,
}


# --------------------------------------------------------------------------- defaults


SPEC_EXAMPLE = json.loads("""{
  "player": {"row": 3, "col": 3, "hp": 3, "credits": 0, "energy": 0,
             "dataSiphons": 0, "attackDamage": 1, "score": 0},
  "enemies": [{"type": "virus", "row": 5, "col": 3, "hp": 2, "stunned": false,
               "spawnedFromSiphon": false, "isFromScheduledTask": false}],
  "transmissions": [{"row": 1, "col": 1, "turnsRemaining": 2, "enemyType": "daemon"}],
  "blocks": [{"row": 4, "col": 3, "type": "data", "points": 5, "spawnCount": 5, "siphoned": false},
             {"row": 2, "col": 2, "type": "program", "programType": "push",
              "programActionIndex": 5, "spawnCount": 4, "siphoned": false}],
  "resources": [{"row": 0, "col": 1, "credits": 2}, {"row": 0, "col": 2, "energy": 1},
                {"row": 0, "col": 5, "dataSiphon": true}],
  "ownedPrograms": [5, 10],
  "stage": 1, "turn": 0, "showActivated": false, "scheduledTasksDisabled": false
}""")


def test_the_spec_example():
    """The original protocol's example (the core keys only), read from JSON text."""
    s = jax.device_get(from_dict(SPEC_EXAMPLE))
    b = s.board
    assert (int(s.player.row), int(s.player.col)) == (3, 3)
    assert (int(s.enemies.kind[0]), int(s.enemies.row[0]), int(s.enemies.col[0])) == (
        C.VIRUS, 5, 3)
    assert (int(s.transmissions.kind[0]), int(s.transmissions.timer[0])) == (C.DAEMON, 2)
    assert (int(b.content[cell(4, 3)]), int(b.block_points[cell(4, 3)])) == (C.BLOCK, 5)
    assert (int(b.block_program[cell(2, 2)]), int(b.block_spawn[cell(2, 2)])) == (C.PUSH, 4)
    assert int(b.credits[cell(0, 1)]) == 2 and int(b.energy[cell(0, 2)]) == 1
    assert int(b.content[cell(0, 5)]) == C.PICKUP and int(b.content[cell(5, 5)]) == C.EXIT
    assert np.flatnonzero(s.player.owned).tolist() == [C.PUSH, C.WAIT]
    written = to_dict(from_dict(SPEC_EXAMPLE))
    for key, value in SPEC_EXAMPLE.items():
        if key not in ("enemies", "transmissions", "blocks"):
            assert written[key] == value, key


def test_minimal_scenario_is_the_bare_fixture():
    for r, c in [(0, 0), (3, 3), (5, 4)]:
        assert states_equal(from_dict(minimal(r, c)), bare_state(r, c), ignore_history=False)


def test_null_counts_as_missing():
    d = {key: None for key in BASE if key != "player"}
    d["player"] = {"row": 2, "col": 1, **{k: None for k in BASE["player"]
                                          if k not in ("row", "col")}}
    d["enemies"] = [{"type": "daemon", "row": 0, "col": 0, "hp": None, "stunned": None}]
    d["transmissions"] = [{"row": 0, "col": 1, "enemyType": "glitch",
                           "turnsRemaining": None}]
    d["blocks"] = [{"row": 1, "col": 1, "type": "data", "points": None, "spawnCount": None,
                    "programType": None, "hidden": None}]
    d["resources"] = [{"row": 0, "col": 2, "credits": 2, "energy": None,
                       "dataSiphon": None}]
    got = to_dict(from_dict(d))
    assert got["player"] == {"row": 2, "col": 1, "hp": 3, "credits": 0, "energy": 0,
                             "dataSiphons": 0, "attackDamage": 1, "score": 0}
    assert got["enemies"][0]["hp"] == 3 and got["enemies"][0]["stunned"] is False
    assert got["transmissions"][0]["turnsRemaining"] == 1
    assert got["blocks"][0]["points"] == 5 and got["blocks"][0]["spawnCount"] == 5
    assert got["resources"] == [{"row": 0, "col": 2, "credits": 2}]
    assert got["exit"] == [5, 5] and got["stage"] == 1
    assert got["scheduledTaskInterval"] == 12 and got["nextScheduledTaskTurn"] == 12


def test_to_dict_of_the_bare_fixture_writes_every_key():
    assert to_dict(bare_state(3, 3)) == {
        "player": {"row": 3, "col": 3, "hp": 3, "credits": 0, "energy": 0,
                   "dataSiphons": 0, "attackDamage": 1, "score": 0},
        "enemies": [], "transmissions": [], "blocks": [], "resources": [],
        "ownedPrograms": [], "stage": 1, "turn": 0, "showActivated": False,
        "scheduledTasksDisabled": False, "exit": [5, 5], "scheduledTaskInterval": 12,
        "nextScheduledTaskTurn": 12, "pendingSiphonTransmissions": 0, "stepActive": False,
        "atkPlusUses": 0, "won": False, "siphonedCells": [], "siphonCenters": [],
        "undoDepth": 0,
    }


def test_state_shapes_and_dtypes_match_state_py():
    s = from_dict(BASE)
    template = bare_state()
    assert jax.tree.structure(s) == jax.tree.structure(template)
    for got, want in zip(jax.tree.leaves(s), jax.tree.leaves(template)):
        assert isinstance(got, jax.Array)
        assert got.shape == want.shape and got.dtype == want.dtype


def test_block_defaults_and_explicit_zero():
    d = minimal(blocks=[
        {"row": 0, "col": 1, "type": "data"},
        {"row": 0, "col": 2, "type": "data", "points": 3},
        {"row": 0, "col": 3, "type": "data", "points": 3, "spawnCount": 0},
        {"row": 1, "col": 1, "type": "program", "programType": "crash"},
        {"row": 1, "col": 2, "type": "program", "programType": "crash", "spawnCount": 0},
        {"row": 2, "col": 1, "type": "question", "hidden": "data", "points": 4},
        {"row": 2, "col": 2, "type": "question", "hidden": "program", "programType": "row"},
        {"row": 2, "col": 3, "type": "question", "programActionIndex": 9},   # hidden inferred
        {"row": 2, "col": 4, "type": "question"},                            # data, 5 points
    ])
    b = jax.device_get(from_dict(d).board)
    expected = {  # cell: (points, program, question, spawn)
        (0, 1): (5, -1, False, 5), (0, 2): (3, -1, False, 3), (0, 3): (3, -1, False, 0),
        (1, 1): (0, C.CRASH, False, 2), (1, 2): (0, C.CRASH, False, 0),
        (2, 1): (4, -1, True, 4), (2, 2): (0, C.ROW, True, 2), (2, 3): (0, C.POLY, True, 2),
        (2, 4): (5, -1, True, 5),
    }
    for (r, c), want in expected.items():
        i = cell(r, c)
        assert b.content[i] == C.BLOCK
        got = (b.block_points[i], b.block_program[i], b.block_question[i], b.block_spawn[i])
        assert tuple(int(x) for x in got) == tuple(int(x) for x in want), (r, c)
    # non-block cells keep the zero payload of state.py
    others = np.ones(C.NUM_CELLS, bool)
    others[[cell(*rc) for rc in expected]] = False
    others[cell(5, 5)] = False
    assert (b.content[others] == C.EMPTY).all()
    assert (b.block_points[others] == 0).all() and (b.block_program[others] == -1).all()
    assert (~b.block_question[others]).all() and (b.block_spawn[others] == 0).all()


@pytest.mark.parametrize("kind, max_hp", list(zip(C.ENEMY_NAMES, C.ENEMY_MAX_HP.tolist())))
def test_enemy_hp_defaults_to_type_max(kind, max_hp):
    s = from_dict(minimal(enemies=[{"type": kind, "row": 0, "col": 0}]))
    assert int(s.enemies.hp[0]) == max_hp
    assert int(s.enemies.kind[0]) == C.ENEMY_NAMES.index(kind)
    assert bool(s.enemies.alive[0]) and not bool(s.enemies.alive[1])


def test_transmission_timer_defaults_to_one():
    s = from_dict(minimal(transmissions=[{"row": 0, "col": 0, "enemyType": "Cryptog"}]))
    assert int(s.transmissions.timer[0]) == 1
    assert int(s.transmissions.kind[0]) == C.CRYPTOG


def test_entity_lists_keep_order_and_flags():
    d = minimal(
        enemies=[{"type": "DAEMON", "row": 0, "col": 0, "hp": 1, "stunned": True,
                  "disabledTurns": 2},
                 {"type": "glitch", "row": 4, "col": 3, "isFromScheduledTask": True},
                 {"type": "virus", "row": 4, "col": 3, "spawnedFromSiphon": True}],
        transmissions=[{"row": 1, "col": 0, "enemyType": "virus", "turnsRemaining": 9,
                        "spawnedFromSiphon": True},
                       {"row": 1, "col": 0, "enemyType": "glitch",
                        "isFromScheduledTask": True}])
    e = jax.device_get(from_dict(d).enemies)
    assert e.alive.tolist()[:4] == [True, True, True, False]
    assert e.kind.tolist()[:3] == [C.DAEMON, C.GLITCH, C.VIRUS]
    assert e.hp.tolist()[:3] == [1, 2, 2] and e.disabled.tolist()[:3] == [2, 0, 0]
    assert e.stunned.tolist()[:3] == [True, False, False]
    assert e.from_task.tolist()[:3] == [False, True, False]
    assert e.from_siphon.tolist()[:3] == [False, False, True]
    # dead slots are all zeros (compact lists)
    for leaf in jax.tree.leaves(e):
        assert not np.asarray(leaf)[3:].any()
    t = jax.device_get(from_dict(d).transmissions)
    assert t.timer.tolist()[:3] == [9, 1, 0] and t.kind.tolist()[:2] == [C.VIRUS, C.GLITCH]
    assert t.from_siphon.tolist()[:2] == [True, False]
    assert t.from_task.tolist()[:2] == [False, True]


# --------------------------------------------------------------------------- programs


@pytest.mark.parametrize("name", sorted(PROGRAM_IDS))
def test_program_names_and_aliases(name):
    program = PROGRAM_IDS[name]
    for spelling in (name, name.upper(), name.capitalize()):
        s = from_dict(minimal(blocks=[{"row": 0, "col": 1, "type": "program",
                                       "programType": spelling}]))
        assert int(s.board.block_program[1]) == program


def test_aliases_are_the_documented_ones():
    aliases = {"siphplus": "siph+", "siph_plus": "siph+", "dbom": "d_bom", "d_bomb": "d_bom",
               "antiv": "anti-v", "anti_v": "anti-v", "atkplus": "atk+", "atk_plus": "atk+"}
    names = [n.lower() for n in C.PROGRAM_NAMES]
    assert set(PROGRAM_IDS) == set(names) | set(aliases)
    for alias, name in aliases.items():
        assert PROGRAM_IDS[alias] == names.index(name)


def test_program_action_index_names_the_program():
    for program in range(C.NUM_PROGRAMS):
        action = program + C.PROGRAM_ACTION_OFFSET
        alone = from_dict(minimal(blocks=[{"row": 0, "col": 1, "type": "program",
                                           "programActionIndex": action}]))
        both = from_dict(minimal(blocks=[{"row": 0, "col": 1, "type": "program",
                                          "programActionIndex": action,
                                          "programType": C.PROGRAM_NAMES[program]}]))
        assert int(alone.board.block_program[1]) == program
        assert states_equal(alone, both)


def test_owned_programs():
    s = from_dict(minimal(ownedPrograms=[27, 5, 10, 10]))
    owned = np.zeros(C.NUM_PROGRAMS, bool)
    owned[[0, 5, 22]] = True
    assert np.array_equal(np.asarray(s.player.owned), owned)
    assert to_dict(s)["ownedPrograms"] == [5, 10, 27]


# What the original game's parity-test protocol sends to setState: every field of its
# test dataclasses, filled with their defaults where a test does not set one. A program
# block carries `"points": 0` (and `"spawnCount": 0` unless set); a data block carries
# no program keys; a resource carries all three amounts.
ORIGINAL_PROTOCOL = {
    "player": {"row": 3, "col": 3, "hp": 3, "credits": 0, "energy": 2, "dataSiphons": 1,
               "attackDamage": 1, "score": 0},
    "enemies": [{"type": "virus", "row": 4, "col": 3, "hp": 2, "stunned": False,
                 "spawnedFromSiphon": False, "isFromScheduledTask": False}],
    "transmissions": [{"row": 0, "col": 0, "turnsRemaining": 3, "enemyType": "cryptog"}],
    "blocks": [{"row": 1, "col": 1, "type": "data", "points": 4, "spawnCount": 4,
                "siphoned": False},
               {"row": 2, "col": 2, "type": "program", "points": 0, "spawnCount": 2,
                "siphoned": False, "programType": "push", "programActionIndex": 5},
               {"row": 2, "col": 4, "type": "program", "points": 0, "spawnCount": 0,
                "siphoned": True, "programType": "atk+", "programActionIndex": 26}],
    "resources": [{"row": 0, "col": 5, "credits": 0, "energy": 0, "dataSiphon": True},
                  {"row": 1, "col": 2, "credits": 2, "energy": 0, "dataSiphon": False}],
    "ownedPrograms": [5],
    "stage": 1, "turn": 0, "showActivated": False, "scheduledTasksDisabled": False,
}


def test_the_original_protocol_is_accepted():
    s = jax.device_get(from_dict(ORIGINAL_PROTOCOL))
    b = s.board
    push, atk = cell(2, 2), cell(2, 4)
    assert (int(b.block_points[cell(1, 1)]), int(b.block_spawn[cell(1, 1)])) == (4, 4)
    assert (int(b.block_program[push]), int(b.block_points[push]),
            int(b.block_spawn[push])) == (C.PUSH, 0, 2)
    assert (int(b.block_program[atk]), int(b.block_spawn[atk]), bool(b.siphoned[atk])) == (
        C.ATK_PLUS, 0, True)
    assert int(b.content[cell(0, 5)]) == C.PICKUP and int(b.credits[cell(1, 2)]) == 2
    # `"points": 0` on a program block means what leaving it out means.
    without = copy.deepcopy(ORIGINAL_PROTOCOL)
    for block in without["blocks"][1:]:
        del block["points"]
    assert states_equal(from_dict(ORIGINAL_PROTOCOL), from_dict(without))


def test_zero_points_on_a_hidden_program_is_accepted():
    with_zero = minimal(blocks=[{"row": 0, "col": 1, "type": "question", "hidden": "program",
                                 "programType": "row", "points": 0}])
    without = minimal(blocks=[{"row": 0, "col": 1, "type": "question", "hidden": "program",
                               "programType": "row"}])
    assert states_equal(from_dict(with_zero), from_dict(without))


# --------------------------------------------------------------------------- cells


def test_pickup_with_resource_is_two_entries():
    two = minimal(resources=[{"row": 0, "col": 5, "dataSiphon": True},
                             {"row": 0, "col": 5, "energy": 2}])
    one = minimal(resources=[{"row": 0, "col": 5, "dataSiphon": True, "energy": 2}])
    reversed_two = minimal(resources=list(reversed(two["resources"])))
    s = from_dict(two)
    assert int(s.board.content[5]) == C.PICKUP and int(s.board.energy[5]) == 2
    assert int(s.board.credits[5]) == 0
    assert states_equal(s, from_dict(one)) and states_equal(s, from_dict(reversed_two))
    assert to_dict(s)["resources"] == [{"row": 0, "col": 5, "dataSiphon": True},
                                       {"row": 0, "col": 5, "energy": 2}]


def test_resource_entries_that_agree_or_are_empty():
    d = minimal(resources=[{"row": 1, "col": 1, "credits": 3},
                           {"row": 1, "col": 1, "credits": 3},
                           {"row": 1, "col": 1, "credits": 0, "energy": 0},
                           {"row": 2, "col": 2, "credits": 0, "dataSiphon": False},
                           {"row": 4, "col": 4, "dataSiphon": True},
                           {"row": 4, "col": 4, "dataSiphon": True}])
    d2 = to_dict(from_dict(d))
    assert d2["resources"] == [{"row": 1, "col": 1, "credits": 3},
                               {"row": 4, "col": 4, "dataSiphon": True}]


def test_resources_may_lie_on_block_and_exit_cells():
    # Only pickups are excluded there (resources are drawn, but never shown on blocks).
    d = minimal(blocks=[{"row": 1, "col": 1, "type": "data"}],
                resources=[{"row": 1, "col": 1, "credits": 1},
                           {"row": 5, "col": 5, "energy": 2}])
    b = from_dict(d).board
    assert int(b.credits[cell(1, 1)]) == 1 and int(b.energy[cell(5, 5)]) == 2
    assert int(b.content[cell(1, 1)]) == C.BLOCK and int(b.content[cell(5, 5)]) == C.EXIT


def test_siphoned_flags_and_centers():
    d = minimal(blocks=[{"row": 4, "col": 3, "type": "data", "siphoned": True,
                         "spawnCount": 0},
                        {"row": 2, "col": 3, "type": "data", "siphoned": False}],
                siphonedCells=[[3, 3], [3, 2], [3, 2]], siphonCenters=[[3, 3]])
    b = jax.device_get(from_dict(d).board)
    assert set(np.flatnonzero(b.siphoned)) == {cell(4, 3), cell(3, 3), cell(3, 2)}
    assert set(np.flatnonzero(b.siphon_center)) == {cell(3, 3)}
    d2 = to_dict(from_dict(d))
    assert d2["siphonedCells"] == [[3, 2], [3, 3]]
    assert d2["siphonCenters"] == [[3, 3]]
    assert [blk["siphoned"] for blk in d2["blocks"]] == [False, True]


def test_exit_key_places_the_exit():
    s = from_dict(minimal(exit=[0, 5]))
    content = np.asarray(s.board.content)
    assert np.flatnonzero(content == C.EXIT).tolist() == [5]
    assert to_dict(s)["exit"] == [0, 5]
    # any on-board cell is accepted, as are states the rules reach
    from_dict(minimal(exit=[2, 3]))


def test_reachable_oddities_are_valid():
    # player on a block (WARP), on a pickup, on the exit (victory); stacked enemies
    # and enemies on blocks (PUSH/PULL, glitches).
    from_dict(minimal(1, 1, blocks=[{"row": 1, "col": 1, "type": "data"}],
                      enemies=[{"type": "glitch", "row": 1, "col": 1}]))
    from_dict(minimal(0, 5, resources=[{"row": 0, "col": 5, "dataSiphon": True}]))
    from_dict(minimal(5, 5, won=True, stage=8))
    from_dict(minimal(enemies=[{"type": "virus", "row": 2, "col": 2},
                               {"type": "daemon", "row": 2, "col": 2}],
                      blocks=[{"row": 2, "col": 2, "type": "program", "programType": "wait"}]))


def test_undo_depth_is_written_but_not_read():
    s = from_dict(BASE)
    deep = eqx.tree_at(lambda x: x.history.depth, s, jnp.asarray(3, jnp.int32))
    d = to_dict(deep)
    assert d["undoDepth"] == 3
    back = from_dict(d)
    assert int(back.history.depth) == 0
    assert states_equal(back, deep)
    assert not states_equal(back, deep, ignore_history=False)
    assert states_equal(back, s, ignore_history=False)


def test_from_dict_does_not_mutate_its_input():
    d = copy.deepcopy(BASE)
    from_dict(d)
    assert d == BASE


def test_states_equal_sees_dtype_and_value_differences():
    s = bare_state(3, 3)
    assert states_equal(s, bare_state(3, 3))
    assert not states_equal(s, bare_state(3, 4))
    widened = eqx.tree_at(lambda x: x.board.credits, s, s.board.credits.astype(jnp.int32))
    assert not states_equal(s, widened)


# --------------------------------------------------------------------------- bad input


def _set(path, value):
    """A mutation of BASE: set `path` (keys and list indices) to `value`."""
    def apply(d):
        target = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return apply


def _delete(path):
    def apply(d):
        target = d
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return apply


def _append(key, entry):
    return lambda d: d[key].append(entry)


def _many(key, n, entry):
    return lambda d: d.__setitem__(key, [dict(entry) for _ in range(n)])


P, E, T, B, R = "player", "enemies", "transmissions", "blocks", "resources"
BIG = 2**31

BAD_INPUT = {
    # unknown keys, at every level
    "unknown top key": (_set(["colour"], "red"), "colour", "'red'"),
    "unknown player key": (_set([P, "mana"], 3), "mana", "3"),
    "unknown enemy key": (_set([E, 0, "speed"], 9), "speed", "9"),
    "unknown transmission key": (_set([T, 0, "timer"], 2), "timer", "2"),
    "unknown block key": (_set([B, 0, "color"], "blue"), "color", "'blue'"),
    "unknown resource key": (_set([R, 0, "gold"], 1), "gold", "1"),
    # positions off the board
    "player row": (_set([P, "row"], 6), "player.row", "6"),
    "player col": (_set([P, "col"], -1), "player.col", "-1"),
    "enemy row": (_set([E, 0, "row"], 9), "enemies[0].row", "9"),
    "transmission col": (_set([T, 0, "col"], 6), "transmissions[0].col", "6"),
    "block row": (_set([B, 0, "row"], -1), "blocks[0].row", "-1"),
    "resource col": (_set([R, 0, "col"], 7), "resources[0].col", "7"),
    "exit off board": (_set(["exit"], [6, 0]), "exit", "[6, 0]"),
    "exit malformed": (_set(["exit"], "5,5"), "exit", "'5,5'"),
    "exit one number": (_set(["exit"], [5]), "exit", "[5]"),
    "siphoned cell off board": (_set(["siphonedCells"], [[0, 6]]), "siphonedCells", "[0, 6]"),
    "siphon center off board": (_set(["siphonCenters"], [[-1, 0]]), "siphonCenters",
                                "[-1, 0]"),
    # names
    "unknown enemy type": (_set([E, 0, "type"], "dragon"), "type", "'dragon'"),
    "unknown transmission type": (_set([T, 0, "enemyType"], "worm"), "enemyType", "'worm'"),
    "unknown program": (_set([B, 1, "programType"], "laser"), "programType", "'laser'"),
    "unknown block type": (_set([B, 0, "type"], "wall"), "type", "'wall'"),
    "unknown hidden kind": (_set([B, 2, "hidden"], "gold"), "hidden", "'gold'"),
    "program index disagrees": (_set([B, 1, "programActionIndex"], 6), "programActionIndex",
                                "6"),
    "program action index low": (_set([B, 1, "programActionIndex"], 4), "programActionIndex",
                                 "4"),
    "program action index high": (_set([B, 1, "programActionIndex"], 28),
                                  "programActionIndex", "28"),
    "owned program low": (_set(["ownedPrograms"], [4]), "ownedPrograms", "4"),
    "owned program high": (_set(["ownedPrograms"], [5, 28]), "ownedPrograms", "28"),
    "owned program name": (_set(["ownedPrograms"], ["push"]), "ownedPrograms", "'push'"),
    "owned program bool": (_set(["ownedPrograms"], [True]), "ownedPrograms", "True"),
    # hp
    "player hp 0": (_set([P, "hp"], 0), "hp", "0"),
    "player hp 4": (_set([P, "hp"], 4), "hp", "4"),
    "virus hp 3": (_set([E, 0, "hp"], 3), "hp", "3"),
    "enemy hp 0": (_set([E, 0, "hp"], 0), "hp", "0"),
    "daemon hp 4": (_append(E, {"type": "daemon", "row": 0, "col": 0, "hp": 4}), "hp", "4"),
    # counters
    "negative credits": (_set([P, "credits"], -1), "credits", "-1"),
    "negative energy": (_set([P, "energy"], -2), "energy", "-2"),
    "negative siphons": (_set([P, "dataSiphons"], -1), "dataSiphons", "-1"),
    "negative score": (_set([P, "score"], -5), "score", "-5"),
    "attack 0": (_set([P, "attackDamage"], 0), "attackDamage", "0"),
    "negative turn": (_set(["turn"], -1), "turn", "-1"),
    "negative pending": (_set(["pendingSiphonTransmissions"], -1),
                         "pendingSiphonTransmissions", "-1"),
    "negative next task": (_set(["nextScheduledTaskTurn"], -3), "nextScheduledTaskTurn",
                           "-3"),
    "negative interval": (_set(["scheduledTaskInterval"], -1), "scheduledTaskInterval",
                          "-1"),
    "negative atk uses": (_set(["atkPlusUses"], -1), "atkPlusUses", "-1"),
    "negative undo depth": (_set(["undoDepth"], -1), "undoDepth", "-1"),
    "negative disabled": (_set([E, 0, "disabledTurns"], -1), "disabledTurns", "-1"),
    "timer 0": (_set([T, 0, "turnsRemaining"], 0), "turnsRemaining", "0"),
    "negative points": (_set([B, 0, "points"], -1), "points", "-1"),
    "negative spawn": (_set([B, 1, "spawnCount"], -1), "spawnCount", "-1"),
    "negative resource": (_set([R, 0, "credits"], -2), "credits", "-2"),
    "stage 0": (_set(["stage"], 0), "stage", "0"),
    "stage 9": (_set(["stage"], 9), "stage", "9"),
    # values that do not fit the dtype
    "points 128": (_set([B, 0, "points"], 128), "points", "128"),
    "spawn 200": (_set([B, 0, "spawnCount"], 200), "spawnCount", "200"),
    "cell credits 128": (_set([R, 0, "credits"], 128), "credits", "128"),
    "disabled 128": (_set([E, 0, "disabledTurns"], 128), "disabledTurns", "128"),
    "player credits 2**31": (_set([P, "credits"], BIG), "credits", str(BIG)),
    "timer 2**31": (_set([T, 0, "turnsRemaining"], BIG), "turnsRemaining", str(BIG)),
    "turn 2**31": (_set(["turn"], BIG), "turn", str(BIG)),
    # block and pickup placement
    "two blocks on a cell": (_append(B, {"row": 4, "col": 3, "type": "data"}), "blocks[3]",
                             "(4, 3)"),
    "block on the exit": (_append(B, {"row": 5, "col": 5, "type": "data"}), "blocks[3]",
                          "exit"),
    "block on a moved exit": (_set(["exit"], [2, 2]), "blocks[1]", "exit"),
    "pickup on a block": (_append(R, {"row": 4, "col": 3, "dataSiphon": True}), "dataSiphon",
                          "(4, 3)"),
    "pickup on the exit": (_append(R, {"row": 5, "col": 5, "dataSiphon": True}), "dataSiphon",
                           "(5, 5)"),
    "two resources on a cell": (_append(R, {"row": 0, "col": 1, "energy": 2}), "resources[3]",
                                "energy 2"),
    "two amounts on a cell": (_append(R, {"row": 0, "col": 1, "credits": 3}), "resources[3]",
                              "credits 3"),
    "credits and energy in one entry": (_append(R, {"row": 3, "col": 0, "credits": 1,
                                                    "energy": 1}), "resources[3]", "energy 1"),
    "siphoned cell holds a block": (_set(["siphonedCells"], [[4, 3]]), "siphonedCells",
                                    "[4, 3]"),
    # capacity
    "too many enemies": (_many(E, C.MAX_ENEMIES + 1, {"type": "virus", "row": 0, "col": 0}),
                         "enemies", str(C.MAX_ENEMIES + 1)),
    "too many transmissions": (_many(T, C.MAX_TRANSMISSIONS + 1,
                                     {"row": 0, "col": 0, "enemyType": "virus"}),
                               "transmissions", str(C.MAX_TRANSMISSIONS + 1)),
    # types
    "row as string": (_set([P, "row"], "3"), "row", "'3'"),
    "credits as float": (_set([P, "credits"], 1.0), "credits", "1.0"),
    "hp as bool": (_set([P, "hp"], True), "hp", "True"),
    "stunned as int": (_set([E, 0, "stunned"], 1), "stunned", "1"),
    "show as string": (_set(["showActivated"], "yes"), "showActivated", "'yes'"),
    "won as int": (_set(["won"], 0), "won", "0"),
    "enemy type as int": (_set([E, 0, "type"], 3), "type", "3"),
    "program type as int": (_set([B, 1, "programType"], 0), "programType", "0"),
    "enemies as object": (_set([E], {}), "enemies", "{}"),
    "player as list": (_set([P], [3, 3]), "player", "[3, 3]"),
    "block as list": (_set([B, 0], [4, 3]), "blocks[0]", "[4, 3]"),
    "siphonedCells entry as object": (_set(["siphonedCells"], [{"row": 1, "col": 1}]),
                                      "siphonedCells", "'row'"),
    # required keys
    "missing player": (_delete([P]), "player", None),
    "missing player row": (_delete([P, "row"]), "row", None),
    "missing enemy type": (_delete([E, 0, "type"]), "type", None),
    "missing enemy col": (_delete([E, 0, "col"]), "col", None),
    "missing transmission type": (_delete([T, 0, "enemyType"]), "enemyType", None),
    "missing block type": (_delete([B, 0, "type"]), "type", None),
    "missing resource row": (_delete([R, 0, "row"]), "row", None),
    "program block without program": (_set([B, 1], {"row": 2, "col": 2, "type": "program"}),
                                      "programType", None),
    # payload keys of the wrong block kind
    "data block naming a program": (_set([B, 0, "programType"], "push"), "programType",
                                    "'push'"),
    "program block with points": (_set([B, 1, "points"], 3), "points", "3"),
    "program block with points false": (_set([B, 1, "points"], False), "points", "False"),
    "program block with points 0.0": (_set([B, 1, "points"], 0.0), "points", "0.0"),
    "hidden program with points": (_set([B, 2], {"row": 1, "col": 4, "type": "question",
                                                 "hidden": "program", "programType": "row",
                                                 "points": 2}), "blocks[2].points", "2"),
    "hidden on a visible block": (_set([B, 0, "hidden"], "data"), "hidden", "'data'"),
    "hidden data naming a program": (_set([B, 2, "programActionIndex"], 5),
                                     "programActionIndex", "5"),
}


def test_base_scenario_is_valid():
    from_dict(BASE)


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_raises_value_error_naming_the_key(case):
    mutate, key, value = BAD_INPUT[case]
    d = copy.deepcopy(BASE)
    mutate(d)
    with pytest.raises(ValueError) as info:
        from_dict(d)
    message = str(info.value)
    assert key in message, message
    if value is not None:
        assert value in message, message


def test_scenario_must_be_an_object():
    with pytest.raises(ValueError, match="scenario"):
        from_dict([BASE])


# --------------------------------------------------------------------------- round trip


def _maybe(draw, entry, key, strategy):
    """Add `key` to `entry` half the time, so defaults get exercised too."""
    if draw(st.booleans()):
        entry[key] = draw(strategy)


@st.composite
def scenarios(draw):
    """Valid scenario dicts, with optional keys present or missing at random."""
    exit_cell = draw(st.sampled_from(ALL_CELLS))
    d = {"player": {"row": draw(st.integers(0, 5)), "col": draw(st.integers(0, 5))}}
    player = d["player"]
    _maybe(draw, player, "hp", st.integers(1, 3))
    for key in ("credits", "energy", "dataSiphons", "score"):
        _maybe(draw, player, key, st.integers(0, 200))
    _maybe(draw, player, "attackDamage", st.integers(1, 9))
    if exit_cell != (5, 5) or draw(st.booleans()):
        d["exit"] = list(exit_cell)

    free = [rc for rc in ALL_CELLS if rc != exit_cell]
    block_cells = draw(st.lists(st.sampled_from(free), unique=True, max_size=12))
    blocks = []
    for r, c in block_cells:
        kind = draw(st.sampled_from(["data", "program", "question"]))
        block = {"row": r, "col": c, "type": draw(st.sampled_from([kind, kind.upper()]))}
        payload = kind
        if kind == "question":
            payload = draw(st.sampled_from(["data", "program"]))
            block["hidden"] = payload
        if payload == "data":
            _maybe(draw, block, "points", st.integers(0, 9))
        else:
            program = draw(st.integers(0, C.NUM_PROGRAMS - 1))
            how = draw(st.sampled_from(["name", "index", "both"]))
            if how != "index":
                block["programType"] = C.PROGRAM_NAMES[program]
            if how != "name":
                block["programActionIndex"] = program + C.PROGRAM_ACTION_OFFSET
        _maybe(draw, block, "spawnCount", st.integers(0, 9))
        _maybe(draw, block, "siphoned", st.booleans())
        blocks.append(block)
    d["blocks"] = blocks

    resources = []
    open_cells = [rc for rc in free if rc not in set(block_cells)]
    for r, c in draw(st.lists(st.sampled_from(open_cells), unique=True, max_size=4)):
        resources.append({"row": r, "col": c, "dataSiphon": True})
    for r, c in draw(st.lists(st.sampled_from(ALL_CELLS), unique=True, max_size=10)):
        kind = draw(st.sampled_from(["credits", "energy"]))
        resources.append({"row": r, "col": c, kind: draw(st.integers(1, 3))})
    d["resources"] = draw(st.permutations(resources))

    enemies = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, C.NUM_ENEMY_TYPES - 1))
        r, c = draw(st.sampled_from(ALL_CELLS))
        enemy = {"type": C.ENEMY_NAMES[kind], "row": r, "col": c}
        _maybe(draw, enemy, "hp", st.integers(1, int(C.ENEMY_MAX_HP[kind])))
        for key in ("stunned", "spawnedFromSiphon", "isFromScheduledTask"):
            _maybe(draw, enemy, key, st.booleans())
        _maybe(draw, enemy, "disabledTurns", st.integers(0, 2))
        enemies.append(enemy)
    d["enemies"] = enemies

    transmissions = []
    for _ in range(draw(st.integers(0, 6))):
        r, c = draw(st.sampled_from(ALL_CELLS))
        t = {"row": r, "col": c, "enemyType": draw(st.sampled_from(C.ENEMY_NAMES))}
        _maybe(draw, t, "turnsRemaining", st.integers(1, 10))
        for key in ("spawnedFromSiphon", "isFromScheduledTask"):
            _maybe(draw, t, key, st.booleans())
        transmissions.append(t)
    d["transmissions"] = transmissions

    d["ownedPrograms"] = draw(st.lists(
        st.integers(C.PROGRAM_ACTION_OFFSET, C.PROGRAM_ACTION_OFFSET + C.NUM_PROGRAMS - 1),
        unique=True))
    siphonable = [rc for rc in ALL_CELLS if rc not in set(block_cells)]
    d["siphonedCells"] = [list(rc) for rc in draw(
        st.lists(st.sampled_from(siphonable), unique=True, max_size=6))]
    d["siphonCenters"] = [list(rc) for rc in draw(
        st.lists(st.sampled_from(ALL_CELLS), unique=True, max_size=3))]
    _maybe(draw, d, "stage", st.integers(1, C.NUM_STAGES))
    for key in ("turn", "scheduledTaskInterval", "nextScheduledTaskTurn",
                "pendingSiphonTransmissions", "atkPlusUses"):
        _maybe(draw, d, key, st.integers(0, 30))
    for key in ("showActivated", "scheduledTasksDisabled", "stepActive", "won"):
        _maybe(draw, d, key, st.booleans())
    _maybe(draw, d, "undoDepth", st.integers(0, 8))
    return d


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_round_trip(d):
    s = from_dict(d)
    written = to_dict(s)
    assert json.loads(json.dumps(written)) == written
    again = from_dict(written)
    assert states_equal(again, s, ignore_history=False)
    assert to_dict(again) == written
    # the meaning survived: entity lists in order, blocks and resources sorted by cell
    assert [(e["row"], e["col"], e["type"]) for e in written["enemies"]] == [
        (e["row"], e["col"], e["type"]) for e in d["enemies"]]
    assert [(t["row"], t["col"], t["enemyType"]) for t in written["transmissions"]] == [
        (t["row"], t["col"], t["enemyType"]) for t in d["transmissions"]]
    assert sorted((b["row"], b["col"]) for b in d["blocks"]) == [
        (b["row"], b["col"]) for b in written["blocks"]]
    resource_cells = [(r["row"], r["col"]) for r in written["resources"]]
    assert resource_cells == sorted(resource_cells)
    assert written["exit"] == d.get("exit", [5, 5])


def test_round_trip_at_capacity_and_extremes():
    big = 2**31 - 1
    d = {
        "player": {"row": 0, "col": 0, "credits": big, "energy": big, "dataSiphons": big,
                   "attackDamage": big, "score": big},
        "enemies": [{"type": C.ENEMY_NAMES[i % 4], "row": i // 6, "col": i % 6,
                     "disabledTurns": 127} for i in range(C.MAX_ENEMIES)],
        "transmissions": [{"row": 5 - i // 6, "col": i % 6, "enemyType": "glitch",
                           "turnsRemaining": big} for i in range(C.MAX_TRANSMISSIONS)],
        "blocks": [{"row": 2, "col": 2, "type": "data", "points": 127, "spawnCount": 127}],
        "resources": [{"row": 1, "col": 1, "credits": 127}],
        "ownedPrograms": list(range(5, 28)), "stage": 8, "turn": big,
        "nextScheduledTaskTurn": big, "scheduledTaskInterval": big,
        "pendingSiphonTransmissions": big, "atkPlusUses": big,
    }
    s = from_dict(d)
    written = to_dict(s)
    assert states_equal(from_dict(written), s)
    assert len(written["enemies"]) == C.MAX_ENEMIES
    assert bool(np.asarray(s.enemies.alive).all())


# --------------------------------------------------------------------------- render

RENDER_SCENARIO = {
    "player": {"row": 3, "col": 3, "hp": 2, "credits": 4, "energy": 7, "dataSiphons": 1},
    "enemies": [{"type": "virus", "row": 5, "col": 3, "hp": 1, "stunned": True},
                {"type": "cryptog", "row": 0, "col": 0},       # hidden from the agent
                {"type": "cryptog", "row": 3, "col": 0},       # in the player's row
                {"type": "daemon", "row": 4, "col": 4}],
    "transmissions": [{"row": 1, "col": 1, "turnsRemaining": 2, "enemyType": "daemon"}],
    "blocks": [{"row": 4, "col": 3, "type": "data", "points": 5, "siphoned": True,
                "spawnCount": 0},
               {"row": 2, "col": 2, "type": "program", "programType": "push"},
               {"row": 4, "col": 4, "type": "question", "hidden": "data", "points": 7}],
    "resources": [{"row": 0, "col": 1, "credits": 2}, {"row": 0, "col": 5, "dataSiphon": True},
                  {"row": 0, "col": 5, "energy": 3}],
    "ownedPrograms": [5, 27], "stage": 3, "turn": 4, "scheduledTasksDisabled": True,
    "siphonedCells": [[3, 3]], "siphonCenters": [[3, 3]],
}


def _cell_text(lines, r, c):
    line, col = cell_origin(r, c)
    return lines[line][col:col + CELL_WIDTH], lines[line + 1][col:col + CELL_WIDTH]


def test_render_layout_is_pinned():
    lines = render(bare_state(3, 3)).splitlines()
    # row 5 is at the top; cell (r, c) starts at line 2 + 3 (5 - r), column 3 + 12 c
    assert cell_origin(3, 3) == (8, 39) and cell_origin(5, 5) == (2, 63)
    assert lines[8][39] == "@"
    assert lines[3][63:67] == "EXIT"
    assert lines[8][:3] == "3 |" and lines[2][:3] == "5 |"
    assert lines[1] == "  +" + ("-" * CELL_WIDTH + "+") * 6


def test_render_shows_every_glyph():
    text = render(from_dict(RENDER_SCENARIO))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 79
    assert _cell_text(lines, 3, 3) == ("@         *", "          ~")
    assert _cell_text(lines, 5, 3)[0].rstrip() == "V1z"
    assert _cell_text(lines, 0, 0)[0].rstrip() == "(C2)"
    assert _cell_text(lines, 3, 0)[0].rstrip() == "C2"
    assert _cell_text(lines, 1, 1)[0].rstrip() == "Td2"
    assert _cell_text(lines, 4, 3)[1] == "#5/0      ~"
    assert _cell_text(lines, 2, 2)[1].rstrip() == "#push/2"
    assert _cell_text(lines, 4, 4) == ("D3".ljust(CELL_WIDTH), "#?7/7".ljust(CELL_WIDTH))
    assert _cell_text(lines, 0, 1)[1].rstrip() == "c2"
    assert _cell_text(lines, 0, 5)[1].rstrip() == "[S] e3"
    assert _cell_text(lines, 5, 5)[1].rstrip() == "EXIT"
    stats = "\n".join(lines[20:])
    for part in ("stage 3/8", "turn 4", "hp 2/3", "credits 4", "energy 7", "siphons 1",
                 "attack 1", "score 0", "next task 12", "pending 0", "flags CALM",
                 "programs push hack"):
        assert part in stats, part
    assert render(from_dict(RENDER_SCENARIO)) == text


def test_render_show_reveals_cryptogs_and_legend_is_optional():
    shown = from_dict({**RENDER_SCENARIO, "showActivated": True})
    lines = render(shown, legend=False).splitlines()
    assert _cell_text(lines, 0, 0)[0].rstrip() == "C2"
    assert "flags SHOW CALM" in lines[-2]
    assert len(render(shown).splitlines()) > len(lines)


def test_render_crowded_cell_is_cut_short():
    d = minimal(enemies=[{"type": "virus", "row": 0, "col": 0} for _ in range(5)])
    lines = render(from_dict(d)).splitlines()
    top = _cell_text(lines, 0, 0)[0]
    assert len(top) == CELL_WIDTH and top[CELL_WIDTH - 2] == "+"
