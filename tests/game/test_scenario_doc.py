"""docs/scenarios.md stays true: its example loads and round-trips, its messages are real.

The page is the user's description of the scenario format; these tests read the page
itself, so a change to `hm/game/scenario.py` that the page does not follow fails here.
"""

import json
import re
from pathlib import Path

import pytest

from hm.game.scenario import from_dict, states_equal, to_dict

PAGE = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"


def fenced_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", PAGE.read_text(), flags=re.MULTILINE | re.DOTALL)


def the_example() -> dict:
    blocks = fenced_blocks("json")
    assert len(blocks) == 1, f"docs/scenarios.md should hold one JSON example, found {len(blocks)}"
    return json.loads(blocks[0])


def assert_written(given, written, path="scenario"):
    """Every value `given` states is in `written`, which may add keys `given` left out."""
    if isinstance(given, dict):
        assert isinstance(written, dict), path
        for key, value in given.items():
            assert key in written, f"{path}.{key} is not written back"
            assert_written(value, written[key], f"{path}.{key}")
    elif isinstance(given, list):
        assert isinstance(written, list) and len(written) == len(given), path
        for i, (g, w) in enumerate(zip(given, written)):
            assert_written(g, w, f"{path}[{i}]")
    else:
        assert written == given and type(written) is type(given), f"{path}: {given!r} came back as {written!r}"


def test_the_example_loads_and_round_trips():
    example = the_example()
    state = from_dict(example)
    written = to_dict(state)
    # The page's example is in the written form, so every value it states comes back.
    assert_written(example, written)
    assert states_equal(from_dict(written), state, ignore_history=False)
    assert to_dict(from_dict(json.loads(json.dumps(written)))) == written


def test_the_example_means_what_the_page_says():
    written = to_dict(from_dict(the_example()))
    assert written["turn"] == 0 and written["scheduledTaskInterval"] == 12 and written["nextScheduledTaskTurn"] == 12
    assert not (written["showActivated"] or written["scheduledTasksDisabled"] or written["stepActive"] or written["won"])
    spawns = {(b["row"], b["col"]): b["spawnCount"] for b in written["blocks"]}
    assert spawns[(1, 1)] == 4 and spawns[(3, 3)] == 2
    assert written["blocks"][2]["programActionIndex"] == 23   # anti-v
    assert written["player"]["attackDamage"] == 1


# The input behind each message the page quotes.
BAD = {
    "player: missing required key": {},
    "player.hp: must be in 1..3 (got 0)": {"player": {"row": 0, "col": 0, "hp": 0}},
    "player.col: off the board (columns are 0..5) (got 6)": {"player": {"row": 0, "col": 6}},
    "enemies[0].type: unknown enemy type (got 'worm')": {
        "player": {"row": 0, "col": 0}, "enemies": [{"type": "worm", "row": 1, "col": 1}]},
    "blocks[0]: unknown key 'colour' with value 'red'": {
        "player": {"row": 0, "col": 0},
        "blocks": [{"row": 1, "col": 1, "type": "data", "colour": "red"}]},
    "blocks[0]: a block on the exit cell (5, 5)": {
        "player": {"row": 0, "col": 0}, "blocks": [{"row": 5, "col": 5, "type": "data"}]},
    "stepActive: expected true or false (got 1)": {"player": {"row": 0, "col": 0}, "stepActive": 1},
}


def test_the_page_quotes_real_messages():
    blocks = fenced_blocks("text")
    assert len(blocks) == 1, "docs/scenarios.md should quote its error messages in one text block"
    quoted = blocks[0].strip().splitlines()
    assert sorted(quoted) == sorted(BAD), "the quoted messages and this test's inputs differ"
    for message in quoted:
        with pytest.raises(ValueError) as raised:
            from_dict(BAD[message])
        assert str(raised.value) == message
