"""`bin/play`, `bin/watch`, `bin/evaluate` and policy loading.

The tools run in-process through their `main(argv)`, so the few compiled programs are
shared: play and watch step with one compiled `step`, and every evaluation plays 8
episodes with a network of the random baseline's shape (the test policy is that small),
so all of them run one compiled program. Argument and path refusals happen before
anything is compiled. One test per kind goes through the `bin/` wrapper in a subprocess.
"""

import dataclasses
import io
import json
import os
import subprocess
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hm import game
from hm.game import constants as C
from hm.tools import evaluate, play, policy, watch
from hm.train import checkpoint
from hm.train.checkpoint import Architecture, CheckpointMeta, Layout
from hm.train.network import Network

REPO = Path(__file__).resolve().parents[2]
EPISODES = 8
# The untrained test policy has the random baseline's shape, so they share compiled programs.
ARCH = policy.BASELINE_ARCHITECTURE


def fresh_network(arch: Architecture = ARCH, seed: int = 0) -> Network:
    return Network(arch.obs_size, arch.num_actions, arch.hidden_dim, arch.num_layers, key=jax.random.key(seed))


def export(run_dir: Path, params: Network, **changes) -> Path:
    """Export as `Trainer.export_policy` does (same description keys)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    description = {
        "network": "hm.train.network.Network", **dataclasses.asdict(ARCH), "game_version": C.GAME_VERSION,
        "precision": "f32", "run_name": "fresh", "update": 0, "env_steps": 0, "config": {},
    }
    description.update(changes)
    return checkpoint.export_policy(run_dir, checkpoint.tree_on_host(params), description)


class StandInState(eqx.Module):
    """The leaves of a `TrainState` that matter here: `.params`, and something else."""

    params: Network
    update: jax.Array


def save_checkpoint(directory: Path, params: Network, arch: Architecture = ARCH, update: int = 3,
                    **meta_changes) -> Path:
    # a single run: a population of one member, its leaves with the member axis
    population = jax.tree.map(lambda x: x[None], params)
    arrays = checkpoint.tree_to_host(StandInState(params=population, update=jnp.int32(update)))
    meta = CheckpointMeta(
        game_version=C.GAME_VERSION, architecture=arch, layout=Layout(8, 1, 1), update=update,
        env_steps=update * 128, config={}, run_name="stand-in", leaves=checkpoint.leaf_table(arrays),
        members=[{"index": 0, "name": "seed=0", "seed": 0, "hyper": {}, "recent_return": None}])
    return checkpoint.save(directory, arrays, dataclasses.replace(meta, **meta_changes))


def assert_same_network(a: Network, b: Network) -> None:
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory) -> Path:
    """A run directory holding an untrained policy exported by the trainer's function."""
    run_dir = tmp_path_factory.mktemp("runs") / "fresh"
    export(run_dir, fresh_network())
    return run_dir


def refusal(main, argv, capsys) -> str:
    """Run a tool's `main` expecting exit code 2; its stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# --- play --------------------------------------------------------------------------------


def test_commands_map_to_actions():
    none = np.zeros(C.NUM_PROGRAMS, bool)
    undo = none.copy()
    undo[C.UNDO] = True
    expect = {"w": 0, "up": 0, "s": 1, "a": 2, "D": 3, " x ": 4, "siphon": 4, "7": 7, "p crash": 7,
              "crash": 7, "P  SIPH+": 5 + C.SIPH_PLUS, "anti_v": 5 + C.ANTI_V, "27": 27}
    for line, action in expect.items():
        assert play.parse_command(line, none) == play.PlayerInput("action", action), line
    assert C.DIRECTION_DELTAS[play.MOVE_KEYS["w"]].tolist() == [1, 0]   # up is row + 1
    assert play.parse_command("u", undo) == play.PlayerInput("action", 5 + C.UNDO)
    assert "do not own UNDO" in play.parse_command("u", none).message
    for line in ("28", "p nope", "jump", "-1"):
        assert play.parse_command(line, none).kind == "invalid", line
    assert [play.parse_command(line, none).kind for line in ("q", "?", "", "l")] == ["quit", "help", "list", "list"]


def corridor_scenario() -> dict:
    """Player in the corner (0, 0), nothing else: up and right are legal, down is not."""
    return {"player": {"row": 0, "col": 0, "energy": 5}, "exit": [5, 5], "ownedPrograms": [5 + C.WAIT]}


def play_session(tmp_path: Path, lines: list[str], *extra: str) -> tuple[str, Path]:
    scenario = tmp_path / "start.json"
    scenario.write_text(json.dumps(corridor_scenario()))
    saved = tmp_path / "saved.json"
    out = io.StringIO()
    code = play.main(["--scenario", str(scenario), "--save", str(saved), "--seed", "1", *extra],
                     stdin=io.StringIO("".join(line + "\n" for line in lines)), stdout=out)
    assert code == 0
    return out.getvalue(), saved


def test_play_scripted_session_reprompts_on_illegal_input_and_saves(tmp_path):
    transcript, saved = play_session(tmp_path, ["s", "x", "bogus", "w", "p crash", "d", "q"])
    assert "down is not legal now: that is off the board" in transcript
    assert "siphon is not legal now: you have no data siphons" in transcript
    assert "unknown command 'bogus'" in transcript
    assert "crash is not legal now: you do not own CRASH" in transcript
    assert transcript.count("reward ") == 2            # only `w` and `d` stepped
    assert "up: reward" in transcript and "right: reward" in transcript
    assert "legal: w up, d right, 10 wait" in transcript
    assert "quit after 2 steps" in transcript
    state = game.from_dict(json.loads(saved.read_text()))   # --save writes a valid scenario
    assert (int(state.player.row), int(state.player.col)) == (1, 1)
    assert int(state.turn) == 2


def test_play_allow_illegal_submits_and_the_game_ends(tmp_path):
    transcript, saved = play_session(tmp_path, ["s", "w"], "--allow-illegal")
    assert "submitting it (--allow-illegal)" in transcript
    assert "game over after 1 steps, illegal action" in transcript
    assert "w\n" not in transcript.split("game over")[1]    # nothing read after the end
    assert json.loads(saved.read_text())["player"]["row"] == 0


def test_play_end_of_input_quits(tmp_path):
    transcript, saved = play_session(tmp_path, ["w"])
    assert "(end of input)" in transcript and saved.exists()


# --- policies ----------------------------------------------------------------------------


def test_exported_policy_loads_back_from_dir_and_files(fresh_run):
    for path in (fresh_run, fresh_run / "policy.eqx", fresh_run / "policy.json"):
        loaded = policy.load(path)
        assert_same_network(loaded.network, fresh_network())
        assert loaded.architecture == ARCH
        assert "policy.eqx (run fresh, update 0" in loaded.source


def test_checkpoint_params_load_from_file_dir_and_run(tmp_path):
    params = fresh_network(seed=5)
    path = save_checkpoint(tmp_path / "run" / checkpoint.CHECKPOINTS_DIR, params)
    for where in (path, path.parent, tmp_path / "run"):
        loaded = policy.load(where)
        assert_same_network(loaded.network, params)
        assert loaded.source.startswith(str(path)) and "update 3" in loaded.source
    export(tmp_path / "run", fresh_network(seed=6))    # a finished run: its exported policy wins
    assert_same_network(policy.load(tmp_path / "run").network, fresh_network(seed=6))


def test_uniform_network_is_uniform_over_legal_actions():
    mask = jnp.asarray([[True] * 3 + [False] * (C.NUM_ACTIONS - 3)])
    obs = jnp.ones((1, C.OBS_FLAT_SIZE), jnp.float32)
    for like in (None, fresh_network()):
        network = policy.uniform_network(like)
        action, probs, value = policy.act(network, obs, mask, jnp.asarray([0.5], jnp.float32), jnp.asarray(False))
        assert action.shape == (1,) and action.dtype == jnp.int32 and int(action[0]) == 1
        np.testing.assert_allclose(np.asarray(probs[0, :3]), 1 / 3, rtol=1e-6)
        assert float(probs[0, 3:].sum()) == 0.0 and float(value[0]) == 0.0


# --- evaluate ----------------------------------------------------------------------------


def check_report(report: dict, max_steps: int) -> None:
    assert report["episodes"] == EPISODES
    for rate in ("win_rate", "death_rate", "truncation_rate"):
        assert 0.0 <= report[rate] <= 1.0
    assert report["win_rate"] + report["death_rate"] + report["truncation_rate"] == pytest.approx(1.0)
    assert 0 < report["length_mean"] <= max_steps
    assert set(report["highest_stage"]) == {str(s) for s in range(1, C.NUM_STAGES + 1)} | {"won"}
    assert sum(report["highest_stage"].values()) == EPISODES
    assert report["highest_stage"]["won"] == round(report["win_rate"] * EPISODES)
    assert sum(report["death_cause"].values()) == round(report["death_rate"] * EPISODES)
    assert list(report["reward_terms_mean"]) == list(C.REWARD_TERMS)
    # The return is the sum of its terms, episode by episode, so on average too.
    assert sum(report["reward_terms_mean"].values()) == pytest.approx(report["return_mean"], abs=1e-3)
    assert report["return_min"] <= report["return_median"] <= report["return_max"]


def test_evaluate_random_baseline(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert evaluate.main(["--baseline", "random", "--episodes", str(EPISODES), "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["policy"] is None and list(document["agents"]) == ["random"]
    check_report(document["agents"]["random"], evaluate.DEFAULT_MAX_STEPS)
    assert "death rate" in capsys.readouterr().out


def test_evaluate_counts_truncation_apart():
    results = evaluate.run_episodes(policy.uniform_network(), EPISODES, max_steps=10, seed=0)
    assert results.length.dtype == np.int32 and results.reward_terms.shape == (EPISODES, len(C.REWARD_TERMS))
    assert results.length.max() <= 10 and results.truncated.any()
    np.testing.assert_array_equal(results.truncated, ~(results.won | results.died))
    np.testing.assert_array_equal(results.length[results.truncated], 10)


def test_evaluate_fresh_policy_against_baseline(fresh_run, tmp_path):
    out = tmp_path / "report.json"
    argv = [str(fresh_run), "--baseline", "random", "--greedy", "--episodes", str(EPISODES), "--json", str(out)]
    stdout = io.StringIO()
    assert evaluate.main(argv, stdout=stdout) == 0
    document = json.loads(out.read_text())
    assert list(document["agents"]) == ["policy", "random"] and document["greedy"]
    for report in document["agents"].values():
        check_report(report, evaluate.DEFAULT_MAX_STEPS)
    assert "policy: " in stdout.getvalue() and "(greedy)" in stdout.getvalue()


def test_evaluate_plans_with_search_and_records_its_settings(fresh_run, tmp_path):
    out = tmp_path / "report.json"
    argv = [str(fresh_run), "--search", "2", "--search-q-span", "0.5", "--baseline", "search",
            "--episodes", str(EPISODES), "--max-steps", "3", "--json", str(out)]
    stdout = io.StringIO()
    assert evaluate.main(argv, stdout=stdout) == 0
    document = json.loads(out.read_text())
    assert list(document["agents"]) == ["policy", "search"]
    for report in document["agents"].values():
        check_report(report, 3)
    settings = document["search"]
    assert set(settings) == {"policy", "search"}
    assert settings["policy"]["num_simulations"] == settings["search"]["num_simulations"] == 2
    assert settings["policy"]["q_span"] == 0.5
    # the policy's saved config is empty: its reward is the trainer's default (no distance
    # term, the game env's program bonus); the baseline plans on the game's own reward
    assert settings["policy"]["reward"]["term_weights"]["distance"] == 0.0
    assert settings["policy"]["reward"]["program_bonus"] > 0
    assert settings["search"]["reward"] == {"term_weights": {name: 1.0 for name in C.REWARD_TERMS},
                                            "program_bonus": 0.0, "charge_undo": True}
    assert "(search, 2 simulations)" in stdout.getvalue()


# --- watch -------------------------------------------------------------------------------


def test_watch_fresh_policy(fresh_run):
    out = io.StringIO()
    assert watch.main([str(fresh_run), "--delay", "0", "--episodes", "2", "--max-steps", "3"], stdout=out) == 0
    text = out.getvalue()
    assert text.count("agent: ") <= 6 and "(p " in text and "value " in text
    assert "episode 2/2 over after" in text and "reward " in text
    assert "\x1b" not in text                       # not a terminal: a log, no redraws


def test_watch_with_search_shows_visits_and_q_values(fresh_run, tmp_path):
    out = io.StringIO()
    html = tmp_path / "replay.html"
    argv = [str(fresh_run), "--delay", "0", "--max-steps", "2", "--search", "2", "--html", str(html)]
    assert watch.main(argv, stdout=out) == 0
    lines = [line for line in out.getvalue().splitlines() if line.startswith("search: value ")]
    assert len(lines) == 2
    # two simulations: the visits shown add up to 2, each with its Q-value and policy p
    counts = [int(cell.split()[1]) for cell in lines[0].split("| ")[1].split(", ")]
    assert sum(counts) == 2 and " Q " in lines[0] and " p " in lines[0]
    page = html.read_text()
    data = json.loads(page.split('id="replay-data">')[1].split("</script>")[0])
    searched = [step for step in data["steps"] if step["action"] is not None]
    assert searched and all(sum(row[1] for row in step["search"]) == 2 for step in searched)
    assert all(step["search_value"] is not None for step in searched)


def test_choice_line_names_action_probability_and_runners_up():
    probs = np.zeros(C.NUM_ACTIONS, np.float32)
    probs[[0, 4, 7]] = [0.25, 0.5, 0.25]
    assert watch.choice_line(4, probs, 1.5) == "agent: siphon (p 0.500)  value +1.500  | up 0.250, crash 0.250"


# --- refusals ----------------------------------------------------------------------------


def bad_policies(root: Path) -> list[tuple[Path, str]]:
    """Paths that are not a usable policy, with the words their refusal must contain."""
    cases = []
    (root / "text.txt").write_text("not a checkpoint")
    cases.append((root / "text.txt", "is not a readable hm checkpoint"))
    (root / "empty").mkdir()
    cases.append((root / "empty", "is not a run directory"))
    cases.append((root / "missing", "does not exist"))
    export(root / "wider", fresh_network(), hidden_dim=16)        # json says 16, weights are 1
    cases.append((root / "wider", "does not hold the network policy.json describes"))
    export(root / "probe", fresh_network(), obs_size=100)
    cases.append((root / "probe", "obs_size is 100, this game's is 1545"))
    export(root / "old", fresh_network(), game_version=C.GAME_VERSION + 1)
    cases.append((root / "old", "rules version"))
    export(root / "half", fresh_network())
    (root / "half" / "policy.eqx").unlink()
    cases.append((root / "half", "has policy.json but no policy.eqx"))
    probe = Architecture(hidden_dim=4, num_layers=1, obs_size=6, num_actions=4)
    cases.append((save_checkpoint(root / "probe_run" / "checkpoints", fresh_network(probe), probe),
                  "obs_size is 6, this game's is 1545; num_actions is 4, this game's is 28"))
    lying = dataclasses.replace(ARCH, num_layers=2)
    cases.append((save_checkpoint(root / "lying" / "checkpoints", fresh_network(), lying),
                  "its parameters are not the network its meta describes"))
    return cases


def test_unusable_policies_are_refused_with_the_reason(tmp_path, capsys):
    for path, words in bad_policies(tmp_path):
        with pytest.raises(policy.PolicyError) as error:
            policy.load(path)
        assert words in str(error.value), (path, str(error.value))
        for main, argv in ((evaluate.main, [str(path), "--episodes", "1"]), (watch.main, [str(path)])):
            err = refusal(main, argv, capsys)
            assert "error: RUN_OR_POLICY: " in err and words in err


BAD_FLAGS = [
    (play.main, ["--seed", "-1"], "--seed must be an integer in [0, 4294967295]; got -1"),
    (play.main, ["--seed", "x"], "argument --seed"),
    (play.main, ["--save", "/nonexistent-dir/x.json"], "--save /nonexistent-dir/x.json: directory /nonexistent-dir does not exist"),
    (play.main, ["--scenario", "/nonexistent.json"], "--scenario /nonexistent.json: cannot read it"),
    (watch.main, [], "the following arguments are required: RUN_OR_POLICY"),
    (watch.main, ["run", "--delay", "-1"], "--delay must be a finite number >= 0; got -1.0"),
    (watch.main, ["run", "--delay", "inf"], "--delay must be a finite number >= 0"),
    (watch.main, ["run", "--episodes", "0"], "--episodes must be an integer >= 1; got 0"),
    (watch.main, ["run", "--max-steps", "0"], "--max-steps must be an integer >= 1; got 0"),
    (watch.main, ["run", "--seed", str(2**32)], "--seed must be an integer in [0, 4294967295]"),
    (evaluate.main, [], "give RUN_OR_POLICY"),
    (evaluate.main, ["--baseline", "best"], "argument --baseline"),
    (evaluate.main, ["--baseline", "random", "--episodes", "0"], "--episodes must be an integer >= 1; got 0"),
    (evaluate.main, ["--baseline", "random", "--max-steps", "-3"], "--max-steps must be an integer >= 1; got -3"),
    (evaluate.main, ["--baseline", "random", "--greedy"], "--greedy needs RUN_OR_POLICY"),
    (evaluate.main, ["--baseline", "random", "--json", "/"], "--json /: is a directory"),
]


@pytest.mark.parametrize(("main", "argv", "message"), BAD_FLAGS)
def test_bad_flags_exit_2_naming_the_flag(main, argv, message, capsys):
    assert message in refusal(main, argv, capsys)


@pytest.mark.parametrize("contents, message", [
    ("{", "not JSON"),
    (json.dumps({"player": {"row": 9, "col": 0}}), "not a valid scenario: player.row"),
])
def test_bad_scenarios_are_refused(tmp_path, capsys, contents, message):
    path = tmp_path / "scenario.json"
    path.write_text(contents)
    assert f"--scenario {path}: {message}" in refusal(play.main, ["--scenario", str(path)], capsys)


# --- the bin/ wrappers -------------------------------------------------------------------


def run_bin(name: str, argv: list[str], stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(REPO / ".cache" / "jax")}
    return subprocess.run([str(REPO / "bin" / name), *argv], check=False, input=stdin, capture_output=True, text=True,
                          env=env, timeout=300)


def test_bin_evaluate_refuses_a_bogus_path(tmp_path):
    done = run_bin("evaluate", [str(tmp_path / "nothing-here")])
    assert done.returncode == 2 and "does not exist" in done.stderr and "Traceback" not in done.stderr


def test_bin_play_reads_piped_input(tmp_path):
    scenario = tmp_path / "start.json"
    scenario.write_text(json.dumps(corridor_scenario()))
    done = run_bin("play", ["--scenario", str(scenario)], stdin="s\nq\n")
    assert done.returncode == 0, done.stderr
    assert "down is not legal now" in done.stdout and "quit after 0 steps" in done.stdout
