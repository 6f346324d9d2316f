"""`hm.search`: Gumbel MuZero search over the real game.

Built scenarios check what a planner must do (take a one-step win, avoid a one-step
death, even against its prior); the rest check the contract: legal actions only, the
prior with one simulation, the end of a game in the tree, determinism, one compilation
per setting, and the reward. Every search here is 8 games of one `Search` setting or
two, so the suite compiles the search few times.
"""

import functools
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hm import game, search
from hm.game import constants as C

GAMES = 8
SEARCH = search.Search(num_simulations=8, gumbel_scale=0.0)
UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3


class FixedEvaluator(search.AbstractEvaluator):
    """Game i's logits and value are `logits[i]` and `value[i]` at every node of its tree.

    Every search here uses this one evaluator class with `GAMES` games, so the tests
    share the compiled search of each setting. `traces` counts how often a search was
    traced (the body runs only while tracing).
    """

    logits: jax.Array = eqx.field(converter=lambda x: jnp.asarray(x, jnp.float32))   # [GAMES, actions]
    value: jax.Array = eqx.field(converter=lambda x: jnp.asarray(x, jnp.float32))    # [GAMES]
    traces: ClassVar[list[int]] = [0]

    def __call__(self, states, obs):
        FixedEvaluator.traces[0] += 1
        copies = obs.shape[0] // self.logits.shape[0]   # `root_searches` copies of the games
        return jnp.tile(self.logits, (copies, 1)), jnp.tile(self.value, copies)


def favouring(action: int, margin: float = 3.0) -> FixedEvaluator:
    """A prior that prefers `action` by `margin` logits over every other action; value 0."""
    logits = jnp.zeros((GAMES, C.NUM_ACTIONS), jnp.float32).at[:, action].set(margin)
    return FixedEvaluator(logits=logits, value=jnp.zeros(GAMES, jnp.float32))


def batch(state: game.GameState, n: int = GAMES) -> game.GameState:
    return jax.tree.map(lambda x: jnp.stack([x] * n), state)


@jax.jit
@jax.vmap
def _played(key):
    state, _ = game.reset(key)

    def move(state, key):
        mask = game.legal_actions(state)
        action = jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)
        after, _, _, done, _ = game.step(state, action, key)
        return jax.tree.map(lambda a, b: jnp.where(done, b, a), after, state), None

    return jax.lax.scan(move, state, jax.random.split(key, 12))[0]


def played_states(seed: int = 0) -> game.GameState:
    """`GAMES` games after up to 12 random legal moves each (a move that would end a
    game is not taken, so every game is still running)."""
    return _played(jax.random.split(jax.random.key(seed), GAMES))


_step = jax.jit(jax.vmap(game.step))
_legal = jax.jit(jax.vmap(game.legal_actions))
# A search edge's reward for each game: one program whatever the weights and the bonus.
_edge_reward = eqx.filter_jit(lambda reward, *edge: jax.vmap(reward)(*edge))
_one_edge = eqx.filter_jit(lambda reward, *edge: reward(*edge))


# A stage-8 board with the exit one step to the right: that step wins the game.
WIN = game.from_dict({"player": {"row": 5, "col": 4}, "stage": 8, "exit": [5, 5]})
# One hp left and a virus next to the player: stepping up lets it strike (death, always);
# attacking it (right) survives (checked below against the game itself).
DEATH = game.from_dict({"player": {"row": 0, "col": 0, "hp": 1}, "enemies": [{"type": "virus", "row": 0, "col": 1}]})


def test_the_scenarios_are_what_they_claim():
    keys = jax.random.split(jax.random.key(0), GAMES)
    _, _, _, _, info = _step(batch(WIN), jnp.full(GAMES, RIGHT), keys)
    assert np.all(info["won"])
    _, _, _, _, info = _step(batch(DEATH), jnp.full(GAMES, UP), keys)
    assert np.all(info["died"])
    _, _, _, _, info = _step(batch(DEATH), jnp.full(GAMES, RIGHT), keys)
    assert not np.any(info["died"])
    assert set(np.nonzero(np.asarray(_legal(batch(DEATH))[0]))[0]) == {UP, RIGHT}


def test_takes_a_one_step_win_against_its_prior():
    out = search.plan(favouring(DOWN), batch(WIN), jax.random.key(1), SEARCH)
    np.testing.assert_array_equal(out.action, RIGHT)
    assert np.all(out.qvalues[:, RIGHT] > 500)


def test_avoids_a_one_step_death_against_its_prior():
    out = search.plan(favouring(UP), batch(DEATH), jax.random.key(2), SEARCH)
    np.testing.assert_array_equal(out.action, RIGHT)
    # the deadly edge: the death's reward, then nothing (terminal: value 0, discount 0)
    visited = out.visit_counts[:, UP] > 0
    assert np.all(visited)
    assert np.all(np.asarray(out.qvalues)[:, UP] < -1.0)


def test_on_a_quiet_board_the_distance_pull_heads_for_the_exit():
    # no enemy, no reward within reach, a prior and a value that say nothing: only the
    # pull towards the exit (5, 5) tells the moves apart
    quiet = game.from_dict({"player": {"row": 2, "col": 2}, "exit": [5, 5]})
    uniform = FixedEvaluator(logits=jnp.zeros((GAMES, C.NUM_ACTIONS)), value=jnp.zeros(GAMES))
    no_distance_reward = search.SearchReward({"distance": 0.0})
    out = search.plan(uniform, batch(quiet), jax.random.key(3), SEARCH, no_distance_reward)
    assert set(np.asarray(out.action).tolist()) <= {UP, RIGHT}


def test_never_picks_an_illegal_action():
    states = played_states()
    mask = np.asarray(_legal(states))
    # a prior that puts its weight on the actions illegal at the root
    evaluator = FixedEvaluator(logits=jnp.where(jnp.asarray(mask), -5.0, 5.0), value=jnp.zeros(GAMES))
    for seed in range(3):
        out = search.plan(evaluator, states, jax.random.key(seed), SEARCH)
        live = mask.any(axis=1)
        assert np.all(mask[np.arange(GAMES), np.asarray(out.action)][live])
        assert np.all(np.asarray(out.visit_counts)[~mask] == 0)
        assert np.all(np.asarray(out.policy)[~mask] < 1e-6)


def test_one_simulation_follows_the_prior():
    states = played_states(seed=1)
    mask = np.asarray(_legal(states))
    logits = jax.random.normal(jax.random.key(3), (GAMES, C.NUM_ACTIONS))
    evaluator = FixedEvaluator(logits=logits, value=jnp.arange(GAMES))
    out = search.plan(evaluator, states, jax.random.key(4), search.Search(num_simulations=1, gumbel_scale=0.0))
    np.testing.assert_array_equal(out.prior_value, np.arange(GAMES))
    expected = np.argmax(np.where(mask, np.asarray(logits), -np.inf), axis=1)
    live = mask.any(axis=1)
    np.testing.assert_array_equal(np.asarray(out.action)[live], expected[live])
    np.testing.assert_allclose(np.asarray(out.prior).sum(axis=1)[live], 1.0, rtol=1e-5)


def test_a_node_below_the_end_of_a_game_pays_nothing_and_has_no_future():
    node = jax.vmap(search.Node)(batch(WIN, 2), jnp.array([False, True]), jnp.zeros(2), jnp.full(2, 8), jnp.zeros(2))
    evaluator = FixedEvaluator(logits=jnp.zeros((2, C.NUM_ACTIONS)), value=jnp.full(2, 1000.0))
    params = (evaluator, search.SearchReward(), 0.99)
    output, child = jax.jit(search._recurrent_fn)(params, jax.random.key(0), jnp.array([RIGHT, RIGHT]), node)
    # game 0 wins on this edge: the victory's reward, then value 0 and discount 0
    assert float(output.reward[0]) > 500 and float(output.discount[0]) == 0 and float(output.value[0]) == 0
    assert bool(child.ended[0]) and bool(child.state.won[0])
    # game 1 had already ended: nothing is paid and its state does not change
    assert float(output.reward[1]) == 0 and float(output.discount[1]) == 0 and float(output.value[1]) == 0
    for new, old in zip(jax.tree.leaves(child.state), jax.tree.leaves(node.state)):
        np.testing.assert_array_equal(np.asarray(new)[1], np.asarray(old)[1])


def test_a_node_past_the_roots_stage_has_the_whole_distance_pull():
    # stage 3, the exit one step to the right: the step completes the stage, and the
    # player starts stage 4 away from its new exit; the pull counts the old exit reached
    exit_next = game.from_dict({"player": {"row": 5, "col": 4}, "stage": 3, "exit": [5, 5]})
    node = jax.vmap(search.Node)(batch(exit_next, 2), jnp.zeros(2, bool), jnp.ones(2), jnp.full(2, 3), jnp.full(2, 0.5))
    evaluator = FixedEvaluator(logits=jnp.zeros((2, C.NUM_ACTIONS)), value=jnp.zeros(2))
    params = (evaluator, search.SearchReward(), 0.99)
    output, child = jax.jit(search._recurrent_fn)(params, jax.random.key(0), jnp.array([RIGHT, LEFT]), node)
    np.testing.assert_array_equal(child.state.stage, [4, 3])
    assert not bool(child.ended[0])
    assert float(jax.vmap(search._exit_distance)(child.state)[0]) > 1   # the new exit is farther
    # game 0: at the exit of the root's stage (+0.5 × 1); game 1: one cell farther (−0.5)
    np.testing.assert_allclose(output.value, [0.5, -0.5])


def test_the_pull_doubles_every_patience_moves_made_on_the_stage():
    grows = search.Search(distance_weight=0.05, patience=50.0)
    np.testing.assert_allclose(grows.pull_weight(jnp.array([0, 50, 100, 125])), [0.05, 0.1, 0.2, 0.2 * 2 ** 0.5],
                               rtol=1e-6)
    # it stops doubling at MAX_DOUBLINGS, so however long a stage lasts it stays finite
    longest = grows.pull_weight(jnp.array([10**9]))
    np.testing.assert_allclose(longest, [0.05 * 2 ** search.MAX_DOUBLINGS], rtol=1e-6)
    np.testing.assert_allclose(search.Search(distance_weight=0.05, patience=float("inf")).pull_weight(jnp.array([100])),
                               [0.05])


def test_patience_counts_the_callers_moves_not_the_games_turn():
    # a prior that favours stepping away from the exit: after few moves on the stage the
    # pull is too weak to overrule it; after 2,000 (UNDO can rewind the game's turn to 0
    # but not the caller's count) it heads for the exit, whatever the game's turn says
    quiet = game.from_dict({"player": {"row": 2, "col": 2}, "exit": [5, 5]})
    late = game.from_dict({"player": {"row": 2, "col": 2}, "exit": [5, 5], "turn": 2000})
    no_distance_reward = search.SearchReward({"distance": 0.0})
    plan = lambda states, moves: np.asarray(search.plan(favouring(LEFT), batch(states), jax.random.key(3), SEARCH,
                                                        no_distance_reward, jnp.full(GAMES, moves, jnp.int32)).action)
    np.testing.assert_array_equal(plan(quiet, 0), LEFT)
    np.testing.assert_array_equal(plan(late, 0), LEFT)
    assert set(plan(quiet, 2000).tolist()) <= {UP, RIGHT}


class SpawnValue(search.AbstractEvaluator):
    """A value that depends on where the first transmission stands (its cell index)."""

    def __call__(self, states, obs):
        cell = (states.transmissions.row[:, 0].astype(jnp.float32) * C.COLS
                + states.transmissions.col[:, 0].astype(jnp.float32))
        return jnp.zeros((obs.shape[0], C.NUM_ACTIONS), jnp.float32), cell


# A scheduled task falls due on this turn: the enemy phase spawns a transmission on a
# random cell, so each draw of an edge's step may end somewhere else.
SPAWN = game.from_dict({"player": {"row": 0, "col": 0}, "turn": 0, "nextScheduledTaskTurn": 1})


def test_chance_samples_average_the_edges_first_estimate():
    # K draws of each edge's step: reward + discount × value is their mean, and the tree
    # keeps the first draw's child
    states = batch(SPAWN)
    node = jax.vmap(search.Node)(states, jnp.zeros(GAMES, bool), jax.vmap(search._exit_distance)(states), states.stage,
                                 jnp.full(GAMES, 0.5))
    params = (SpawnValue(), search.SearchReward(), 0.9)
    actions = jnp.full(GAMES, UP, jnp.int32)
    key, k = jax.random.key(7), 4
    output, child = jax.jit(search._recurrent_fn, static_argnames="samples")(params, key, actions, node, samples=k)

    @jax.jit
    def draw(keys):
        one, obs, paid, _ = jax.vmap(functools.partial(search._step, params[1]))(node, actions, keys)
        value = SpawnValue()(one.state, obs)[1] + 0.5 * jax.vmap(search._pull)(one)
        return paid + 0.9 * value, one

    draws = [(np.asarray(estimate), one) for estimate, one in
             map(draw, jax.random.split(key, k * GAMES).reshape(k, GAMES))]
    mean = np.mean([estimate for estimate, _ in draws], axis=0)
    np.testing.assert_allclose(np.asarray(output.reward + output.discount * output.value), mean, rtol=1e-5)
    for kept, first in zip(jax.tree.leaves(child.state), jax.tree.leaves(draws[0][1].state)):
        np.testing.assert_array_equal(np.asarray(kept), np.asarray(first))
    # the draws differ (the transmission's cell), so the mean is not the first draw's
    assert np.any(np.abs(draws[0][0] - mean) > 0.1)


def test_is_deterministic_for_a_key_and_random_across_keys():
    states = played_states(seed=2)
    evaluator = favouring(RIGHT, margin=0.5)
    a = search.plan(evaluator, states, jax.random.key(5), SEARCH)
    b = search.plan(evaluator, states, jax.random.key(5), SEARCH)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # the enemy phases the tree samples come from the key
    others = [search.plan(evaluator, states, jax.random.key(k), SEARCH).qvalues for k in range(6, 10)]
    assert any(not np.array_equal(np.asarray(a.qvalues), np.asarray(o)) for o in others)


def test_compiles_once_per_setting():
    states = played_states(seed=3)
    search.plan(favouring(RIGHT), states, jax.random.key(0), SEARCH)
    traced = FixedEvaluator.traces[0]
    for seed in range(1, 4):   # new keys, new weights, new games: no new program
        logits = jax.random.normal(jax.random.key(seed), (GAMES, C.NUM_ACTIONS))
        search.plan(FixedEvaluator(logits=logits, value=jnp.full(GAMES, float(seed))),
                    played_states(seed=seed), jax.random.key(seed), SEARCH)
    assert FixedEvaluator.traces[0] == traced


def test_root_searches_merge_into_one_legal_choice():
    states = played_states(seed=4)
    mask = np.asarray(_legal(states))
    out = search.plan(favouring(RIGHT, margin=0.5), states, jax.random.key(0),
                      search.Search(num_simulations=8, root_searches=2))
    live = mask.any(axis=1)
    assert np.all(mask[np.arange(GAMES), np.asarray(out.action)][live])
    # two searches of 8 simulations each: 16 visits at every live root
    np.testing.assert_array_equal(np.asarray(out.visit_counts).sum(axis=1)[live], 16)
    np.testing.assert_allclose(np.asarray(out.policy).sum(axis=1), 1.0, rtol=1e-5)


def test_the_default_reward_is_the_games_and_weights_and_bonus_apply():
    states = played_states(seed=5)
    actions = jnp.argmax(_legal(states), axis=1).astype(jnp.int32)
    keys = jax.random.split(jax.random.key(0), GAMES)
    after, _, reward, _, info = _step(states, actions, keys)
    terms = jnp.stack([info["reward_terms"][name] for name in C.REWARD_TERMS], axis=1).astype(jnp.float32)
    own = search.SearchReward()
    assert not np.any(np.asarray(actions) == search.UNDO_ACTION)   # no UNDO: nothing to charge
    np.testing.assert_array_equal(_edge_reward(own, states, after, actions, reward, terms), reward)
    no_distance = search.SearchReward({"distance": 0.0})
    np.testing.assert_allclose(_edge_reward(no_distance, states, after, actions, reward, terms),
                               reward - info["reward_terms"]["distance"], atol=1e-5)
    # a program bonus pays B for each program that comes to be owned
    bare = game.from_dict({"player": {"row": 0, "col": 0}})
    owning = game.from_dict({"player": {"row": 0, "col": 0}, "ownedPrograms": [5, 6]})
    paid = _edge_reward(search.SearchReward(program_bonus=3.0), batch(bare), batch(owning),
                        jnp.zeros(GAMES, jnp.int32), jnp.zeros(GAMES, jnp.float32), jnp.zeros((GAMES, len(C.REWARD_TERMS)), jnp.float32))
    np.testing.assert_array_equal(paid, 6.0)


# A daemon that cannot act next to a player who owns UNDO: killing it, undoing back to
# before the kill (two UNDOs: the first pops the snapshot of this turn's start) and
# killing it again is a loop the game pays a kill for each time round.
UNDO_LOOP = game.from_dict({"player": {"row": 0, "col": 0, "hp": 3, "credits": 5},
                            "enemies": [{"type": "daemon", "row": 0, "col": 1, "hp": 1, "disabledTurns": 9}],
                            "ownedPrograms": [search.UNDO_ACTION]})


def _undo_loop_rewards(start: game.GameState) -> tuple[np.ndarray, np.ndarray, list[game.GameState]]:
    """The game's kill reward and the charge (uncharged − charged edge reward) of each
    move of: to the daemon's side, kill, UNDO twice, kill; and the states after each."""
    undo = search.UNDO_ACTION
    state, game_kills, charges, states = start, [], [], []
    for action in [UP, DOWN, RIGHT, undo, undo, RIGHT]:
        after, _, reward, _, info = game.step(state, jnp.int32(action), jax.random.key(0))
        assert not bool(info["illegal"])
        terms = jnp.stack([info["reward_terms"][name] for name in C.REWARD_TERMS]).astype(jnp.float32)
        edge = (state, after, jnp.int32(action), jnp.asarray(reward, jnp.float32), terms)
        charges.append(float(_one_edge(search.SearchReward(charge_undo=False), *edge))
                       - float(_one_edge(search.SearchReward(), *edge)))
        game_kills.append(float(info["reward_terms"]["kills"]))
        states.append(after)
        state = after
    return np.asarray(game_kills), np.asarray(charges), states


def test_an_undo_that_brings_a_kill_back_pays_it_back():
    game_kills, charges, _ = _undo_loop_rewards(UNDO_LOOP)
    # the game pays the same kill twice; the second UNDO (the daemon is back) pays it back
    np.testing.assert_allclose(game_kills, [0, 0, C.KILL_REWARD, 0, 0, C.KILL_REWARD])
    np.testing.assert_allclose(charges, [0, 0, 0, 0, C.KILL_REWARD, 0], atol=1e-6)


def test_an_undo_that_also_takes_away_a_spawn_still_pays_the_kill_back():
    # a scheduled task spawns a transmission in the enemy phase of the kill, so the
    # UNDO that brings the daemon back takes the transmission away: one entity either
    # way, but a daemon is back, and the charge counts each kind of entity on its own
    spawning = eqx.tree_at(lambda s: s.next_task, UNDO_LOOP, jnp.int32(3))
    game_kills, charges, states = _undo_loop_rewards(spawning)
    alive = [(int(s.enemies.alive.sum()), int(s.transmissions.alive.sum())) for s in states]
    assert alive[2] == (0, 1) and alive[4] == (1, 0)   # after the kill; after the second UNDO
    np.testing.assert_allclose(game_kills, [0, 0, C.KILL_REWARD, 0, 0, C.KILL_REWARD])
    np.testing.assert_allclose(charges, [0, 0, 0, 0, C.KILL_REWARD, 0], atol=1e-6)


@pytest.mark.parametrize("field, value, message", [
    ("num_simulations", 0, "Search.num_simulations must be at least 1"),
    ("q_span", 0.0, "Search.q_span must be above 0"),
    ("root_searches", 0, "Search.root_searches must be at least 1"),
    ("discount", 1.5, "Search.discount must be in [0, 1]"),
])
def test_bad_settings_are_refused_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        search.Search(**{field: value})


def test_unknown_reward_terms_are_refused():
    with pytest.raises(ValueError, match="unknown reward terms \\['distnace'\\]"):
        search.SearchReward({"distnace": 0.0})


def test_a_search_state_is_one_game_state():
    state = jax.tree.map(lambda x: x[0], played_states())
    assert search.state_bytes(state) == sum(np.asarray(x).nbytes for x in jax.tree.leaves(state))
    assert 5_000 < search.state_bytes(state) < 20_000
