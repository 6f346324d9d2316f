"""`hm.viz.write_html` and `write_gif`: the files' structure, read back.

The page is checked with `html.parser` (CI has no browser): one frame per step, the
embedded JSON round-trips, nothing is fetched from outside the file, and text that
looks like markup stays text.
"""

import base64
import html.parser
import io
import json
import math

import numpy as np
import pytest
from PIL import Image

from hm import viz
from hm.game.state import bare_state
from hm.viz._replay import GIF_CAPTION_HEIGHT, caption_lines


class Page(html.parser.HTMLParser):
    """Every start tag with its attributes, and the text of each <script>."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.text: list[str] = []
        self._in_script: dict[str, str | None] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append((self._in_script, ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = None

    def handle_data(self, data):
        if self._in_script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)
        else:
            self.text.append(data)


def sample_steps() -> list[viz.Step]:
    """Two episodes: two actions and an end, then one action and an end."""
    return [
        viz.Step(state=bare_state(0, 0), episode=1, index=0, action=0, action_name="up",
                 choices=(("up", 0.75), ("right", 0.25)), value=0.5, reward=0.04,
                 reward_terms={"step": -0.01, "distance": 0.05}),
        viz.Step(state=bare_state(1, 0), episode=1, index=1, action=3, action_name="right",
                 choices=(("up", 0.6), ("right", 0.4)), value=0.25, reward=-1.01,
                 reward_terms={"step": -0.01, "damage": -1.0}),
        viz.Step(state=bare_state(1, 1), episode=1, index=2, note="died on stage 1"),
        viz.Step(state=bare_state(3, 3), episode=2, index=0, action=4, action_name="siphon", reward=2.0,
                 reward_terms={"score": 2.0}, value=float("nan")),
        viz.Step(state=bare_state(3, 3), episode=2, index=1, note="quit"),
    ]


def read_page(path) -> tuple[Page, dict]:
    page = Page(path.read_text(encoding="utf-8"))
    data = [text for attrs, text in page.scripts if attrs.get("id") == "replay-data"]
    assert len(data) == 1 and page.scripts[0][0].get("type") == "application/json"
    return page, json.loads(data[0])


def decode_png(uri: str) -> Image.Image:
    prefix = "data:image/png;base64,"
    assert uri.startswith(prefix)
    image = Image.open(io.BytesIO(base64.b64decode(uri[len(prefix):], validate=True)))
    assert image.format == "PNG"
    return image


def test_html_has_one_frame_per_step_and_the_facts_round_trip(tmp_path):
    steps = sample_steps()
    path = tmp_path / "replay.html"
    viz.write_html(path, steps, title="a title", fps=8)
    _, data = read_page(path)
    assert data["title"] == "a title" and data["fps"] == 8
    assert len(data["steps"]) == len(steps)
    for step, facts in zip(steps, data["steps"]):
        image = decode_png(facts["frame"])
        assert image.size == (viz.FRAME_WIDTH, viz.FRAME_HEIGHT)
        assert (facts["episode"], facts["step"], facts["action"]) == (step.episode, step.index, step.action)
        assert facts["action_name"] == step.action_name and facts["note"] == step.note
        assert facts["choices"] == [list(choice) for choice in step.choices]
        assert facts["reward_terms"] == [list(term) for term in step.reward_terms.items()]
        assert facts["stage"] == 1
    assert [facts["value"] for facts in data["steps"]] == [0.5, 0.25, None, None, None]   # NaN is written as null
    assert [facts["reward"] for facts in data["steps"]] == [0.04, -1.01, None, 2.0, None]
    returns = [facts["return"] for facts in data["steps"]]
    assert returns == pytest.approx([0.04, -0.97, -0.97, 2.0, 2.0])                     # per episode


def test_html_frames_are_the_pictures_of_the_steps(tmp_path):
    steps = sample_steps()
    path = tmp_path / "replay.html"
    viz.write_html(path, steps)
    _, data = read_page(path)
    for step, facts in zip(steps[:3], data["steps"]):
        stored = np.asarray(decode_png(facts["frame"]).convert("RGB")).astype(np.int32)
        drawn = viz.draw_frame(step.state, action=step.action).astype(np.int32)
        # The PNG keeps a palette of `PNG_COLORS`: flat colours exact, anti-aliased edges close.
        assert np.mean(np.abs(stored - drawn)) < 2.0
    frames = [facts["frame"] for facts in data["steps"]]
    assert frames[0] != frames[1] != frames[2]


def test_html_is_self_contained(tmp_path):
    path = tmp_path / "replay.html"
    viz.write_html(path, sample_steps())
    page, _ = read_page(path)
    text = path.read_text(encoding="utf-8")
    assert "http:" not in text and "https:" not in text and "//cdn" not in text
    for tag, attrs in page.tags:
        assert tag != "link" and tag != "iframe", tag
        assert not (tag == "script" and "src" in attrs)
        for name in ("src", "href"):
            if attrs.get(name) is not None:
                assert attrs[name].startswith("data:"), (tag, attrs[name][:40])
    icons = [attrs for tag, attrs in page.tags if tag == "img" and attrs.get("src")]
    assert len(icons) == len(viz.legend())          # the legend; the board's src is set by the script
    for attrs in icons:
        decode_png(attrs["src"])
    controls = {attrs.get("id") for tag, attrs in page.tags if tag in ("button", "input", "select")}
    assert {"play", "prev", "next", "first", "last", "slider", "speed"} <= controls


def test_text_that_looks_like_markup_stays_text(tmp_path):
    evil = "</script><script>alert('x')</script><b>&amp;"
    steps = [viz.Step(state=bare_state(), action=0, action_name=evil, note=evil,
                      choices=((evil, 1.0),), reward_terms={evil: 1.0})]
    path = tmp_path / "replay.html"
    viz.write_html(path, steps, title=evil)
    page, data = read_page(path)
    assert len(page.scripts) == 2                   # the data and the player; no injected script
    assert not any(tag == "b" for tag, _ in page.tags)
    assert evil in "".join(page.text)               # the title, as text
    facts = data["steps"][0]
    assert data["title"] == facts["action_name"] == facts["note"] == facts["choices"][0][0] == evil
    assert facts["reward_terms"] == [[evil, 1.0]]


def test_gif_has_one_captioned_frame_per_step(tmp_path):
    steps = sample_steps()
    path = tmp_path / "replay.gif"
    viz.write_gif(path, steps, fps=5, last_frame_seconds=3)
    with Image.open(path) as gif:
        assert gif.format == "GIF" and gif.n_frames == len(steps) and gif.info.get("loop") == 0
        assert gif.size == (viz.FRAME_WIDTH, viz.FRAME_HEIGHT + GIF_CAPTION_HEIGHT)
        durations, frames = [], []
        for i in range(gif.n_frames):
            gif.seek(i)
            durations.append(gif.info["duration"])
            frames.append(np.asarray(gif.convert("RGB")))
    assert durations == [200] * (len(steps) - 1) + [3000]
    board = slice(0, viz.FRAME_HEIGHT)
    drawn = viz.draw_frame(steps[0].state, action=steps[0].action).astype(np.int32)
    assert np.mean(np.abs(frames[0][board].astype(np.int32) - drawn)) < 2.0
    assert (frames[0][viz.FRAME_HEIGHT:] != frames[1][viz.FRAME_HEIGHT:]).any()   # captions differ


def test_caption_names_action_probability_value_and_reward():
    where, reward = caption_lines(sample_steps()[0])
    assert where == "episode 1  step 0  up (p 0.75)  value +0.50"
    assert reward == "reward +0.040 (step -0.01, distance +0.05)"
    assert caption_lines(sample_steps()[2]) == ("episode 1  step 2", "died on stage 1")


@pytest.mark.parametrize("write", [viz.write_html, viz.write_gif])
def test_bad_replays_are_refused(write, tmp_path):
    with pytest.raises(ValueError, match="at least one step"):
        write(tmp_path / "x", [])
    for fps in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="fps must be a positive number"):
            write(tmp_path / "x", sample_steps()[:1], fps=fps)
    assert not (tmp_path / "x").exists()

