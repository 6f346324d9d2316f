"""Curriculum starts (docs/rules.md#curriculum-starts): games that begin at a later stage.

Stage 1 is `new_game` bit for bit; a start at stage k is a valid game at stage k (the
invariants of test_invariants.py hold on it and on random play from it), holds what the
documented rule gives, and round-trips through the scenario format; `curriculum_stage`
draws the stages the share and the highest stage ask for.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_invariants import _sample_actions, _violations

import hm.game as game
from hm.game import constants as C
from hm.game import generation, scenario

GAMES = 128        # the batch most tests share, so each of its programs is compiled once
STAGES = range(2, C.NUM_STAGES + 1)


def keys(n=GAMES, seed=0):
    return jax.random.split(jax.random.key(seed), n)


# Each compiled once for the module (engine functions are never run op by op here).
@jax.jit
def starts_at(keys, stage):
    return jax.vmap(generation.curriculum_game, (0, None))(keys, stage)


new_games = jax.jit(jax.vmap(generation.new_game))
resets = jax.jit(jax.vmap(game.reset))
reset_where_each = jax.jit(jax.vmap(game.reset_where))
observe = jax.jit(game.observe)


def one(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_stage_one_is_new_game_bit_for_bit():
    ks = keys()
    assert_same(starts_at(ks, 1), new_games(ks))
    assert_same(jax.jit(generation.curriculum_game)(ks[0], 1), jax.jit(generation.new_game)(ks[0]))


def test_the_auto_reset_at_stage_one_makes_new_games():
    """`hm.game.reset_where` at stage 1 (its default) puts `new_game(key)` where done."""
    n = GAMES
    state, obs = resets(keys(n, seed=1))
    done = jnp.arange(n) % 3 == 0
    after, after_obs = reset_where_each(done, state, obs, keys(n))
    after_flat = np.asarray(after_obs.flat())
    fresh, state, after = jax.device_get((new_games(keys(n)), state, after))
    for i, ended in enumerate(np.asarray(done)):
        expect = one(fresh if ended else state, i)
        assert scenario.states_equal(one(after, i), expect)
        np.testing.assert_array_equal(after_flat[i], observe(expect).flat())


def test_the_batched_auto_reset_at_given_stages_is_each_game_alone():
    """`vmap(reset_where)` with a start stage per game (its `where_selected` rule with the
    stage argument) equals `reset_where` on each game alone."""
    n = 8
    state, obs = one(resets(keys(seed=2)), slice(n))     # 8 of the module's batch of new games
    done = jnp.array([True, False, True, True, False, True, False, True])
    stage = jnp.array([1, 8, 2, 5, 3, 8, 1, 3], jnp.int32)
    after, after_obs = jax.jit(jax.vmap(game.reset_where))(done, state, obs, keys(n, seed=4), stage)
    alone = jax.jit(game.reset_where)
    for i in range(n):
        single, single_obs = alone(done[i], one(state, i), one(obs, i), keys(n, seed=4)[i], stage[i])
        assert scenario.states_equal(one(after, i), single, ignore_history=False)
        np.testing.assert_array_equal(after_obs.values[i], single_obs.values)
        assert int(single.stage) == (int(stage[i]) if done[i] else 1)


@pytest.mark.parametrize("stage", STAGES)
def test_a_start_at_stage_k_is_a_valid_game_at_stage_k(stage):
    s = jax.device_get(starts_at(keys(), stage))
    p, e, t, b = s.player, s.enemies, s.transmissions, s.board
    assert np.all(s.stage == stage)
    assert np.all(s.interval == C.INTERVAL_BASE - stage) and np.all(s.next_task == s.interval)
    assert np.all(s.turn == 0) and np.all(s.pending == 0) and np.all(s.history.depth == 0)
    assert not np.any(s.won | s.show | s.calm | s.step_active)
    assert np.all((p.hp >= 2) & (p.hp <= C.MAX_HP)) and np.all(p.attack == 1)
    # what the rule gives: the starting bonus plus up to 8 credits and energy, 9 score and
    # one program per completed stage, and up to 2 data siphons
    bonus_siphons = C.STARTING_BONUS_SIPHONS
    assert np.all((p.credits >= 0) & (p.credits <= C.STARTING_BONUS_CREDITS + 8 * (stage - 1)))
    assert np.all((p.energy >= 0) & (p.energy <= C.STARTING_BONUS_ENERGY + 8 * (stage - 1)))
    assert np.all((p.score >= 0) & (p.score <= 9 * (stage - 1)))
    assert np.all((p.data_siphons >= 0) & (p.data_siphons <= bonus_siphons + 2))
    assert np.all(np.sum(p.owned, axis=1) <= stage - 1)
    assert not np.any(e.alive)
    # the stage's own transmissions and up to stage // 2 carried ones, on free cells
    count = np.sum(t.alive, axis=1)
    assert np.all((count >= stage) & (count <= stage + stage // 2))
    assert np.all(~t.alive | (t.timer == 1)) and not np.any(t.from_task | t.from_siphon)
    cells = np.where(t.alive, t.row.astype(int) * 6 + t.col, -1)
    player = np.asarray(p.row * 6 + p.col)
    assert not np.any(cells == player[:, None])
    blocked = np.take_along_axis(np.asarray(b.content), np.maximum(cells, 0), axis=1) == C.BLOCK
    assert not np.any(blocked & (cells >= 0))
    assert all(len(set(row[row >= 0])) == np.sum(row >= 0) for row in cells), "one per cell"
    assert np.all(np.sum(b.content == C.EXIT, axis=1) == 1)
    assert not np.any((b.content == C.BLOCK)[:, np.array(C.CORNER_CELLS)])
    assert np.all(np.isin(player, C.CORNER_CELLS))
    assert np.all(np.asarray(b.content)[np.arange(GAMES), player] != C.EXIT)


def test_the_inventory_grows_with_the_stage_as_documented():
    """Means over 2048 starts against the rule's: 4 credits, 4 energy, 4.5 score and ½ a
    program per completed stage (the starting bonus adds 10/3 credits, 11/3 energy)."""
    ks = keys(2048, seed=3)
    for stage in (2, 5, 8):
        p = jax.device_get(starts_at(ks, stage).player)
        done = stage - 1
        assert np.mean(p.credits) == pytest.approx(10 / 3 + 4 * done, abs=0.35 + 0.1 * done)
        assert np.mean(p.energy) == pytest.approx(11 / 3 + 4 * done, abs=0.35 + 0.1 * done)
        assert np.mean(p.score) == pytest.approx(4.5 * done, abs=0.15 * done + 0.2)
        assert np.mean(np.sum(p.owned, axis=1)) == pytest.approx(0.5 * done, abs=0.08 * done)
        assert np.mean(p.hp == 2) == pytest.approx(0.25, abs=0.04)
        assert np.mean(p.data_siphons) == pytest.approx(1 / 3 + 1, abs=0.08)


@pytest.mark.parametrize("stage", [2, 5, 8])
def test_starts_round_trip_through_the_scenario_format(stage):
    """The first 16 starts of the module's batch at `stage`."""
    s = jax.device_get(starts_at(keys(), stage))
    for i in range(16):
        start = one(s, i)
        again = game.from_dict(game.to_dict(start))
        assert scenario.states_equal(again, start)
        np.testing.assert_array_equal(observe(again).flat(), observe(start).flat())


def test_random_play_from_curriculum_starts_keeps_the_invariants():
    """Random legal play from starts at every stage, with curriculum auto-resets: the
    per-step invariants of test_invariants.py hold and stages only grow."""
    games, steps = 112, 60
    stage_of = jnp.asarray(np.tile(np.arange(2, C.NUM_STAGES + 1), games // 7), jnp.int32)

    @jax.jit
    def run(key):
        start_key, key = jax.random.split(key)
        state, obs = jax.vmap(game.reset)(jax.random.split(start_key, games), stage_of)

        def body(carry, key):
            state, obs = carry
            k_act, k_step, k_reset = jax.random.split(key, 3)
            mask = jax.vmap(game.legal_actions)(state)
            action = _sample_actions(k_act, mask)
            new, obs, reward, done, info = jax.vmap(game.step)(state, action, jax.random.split(k_step, games))
            bad = jax.vmap(_violations)(state, new, reward, done, info, mask, action)
            bad["below_start"] = (new.stage < stage_of).astype(jnp.int32)
            new, obs = jax.vmap(game.reset_where)(done, new, obs, jax.random.split(k_reset, games), stage_of)
            bad["reset_stage"] = (done & (new.stage != stage_of)).astype(jnp.int32)
            return (new, obs), (jax.tree.map(jnp.sum, bad), jnp.sum(done))

        _, (bad, done) = jax.lax.scan(body, (state, obs), jax.random.split(key, steps))
        return bad, jnp.sum(done)

    bad, episodes = jax.device_get(run(jax.random.key(11)))
    totals = {k: int(np.sum(v)) for k, v in bad.items()}
    assert all(v == 0 for v in totals.values()), {k: v for k, v in totals.items() if v}
    assert episodes > 20   # the play crossed episode boundaries (curriculum auto-resets)


def test_curriculum_stage_draws_what_the_share_and_highest_stage_ask():
    ks = keys(8000, seed=5)
    draw = jax.jit(jax.vmap(generation.curriculum_stage, (0, None, None)))
    assert np.all(draw(ks, 0.0, 8) == 1)
    always = np.asarray(draw(ks, 1.0, 8))
    assert always.min() == 2 and always.max() == 8
    counts = np.bincount(always, minlength=9)[2:]
    assert np.all(np.abs(counts / len(ks) - 1 / 7) < 0.015), counts
    assert set(np.unique(draw(ks, 1.0, 2))) == {2}
    half = np.asarray(draw(ks, 0.25, 4))
    assert np.mean(half > 1) == pytest.approx(0.25, abs=0.015)
    assert set(np.unique(half)) == {1, 2, 3, 4}
    # per game: a batch of different shares and highest stages
    per_game = np.asarray(jax.jit(jax.vmap(generation.curriculum_stage))(
        ks[:4], jnp.array([0.0, 1.0, 1.0, 0.0]), jnp.array([8, 2, 3, 2], jnp.int32)))
    assert per_game[0] == 1 and per_game[1] == 2 and per_game[2] in (2, 3) and per_game[3] == 1
