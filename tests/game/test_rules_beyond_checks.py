"""Rules the §19 observable checks leave uncovered, each pinned by a scenario.

PUSH/PULL collision winners (§9.1), D_BOM's fixed splash damage (§9.16), UNDO losing
origin flags (§9.10 [QUIRK]), history cleared at a stage change (§9.10 [RESOLUTION]),
bounded history (§9.10), STEP keeping stuns across a swallowed phase (§10), line of
fire hitting the first transmission before an enemy on the same cell (§7), an
out-of-range action (§3), and `restart` (auto-reset) giving the new game itself.
"""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hm.game as game


@pytest.fixture(scope="module")
def g(step, legal_actions, observe, scenario, hmx):
    ns = types.SimpleNamespace(**vars(hmx))
    ns.step, ns.legal, ns.observe, ns.scenario = step, legal_actions, observe, scenario
    return ns


def cells(entries):
    return [(e["row"], e["col"]) for e in entries]


@pytest.mark.parametrize("order, expected", [
    ("virus first", [(5, 5), (5, 4)]),
    ("daemon first", [(5, 5), (4, 4)]),
])
def test_push_collision_first_in_list_order_wins(g, order, expected):
    # From the player at (3, 3), (4, 4) is pushed diagonally and (5, 4) sideways, both to
    # (5, 5): the first in list order moves there, the other stays where it was.
    PUSH = g.ACTION["PUSH"]
    enemies = [g.virus(4, 4), g.daemon(5, 4)]
    if order == "daemon first":
        enemies.reverse()
    d0 = g.scenario(3, 3, energy=2, ownedPrograms=[PUSH], enemies=enemies)
    d = game.to_dict(g.step(game.from_dict(d0), PUSH)[0])
    assert cells(d["enemies"]) == expected


def test_pull_collision_first_in_list_order_wins(g):
    # Both are pulled to (4, 3): the glitch from (5, 2) diagonally, the daemon from (5, 3)
    # straight. The glitch is first in list order, so it moves and the daemon stays.
    PULL = g.ACTION["PULL"]
    d0 = g.scenario(3, 3, energy=2, ownedPrograms=[PULL],
                    enemies=[g.glitch(5, 2), g.daemon(5, 3)])
    d = game.to_dict(g.step(game.from_dict(d0), PULL)[0])
    assert cells(d["enemies"]) == [(4, 3), (5, 3)]


def test_d_bom_splash_is_one_damage_whatever_the_attack(g):
    DBOM = g.ACTION["D_BOM"]
    d0 = g.scenario(0, 0, credits=3, attackDamage=3, ownedPrograms=[DBOM],
                    enemies=[g.daemon(3, 3), g.daemon(4, 4, hp=3)])
    s, obs, r, done, info = g.step(game.from_dict(d0), DBOM)
    d = game.to_dict(s)
    assert len(d["enemies"]) == 1
    survivor = d["enemies"][0]
    assert (survivor["row"], survivor["col"], survivor["hp"], survivor["stunned"]) == (4, 4, 2, True)
    assert int(info["reward_terms"]["kills"] / 0.3 + 0.5) == 1


def test_undo_restores_entities_without_origin_flags(g):
    WAIT, UNDO = g.ACTION["WAIT"], g.ACTION["UNDO"]
    d0 = g.scenario(0, 0, credits=2, energy=3, ownedPrograms=[WAIT, UNDO],
                    enemies=[g.daemon(5, 5, from_siphon=True, from_task=True)],
                    transmissions=[g.transmission(3, 3, 5, from_siphon=True)])
    s, *_ = g.step(game.from_dict(d0), WAIT)
    d = game.to_dict(s)
    assert d["enemies"][0]["spawnedFromSiphon"] and d["enemies"][0]["isFromScheduledTask"]
    s, *_ = g.step(s, UNDO)
    d = game.to_dict(s)
    assert len(d["enemies"]) == 1 and len(d["transmissions"]) == 1
    assert not d["enemies"][0]["spawnedFromSiphon"]
    assert not d["enemies"][0]["isFromScheduledTask"]
    assert not d["transmissions"][0]["spawnedFromSiphon"]
    r, c = d["enemies"][0]["row"], d["enemies"][0]["col"]
    assert np.asarray(g.observe(s).grid)[r, c, 6] == 0.0   # fromSiphon channel cleared


def test_history_cleared_at_stage_change(g):
    WAIT, UNDO = g.ACTION["WAIT"], g.ACTION["UNDO"]
    d0 = g.scenario(5, 4, credits=2, energy=3, ownedPrograms=[WAIT, UNDO])
    s, *_ = g.step(game.from_dict(d0), WAIT)
    assert int(s.history.depth) == 1 and g.legal(s)[UNDO]
    s, obs, r, done, info = g.step(s, 3)          # right, onto the exit (5, 5)
    assert bool(info["stage_completed"])
    assert int(s.history.depth) == 0 and not g.legal(s)[UNDO]


def test_history_is_bounded_and_drops_the_oldest(g):
    WAIT, UNDO = g.ACTION["WAIT"], g.ACTION["UNDO"]
    d0 = g.scenario(0, 0, credits=20, energy=20, ownedPrograms=[WAIT, UNDO])
    s = game.from_dict(d0)
    for _ in range(12):
        s, *_ = g.step(s, WAIT)
    assert int(s.history.depth) == game.constants.HISTORY_CAPACITY
    assert int(s.turn) == 12
    turns = []
    for _ in range(game.constants.HISTORY_CAPACITY):
        s, *_ = g.step(s, UNDO)
        turns.append(int(s.turn))
    # Each UNDO goes one executed phase further back; the oldest 4 were dropped.
    assert turns == list(range(12, 12 - game.constants.HISTORY_CAPACITY, -1))
    assert not g.legal(s)[UNDO]


def test_step_keeps_stun_across_a_swallowed_phase(g):
    STEP, WAIT = g.ACTION["STEP"], g.ACTION["WAIT"]
    d0 = g.scenario(0, 0, energy=5, ownedPrograms=[STEP, WAIT],
                    enemies=[g.daemon(4, 0, stunned=True)])
    s, *_ = g.step(game.from_dict(d0), STEP)
    s, *_ = g.step(s, WAIT)                        # swallowed: nothing moves, stun stays
    d = game.to_dict(s)
    assert cells(d["enemies"]) == [(4, 0)] and d["enemies"][0]["stunned"]
    assert d["turn"] == 0 and not d["stepActive"]
    s, *_ = g.step(s, WAIT)                        # executed: stunned, so it skips, then clears
    d = game.to_dict(s)
    assert cells(d["enemies"]) == [(4, 0)] and not d["enemies"][0]["stunned"]
    assert d["turn"] == 1


def test_line_of_fire_hits_transmission_before_enemy_on_same_cell(g):
    d0 = g.scenario(0, 3, enemies=[g.daemon(4, 3)],
                    transmissions=[g.transmission(4, 3, 3)])
    s, obs, r, done, info = g.step(game.from_dict(d0), 0)
    d = game.to_dict(s)
    assert d["transmissions"] == []
    assert d["enemies"][0]["hp"] == 3
    assert (d["player"]["row"], d["player"]["col"]) == (0, 3)


@pytest.mark.parametrize("action", [-1, 28, 1000])
def test_out_of_range_action_is_illegal(g, action):
    s0 = game.from_dict(g.scenario(3, 3))
    s, obs, r, done, info = g.step(s0, action)
    assert bool(done) and float(r) == 0.0 and bool(info["illegal"])
    assert game.to_dict(s) == game.to_dict(s0)


def test_restart_is_the_new_game_where_done(g):
    # A game with a non-empty UNDO stack, restarted to a new game: the same game as the
    # new one (its stack is empty, the old snapshots are never read), step for step.
    WAIT, UNDO = g.ACTION["WAIT"], g.ACTION["UNDO"]
    s = game.from_dict(g.scenario(0, 0, credits=20, energy=20, ownedPrograms=[WAIT, UNDO]))
    for _ in range(3):
        s, *_ = g.step(s, WAIT)
    assert int(s.history.depth) == 3
    fresh, _ = jax.jit(game.reset)(jax.random.key(7))
    restarted = jax.jit(game.restart)(jnp.asarray(True), s, fresh)
    assert game.to_dict(restarted) == game.to_dict(fresh)
    assert (int(restarted.history.depth), int(restarted.history.top)) == (
        int(fresh.history.depth), int(fresh.history.top))
    a, b = restarted, fresh
    for i, action in enumerate([WAIT, 0, 3, UNDO, 1, 4]):
        if not bool(g.legal(a)[action]):
            continue
        assert np.array_equal(np.asarray(g.legal(a)), np.asarray(g.legal(b)))
        key = jax.random.key(100 + i)
        a, obs_a, r_a, *_ = g.step(a, action, key)
        b, obs_b, r_b, *_ = g.step(b, action, key)
        assert game.to_dict(a) == game.to_dict(b) and float(r_a) == float(r_b)
        assert np.array_equal(np.asarray(obs_a.flat()), np.asarray(obs_b.flat()))
    kept = jax.jit(game.restart)(jnp.asarray(False), s, fresh)
    assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(kept), jax.tree.leaves(s)))
