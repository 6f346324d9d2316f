"""`bin/evaluate`'s per-episode tallies, its `--json` schema, the greedy baseline and the
Python API.

Compiled programs are few and shared: one unbatched `advance` for the scenario tests, one
batch of two games for the greedy player's choices, and the evaluation programs of the
random baseline (a network of `BASELINE_ARCHITECTURE`'s shape, as in test_tools.py) and of
the greedy baseline, at 8 episodes.
"""

import json
import logging

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hm import game
from hm.game import constants as C
from hm.players import greedy
from hm.tools import evaluate, players, policy
from hm.train import TrainConfig
from hm.train.network import Network

EPISODES = 8
MAX_STEPS = 64
WAIT = C.PROGRAM_ACTION_OFFSET + C.WAIT
UP, DOWN, RIGHT = 0, 1, 3

TOP_KEYS = {"schema_version", "policy", "episodes", "max_steps", "seed", "greedy", "game_version", "search", "agents"}
AGENT_KEYS = {
    "episodes", "return_mean", "return_std", "return_median", "return_min", "return_max", "length_mean",
    "win_rate", "death_rate", "truncation_rate", "highest_stage", "highest_stage_mean", "stage_completions",
    "stage_completed_step_mean", "siphon_episode_rate", "program_episode_rate", "program_owned_episode_rate",
    "program_legal_episode_rate", "siphons_per_episode",
    "programs_per_episode", "programs", "death_cause", "reward_terms_mean", "steps", "seconds",
}
STAGES = [str(s) for s in range(1, C.NUM_STAGES + 1)]


def scenario(**fields) -> game.GameState:
    """Stage 1 with the exit at (5, 5); the player (row, col, hp, ...) and lists as given."""
    player = {"row": 3, "col": 3, "hp": 3, "energy": 1}
    player.update({k: fields.pop(k) for k in list(fields) if k in ("row", "col", "hp", "energy", "dataSiphons")})
    return game.from_dict({"player": player, "exit": [5, 5], "ownedPrograms": [WAIT], **fields})


def enemy(kind: str, row: int, col: int) -> dict:
    return {"type": kind, "row": row, "col": col}


def episode_at(state: game.GameState) -> evaluate.Episode:
    """A fresh tally for the game `state`."""
    start = evaluate.start(jax.random.key(0))
    return eqx.tree_at(lambda e: (e.state, e.obs), start, (state, game.observe(state).flat()))


_advance = eqx.filter_jit(evaluate.advance)
_legal_actions = jax.jit(game.legal_actions)


def advance(episode: evaluate.Episode, action: int, live: bool = True) -> evaluate.Episode:
    return _advance(episode, jnp.int32(action), _legal_actions(episode.state), jax.random.key(1),
                    jnp.asarray(live))


# --- the tallies -------------------------------------------------------------------------


def test_siphons_programs_and_stage_completion_are_counted():
    episode = episode_at(scenario(row=5, col=3, dataSiphons=1,
                                  blocks=[{"row": 4, "col": 3, "type": "data", "points": 2, "spawnCount": 0}]))
    episode = advance(episode, C.ACTION_SIPHON)
    assert int(episode.siphons) == 1 and int(episode.program_runs.sum()) == 0
    episode = advance(episode, WAIT)
    assert int(episode.siphons) == 1 and episode.program_runs.tolist() == [int(p == C.WAIT) for p in range(C.NUM_PROGRAMS)]
    assert episode.stage_completed_step.tolist() == [0] * C.NUM_STAGES
    episode = advance(episode, RIGHT)       # (5, 4)
    episode = advance(episode, RIGHT)       # the exit: stage 1 completed on step 4
    assert int(episode.state.stage) == 2 and int(episode.length) == 4
    assert episode.stage_completed_step.tolist() == [4] + [0] * (C.NUM_STAGES - 1)
    assert int(episode.death_cause) == -1 and not bool(episode.ended)
    assert episode.program_runs.dtype == jnp.int32 and episode.stage_completed_step.shape == (C.NUM_STAGES,)
    frozen = advance(episode, UP, live=False)
    assert all(bool(jnp.all(a == b)) for a, b in zip(jax.tree.leaves(frozen), jax.tree.leaves(episode)))


def test_owning_a_program_and_having_one_legal_are_counted():
    # No program owned: siphoning the WAIT program block next to the player gives it
    # (owned from then on); WAIT is legal from the next state on (1 energy), not before.
    state = scenario(row=5, col=3, dataSiphons=1, ownedPrograms=[],
                     blocks=[{"row": 4, "col": 3, "type": "program", "programType": "wait", "spawnCount": 0}])
    episode = episode_at(state)
    assert not bool(episode.owned_program) and not bool(episode.program_legal)
    episode = advance(episode, C.ACTION_SIPHON)
    assert bool(episode.owned_program) and not bool(episode.program_legal)
    assert bool(_legal_actions(episode.state)[WAIT])
    episode = advance(episode, RIGHT)
    assert bool(episode.program_legal) and int(episode.program_runs.sum()) == 0
    frozen = advance(episode_at(state), C.ACTION_SIPHON, live=False)
    assert not bool(frozen.owned_program) and not bool(frozen.program_legal)


@pytest.mark.parametrize("fields, cause", [
    ({"enemies": [enemy("daemon", 4, 3)]}, "daemon"),
    ({"enemies": [enemy("cryptog", 3, 2)]}, "cryptog"),
    ({"enemies": [enemy("daemon", 4, 3), enemy("virus", 2, 3)]}, "several_kinds"),
    # A virus hatching next to the player is born disabled: it cannot have struck.
    ({"enemies": [enemy("glitch", 4, 3)],
      "transmissions": [{"row": 2, "col": 3, "turnsRemaining": 1, "enemyType": "virus"}]}, "glitch"),
])
def test_cause_of_death_is_the_type_next_to_the_player(fields, cause):
    episode = advance(episode_at(scenario(hp=1, **fields)), WAIT)
    assert bool(episode.died) and bool(episode.ended)
    assert evaluate.DEATH_CAUSES[int(episode.death_cause)] == cause
    if "transmissions" in fields:       # the newborn virus is there, next to the player
        e = episode.state.enemies
        assert np.sum(np.asarray(e.alive & (e.kind == C.VIRUS) & (e.row == 2) & (e.col == 3))) == 1


# --- the greedy baseline -----------------------------------------------------------------


@pytest.fixture(scope="module")
def greedy_choices():
    """The greedy player's choices, 16 keys, in two games: next to the exit, and in the
    open at (2, 2) where up and right (towards the exit) tie."""
    states = jax.tree.map(lambda *x: jnp.stack(x), scenario(row=5, col=4), scenario(row=2, col=2))
    mask = jax.vmap(game.legal_actions)(states)
    obs = jax.vmap(lambda s: game.observe(s).flat())(states)
    choose = eqx.filter_jit(players.GreedyPlayer().choose)
    moves = jnp.zeros(2, jnp.int32)
    return np.stack([np.asarray(choose(states, obs, mask, jax.random.key(k), moves)) for k in range(16)])


def test_greedy_takes_the_exit(greedy_choices):
    assert set(greedy_choices[:, 0].tolist()) == {RIGHT}


def test_greedy_breaks_exact_ties_at_random(greedy_choices):
    assert set(greedy_choices[:, 1].tolist()) == {UP, RIGHT}


def test_greedy_choose_each_decides_each_game_from_its_own_key():
    """The teacher's entry point (`greedy.choose_each`): a game's choice depends on its
    own state and key only, not on the rest of the batch; it takes the exit when next to it."""
    states = jax.tree.map(lambda *x: jnp.stack(x), scenario(row=5, col=4), scenario(row=2, col=2))
    mask = jax.vmap(game.legal_actions)(states)
    choose = eqx.filter_jit(greedy.choose_each)
    swap = lambda tree: jax.tree.map(lambda x: x[::-1], tree)  # noqa: E731
    second_choices = set()
    for k in range(8):
        keys = jax.random.split(jax.random.key(k), 2)
        chosen = np.asarray(choose(states, mask, keys))
        swapped = np.asarray(choose(swap(states), swap(mask), swap(keys)))
        np.testing.assert_array_equal(chosen, swapped[::-1])
        assert chosen[0] == RIGHT
        second_choices.add(int(chosen[1]))
    assert second_choices <= {UP, RIGHT}


def test_greedy_scores_only_legal_actions():
    states = jax.tree.map(lambda x: x[None], scenario(row=0, col=0))
    mask = jax.vmap(game.legal_actions)(states)
    scores = np.asarray(eqx.filter_jit(players.GreedyPlayer().scores)(states, mask, jax.random.key(0)))
    assert scores.shape == (1, C.NUM_ACTIONS) and scores.dtype == np.float32
    np.testing.assert_array_equal(np.isfinite(scores[0]), np.asarray(mask[0]))
    # Up and right each approach the exit (+0.05, −0.01 step) and stand 9 cells from it.
    np.testing.assert_allclose(scores[0, [UP, RIGHT]], 0.04 - 0.01 * 9, atol=1e-6)
    assert scores[0, WAIT] < scores[0, UP]


# --- the report, the command line and the API ---------------------------------------------


@pytest.fixture(scope="module")
def document(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("evaluate") / "report.json"
    argv = ["--baseline", "random", "greedy", "--episodes", str(EPISODES), "--max-steps", str(MAX_STEPS),
            "--seed", "5", "--json", str(out)]
    assert evaluate.main(argv) == 0
    return json.loads(out.read_text())


def test_json_schema_is_pinned(document):
    assert set(document) == TOP_KEYS and document["schema_version"] == evaluate.SCHEMA_VERSION == 4
    assert list(document["agents"]) == ["random", "greedy"] and document["search"] == {}
    for report in document["agents"].values():
        assert set(report) == AGENT_KEYS
        assert list(report["highest_stage"]) == STAGES + ["won"]
        assert list(report["stage_completions"]) == list(report["stage_completed_step_mean"]) == STAGES
        assert list(report["programs"]) == list(C.PROGRAM_NAMES)
        assert all(set(use) == {"runs_per_episode", "episode_rate"} for use in report["programs"].values())
        assert list(report["death_cause"]) == list(evaluate.DEATH_CAUSES)
        assert list(report["reward_terms_mean"]) == list(C.REWARD_TERMS)


def test_report_figures_agree_with_each_other(document):
    for report in document["agents"].values():
        n = report["episodes"]
        assert n == EPISODES and sum(report["highest_stage"].values()) == n
        assert sum(report["death_cause"].values()) == round(report["death_rate"] * n)
        assert report["death_cause"]["unknown"] == 0, "only enemies take the player's HP"
        completions = [report["stage_completions"][s] for s in STAGES]
        assert completions == sorted(completions, reverse=True), "stage k+1 is completed after stage k"
        # An episode that ended on stage k completed stages 1 .. k-1.
        assert completions[0] == n - report["highest_stage"]["1"]
        steps = [report["stage_completed_step_mean"][s] for s, c in zip(STAGES, completions) if c]
        assert all(0 < step <= MAX_STEPS for step in steps)
        assert (report["stage_completed_step_mean"]["1"] is None) == (completions[0] == 0)
        assert 0 <= report["siphon_episode_rate"] <= 1 and 0 <= report["program_episode_rate"] <= 1
        assert report["program_episode_rate"] >= max(u["episode_rate"] for u in report["programs"].values())
        # a program is run only where one is legal, and is legal only where one is owned
        assert (report["program_episode_rate"] <= report["program_legal_episode_rate"]
                <= report["program_owned_episode_rate"] <= 1)
        assert report["programs_per_episode"] == pytest.approx(
            sum(u["runs_per_episode"] for u in report["programs"].values()))
        assert report["siphon_episode_rate"] == 0 or report["siphons_per_episode"] > 0


def test_greedy_baseline_beats_random(document):
    random, greedy = document["agents"]["random"], document["agents"]["greedy"]
    assert greedy["highest_stage_mean"] > random["highest_stage_mean"]
    assert greedy["win_rate"] + greedy["death_rate"] + greedy["truncation_rate"] == pytest.approx(1.0), \
        "no game ended on an illegal action"


def test_evaluate_api_on_a_network_in_memory():
    network = Network(C.OBS_FLAT_SIZE, C.NUM_ACTIONS, policy.BASELINE_ARCHITECTURE.hidden_dim,
                      policy.BASELINE_ARCHITECTURE.num_layers, key=jax.random.key(3))
    report = evaluate.evaluate(network, num_episodes=EPISODES, seed=5, max_steps=MAX_STEPS)
    assert set(report.to_json()) == AGENT_KEYS
    json.dumps(report.to_json())
    assert report.highest_stage_mean == pytest.approx(float(report.results.stage.mean()))
    summary = report.summary()
    assert summary == {"return": report.to_json()["return_mean"], "highest_stage": report.highest_stage_mean,
                       "siphon_share": float((report.results.siphons > 0).mean()),
                       "program_share": float((report.results.program_runs.sum(axis=1) > 0).mean()),
                       "win_rate": float(report.results.won.mean()),
                       "program_owned_share": float(report.results.owned_program.mean()),
                       "program_legal_share": float(report.results.program_legal.mean()),
                       "siphons_per_episode": float(report.results.siphons.mean())}
    # a program is run only if it was owned and legal first
    assert summary["program_share"] <= summary["program_legal_share"] <= summary["program_owned_share"]
    assert report.results.program_runs.shape == (EPISODES, C.NUM_PROGRAMS)
    assert report.results.death_cause.dtype == np.int32
    np.testing.assert_array_equal(report.results.death_cause >= 0, report.results.died)


def test_one_program_per_kind_of_player(caplog):
    """Another network of the same shape, or other weights, reuse the compiled evaluation."""
    evaluate.evaluate("random", num_episodes=EPISODES, seed=5, max_steps=MAX_STEPS)      # compiled (or cached)
    network = Network(C.OBS_FLAT_SIZE, C.NUM_ACTIONS, policy.BASELINE_ARCHITECTURE.hidden_dim,
                      policy.BASELINE_ARCHITECTURE.num_layers, key=jax.random.key(4))
    with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles(True):
        for greedy in (False, True):
            evaluate.evaluate(network, num_episodes=EPISODES, seed=6, max_steps=MAX_STEPS, greedy=greedy)
    compiled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Compiling ")]
    assert not [m for m in compiled if "_play_chunk" in m], compiled


def test_every_player_gets_the_same_games_and_not_trainings():
    key = evaluate.evaluation_key(5)
    reset_key, _ = jax.random.split(key)
    states = evaluate._start_all(jax.random.split(reset_key, EPISODES)).state
    again = evaluate._start_all(jax.random.split(jax.random.split(evaluate.evaluation_key(5))[0], EPISODES)).state
    assert all(bool(jnp.all(a == b)) for a, b in zip(jax.tree.leaves(states), jax.tree.leaves(again)))
    # Training keys descend from split(key(seed)); evaluation's from a fold-in of it.
    data = jax.random.key_data(key)
    for other in (jax.random.key(5), *jax.random.split(jax.random.key(5))):
        assert not bool(jnp.all(jax.random.key_data(other) == data))


def test_unknown_players_are_refused():
    with pytest.raises(ValueError, match="one of .'random', 'greedy'."):
        evaluate.make_player("best")
    with pytest.raises(ValueError, match="num_episodes and max_steps must be >= 1"):
        evaluate.evaluate("random", num_episodes=0)
    with pytest.raises(ValueError, match="precision must be one of .'f32', 'bf16'.; got 'f16'"):
        evaluate.make_player(policy.uniform_network(), precision="f16")


class FirstLegal(players.AbstractPlayer):
    """A deterministic player: the lowest-numbered legal action."""

    def choose(self, states, obs, mask, key, stage_moves):
        return jnp.argmax(mask, axis=-1).astype(jnp.int32)


def test_the_work_queue_plays_every_game_whatever_the_number_of_slots():
    """Game g's randomness depends on g and its step alone, so a deterministic player's
    games come out the same with 2 slots or 3, in game order, each one played once."""
    reset_keys = jax.random.split(jax.random.key(0), 5)
    key = jax.random.key(1)
    reports = []
    runs = [jax.device_get(evaluate.run_queue(FirstLegal(), reset_keys, key, 20, slots,
                                              lambda ended, games: reports.append((ended, games))))
            for slots in (2, 3)]
    assert reports[-1] == (5, 5) and all(0 <= ended <= games == 5 for ended, games in reports)
    for a, b in zip(jax.tree.leaves(runs[0]), jax.tree.leaves(runs[1])):
        np.testing.assert_array_equal(a, b)
    played = runs[0]
    assert np.all(played.length >= 1) and np.all(played.length <= 20)
    np.testing.assert_array_equal(played.ended | (played.length == 20), True)
    # the games are those side by side play starts from: after one move (the lowest
    # legal action is a move, which takes no block) each board's blocks are its start's
    one_move = jax.device_get(evaluate.run_queue(FirstLegal(), reset_keys, key, 1, 2))
    np.testing.assert_array_equal(one_move.length, 1)
    starts = jax.device_get(evaluate._start_all(reset_keys))
    np.testing.assert_array_equal(one_move.state.board.block_points, starts.state.board.block_points)


def test_a_search_plans_on_the_reward_its_critic_was_trained_on():
    reward = players.reward_of_config({"reward_weights": [["distance", 0.0], ["kills", 0.5]], "program_bonus": 2.0})
    weights = dict(zip(C.REWARD_TERMS, np.asarray(reward.term_weights).tolist()))
    assert weights["distance"] == 0.0 and weights["kills"] == 0.5 and weights["stage"] == 1.0
    assert float(reward.program_bonus) == 2.0
    # nothing saved: the default config's
    default = players.reward_of_config(None)
    weights = dict(zip(C.REWARD_TERMS, np.asarray(default.term_weights).tolist()))
    assert weights == {name: dict(TrainConfig().reward_weights).get(name, 1.0) for name in C.REWARD_TERMS}
    assert float(default.program_bonus) == TrainConfig().program_bonus == 3.0
    # a population member's own swept value wins over the run's
    table = [{"name": "program_bonus=1.0,seed=0", "hyper": {"program_bonus": 1.0}}]
    assert policy._member_config({"program_bonus": 3.0}, table, "program_bonus=1.0,seed=0") == {"program_bonus": 1.0}
