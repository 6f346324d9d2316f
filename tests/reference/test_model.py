"""The reference model against the 54 observable checks of docs/rules.md §19.

Each test is named after its check number. Scenarios are written as docs/scenarios.md dicts
starting from the bare fixture F(r, c) of §19, so the scenario reader is exercised too.
Checks involving randomness are run over several seeds and assert what the spec asserts.
"""

import collections
import random

import pytest

from . import model as M

SEEDS = range(8)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def F(r, c, **top):
    """Scenario dict of the bare fixture F(r, c) (§19), plus top-level/player extras.

    Player fields may be given as keyword arguments too (hp, credits, energy, ...)."""
    player_keys = {"hp", "credits", "energy", "dataSiphons", "attackDamage", "score"}
    d = {"player": {"row": r, "col": c}, "enemies": [], "transmissions": [], "blocks": [],
         "resources": [], "ownedPrograms": []}
    for k, v in top.items():
        if k in player_keys:
            d["player"][k] = v
        else:
            d[k] = v
    return d


def enemy(kind, r, c, hp=None, **kw):
    e = {"type": kind, "row": r, "col": c}
    if hp is not None:
        e["hp"] = hp
    e.update(kw)
    return e


def trans(r, c, timer=1, kind="virus", **kw):
    return {"row": r, "col": c, "turnsRemaining": timer, "enemyType": kind, **kw}


def data_block(r, c, points, spawn=None, **kw):
    b = {"row": r, "col": c, "type": "data", "points": points}
    if spawn is not None:
        b["spawnCount"] = spawn
    b.update(kw)
    return b


def program_block(r, c, name, spawn, **kw):
    return {"row": r, "col": c, "type": "program", "programType": name, "spawnCount": spawn,
            **kw}


def act(name):
    """Action index of a program by its scenario name."""
    return 5 + M.PROGRAM_NAMES.index(name)


def run(state, action, seed=0):
    s2, obs, reward, done, info = M.step(state, action, random.Random(seed))
    terms = info["reward_terms"]
    assert set(terms) == set(M.REWARD_TERMS)
    assert reward == pytest.approx(sum(terms.values()), abs=1e-9)
    return s2, obs, reward, done, info


def grid(state):
    return M.observe(state)[2]


def pos(e):
    return (e.row, e.col)


def positions(state):
    return [pos(e) for e in state.enemies]


def legal_set(state):
    return {a for a, ok in enumerate(M.legal_actions(state)) if ok}


def in_line_of_fire(state, x):
    """Independent check of §11's line of fire on a final state."""
    pr, pc = state.player.row, state.player.col
    r, c = x
    if r != pr and c != pc:
        return False
    if r == pr:
        between = [(r, k) for k in range(min(c, pc) + 1, max(c, pc))]
    else:
        between = [(k, c) for k in range(min(r, pr) + 1, max(r, pr))]
    return not any(state.cell(*y).content == M.BLOCK or M.enemies_at(state, *y)
                   for y in between)


def approx(x):
    return pytest.approx(x, abs=1e-6)


# ---------------------------------------------------------------------------
# Movement, masks, line of fire
# ---------------------------------------------------------------------------

def test_01_move_up_toward_exit():
    s2, _, reward, done, _ = run(M.from_scenario(F(3, 3)), 0)
    assert pos(s2.player) == (4, 3)
    assert s2.turn == 1
    assert reward == approx(0.04)
    assert not done


def test_02_moving_away_not_penalised():
    s2, _, reward, _, _ = run(M.from_scenario(F(3, 3)), 1)
    assert pos(s2.player) == (2, 3)
    assert reward == approx(-0.01)


def test_03_corner_mask():
    assert legal_set(M.from_scenario(F(0, 0))) == {0, 3}


def test_04_block_blocks_direction():
    s = M.from_scenario(F(3, 3, blocks=[data_block(4, 3, 5, 5)]))
    mask = M.legal_actions(s)
    assert not mask[0]
    assert mask[1] and mask[2] and mask[3]


def test_05_attack_enemy_on_block():
    s = M.from_scenario(F(3, 3, blocks=[data_block(4, 3, 5, 5)],
                          enemies=[enemy("glitch", 4, 3, hp=2)]))
    assert M.legal_actions(s)[0]
    s2, obs, reward, _, _ = run(s, 0)
    assert pos(s2.player) == (3, 3)
    assert positions(s2) == [(4, 3)]
    assert s2.enemies[0].hp == 1
    assert obs[2][4][3][5] == 0.0
    assert s2.player.hp == 3
    assert reward == approx(-0.01)


def test_06_shoot_virus_at_range():
    s = M.from_scenario(F(0, 3, enemies=[enemy("virus", 5, 3, hp=1)]))
    s2, _, reward, _, _ = run(s, 0)
    assert s2.enemies == []
    assert pos(s2.player) == (0, 3)
    assert reward == approx(0.29)


def test_07_block_stops_line_of_fire():
    s = M.from_scenario(F(0, 3, blocks=[data_block(2, 3, 5)],
                          enemies=[enemy("virus", 5, 3, hp=2)]))
    for seed in SEEDS:
        s2, _, reward, _, _ = run(s, 0, seed)
        assert pos(s2.player) == (1, 3)
        assert s2.enemies[0].hp == 2
        assert positions(s2) == [(3, 3)]
        assert reward == approx(0.04)


def test_08_shoot_transmission():
    s = M.from_scenario(F(3, 3, transmissions=[trans(5, 3, 3)]))
    s2, _, reward, _, _ = run(s, 0)
    assert s2.transmissions == []
    assert pos(s2.player) == (3, 3)
    assert reward == approx(0.29)


def test_09_task_transmission_no_kill_credit():
    s = M.from_scenario(F(3, 3, transmissions=[trans(5, 3, 3, isFromScheduledTask=True)]))
    s2, _, reward, _, _ = run(s, 0)
    assert s2.transmissions == []
    assert reward == approx(-0.01)


def test_10_walk_onto_pickup():
    s = M.from_scenario(F(3, 3, resources=[{"row": 4, "col": 3, "dataSiphon": True}]))
    assert grid(s)[4][3][39] == 1.0
    s2, obs, reward, _, _ = run(s, 0)
    assert s2.player.siphons == 1
    assert obs[2][4][3][39] == 0.0
    assert reward == approx(1.04)


def test_11_walking_does_not_collect_resources():
    s = M.from_scenario(F(3, 3, resources=[{"row": 4, "col": 3, "credits": 2}]))
    s2, obs, reward, _, _ = run(s, 0)
    assert s2.player.credits == 0
    assert obs[2][4][3][37] == M.f32(2 / 3)
    assert reward == approx(0.04)


# ---------------------------------------------------------------------------
# Stages and game end
# ---------------------------------------------------------------------------

def test_12_stage_completion():
    s = M.from_scenario(F(5, 4, hp=2, credits=10, energy=5))
    for seed in SEEDS:
        s2, obs, reward, done, info = run(s, 3, seed)
        assert s2.stage == 2 and s2.player.hp == 3 and pos(s2.player) == (5, 5)
        assert s2.exit in [(0, 0), (0, 5), (5, 0)]
        pickups = {x for x in [(0, 0), (0, 5), (5, 0)] if x != s2.exit}
        assert {(r, c) for r in range(6) for c in range(6)
                if s2.cell(r, c).content == M.PICKUP} == pickups
        blocks = [(r, c) for r in range(6) for c in range(6) if s2.cell(r, c).content == M.BLOCK]
        assert 5 <= len(blocks) <= 11
        assert not set(blocks) & set(M.CORNERS)
        assert len(s2.transmissions) == 2
        for t in s2.transmissions:
            assert obs[2][t.row][t.col][36] == 0.25
        assert (s2.turn, s2.interval, s2.next_task) == (0, 11, 11)
        assert s2.history == [] and not info["snapshot_pushed"]
        assert info["stage_completed"] and not done
        assert reward == approx(2.19)


def test_13_victory():
    s = M.from_scenario(F(5, 4, stage=8, score=10))
    s2, obs, reward, done, info = run(s, 3)
    assert done and s2.won and info["won"]
    assert s2.stage == 8
    assert obs[0][5] == 1.0
    assert reward == approx(1600.04)


def _flood_ok(state):
    """§12.4 connectivity, written independently of the model."""
    blocks = {(r, c) for r in range(6) for c in range(6)
              if state.cell(r, c).content == M.BLOCK}
    seen, todo = {(0, 0)}, collections.deque([(0, 0)])
    while todo:
        r, c = todo.popleft()
        for dr, dc in ((1, 0), (-1, 0), (0, -1), (0, 1)):
            n = (r + dr, c + dc)
            if 0 <= n[0] < 6 and 0 <= n[1] < 6 and n not in blocks and n not in seen:
                seen.add(n)
                if n != state.exit:
                    todo.append(n)
    return all(x in seen for x in ((r, c) for r in range(6) for c in range(6))
               if x not in blocks)


def test_14_generated_stages():
    rng = random.Random(1234)
    n_blocks = n_question = 0
    amounts = collections.Counter()
    for _ in range(400):
        s = M.new_game(rng)
        assert s.stage == 1 and len(s.transmissions) == 1 and s.enemies == []
        assert pos(s.player) in M.CORNERS and s.exit in M.CORNERS and s.exit != pos(s.player)
        bonus = (s.player.credits, s.player.energy, s.player.siphons)
        assert bonus in [(10, 0, 0), (0, 11, 0), (0, 0, 1)]
        programs = []
        for r in range(6):
            for c in range(6):
                cell = s.cell(r, c)
                if cell.content == M.BLOCK:
                    b = cell.block
                    n_blocks += 1
                    n_question += b.question
                    assert (r, c) not in M.CORNERS
                    if b.kind == "data":
                        assert b.points == b.spawn and 1 <= b.points <= 9
                    else:
                        assert b.spawn == M.SPAWN_COUNT[b.program]
                        programs.append(b.program)
                    assert any(s.cell(*n).content != M.BLOCK for n in M.neighbours(r, c))
                    assert cell.credits == cell.energy == 0
                elif cell.content == M.EXIT:
                    assert cell.credits == cell.energy == 0
                else:
                    assert (cell.credits > 0) != (cell.energy > 0)
                    amount = cell.credits + cell.energy
                    assert 1 <= amount <= 3
                    amounts[amount] += 1
        assert len(programs) == len(set(programs))
        assert _flood_ok(s)
        assert s.history == [] and s.turn == 0 and s.next_task == 12
    assert 0.07 < n_question / n_blocks < 0.13
    total = sum(amounts.values())
    assert abs(amounts[1] / total - 0.45) < 0.03
    assert abs(amounts[2] / total - 0.45) < 0.03
    assert abs(amounts[3] / total - 0.10) < 0.02


def test_15_entities_persist_across_stages():
    s = M.from_scenario(F(5, 4, enemies=[enemy("daemon", 2, 2, hp=2)],
                          transmissions=[trans(1, 4, 3, "glitch")]))
    for seed in range(20):
        s2, _, _, _, _ = run(s, 3, seed)
        assert s2.stage == 2
        assert positions(s2) == [(2, 2)] and s2.enemies[0].hp == 2
        assert s2.cell(2, 2).content != M.BLOCK
        assert len(s2.transmissions) == 1 + 2
        assert (s2.transmissions[0].row, s2.transmissions[0].col,
                s2.transmissions[0].timer) == (1, 4, 3)


# ---------------------------------------------------------------------------
# Siphon
# ---------------------------------------------------------------------------

def test_16_siphon():
    s = M.from_scenario(F(3, 3, dataSiphons=1, blocks=[data_block(4, 3, 5, 5)],
                          resources=[{"row": 3, "col": 3, "credits": 2},
                                     {"row": 3, "col": 2, "energy": 1}]))
    for seed in SEEDS:
        s2, obs, reward, _, _ = run(s, 4, seed)
        p = s2.player
        assert (p.score, p.credits, p.energy, p.siphons) == (5, 2, 1, 0)
        g = obs[2]
        assert g[4][3][11] == 1.0 and g[4][3][10] == M.f32(5 / 9) and g[4][3][35] == 0.0
        assert g[3][3][41] == 1.0 and g[3][3][37] == 0.0
        assert s2.interval == 11 and s2.next_task == 17
        assert len(s2.transmissions) == 5
        for t in s2.transmissions:
            assert t.timer == 1 and t.from_siphon and not t.from_task
            assert not in_line_of_fire(s2, (t.row, t.col))
        assert reward == approx(2.64)


def test_17_siphon_data_and_program():
    s = M.from_scenario(F(3, 3, dataSiphons=1, blocks=[
        data_block(4, 3, 3, 3), program_block(3, 4, "row", 2)]))
    for seed in SEEDS:
        s2, _, reward, _, _ = run(s, 4, seed)
        assert s2.player.score == 3
        assert M.ROW in s2.owned
        assert len(s2.transmissions) == 5
        assert reward == approx(1.49)


def test_18_suboptimal_siphon():
    s = M.from_scenario(F(2, 1, dataSiphons=1, blocks=[data_block(2, 2, 1, 0)],
                          resources=[{"row": 2, "col": 4, "credits": 3}]))
    assert M.siphon_quality(s) == (3, 0)
    s2, _, reward, _, info = run(s, 4)
    assert reward == approx(0.415)
    assert info["reward_terms"]["siphon_quality"] == approx(-0.075)
    assert s2.transmissions == []


def test_19_siphon_in_open_space():
    s = M.from_scenario(F(3, 3, dataSiphons=1, credits=2, energy=2, ownedPrograms=[act("hack")]))
    assert M.legal_actions(s)[4]
    assert not M.legal_actions(s)[act("hack")]
    s2, _, reward, _, _ = run(s, 4)
    assert {(r, c) for r in range(6) for c in range(6) if s2.cell(r, c).siphoned} == \
        {(3, 3), (4, 3), (2, 3), (3, 2), (3, 4)}
    assert reward == approx(-0.01)
    assert M.legal_actions(s2)[act("hack")]


def test_20_siphon_owned_program_block():
    s = M.from_scenario(F(3, 3, dataSiphons=1, ownedPrograms=[act("push")],
                          blocks=[program_block(4, 3, "push", 4)]))
    for seed in SEEDS:
        s2, _, reward, _, _ = run(s, 4, seed)
        assert s2.owned == {M.PUSH}
        assert len(s2.transmissions) == 4
        assert reward == approx(-0.01)


def test_21_interval_floor():
    s = M.from_scenario(F(3, 3, dataSiphons=2, scheduledTaskInterval=5))
    s2, *_ = run(s, 4)
    assert s2.interval == 4
    s3, *_ = run(s2, 4)
    assert s3.interval == 4


# ---------------------------------------------------------------------------
# Enemy phase
# ---------------------------------------------------------------------------

WAIT = act("wait")


def test_22_new_enemy_idles_one_phase():
    s = M.from_scenario(F(0, 0, energy=2, ownedPrograms=[WAIT],
                          transmissions=[trans(5, 5, 1, "virus")]))
    s2, _, reward, _, _ = run(s, WAIT)
    assert [(e.type, pos(e)) for e in s2.enemies] == [(M.VIRUS, (5, 5))]
    assert s2.transmissions == []
    assert reward == approx(-0.06)
    s3, _, reward, _, _ = run(s2, WAIT)
    assert positions(s3) == [(3, 5)]
    assert reward == approx(-0.06)


def test_23_canonical_order_down_before_left():
    s = M.from_scenario(F(0, 0, energy=1, ownedPrograms=[WAIT], enemies=[enemy("daemon", 2, 2)]))
    s2, *_ = run(s, WAIT)
    assert positions(s2) == [(1, 2)]


def test_24_virus_moves_then_attacks():
    s = M.from_scenario(F(0, 0, energy=1, ownedPrograms=[WAIT], enemies=[enemy("virus", 2, 0)]))
    s2, _, reward, _, _ = run(s, WAIT)
    assert positions(s2) == [(1, 0)]
    assert s2.player.hp == 2
    assert reward == approx(-1.06)


def test_25_adjacent_attacks_instead_of_moving():
    s = M.from_scenario(F(3, 3, energy=1, ownedPrograms=[WAIT], enemies=[enemy("daemon", 4, 3)]))
    s2, _, reward, _, _ = run(s, WAIT)
    assert s2.player.hp == 2
    assert positions(s2) == [(4, 3)]
    assert reward == approx(-1.06)


def test_26_stunned_enemy_skips():
    s = M.from_scenario(F(0, 0, energy=1, ownedPrograms=[WAIT],
                          enemies=[enemy("virus", 3, 0, stunned=True)]))
    s2, *_ = run(s, WAIT)
    assert positions(s2) == [(3, 0)]
    assert not s2.enemies[0].stunned


def test_27_walks_around_transmission():
    s = M.from_scenario(F(0, 0, energy=1, ownedPrograms=[WAIT], enemies=[enemy("daemon", 2, 0)],
                          transmissions=[trans(1, 0, 5)]))
    s2, *_ = run(s, WAIT)
    assert positions(s2) == [(2, 1)]


def test_28_glitch_enters_blocks():
    for kind, expected in (("glitch", (2, 0)), ("daemon", (3, 1))):
        s = M.from_scenario(F(0, 0, energy=1, ownedPrograms=[WAIT], enemies=[enemy(kind, 3, 0)],
                              blocks=[data_block(2, 0, 5)]))
        s2, *_ = run(s, WAIT)
        assert positions(s2) == [expected], kind


def test_29_step_swallows_phase():
    s = M.from_scenario(F(0, 0, energy=3, ownedPrograms=[act("step")],
                          enemies=[enemy("daemon", 4, 1)], transmissions=[trans(5, 5, 2)]))
    s1, _, reward, _, _ = run(s, act("step"))
    assert reward == approx(-0.16) and s1.step_active
    s2, _, reward, _, info = run(s1, 0)
    assert pos(s2.player) == (1, 0)
    assert positions(s2) == [(4, 1)]
    assert s2.transmissions[0].timer == 2
    assert s2.turn == 0 and not s2.step_active
    assert reward == approx(0.04)
    assert not info["snapshot_pushed"] and s2.history == []


def test_30_scheduled_task():
    s = M.from_scenario(F(0, 0, turn=11, energy=1, ownedPrograms=[WAIT]))
    for seed in SEEDS:
        s2, *_ = run(s, WAIT, seed)
        assert s2.turn == 12
        assert len(s2.transmissions) == 1
        t = s2.transmissions[0]
        assert t.from_task and not t.from_siphon and t.timer == 1
        assert not in_line_of_fire(s2, (t.row, t.col))
        assert s2.next_task == 24


def test_31_calm():
    s = M.from_scenario(F(0, 0, credits=2, energy=4 + 20, ownedPrograms=[act("calm"), WAIT]))
    s1, obs, reward, _, _ = run(s, act("calm"))
    assert obs[0][9] == 1.0
    assert reward == approx(-0.31 + 0.0)
    for i in range(20):
        s1, *_ = run(s1, WAIT, i)
    assert s1.turn == 20 and s1.transmissions == []


def test_32_siphon_caused_death():
    s = M.from_scenario(F(3, 3, stage=4, hp=1, energy=1, ownedPrograms=[WAIT],
                          enemies=[enemy("daemon", 4, 3, spawnedFromSiphon=True)]))
    s2, _, reward, done, info = run(s, WAIT)
    assert done and info["died"]
    assert reward == approx(-14.56)


def test_33_two_attackers_kill():
    s = M.from_scenario(F(3, 3, hp=2, energy=1, ownedPrograms=[WAIT],
                          enemies=[enemy("daemon", 4, 3), enemy("virus", 2, 3)]))
    for seed in SEEDS:
        s2, _, reward, done, _ = run(s, WAIT, seed)
        assert done and s2.player.hp == 0
        assert reward == approx(-2.06)


# ---------------------------------------------------------------------------
# Programs
# ---------------------------------------------------------------------------

def test_34_push():
    s = M.from_scenario(F(3, 3, energy=2, ownedPrograms=[act("push")], enemies=[
        enemy("daemon", 4, 3), enemy("virus", 4, 4), enemy("glitch", 0, 0)]))
    s2, _, reward, _, _ = run(s, act("push"))
    assert positions(s2) == [(5, 3), (5, 5), (0, 0)]
    assert reward == approx(-0.11)
    assert s2.turn == 0


def test_35_pull():
    s = M.from_scenario(F(3, 3, energy=2, ownedPrograms=[act("pull")], enemies=[
        enemy("daemon", 5, 3), enemy("virus", 4, 4), enemy("glitch", 3, 4)]))
    s2, obs, reward, _, _ = run(s, act("pull"))
    assert positions(s2) == [(4, 3), (3, 4), (3, 4)]
    assert obs[2][3][4][0] == 1.0 and obs[2][3][4][2] == 0.0
    assert reward == approx(-0.11)


def test_36_crash():
    s = M.from_scenario(F(3, 3, credits=3, energy=2, ownedPrograms=[act("crash")],
                          blocks=[data_block(4, 4, 5)],
                          enemies=[enemy("virus", 2, 2), enemy("daemon", 3, 5)],
                          transmissions=[trans(2, 3, 2)]))
    s2, _, reward, _, _ = run(s, act("crash"))
    assert s2.cell(4, 4).content == M.EMPTY
    assert [(e.type, pos(e)) for e in s2.enemies] == [(M.DAEMON, (3, 5))]
    assert s2.transmissions == []
    assert reward == approx(0.34)


def test_37_warp_onto_exit():
    s = M.from_scenario(F(0, 0, credits=2, energy=2, ownedPrograms=[act("warp")],
                          enemies=[enemy("virus", 5, 5)]))
    for seed in SEEDS:
        s2, _, reward, _, _ = run(s, act("warp"), seed)
        assert pos(s2.player) == (5, 5) and s2.stage == 2
        assert reward == approx(1.59)


def test_38_warp_onto_daemon():
    s = M.from_scenario(F(0, 0, credits=2, energy=2, ownedPrograms=[act("warp")],
                          enemies=[enemy("daemon", 3, 3)]))
    s2, _, reward, _, _ = run(s, act("warp"))
    assert pos(s2.player) == (3, 3) and s2.enemies == [] and s2.turn == 0
    assert reward == approx(0.39)


def test_39_poly_kills_damaged_daemon():
    s = M.from_scenario(F(3, 3, credits=1, energy=1, ownedPrograms=[act("poly")],
                          enemies=[enemy("daemon", 3, 5, hp=1)]))
    for seed in SEEDS:
        s2, _, reward, _, _ = run(s, act("poly"), seed)
        assert s2.enemies == []
        assert reward == approx(0.19)


def test_40_row():
    s = M.from_scenario(F(3, 3, credits=3, energy=1, attackDamage=2, ownedPrograms=[act("row")],
                          enemies=[enemy("daemon", 3, 0, hp=3), enemy("virus", 3, 5, hp=2),
                                   enemy("virus", 4, 3)]))
    s2, obs, reward, _, _ = run(s, act("row"))
    assert [(e.type, pos(e), e.hp) for e in s2.enemies] == [
        (M.DAEMON, (3, 0), 1), (M.VIRUS, (4, 3), 2)]
    assert obs[2][3][0][5] == 1.0
    assert reward == approx(0.09)


def test_41_d_bom():
    s = M.from_scenario(F(0, 0, credits=3, ownedPrograms=[act("d_bom")], enemies=[
        enemy("daemon", 3, 3), enemy("daemon", 5, 5), enemy("virus", 4, 4, hp=1),
        enemy("glitch", 2, 3), enemy("cryptog", 3, 5)]))
    s2, _, reward, _, _ = run(s, act("d_bom"))
    assert [(e.type, pos(e), e.hp, e.stunned) for e in s2.enemies] == [
        (M.DAEMON, (5, 5), 3, False), (M.GLITCH, (2, 3), 1, True),
        (M.CRYPTOG, (3, 5), 2, False)]
    assert reward == approx(0.44)


def test_42_hack():
    s = M.from_scenario(F(3, 3, credits=2, energy=2, ownedPrograms=[act("hack")],
                          siphonedCells=[[1, 1]], enemies=[enemy("daemon", 1, 1)]))
    s2, _, reward, _, _ = run(s, act("hack"))
    assert (s2.enemies[0].hp, s2.enemies[0].stunned) == (2, True)
    assert reward == approx(-0.21)


def test_43_atk_plus():
    s = M.from_scenario(F(3, 3, credits=20, energy=20, ownedPrograms=[act("atk+")]))
    s, *_ = run(s, act("atk+"))
    s, obs, *_ = run(s, act("atk+"))
    assert s.player.attack == 3 and obs[0][7] == 1.0
    assert not M.legal_actions(s)[act("atk+")]
    for a in (3, 3, 0, 0):          # walk (3,3) -> (5,5), the exit
        s, _, _, _, info = run(s, a)
    assert info["stage_completed"] and s.stage == 2
    assert M.legal_actions(s)[act("atk+")]
    s, obs, *_ = run(s, act("atk+"))
    assert s.player.attack == 4 and obs[0][7] == 1.5


def test_44_undo():
    s = M.from_scenario(F(3, 3, credits=5, energy=3, ownedPrograms=[WAIT, act("crash"), act("undo")],
                          blocks=[data_block(4, 4, 5)]))
    assert not M.legal_actions(s)[act("undo")]
    s, _, reward, _, _ = run(s, WAIT)
    assert reward == approx(-0.06) and len(s.history) == 1
    s, _, reward, _, _ = run(s, act("crash"))
    assert reward == approx(-0.26)
    assert (s.player.credits, s.player.energy) == (2, 0)
    assert s.cell(4, 4).content == M.EMPTY
    s, _, reward, _, _ = run(s, act("undo"))
    assert (s.player.credits, s.player.energy) == (5, 2)
    assert s.cell(4, 4).content == M.BLOCK
    assert s.history == [] and not M.legal_actions(s)[act("undo")]
    assert reward == approx(0.24)


def test_45_score():
    s = M.from_scenario(F(3, 3, energy=5, stage=2, ownedPrograms=[act("score")]))
    s2, _, reward, _, _ = run(s, act("score"))
    assert s2.player.score == 6
    assert reward == approx(2.74)
    s8 = M.from_scenario(F(3, 3, energy=5, stage=8, ownedPrograms=[act("score")]))
    assert not M.legal_actions(s8)[act("score")]


def test_46_exch():
    s = M.from_scenario(F(3, 3, credits=8, ownedPrograms=[act("exch")]))
    s2, _, reward, _, _ = run(s, act("exch"))
    assert (s2.player.credits, s2.player.energy) == (4, 4)
    assert reward == approx(-0.01)
    s3 = M.from_scenario(F(3, 3, credits=3, ownedPrograms=[act("exch")]))
    assert not M.legal_actions(s3)[act("exch")]


def test_47_reset():
    for hp, expected in ((2, 0.49), (1, 1.79)):
        s = M.from_scenario(F(3, 3, energy=4, hp=hp, ownedPrograms=[act("reset")]))
        s2, _, reward, _, _ = run(s, act("reset"))
        assert s2.player.hp == 3
        assert reward == approx(expected)
    s = M.from_scenario(F(3, 3, energy=4, hp=3, ownedPrograms=[act("reset")]))
    assert not M.legal_actions(s)[act("reset")]


def test_48_delay():
    s = M.from_scenario(F(3, 3, credits=1, energy=2, ownedPrograms=[act("delay")],
                          transmissions=[trans(0, 0, 2)]))
    s2, obs, reward, _, _ = run(s, act("delay"))
    assert s2.transmissions[0].timer == 5
    assert obs[2][0][0][36] == 1.0
    assert reward == approx(-0.16)


def test_49_reduc():
    s = M.from_scenario(F(3, 3, credits=2, energy=1, ownedPrograms=[act("reduc")], blocks=[
        data_block(4, 3, 3, 3), data_block(4, 4, 2, 2, siphoned=True)]))
    g0 = grid(s)
    s2, obs, reward, _, _ = run(s, act("reduc"))
    g = obs[2]
    assert g[4][3][35] == M.f32(2 / 9) and g[4][3][10] == M.f32(3 / 9)
    assert g[4][4] == g0[4][4]
    assert reward == approx(-0.16)


def test_50_siph_plus():
    s = M.from_scenario(F(3, 3, credits=5, ownedPrograms=[act("siph+")]))
    s2, _, reward, _, info = run(s, act("siph+"))
    assert s2.player.siphons == 1
    assert reward == approx(-0.26)
    assert info["reward_terms"]["pickup"] == 0.0


# ---------------------------------------------------------------------------
# Observation encoding
# ---------------------------------------------------------------------------

def test_51_player_vector():
    s = M.from_scenario(F(2, 3, hp=2, credits=60, energy=7, stage=3, dataSiphons=4,
                          attackDamage=2, showActivated=True))
    player = M.observe(s)[0]
    expected = [0.4, 0.6, 0.6667, 1.0, 0.14, 0.2857, 0.4, 0.5, 1, 0]
    assert player == pytest.approx(expected, abs=1e-4)
    assert player[2] == M.f32(2 / 3) and player[5] == M.f32(2 / 7)


def test_52_cryptog_visibility():
    s = M.from_scenario(F(0, 0, credits=2, ownedPrograms=[act("show")],
                          enemies=[enemy("cryptog", 5, 5), enemy("cryptog", 0, 4)]))
    g = grid(s)
    assert g[5][5][0:7] == [0.0] * 7
    assert g[0][4][3] == 1.0 and g[0][4][4] == M.f32(2 / 3)
    s2, obs, *_ = run(s, act("show"))
    assert obs[2][5][5][3] == 1.0


def test_53_block_and_cell_channels():
    s = M.from_scenario(F(0, 0, blocks=[
        data_block(1, 1, 6, 6), program_block(1, 2, "crash", 6),
        {"row": 2, "col": 2, "type": "question", "hidden": "program", "programType": "warp",
         "spawnCount": 5},
        {"row": 2, "col": 3, "type": "question", "hidden": "data", "points": 4}],
        resources=[{"row": 0, "col": 5, "dataSiphon": True}, {"row": 0, "col": 5, "energy": 2}]))
    g = grid(s)
    d = g[1][1]
    assert (d[7], d[10], d[35], d[11]) == (1.0, M.f32(6 / 9), M.f32(6 / 9), 0.0)
    pb = g[1][2]
    assert (pb[8], pb[12 + M.CRASH], pb[10], pb[35]) == (1.0, 1.0, 0.0, M.f32(6 / 9))
    assert sum(pb[7:36]) == pytest.approx(2 + 6 / 9)
    for x in (g[2][2], g[2][3]):
        assert x[9] == 1.0 and sum(x) == 1.0
    assert g[0][5][39] == 1.0 and g[0][5][38] == M.f32(2 / 3)
    assert g[5][5][40] == 1.0


def test_flat_layout():
    s = M.from_scenario(F(1, 2, credits=3, ownedPrograms=[act("warp")],
                          enemies=[enemy("daemon", 4, 5)]))
    obs = M.observe(s)
    flat = M.flat_observation(obs)
    assert len(flat) == 10 + 23 + 36 * 42 == 1545
    assert flat[10 + M.WARP] == 1.0
    assert flat[33 + (4 * 6 + 5) * 42 + 1] == 1.0     # [row][col][channel], row-major


def test_54_siphon_enemy_and_long_timer():
    s = M.from_scenario(F(0, 0, enemies=[enemy("virus", 0, 3, hp=1, spawnedFromSiphon=True)],
                          transmissions=[trans(4, 4, 7)]))
    g = grid(s)
    assert (g[0][3][0], g[0][3][4], g[0][3][6]) == (1.0, M.f32(1 / 3), 1.0)
    assert g[4][4][36] == 1.0


# ---------------------------------------------------------------------------
# Beyond §19: illegal actions, scenario round trip, enumeration
# ---------------------------------------------------------------------------

def test_illegal_action_ends_episode_unchanged():
    s = M.from_scenario(F(0, 0))
    for a in (1, 2, 4, 5, 27, 28, -1):
        s2, _, reward, done, info = run(s, a)
        assert reward == 0.0 and done and info["illegal"]
        assert M.to_scenario(s2) == M.to_scenario(s)


def test_scenario_round_trip():
    rng = random.Random(7)
    for _ in range(50):
        s = M.new_game(rng)
        d = M.to_scenario(s)
        d.pop("undoDepth")
        assert M.to_scenario(M.from_scenario(d)) == {**d, "undoDepth": 0}


def test_enumeration_lists_every_activation_order():
    # two daemons racing for the one cell next to the player: order decides who gets it
    s = M.from_scenario(F(0, 0, energy=1, ownedPrograms=[WAIT],
                          enemies=[enemy("daemon", 1, 1), enemy("daemon", 0, 2)],
                          blocks=[data_block(1, 2, 1), data_block(2, 1, 1)]))
    outs = M.enumerate_outcomes(s, WAIT)
    assert len(outs) == 2
    assert {tuple(positions(o[0])) for o in outs} == {((1, 0), (0, 1)), ((0, 1), (0, 3))}
