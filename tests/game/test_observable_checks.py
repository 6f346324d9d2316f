"""The 54 observable checks of docs/rules.md §19, one test each (a/b/c where a check
has independent parts).

Every scenario starts from the bare fixture F(r, c) (conftest `scenario`), adds what
the check lists, runs the jitted engine and compares with the exact values §19 gives.
Rewards are float32 sums, compared with a 1e-4 tolerance. Where the outcome depends on
the PRNG key (stage generation, transmission placement, activation order, POLY), the
check runs under several keys and asserts only what the rules guarantee.
"""

import types

import numpy as np
import pytest

import hm.game as game

KEYS = range(8)
ROWS = COLS = 6
CORNERS = {(0, 0), (0, 5), (5, 0), (5, 5)}
DIRECTION_DELTAS = ((1, 0), (-1, 0), (0, -1), (0, 1))
UP, DOWN, LEFT, RIGHT, SIPHON = 0, 1, 2, 3, 4

# §15.3 grid channels, spelled out from the spec (not read from the engine's constants).
GRID_CHANNELS = 42
CH_VIRUS, CH_DAEMON, CH_GLITCH, CH_CRYPTOG = 0, 1, 2, 3
CH_ENEMY_HP, CH_ENEMY_STUNNED, CH_ENEMY_FROM_SIPHON = 4, 5, 6
CH_BLOCK_DATA, CH_BLOCK_PROGRAM, CH_BLOCK_QUESTION, CH_BLOCK_POINTS = 7, 8, 9, 10
CH_BLOCK_SIPHONED, CH_PROGRAM_ID, CH_BLOCK_SPAWN = 11, 12, 35  # 12 + program id
CH_TRANSMISSION, CH_CREDITS, CH_ENERGY = 36, 37, 38
CH_PICKUP, CH_EXIT, CH_SIPHON_CENTER = 39, 40, 41


@pytest.fixture(scope="module")
def g(step, legal_actions, observe, scenario, hmx):
    """Engine functions and helpers in one namespace: g.step, g.legal, g.observe,
    g.scenario, g.virus(...), g.enemy_at(d, r, c), g.assert_reward(...), ..."""
    ns = types.SimpleNamespace(**vars(hmx))
    ns.step = step
    ns.legal = legal_actions
    ns.observe = observe
    ns.scenario = scenario
    return ns


def start(d):
    return game.from_dict(d)


def td(state):
    return game.to_dict(state)


def grid(obs):
    return np.asarray(obs.grid)


def pvec(obs):
    return np.asarray(obs.player)


def legal_set(g, state):
    return set(np.flatnonzero(g.legal(state)).tolist())


def cells(entries):
    return [(e["row"], e["col"]) for e in entries]


def expected_channels(values):
    """A 42-channel vector with the given {channel: value}, zeros elsewhere."""
    v = np.zeros(GRID_CHANNELS, np.float32)
    for ch, x in values.items():
        v[ch] = x
    return v


def assert_cell_channels(obs, r, c, expected, what=""):
    np.testing.assert_allclose(grid(obs)[r, c], expected, atol=1e-6,
                               err_msg=f"observation channels at {(r, c)} {what}")


# ============================================================ movement, masks, line of fire

def test_01_step_toward_exit(g):
    s, obs, r, done, info = g.step(start(g.scenario(3, 3)), UP)
    d = td(s)
    assert g.player_cell(d) == (4, 3)
    assert d["turn"] == 1
    assert not bool(done)
    g.assert_reward(r, 0.04, info)  # distance 4 -> 3


def test_02_step_away_not_penalised(g):
    s, obs, r, done, info = g.step(start(g.scenario(3, 3)), DOWN)
    assert g.player_cell(td(s)) == (2, 3)
    g.assert_reward(r, -0.01, info)


def test_03_corner_mask(g):
    assert legal_set(g, start(g.scenario(0, 0))) == {UP, RIGHT}


def _check4(g):
    return g.scenario(3, 3, blocks=[g.data_block(4, 3, 5, 5)])


def test_04_block_makes_move_illegal(g):
    mask = g.legal(start(_check4(g)))
    assert not mask[UP]
    assert mask[DOWN] and mask[LEFT] and mask[RIGHT]


def test_04b_illegal_action_submitted(g):
    """§5: an illegal action leaves the state unchanged, rewards 0.0, ends the episode."""
    s0 = start(_check4(g))
    s1, obs, r, done, info = g.step(s0, UP)
    assert float(r) == 0.0
    assert bool(done)
    assert bool(info["illegal"])
    assert td(s1) == td(s0)


def test_05_attack_enemy_on_block(g):
    d0 = g.scenario(3, 3, blocks=[g.data_block(4, 3, 5, 5)], enemies=[g.glitch(4, 3, hp=2)])
    s0 = start(d0)
    assert g.legal(s0)[UP]
    s, obs, r, done, info = g.step(s0, UP)
    d = td(s)
    assert g.player_cell(d) == (3, 3)
    e = g.enemy_at(d, 4, 3)
    assert e is not None and e["type"] == "glitch" and e["hp"] == 1
    assert len(d["enemies"]) == 1
    assert not e["stunned"]  # stun cleared at the end of the phase
    assert grid(obs)[4, 3, CH_ENEMY_STUNNED] == 0.0
    assert d["player"]["hp"] == 3  # stunned during the phase: it did not attack
    g.assert_reward(r, -0.01, info)


def test_06_line_of_fire_kill_at_range(g):
    d0 = g.scenario(0, 3, enemies=[g.virus(5, 3, hp=1)])
    s, obs, r, done, info = g.step(start(d0), UP)
    d = td(s)
    assert d["enemies"] == []
    assert g.player_cell(d) == (0, 3)
    g.assert_reward(r, 0.29, info)


def test_07_block_stops_line_of_fire(g):
    d0 = g.scenario(0, 3, blocks=[g.data_block(2, 3, 5)], enemies=[g.virus(5, 3, hp=2)])
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), UP, key)
        d = td(s)
        assert g.player_cell(d) == (1, 3)
        assert len(d["enemies"]) == 1
        e = d["enemies"][0]
        assert e["hp"] == 2, "virus must not be damaged through the block"
        assert (e["row"], e["col"]) == (3, 3), "virus moves down, then down"
        g.assert_reward(r, 0.04, info)


def test_08_shoot_transmission(g):
    d0 = g.scenario(3, 3, transmissions=[g.transmission(5, 3, 3)])
    s, obs, r, done, info = g.step(start(d0), UP)
    d = td(s)
    assert d["transmissions"] == []
    assert g.player_cell(d) == (3, 3)
    g.assert_reward(r, 0.29, info)


def test_09_shoot_task_transmission_no_kill_credit(g):
    d0 = g.scenario(3, 3, transmissions=[g.transmission(5, 3, 3, from_task=True)])
    s, obs, r, done, info = g.step(start(d0), UP)
    d = td(s)
    assert d["transmissions"] == []
    assert g.player_cell(d) == (3, 3)
    g.assert_reward(r, -0.01, info)


def test_10_collect_pickup_by_walking(g):
    d0 = g.scenario(3, 3, resources=[g.pickup_at(4, 3)])
    s, obs, r, done, info = g.step(start(d0), UP)
    d = td(s)
    assert g.player_cell(d) == (4, 3)
    assert d["player"]["dataSiphons"] == 1
    assert grid(obs)[4, 3, CH_PICKUP] == 0.0
    assert (4, 3) not in g.pickup_cells(d)
    g.assert_reward(r, 1.04, info)


def test_11_walking_does_not_collect_resources(g):
    d0 = g.scenario(3, 3, resources=[g.credits_at(4, 3, 2)])
    s, obs, r, done, info = g.step(start(d0), UP)
    d = td(s)
    assert g.player_cell(d) == (4, 3)
    assert d["player"]["credits"] == 0
    g.assert_close(grid(obs)[4, 3, CH_CREDITS], 2 / 3, "channel 37 at (4,3)")
    g.assert_reward(r, 0.04, info)


# ============================================================ stages and game end

def check_transmissions_placed(g, d, obs, n_expected, *, from_siphon=False, from_task=False,
                               new=None):
    """`new` (default: all) transmissions: timer 1, flags as given, on free cells, distinct,
    not in the player's line of fire (plenty of such cells exist in every scenario here)."""
    ts = d["transmissions"] if new is None else new
    assert len(ts) == n_expected, f"expected {n_expected} transmissions, got {ts}"
    lof = g.line_of_fire(d)
    blocks = g.block_cells(d)
    enemy_cells = set(cells(d["enemies"]))
    assert len(set(cells(d["transmissions"]))) == len(d["transmissions"]), \
        f"transmissions share a cell: {d['transmissions']}"
    for t in ts:
        cell = (t["row"], t["col"])
        assert t["turnsRemaining"] == 1, t
        assert bool(t.get("spawnedFromSiphon")) == from_siphon, t
        assert bool(t.get("isFromScheduledTask")) == from_task, t
        assert cell != g.player_cell(d), t
        assert cell not in blocks, t
        assert cell not in enemy_cells, t
        assert cell not in lof, f"transmission {cell} placed in the line of fire {sorted(lof)}"
        g.assert_close(grid(obs)[cell[0], cell[1], CH_TRANSMISSION], 0.25,
                       f"channel 36 at {cell}")


def test_12_stage_advance(g):
    d0 = g.scenario(5, 4, hp=2, credits=10, energy=5)
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), RIGHT, key)
        d = td(s)
        assert d["stage"] == 2
        assert d["player"]["hp"] == 3
        assert g.player_cell(d) == (5, 5)
        exit_cell = tuple(d["exit"])
        assert exit_cell in {(0, 0), (0, 5), (5, 0)}
        assert g.pickup_cells(d) == {(0, 0), (0, 5), (5, 0)} - {exit_cell}
        blocks = g.block_cells(d)
        assert 5 <= len(blocks) <= 11, f"{len(blocks)} blocks"
        assert not blocks & CORNERS
        check_transmissions_placed(g, d, obs, 2)
        assert d["turn"] == 0
        assert d["scheduledTaskInterval"] == 11
        assert d["nextScheduledTaskTurn"] == 11
        # no enemy phase ran: no snapshot pushed, the new transmissions still at timer 1
        assert d["undoDepth"] == 0
        assert d["enemies"] == []
        assert not bool(done)
        g.assert_reward(r, 2.19, info)  # -0.01 + 1 + 0.05 + 0.15 + 1.0


def test_13_victory(g):
    d0 = g.scenario(5, 4, stage=8, score=10)
    s, obs, r, done, info = g.step(start(d0), RIGHT)
    d = td(s)
    assert bool(done)
    assert bool(info["won"]) and d["won"]
    assert d["stage"] == 8
    assert g.player_cell(d) == (5, 5)
    assert pvec(obs)[5] == 1.0
    g.assert_reward(r, 1600.04, info)  # 100 (not the literal 64) for stage 8


def _check_generated_stage(g, d):
    """The §12 invariants of a freshly generated stage (smoke version of check 14)."""
    exit_cell = tuple(d["exit"])
    blocks = g.block_cells(d)
    assert exit_cell in CORNERS
    assert not blocks & CORNERS
    assert g.pickup_cells(d) == CORNERS - {exit_cell, g.player_cell(d)}
    programs = []
    for b in d["blocks"]:
        assert not b["siphoned"], b
        hidden = b.get("hidden") if b["type"] == "question" else b["type"]
        if hidden == "data":
            assert 1 <= b["points"] <= 9, b
            assert b["spawnCount"] == b["points"], b
        else:
            pid = g.program_id_of_block(b)
            assert b["spawnCount"] == g.PROGRAM_SPAWN_COUNT[pid], b
            programs.append(pid)
    assert len(programs) == len(set(programs)), f"program repeats: {programs}"

    def neighbours(r, c):
        for dr, dc in DIRECTION_DELTAS:
            if 0 <= r + dr < ROWS and 0 <= c + dc < COLS:
                yield r + dr, c + dc

    for b in blocks:
        assert any(n not in blocks for n in neighbours(*b)), f"block {b} is walled in"
    visited, frontier = {(0, 0)}, [(0, 0)]
    while frontier:
        cell = frontier.pop()
        if cell == exit_cell and cell != (0, 0):
            continue  # the exit is reached, not passed through
        for n in neighbours(*cell):
            if n not in blocks and n not in visited:
                visited.add(n)
                frontier.append(n)
    non_block = {(r, c) for r in range(ROWS) for c in range(COLS)} - blocks
    assert visited == non_block, f"unreachable cells {sorted(non_block - visited)}"
    for r in range(ROWS):
        for c in range(COLS):
            credits, energy, _ = g.resource_at(d, r, c)
            if (r, c) in blocks or (r, c) == exit_cell:
                assert credits == 0 and energy == 0, (r, c)
            else:
                assert (credits == 0) != (energy == 0), (r, c, credits, energy)
                assert 1 <= credits + energy <= 3, (r, c, credits, energy)


def _walk_onto_exit_next(g, d):
    """A scenario from generated stage `d`: entities cleared, the player on an open
    neighbour of the exit, plus the directional action that steps onto the exit."""
    er, ec = d["exit"]
    blocks = g.block_cells(d)
    for action, (dr, dc) in enumerate(DIRECTION_DELTAS):
        cell = (er - dr, ec - dc)
        if 0 <= cell[0] < ROWS and 0 <= cell[1] < COLS and cell not in blocks:
            break
    else:
        pytest.fail(f"exit {d['exit']} has no open neighbour")
    d = dict(d, enemies=[], transmissions=[])
    d.pop("undoDepth", None)
    d["player"] = dict(d["player"], row=cell[0], col=cell[1])
    return d, action


def test_14_generation_smoke(g):
    """Smoke version of check 14 (the statistics test lives elsewhere): three chained
    stage advances under a few keys, each generated stage checked against §12."""
    for key in range(3):
        d, move = g.scenario(5, 4), RIGHT
        for stage in (2, 3, 4):
            s, obs, r, done, info = g.step(start(d), move, key * 10 + stage)
            d = td(s)
            assert d["stage"] == stage
            _check_generated_stage(g, d)
            check_transmissions_placed(g, d, obs, stage)
            d, move = _walk_onto_exit_next(g, d)


def test_15_stage_advance_keeps_entities(g):
    d0 = g.scenario(5, 4, enemies=[g.daemon(2, 2, hp=2)],
                    transmissions=[g.transmission(0, 3, 3, kind="glitch")])
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), RIGHT, key)
        d = td(s)
        assert d["stage"] == 2
        assert len(d["enemies"]) == 1
        e = d["enemies"][0]
        assert (e["type"], e["row"], e["col"], e["hp"]) == ("daemon", 2, 2, 2)
        assert g.block_at(d, 2, 2) is None
        assert g.block_at(d, 0, 3) is None  # cells holding transmissions are not eligible
        ts = d["transmissions"]
        assert len(ts) == 1 + 2, "the stage's 2 transmissions are added to the survivor"
        old = ts[0]
        assert (old["row"], old["col"], old["turnsRemaining"]) == (0, 3, 3)
        assert old["enemyType"].lower() == "glitch"
        check_transmissions_placed(g, d, obs, 2, new=ts[1:])


# ============================================================ siphon

def test_16_siphon_data_block(g):
    d0 = g.scenario(3, 3, dataSiphons=1, blocks=[g.data_block(4, 3, 5, 5)],
                    resources=[g.credits_at(3, 3, 2), g.energy_at(3, 2, 1)])
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), SIPHON, key)
        d = td(s)
        p = d["player"]
        assert (p["score"], p["credits"], p["energy"], p["dataSiphons"]) == (5, 2, 1, 0)
        x = grid(obs)
        assert x[4, 3, CH_BLOCK_SIPHONED] == 1.0
        g.assert_close(x[4, 3, CH_BLOCK_POINTS], 5 / 9, "channel 10 at (4,3)")
        assert x[4, 3, CH_BLOCK_SPAWN] == 0.0
        assert x[3, 3, CH_SIPHON_CENTER] == 1.0
        assert x[3, 3, CH_CREDITS] == 0.0
        assert d["scheduledTaskInterval"] == 11
        assert d["nextScheduledTaskTurn"] == 17
        assert d["pendingSiphonTransmissions"] == 0
        check_transmissions_placed(g, d, obs, 5, from_siphon=True)
        g.assert_reward(r, 2.64, info)


def test_17_siphon_two_blocks(g):
    d0 = g.scenario(3, 3, dataSiphons=1, blocks=[g.data_block(4, 3, 3, 3),
                                                 g.program_block(3, 4, "ROW", 2)])
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), SIPHON, key)
        d = td(s)
        assert d["player"]["score"] == 3
        assert d["ownedPrograms"] == [g.ACTION["ROW"]]
        for cell in ((4, 3), (3, 4)):
            b = g.block_at(d, *cell)
            assert b is not None and b["siphoned"] and b["spawnCount"] == 0, b
        check_transmissions_placed(g, d, obs, 5, from_siphon=True)
        g.assert_reward(r, 1.49, info)


def test_18_suboptimal_siphon(g):
    d0 = g.scenario(2, 1, dataSiphons=1, blocks=[g.data_block(2, 2, 1, spawn=0)],
                    resources=[g.credits_at(2, 4, 3)])
    s, obs, r, done, info = g.step(start(d0), SIPHON)
    d = td(s)
    assert d["player"]["score"] == 1
    assert d["player"]["credits"] == 0
    assert d["transmissions"] == []
    g.assert_reward(r, 0.415, info)  # -0.01 + 0.5 - 0.075 (missedCredits 3)


def test_19_siphon_in_open_space(g):
    d0 = g.scenario(3, 3, dataSiphons=1, credits=2, energy=2,
                    ownedPrograms=[g.ACTION["HACK"]])
    s0 = start(d0)
    mask = g.legal(s0)
    assert mask[SIPHON]
    assert not mask[g.ACTION["HACK"]]
    s, obs, r, done, info = g.step(s0, SIPHON)
    d = td(s)
    assert {tuple(x) for x in d["siphonedCells"]} == {(3, 3), (4, 3), (2, 3), (3, 2), (3, 4)}
    assert [tuple(x) for x in d["siphonCenters"]] == [(3, 3)]
    g.assert_reward(r, -0.01, info)
    assert g.legal(s)[g.ACTION["HACK"]]


def test_20_siphon_owned_program_block(g):
    d0 = g.scenario(3, 3, dataSiphons=1, ownedPrograms=[g.ACTION["PUSH"]],
                    blocks=[g.program_block(4, 3, "PUSH", 4)])
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), SIPHON, key)
        d = td(s)
        assert d["ownedPrograms"] == [g.ACTION["PUSH"]]
        check_transmissions_placed(g, d, obs, 4, from_siphon=True)
        g.assert_reward(r, -0.01, info)


def test_21_interval_floor(g):
    s = start(g.scenario(3, 3, dataSiphons=2, scheduledTaskInterval=5))
    s, obs, r, done, info = g.step(s, SIPHON)
    d = td(s)
    assert d["scheduledTaskInterval"] == 4
    assert d["nextScheduledTaskTurn"] == 17
    s, obs, r, done, info = g.step(s, SIPHON, 1)
    d = td(s)
    assert d["turn"] == 2
    assert d["scheduledTaskInterval"] == 4
    assert d["nextScheduledTaskTurn"] == 22


# ============================================================ enemy phase

def _wait_scenario(g, r, c, energy=1, **extra):
    owned = extra.pop("ownedPrograms", [g.ACTION["WAIT"]])
    return g.scenario(r, c, energy=energy, ownedPrograms=owned, **extra)


def test_22_new_enemy_idles_then_virus_moves_twice(g):
    WAIT = g.ACTION["WAIT"]
    d0 = _wait_scenario(g, 0, 0, energy=2, transmissions=[g.transmission(5, 5, 1, "virus")])
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), WAIT, key)
        d = td(s)
        assert d["transmissions"] == []
        assert cells(d["enemies"]) == [(5, 5)]
        assert d["enemies"][0]["type"] == "virus"
        g.assert_reward(r, -0.06, info)
        s, obs, r, done, info = g.step(s, WAIT, key + 100)
        d = td(s)
        assert cells(d["enemies"]) == [(3, 5)]
        g.assert_reward(r, -0.06, info)


def test_23_canonical_direction_tie_break(g):
    d0 = _wait_scenario(g, 0, 0, enemies=[g.daemon(2, 2)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["WAIT"])
    assert cells(td(s)["enemies"]) == [(1, 2)]


def test_24_virus_moves_then_attacks(g):
    d0 = _wait_scenario(g, 0, 0, enemies=[g.virus(2, 0)])
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), g.ACTION["WAIT"], key)
        d = td(s)
        assert cells(d["enemies"]) == [(1, 0)]
        assert d["player"]["hp"] == 2
        g.assert_reward(r, -1.06, info)


def test_25_adjacent_enemy_attacks_instead_of_moving(g):
    d0 = _wait_scenario(g, 3, 3, enemies=[g.daemon(4, 3)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["WAIT"])
    d = td(s)
    assert d["player"]["hp"] == 2
    assert cells(d["enemies"]) == [(4, 3)]
    g.assert_reward(r, -1.06, info)


def test_26_stunned_enemy_skips_phase(g):
    d0 = _wait_scenario(g, 0, 0, enemies=[g.virus(3, 0, stunned=True)])
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), g.ACTION["WAIT"], key)
        d = td(s)
        assert cells(d["enemies"]) == [(3, 0)]
        assert not d["enemies"][0]["stunned"]


def test_27_walk_around_transmission(g):
    d0 = _wait_scenario(g, 0, 0, enemies=[g.daemon(2, 0)],
                        transmissions=[g.transmission(1, 0, 5)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["WAIT"])
    d = td(s)
    assert cells(d["enemies"]) == [(2, 1)]
    assert [t["turnsRemaining"] for t in d["transmissions"]] == [4]


def test_28a_glitch_enters_block(g):
    d0 = _wait_scenario(g, 0, 0, enemies=[g.glitch(3, 0)], blocks=[g.data_block(2, 0, 5)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["WAIT"])
    assert cells(td(s)["enemies"]) == [(2, 0)]


def test_28b_daemon_goes_around_block(g):
    d0 = _wait_scenario(g, 0, 0, enemies=[g.daemon(3, 0)], blocks=[g.data_block(2, 0, 5)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["WAIT"])
    assert cells(td(s)["enemies"]) == [(3, 1)]


def test_29_step_swallows_enemy_phase(g):
    d0 = g.scenario(0, 0, energy=3, ownedPrograms=[g.ACTION["STEP"]],
                    enemies=[g.daemon(4, 1)], transmissions=[g.transmission(5, 5, 2)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["STEP"])
    g.assert_reward(r, -0.16, info)
    assert td(s)["stepActive"]
    s, obs, r, done, info = g.step(s, UP)
    d = td(s)
    assert g.player_cell(d) == (1, 0)
    assert cells(d["enemies"]) == [(4, 1)]
    assert [t["turnsRemaining"] for t in d["transmissions"]] == [2]
    assert d["turn"] == 0
    assert not d["stepActive"]
    assert d["undoDepth"] == 0  # no snapshot either
    g.assert_reward(r, 0.04, info)


def test_30_scheduled_task(g):
    d0 = _wait_scenario(g, 0, 0, turn=11)
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), g.ACTION["WAIT"], key)
        d = td(s)
        assert d["turn"] == 12
        check_transmissions_placed(g, d, obs, 1, from_task=True)
        assert d["nextScheduledTaskTurn"] == 24


def test_31_calm(g):
    CALM, WAIT = g.ACTION["CALM"], g.ACTION["WAIT"]
    d0 = g.scenario(0, 0, credits=2, energy=4 + 20, ownedPrograms=[WAIT, CALM])
    s, obs, r, done, info = g.step(start(d0), CALM)
    assert pvec(obs)[9] == 1.0
    g.assert_reward(r, -0.31, info)
    for i in range(20):
        s, obs, r, done, info = g.step(s, WAIT, i)
        d = td(s)
        assert d["transmissions"] == [], f"transmission after WAIT #{i + 1}"
    assert d["turn"] == 20
    assert d["scheduledTasksDisabled"]


def test_32_siphon_caused_death(g):
    d0 = _wait_scenario(g, 3, 3, stage=4, hp=1,
                        enemies=[g.daemon(4, 3, from_siphon=True)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["WAIT"])
    d = td(s)
    assert bool(done)
    assert bool(info["died"])
    assert d["player"]["hp"] == 0
    g.assert_reward(r, -14.56, info)  # -0.01 - 0.05 - 1 - 3.5 - 10


def test_33_two_attackers_kill(g):
    d0 = _wait_scenario(g, 3, 3, hp=2, enemies=[g.daemon(4, 3), g.virus(2, 3)])
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), g.ACTION["WAIT"], key)
        assert bool(done)
        assert td(s)["player"]["hp"] == 0
        g.assert_reward(r, -2.06, info)


# ============================================================ programs

def test_34_push(g):
    d0 = g.scenario(3, 3, energy=2, ownedPrograms=[g.ACTION["PUSH"]],
                    enemies=[g.daemon(4, 3), g.virus(4, 4), g.glitch(0, 0)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["PUSH"])
    d = td(s)
    assert cells(d["enemies"]) == [(5, 3), (5, 5), (0, 0)]
    assert [e["type"] for e in d["enemies"]] == ["daemon", "virus", "glitch"]
    assert d["turn"] == 0
    g.assert_reward(r, -0.11, info)


def test_35_pull_stacks(g):
    d0 = g.scenario(3, 3, energy=2, ownedPrograms=[g.ACTION["PULL"]],
                    enemies=[g.daemon(5, 3), g.virus(4, 4), g.glitch(3, 4)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["PULL"])
    d = td(s)
    assert cells(d["enemies"]) == [(4, 3), (3, 4), (3, 4)]
    assert [e["type"] for e in d["enemies"]] == ["daemon", "virus", "glitch"]
    x = grid(obs)
    assert x[3, 4, CH_VIRUS] == 1.0
    assert x[3, 4, CH_GLITCH] == 0.0
    g.assert_reward(r, -0.11, info)


def test_36_crash(g):
    d0 = g.scenario(3, 3, credits=3, energy=2, ownedPrograms=[g.ACTION["CRASH"]],
                    blocks=[g.data_block(4, 4, 5)], enemies=[g.virus(2, 2), g.daemon(3, 5)],
                    transmissions=[g.transmission(2, 3, 2)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["CRASH"])
    d = td(s)
    assert d["blocks"] == []
    assert not grid(obs)[4, 4, CH_BLOCK_DATA:CH_BLOCK_SPAWN + 1].any()
    assert d["transmissions"] == []
    assert len(d["enemies"]) == 1
    e = d["enemies"][0]
    assert (e["type"], e["row"], e["col"], e["hp"], e["stunned"]) == ("daemon", 3, 5, 3, False)
    g.assert_reward(r, 0.34, info)


def test_37_warp_onto_exit(g):
    d0 = g.scenario(0, 0, credits=2, energy=2, ownedPrograms=[g.ACTION["WARP"]],
                    enemies=[g.virus(5, 5)])
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), g.ACTION["WARP"], key)
        d = td(s)
        assert g.player_cell(d) == (5, 5)
        assert d["stage"] == 2
        assert d["enemies"] == []
        assert not bool(done)
        g.assert_reward(r, 1.59, info)


def test_38_warp_onto_enemy(g):
    d0 = g.scenario(0, 0, credits=2, energy=2, ownedPrograms=[g.ACTION["WARP"]],
                    enemies=[g.daemon(3, 3)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["WARP"])
    d = td(s)
    assert g.player_cell(d) == (3, 3)
    assert d["enemies"] == []
    assert d["turn"] == 0
    g.assert_reward(r, 0.39, info)


def test_39_poly_kills_damaged_daemon(g):
    d0 = g.scenario(3, 3, credits=1, energy=1, ownedPrograms=[g.ACTION["POLY"]],
                    enemies=[g.daemon(3, 5, hp=1)])
    for key in KEYS:
        s, obs, r, done, info = g.step(start(d0), g.ACTION["POLY"], key)
        assert td(s)["enemies"] == []
        g.assert_reward(r, 0.19, info)


def test_40_row(g):
    d0 = g.scenario(3, 3, credits=3, energy=1, attackDamage=2,
                    ownedPrograms=[g.ACTION["ROW"]],
                    enemies=[g.daemon(3, 0, hp=3), g.virus(3, 5, hp=2), g.virus(4, 3)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["ROW"])
    d = td(s)
    assert len(d["enemies"]) == 2
    dm = g.enemy_at(d, 3, 0)
    assert dm["type"] == "daemon" and dm["hp"] == 1 and dm["stunned"]
    assert grid(obs)[3, 0, CH_ENEMY_STUNNED] == 1.0
    assert g.enemy_at(d, 3, 5) is None
    v = g.enemy_at(d, 4, 3)
    assert v["type"] == "virus" and v["hp"] == 2 and not v["stunned"]
    g.assert_reward(r, 0.09, info)


def test_41_d_bom(g):
    d0 = g.scenario(0, 0, credits=3, ownedPrograms=[g.ACTION["D_BOM"]],
                    enemies=[g.daemon(3, 3), g.daemon(5, 5), g.virus(4, 4, hp=1),
                             g.glitch(2, 3), g.cryptog(3, 5)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["D_BOM"])
    d = td(s)
    assert g.enemy_at(d, 3, 3) is None
    assert g.enemy_at(d, 4, 4) is None
    gl = g.enemy_at(d, 2, 3)
    assert gl["type"] == "glitch" and gl["hp"] == 1 and gl["stunned"]
    cr = g.enemy_at(d, 3, 5)
    assert cr["type"] == "cryptog" and cr["hp"] == 2 and not cr["stunned"]
    dm = g.enemy_at(d, 5, 5)
    assert dm["type"] == "daemon" and dm["hp"] == 3 and not dm["stunned"]
    assert len(d["enemies"]) == 3
    g.assert_reward(r, 0.44, info)


def test_42_hack(g):
    d0 = g.scenario(3, 3, credits=2, energy=2, ownedPrograms=[g.ACTION["HACK"]],
                    siphonedCells=[[1, 1]], enemies=[g.daemon(1, 1)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["HACK"])
    e = g.enemy_at(td(s), 1, 1)
    assert e["hp"] == 2 and e["stunned"]
    g.assert_reward(r, -0.21, info)


def test_43_atk_plus(g):
    ATK = g.ACTION["ATK+"]
    s = start(g.scenario(3, 3, credits=20, energy=20, ownedPrograms=[ATK]))
    for _ in range(2):
        assert g.legal(s)[ATK]
        s, obs, r, done, info = g.step(s, ATK)
    assert td(s)["player"]["attackDamage"] == 3
    g.assert_close(pvec(obs)[7], 1.0, "player feature 7")
    assert not g.legal(s)[ATK], "third ATK+ in a stage must be illegal"
    for action in (UP, UP, RIGHT, RIGHT):  # (3,3) -> (4,3) -> (5,3) -> (5,4) -> exit
        s, obs, r, done, info = g.step(s, action)
    d = td(s)
    assert d["stage"] == 2 and d["atkPlusUses"] == 0
    assert g.legal(s)[ATK]
    s, obs, r, done, info = g.step(s, ATK)
    assert td(s)["player"]["attackDamage"] == 4
    g.assert_close(pvec(obs)[7], 1.5, "player feature 7")


def test_44_undo(g):
    WAIT, CRASH, UNDO = g.ACTION["WAIT"], g.ACTION["CRASH"], g.ACTION["UNDO"]
    d0 = g.scenario(3, 3, credits=5, energy=3, ownedPrograms=[WAIT, CRASH, UNDO],
                    blocks=[g.data_block(4, 4, 5, 5)])
    s = start(d0)
    assert not g.legal(s)[UNDO]
    s, obs, r, done, info = g.step(s, WAIT)
    g.assert_reward(r, -0.06, info)
    assert td(s)["undoDepth"] == 1
    assert int(s.history.depth) == 1
    s, obs, r, done, info = g.step(s, CRASH)
    g.assert_reward(r, -0.26, info)
    d = td(s)
    assert (d["player"]["credits"], d["player"]["energy"]) == (2, 0)
    assert g.block_at(d, 4, 4) is None
    assert g.legal(s)[UNDO]
    s, obs, r, done, info = g.step(s, UNDO)
    d = td(s)
    assert (d["player"]["credits"], d["player"]["energy"]) == (5, 2)
    b = g.block_at(d, 4, 4)
    assert b is not None and b["type"] == "data" and b["points"] == 5 and b["spawnCount"] == 5
    assert d["undoDepth"] == 0
    assert int(s.history.depth) == 0
    assert not g.legal(s)[UNDO]
    g.assert_reward(r, 0.24, info)


def test_45a_score(g):
    d0 = g.scenario(3, 3, energy=5, stage=2, ownedPrograms=[g.ACTION["SCORE"]])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["SCORE"])
    assert td(s)["player"]["score"] == 6
    g.assert_reward(r, 2.74, info)


def test_45b_score_illegal_at_stage_8(g):
    d0 = g.scenario(3, 3, energy=5, stage=8, ownedPrograms=[g.ACTION["SCORE"]])
    assert not g.legal(start(d0))[g.ACTION["SCORE"]]


def test_46_exch(g):
    EXCH = g.ACTION["EXCH"]
    s, obs, r, done, info = g.step(start(g.scenario(3, 3, credits=8, ownedPrograms=[EXCH])),
                                   EXCH)
    p = td(s)["player"]
    assert (p["credits"], p["energy"]) == (4, 4)
    g.assert_reward(r, -0.01, info)
    assert not g.legal(start(g.scenario(3, 3, credits=3, ownedPrograms=[EXCH])))[EXCH]


def test_47_reset(g):
    RESET = g.ACTION["RESET"]
    for hp, expected in ((2, 0.49), (1, 1.79)):
        d0 = g.scenario(3, 3, energy=4, hp=hp, ownedPrograms=[RESET])
        s, obs, r, done, info = g.step(start(d0), RESET)
        assert td(s)["player"]["hp"] == 3
        g.assert_reward(r, expected, info)
    assert not g.legal(start(g.scenario(3, 3, energy=4, hp=3, ownedPrograms=[RESET])))[RESET]


def test_48_delay(g):
    d0 = g.scenario(3, 3, credits=1, energy=2, ownedPrograms=[g.ACTION["DELAY"]],
                    transmissions=[g.transmission(0, 0, 2)])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["DELAY"])
    assert [t["turnsRemaining"] for t in td(s)["transmissions"]] == [5]
    assert grid(obs)[0, 0, CH_TRANSMISSION] == 1.0
    g.assert_reward(r, -0.16, info)


def test_49_reduc(g):
    d0 = g.scenario(3, 3, credits=2, energy=1, ownedPrograms=[g.ACTION["REDUC"]],
                    blocks=[g.data_block(4, 3, 3, 3), g.data_block(4, 4, 2, 2, siphoned=True)])
    s0 = start(d0)
    obs0 = g.observe(s0)
    s, obs, r, done, info = g.step(s0, g.ACTION["REDUC"])
    d = td(s)
    x = grid(obs)
    g.assert_close(x[4, 3, CH_BLOCK_SPAWN], 2 / 9, "channel 35 at (4,3)")
    g.assert_close(x[4, 3, CH_BLOCK_POINTS], 3 / 9, "channel 10 at (4,3)")
    b = g.block_at(d, 4, 3)
    assert (b["points"], b["spawnCount"]) == (3, 2)
    b = g.block_at(d, 4, 4)
    assert (b["points"], b["spawnCount"], b["siphoned"]) == (2, 2, True)
    np.testing.assert_array_equal(x[4, 4], grid(obs0)[4, 4], err_msg="(4,4) changed")
    g.assert_reward(r, -0.16, info)


def test_50_siph_plus(g):
    d0 = g.scenario(3, 3, credits=5, ownedPrograms=[g.ACTION["SIPH+"]])
    s, obs, r, done, info = g.step(start(d0), g.ACTION["SIPH+"])
    assert td(s)["player"]["dataSiphons"] == 1
    g.assert_reward(r, -0.26, info)


# ============================================================ observation encoding

def test_51_player_vector(g):
    d0 = g.scenario(2, 3, hp=2, credits=60, energy=7, stage=3, dataSiphons=4,
                    attackDamage=2, showActivated=True)
    obs = g.observe(start(d0))
    np.testing.assert_allclose(
        pvec(obs), [0.4, 0.6, 2 / 3, 1.0, 0.14, 2 / 7, 0.4, 0.5, 1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(
        pvec(obs), [0.4, 0.6, 0.6667, 1.0, 0.14, 0.2857, 0.4, 0.5, 1, 0], atol=1e-4)


def test_52_cryptog_visibility(g):
    d0 = g.scenario(0, 0, credits=2, ownedPrograms=[g.ACTION["SHOW"]],
                    enemies=[g.cryptog(5, 5), g.cryptog(0, 4)])
    s0 = start(d0)
    x = grid(g.observe(s0))
    assert not x[5, 5, 0:7].any(), "hidden cryptog must leave channels 0-6 at zero"
    assert x[0, 4, CH_CRYPTOG] == 1.0
    g.assert_close(x[0, 4, CH_ENEMY_HP], 2 / 3, "channel 4 at (0,4)")
    s, obs, r, done, info = g.step(s0, g.ACTION["SHOW"])
    assert grid(obs)[5, 5, CH_CRYPTOG] == 1.0
    assert pvec(obs)[8] == 1.0


def test_53_block_and_special_channels(g):
    d0 = g.scenario(0, 0,
                    blocks=[g.data_block(1, 1, 6, 6), g.program_block(1, 2, "CRASH", 6),
                            g.question_block(3, 3, "data", points=4),
                            g.question_block(3, 4, "program", program="hack")],
                    resources=[g.pickup_at(0, 5), g.energy_at(0, 5, 2)])
    obs = g.observe(start(d0))
    data = {CH_BLOCK_DATA: 1, CH_BLOCK_POINTS: 6 / 9, CH_BLOCK_SPAWN: 6 / 9}
    crash = {CH_BLOCK_PROGRAM: 1, CH_PROGRAM_ID + 2: 1, CH_BLOCK_SPAWN: 6 / 9}
    assert_cell_channels(obs, 1, 1, expected_channels(data), "(data block 6/6)")
    assert_cell_channels(obs, 1, 2, expected_channels(crash), "(CRASH block, spawn 6)")
    question = expected_channels({CH_BLOCK_QUESTION: 1})
    assert_cell_channels(obs, 3, 3, question, "(question block, hidden data)")
    assert_cell_channels(obs, 3, 4, question, "(question block, hidden program)")
    assert_cell_channels(obs, 0, 5, expected_channels({CH_PICKUP: 1, CH_ENERGY: 2 / 3}),
                         "(pickup with energy 2)")
    assert_cell_channels(obs, 5, 5, expected_channels({CH_EXIT: 1}), "(exit)")


def test_54_enemy_and_transmission_channels(g):
    d0 = g.scenario(5, 0, enemies=[g.virus(0, 3, hp=1, from_siphon=True)],
                    transmissions=[g.transmission(2, 2, 7)])
    obs = g.observe(start(d0))
    virus = {CH_VIRUS: 1, CH_ENEMY_HP: 1 / 3, CH_ENEMY_FROM_SIPHON: 1}
    assert_cell_channels(obs, 0, 3, expected_channels(virus), "(virus hp 1, fromSiphon)")
    assert_cell_channels(obs, 2, 2, expected_channels({CH_TRANSMISSION: 1.0}),
                         "(transmission timer 7)")
