"""`bin/watch --html/--gif` and `bin/play --html`, end to end through the tools' `main`.

The policy is the untrained one of tests/tools (same shape, so the same compiled
programs); the pages are read back with the parser of test_replay.py.
"""

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hm.game import constants as C
from hm.tools import play, watch
from tests.tools.test_tools import corridor_scenario, export, fresh_network, refusal
from tests.viz.test_replay import decode_png, read_page


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "fresh"
    export(run_dir, fresh_network())
    return run_dir


def test_watch_writes_html_and_gif_of_what_it_shows(fresh_run, tmp_path):
    page_path, gif_path = tmp_path / "replay.html", tmp_path / "replay.gif"
    out = io.StringIO()
    argv = [str(fresh_run), "--delay", "0", "--episodes", "2", "--max-steps", "4", "--seed", "7",
            "--html", str(page_path), "--gif", str(gif_path), "--fps", "10"]
    assert watch.main(argv, stdout=out) == 0
    text = out.getvalue()
    _, data = read_page(page_path)
    steps = data["steps"]
    actions = [facts for facts in steps if facts["action"] is not None]
    assert len(actions) == text.count("agent: ")                  # one frame per step shown ...
    assert len(steps) == len(actions) + 2                          # ... and each episode's end
    assert f"wrote {page_path} ({len(steps)} frames)" in text and f"wrote {gif_path}" in text
    assert [facts["episode"] for facts in steps if facts["action"] is None] == [1, 2]
    assert "greedy" not in data["title"] and "seed 7" in data["title"] and data["fps"] == 10
    printed = [line for line in text.splitlines() if line.startswith("agent: ")]
    for facts, line in zip(actions, printed):
        probabilities = dict(facts["choices"])
        chosen = probabilities[facts["action_name"]]
        assert line.startswith(f"agent: {facts['action_name']} (p {chosen:.3f})  value {facts['value']:+.3f}")
        assert 0.0 < chosen <= 1.0 and sum(probabilities.values()) <= 1.0 + 1e-5
        assert list(probabilities.values()) == sorted(probabilities.values(), reverse=True)
        assert f"reward {facts['reward']:+.3f}" in text
        for name, value in facts["reward_terms"]:
            assert name in C.REWARD_TERMS and value != 0.0
        assert math.isclose(sum(value for _, value in facts["reward_terms"]), facts["reward"], abs_tol=1e-4)
    for facts in steps:
        assert decode_png(facts["frame"]).size[0] > 0
    with Image.open(gif_path) as gif:
        assert gif.n_frames == len(steps) and gif.info["duration"] == 100


def test_watch_replay_choices_show_a_sampled_long_shot_last():
    probs = [0.0] * C.NUM_ACTIONS
    probs[:7] = [0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.05]
    choices = watch.replay_choices(6, np.asarray(probs, np.float32))
    assert [name for name, _ in choices] == ["up", "down", "left", "right", "siphon", "pull"]
    assert choices[-1][1] == pytest.approx(0.05)


def test_play_html_records_a_human_game(tmp_path):
    scenario = tmp_path / "start.json"
    scenario.write_text(json.dumps(corridor_scenario()))
    page_path = tmp_path / "game.html"
    out = io.StringIO()
    code = play.main(["--scenario", str(scenario), "--seed", "1", "--html", str(page_path)],
                     stdin=io.StringIO("s\nw\nd\nq\n"), stdout=out)
    assert code == 0 and f"wrote {page_path} (3 frames)" in out.getvalue()
    _, data = read_page(page_path)
    steps = data["steps"]
    assert [facts["action_name"] for facts in steps] == ["up", "right", ""]     # `s` was refused, not stepped
    assert [facts["action"] for facts in steps] == [0, 3, None]
    assert all(facts["choices"] == [] and facts["value"] is None for facts in steps)
    assert steps[0]["reward"] is not None and dict(steps[0]["reward_terms"])["step"] == pytest.approx(C.STEP_PENALTY)
    assert steps[-1]["note"] == "quit after 2 steps: return " + f"{steps[1]['return']:+.3f}"
    assert "bin/play" in data["title"] and "seed 1" in data["title"]


@pytest.mark.parametrize(("main", "argv", "message"), [
    (watch.main, ["run", "--html", "/nonexistent-dir/r.html"], "--html /nonexistent-dir/r.html: directory /nonexistent-dir does not exist"),
    (watch.main, ["run", "--gif", "/"], "--gif /: is a directory"),
    (watch.main, ["run", "--fps", "0"], "--fps must be a finite number > 0; got 0.0"),
    (watch.main, ["run", "--fps", "nan"], "--fps must be a finite number > 0"),
    (play.main, ["--html", "/nonexistent-dir/g.html"], "--html /nonexistent-dir/g.html: directory /nonexistent-dir does not exist"),
])
def test_bad_replay_paths_exit_2_naming_the_flag(main, argv, message, capsys):
    assert message in refusal(main, argv, capsys)
