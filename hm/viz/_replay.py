"""Replays: the steps of one or more games, written as a self-contained HTML page or a GIF.

A replay is a list of `Step`s. Each holds the game *before* an action, the action, what
the agent thought of it (its likeliest actions and the value estimate, when a policy
played) and the reward it earned; an episode's last step holds the final state and no
action. The HTML page embeds every frame as a PNG data URI and every step's facts as
JSON inside the page, and draws the panel from them with a few lines of JavaScript:
no network, no external file, so the page can be mailed or attached to an issue.
"""

import base64
import dataclasses
import html
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
from PIL import Image, ImageDraw

from hm.game.state import GameState
from hm.viz._frame import BACKGROUND, DIM_TEXT, FRAME_HEIGHT, FRAME_WIDTH, TEXT, draw_image, font, legend

# PNG frames are stored with a palette of this many colours: flat shapes and anti-aliased
# text need few, and a palette PNG is about a quarter of the RGB one.
PNG_COLORS = 64
GIF_CAPTION_HEIGHT = 48
LEGEND_ICON = 64            # pixels: the legend's cell-sized icons, shrunk a little


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of a replay: a state, and what was done in it.

    Attributes:
        state: the game before `action` (one unbatched game; device or host arrays).
        episode: which game of the replay this step belongs to (from 1).
        index: the step's number within its episode (from 0).
        action: the action taken in `state` (0-27), or None on an episode's last step.
        action_name: the action in words (`right`, `siphon`, `crash`).
        choices: the policy's likeliest actions as (name, probability), likeliest first;
            empty when no policy chose (a human game).
        value: the critic's value estimate of `state`, when a policy played.
        reward: the reward the action earned.
        reward_terms: the reward's nonzero terms by name (docs/rules.md#reward-terms).
        note: free text shown with the step, e.g. how the episode ended.
        search: when a search chose the action (`bin/watch --search`), the actions it
            visited as (name, visits, Q-value, the policy's probability), most visited first.
        search_value: the search's value of `state`, when a search chose.
    """

    state: GameState
    episode: int = 1
    index: int = 0
    action: int | None = None
    action_name: str = ""
    choices: tuple[tuple[str, float], ...] = ()
    value: float | None = None
    reward: float | None = None
    reward_terms: Mapping[str, float] = dataclasses.field(default_factory=dict)
    note: str = ""
    search: tuple[tuple[str, int, float, float], ...] = ()
    search_value: float | None = None


def _finite(x: float | None) -> float | None:
    """JSON has no NaN or infinity; a non-finite number is written as null."""
    return float(x) if x is not None and math.isfinite(float(x)) else None


def step_facts(step: Step, episode_return: float) -> dict[str, Any]:
    """A step as JSON-able facts (everything the page shows but the frame)."""
    return {
        "episode": step.episode,
        "step": step.index,
        "stage": int(jax.device_get(step.state.stage)),
        "action": step.action,
        "action_name": step.action_name,
        "choices": [[name, _finite(p)] for name, p in step.choices],
        "value": _finite(step.value),
        "reward": _finite(step.reward),
        "reward_terms": [[name, _finite(v)] for name, v in step.reward_terms.items()],
        "return": _finite(episode_return),
        "note": step.note,
        "search": [[name, int(visits), _finite(q), _finite(p)] for name, visits, q, p in step.search],
        "search_value": _finite(step.search_value),
    }


def _returns(steps: Sequence[Step]) -> list[float]:
    """The return of each step's episode up to and including that step's reward."""
    totals, returns = {}, []
    for step in steps:
        totals[step.episode] = totals.get(step.episode, 0.0) + (step.reward or 0.0)
        returns.append(totals[step.episode])
    return returns


def _png_data_uri(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.quantize(PNG_COLORS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element: no `<`, `>` or `&` can end or open a tag."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _check_steps(steps: Sequence[Step], what: str) -> None:
    if not steps:
        raise ValueError(f"{what}: a replay needs at least one step; got none")


def _check_fps(fps: int | float, what: str) -> None:
    if not (math.isfinite(fps) and fps > 0):
        raise ValueError(f"{what}: fps must be a positive number; got {fps!r}")


def write_html(path: str | Path, steps: Sequence[Step], *, title: str = "hm replay", fps: int | float = 4.0) -> None:
    """Write `steps` as one self-contained HTML page.

    The page shows the board picture of the current step beside its panel (action, the
    policy's likeliest actions, value estimate, reward and its nonzero terms, return so
    far), with play/pause, previous/next, a step slider and the keyboard (arrows,
    space, Home/End), and a legend of every symbol, drawn by the frame's own code.

    Args:
        path: the file to write.
        steps: the replay, in order.
        title: the page's heading (e.g. which policy played).
        fps: steps per second when playing.
    """
    _check_steps(steps, "write_html")
    _check_fps(fps, "write_html")
    returns = _returns(steps)
    payload = {
        "title": title,
        "fps": fps,
        "steps": [step_facts(step, total) | {"frame": _png_data_uri(draw_image(step.state, action=step.action))}
                  for step, total in zip(steps, returns)],
    }
    legend_html = "\n".join(
        f'<figure><img src="{_png_data_uri(icon)}" alt="" width="{LEGEND_ICON}" height="{LEGEND_ICON}">'
        f"<figcaption>{html.escape(text)}</figcaption></figure>" for icon, text in legend())
    fills = {"TITLE": html.escape(title), "WIDTH": str(FRAME_WIDTH), "HEIGHT": str(FRAME_HEIGHT),
             "LEGEND": legend_html, "DATA": _script_json(payload)}
    # One pass, so a title that happens to contain `@DATA@` stays text.
    page = re.sub(r"@([A-Z]+)@", lambda match: fills[match.group(1)], _PAGE)
    Path(path).write_text(page, encoding="utf-8")


def caption_lines(step: Step) -> tuple[str, str]:
    """The two caption lines of a GIF frame: where and what; the reward."""
    where = f"episode {step.episode}  step {step.index}"
    if step.action is not None:
        chosen = dict(step.choices).get(step.action_name)
        where += f"  {step.action_name}" + (f" (p {chosen:.2f})" if chosen is not None else "")
    if step.value is not None:
        where += f"  value {step.value:+.2f}"
    if step.reward is None:
        return where, step.note
    terms = ", ".join(f"{name} {v:+.2f}" for name, v in step.reward_terms.items())
    return where, f"reward {step.reward:+.3f}" + (f" ({terms})" if terms else "") + (f"  {step.note}" if step.note else "")


def gif_frame(step: Step) -> Image.Image:
    """A step's frame with its caption beneath (a GIF has no panel)."""
    board = draw_image(step.state, action=step.action)
    image = Image.new("RGB", (FRAME_WIDTH, FRAME_HEIGHT + GIF_CAPTION_HEIGHT), BACKGROUND)
    image.paste(board, (0, 0))
    draw = ImageDraw.Draw(image)
    for i, (line, color) in enumerate(zip(caption_lines(step), (TEXT, DIM_TEXT))):
        y = FRAME_HEIGHT + 12 + 20 * i
        while line and draw.textlength(line, font=font(15)) > FRAME_WIDTH - 32:
            line = line[:-2] + "…"
        draw.text((16, y), line, font=font(15), fill=color, anchor="lm")
    return image


def write_gif(path: str | Path, steps: Sequence[Step], *, fps: int | float = 4.0, last_frame_seconds: int | float = 2.0) -> None:
    """Write `steps` as an animated GIF that loops: each frame with a caption of the
    action, the policy's probability and value, and the reward.

    Args:
        path: the file to write.
        steps: the replay, in order.
        fps: frames per second.
        last_frame_seconds: how long the final frame stays before the loop restarts.
    """
    _check_steps(steps, "write_gif")
    _check_fps(fps, "write_gif")
    frames: Iterable[Image.Image] = (gif_frame(step).quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE) for step in steps)
    first, *rest = frames
    durations = [round(1000 / fps)] * len(steps)
    durations[-1] = max(durations[-1], round(1000 * last_frame_seconds))
    first.save(path, format="GIF", save_all=True, append_images=rest, duration=durations, loop=0)


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>@TITLE@</title>
<style>
  body { background: #0e111a; color: #e4e8f2; font: 15px/1.4 system-ui, sans-serif; margin: 20px; }
  h1 { font-size: 20px; margin: 0 0 12px; font-weight: 600; }
  main { display: flex; gap: 24px; align-items: flex-start; flex-wrap: wrap; }
  #board { width: @WIDTH@px; height: @HEIGHT@px; image-rendering: auto; border-radius: 8px; }
  #panel { min-width: 320px; max-width: 460px; flex: 1; }
  .controls { display: flex; gap: 6px; align-items: center; margin-bottom: 8px; }
  button, select { background: #20263a; color: #e4e8f2; border: 1px solid #3a4260; border-radius: 6px;
                   padding: 5px 10px; font: inherit; cursor: pointer; }
  button:hover { background: #2c3450; }
  #slider { width: 100%; margin: 4px 0 12px; }
  .where { color: #808aa0; margin-bottom: 10px; }
  .card { background: #181d2b; border-radius: 8px; padding: 10px 14px; margin-bottom: 10px; }
  .label { color: #808aa0; font-size: 12px; text-transform: uppercase; letter-spacing: .06em; }
  .big { font-size: 22px; font-weight: 600; }
  .bar { display: grid; grid-template-columns: 7em 1fr 4em; gap: 8px; align-items: center; margin: 3px 0; }
  .bar .track { background: #262c40; height: 10px; border-radius: 5px; overflow: hidden; }
  .bar .fill { background: #5c9cff; height: 100%; }
  .bar.taken .fill { background: #5ceb78; }
  .bar.taken { font-weight: 600; }
  tr.taken { font-weight: 600; color: #5ceb78; }
  .num { text-align: right; font-variant-numeric: tabular-nums; }
  table { border-collapse: collapse; width: 100%; }
  td { padding: 1px 0; font-variant-numeric: tabular-nums; }
  td.num { text-align: right; }
  .pos { color: #5ceb78; } .neg { color: #eb485c; }
  .note { color: #ffd65a; }
  details { margin-top: 20px; }
  summary { cursor: pointer; font-weight: 600; }
  #legend { display: grid; grid-template-columns: repeat(auto-fill, minmax(230px, 1fr)); gap: 8px; margin-top: 10px; }
  figure { display: flex; gap: 10px; align-items: center; margin: 0; }
  figcaption { font-size: 13px; }
  kbd { background: #20263a; border: 1px solid #3a4260; border-radius: 4px; padding: 0 4px; font-size: 12px; }
</style>
</head>
<body>
<h1>@TITLE@</h1>
<main>
  <img id="board" alt="the board at this step">
  <div id="panel">
    <div class="controls">
      <button id="first" title="first step (Home)">|&#x25C0;</button>
      <button id="prev" title="previous step (left arrow)">&#x25C0;</button>
      <button id="play" title="play / pause (space)">play</button>
      <button id="next" title="next step (right arrow)">&#x25B6;</button>
      <button id="last" title="last step (End)">&#x25B6;|</button>
      <select id="speed" title="steps per second"></select>
    </div>
    <input id="slider" type="range" min="0" value="0" step="1" aria-label="step">
    <div class="where" id="where"></div>
    <div class="card"><div class="label">action</div><div class="big" id="action"></div>
      <div class="note" id="note"></div></div>
    <div class="card" id="choices-card"><div class="label">the policy's likeliest actions</div>
      <div id="choices"></div></div>
    <div class="card" id="search-card"><div class="label">the search: visits, Q-value, policy p</div>
      <table id="search"></table><div class="where" id="search-value"></div></div>
    <div class="card" id="value-card"><div class="label">value estimate</div><div class="big" id="value"></div></div>
    <div class="card"><div class="label">reward</div><div class="big" id="reward"></div>
      <table id="terms"></table>
      <div class="where" id="return"></div></div>
    <div class="where"><kbd>&larr;</kbd> <kbd>&rarr;</kbd> step, <kbd>space</kbd> play/pause,
      <kbd>Home</kbd> <kbd>End</kbd> first/last</div>
  </div>
</main>
<details open><summary>legend</summary><div id="legend">
@LEGEND@
</div></details>
<script type="application/json" id="replay-data">@DATA@</script>
<script>
"use strict";
const replay = JSON.parse(document.getElementById("replay-data").textContent);
const steps = replay.steps;
const $ = (id) => document.getElementById(id);
const slider = $("slider");
slider.max = String(steps.length - 1);
let current = 0, timer = null;
const signed = (x, digits) => (x >= 0 ? "+" : "") + x.toFixed(digits);
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}
function show(i) {
  current = Math.max(0, Math.min(steps.length - 1, i));
  const s = steps[current];
  $("board").src = s.frame;
  slider.value = String(current);
  const episodes = steps[steps.length - 1].episode;
  $("where").textContent = "episode " + s.episode + "/" + episodes + "  \\u00b7  step " + s.step +
    "  \\u00b7  stage " + s.stage + "  \\u00b7  frame " + (current + 1) + "/" + steps.length;
  $("action").textContent = s.action === null ? "(no action)" : s.action_name;
  $("note").textContent = s.note;
  const choices = $("choices");
  choices.replaceChildren();
  $("choices-card").style.display = s.choices.length ? "" : "none";
  for (const [name, p] of s.choices) {
    const row = el("div", name === s.action_name ? "bar taken" : "bar");
    row.append(el("span", "", name));
    const track = el("div", "track"), fill = el("div", "fill");
    fill.style.width = (100 * (p || 0)).toFixed(1) + "%";
    track.append(fill);
    row.append(track, el("span", "num", p === null ? "?" : p.toFixed(3)));
    choices.append(row);
  }
  const search = $("search");
  search.replaceChildren();
  $("search-card").style.display = s.search.length ? "" : "none";
  for (const [name, visits, q, p] of s.search) {
    const tr = el("tr", name === s.action_name ? "taken" : "");
    tr.append(el("td", "", name), el("td", "num", String(visits)),
              el("td", "num", q === null ? "?" : signed(q, 3)), el("td", "num", p === null ? "?" : p.toFixed(3)));
    search.append(tr);
  }
  $("search-value").textContent = s.search_value === null ? "" : "search value " + signed(s.search_value, 3);
  $("value-card").style.display = s.value === null ? "none" : "";
  $("value").textContent = s.value === null ? "" : signed(s.value, 3);
  const reward = $("reward");
  reward.textContent = s.reward === null ? "\\u2014" : signed(s.reward, 3);
  reward.className = "big " + (s.reward > 0 ? "pos" : s.reward < 0 ? "neg" : "");
  const terms = $("terms");
  terms.replaceChildren();
  for (const [name, v] of s.reward_terms) {
    const tr = el("tr");
    tr.append(el("td", "", name), el("td", "num " + (v > 0 ? "pos" : v < 0 ? "neg" : ""), signed(v, 3)));
    terms.append(tr);
  }
  $("return").textContent = s.return === null ? "" : "return so far " + signed(s.return, 3);
}
function playing() { return timer !== null; }
function pause() { clearInterval(timer); timer = null; $("play").textContent = "play"; }
function play() {
  if (current >= steps.length - 1) show(0);
  timer = setInterval(() => { if (current >= steps.length - 1) pause(); else show(current + 1); },
                      1000 / Number($("speed").value));
  $("play").textContent = "pause";
}
function toggle() { if (playing()) pause(); else play(); }
for (const fps of [1, 2, 4, 8, 16]) {
  const option = el("option", "", fps + " steps/s");
  option.value = String(fps);
  $("speed").append(option);
}
$("speed").value = String([1, 2, 4, 8, 16].includes(replay.fps) ? replay.fps : 4);
$("speed").addEventListener("change", () => { if (playing()) { pause(); play(); } });
$("play").addEventListener("click", toggle);
$("prev").addEventListener("click", () => { pause(); show(current - 1); });
$("next").addEventListener("click", () => { pause(); show(current + 1); });
$("first").addEventListener("click", () => { pause(); show(0); });
$("last").addEventListener("click", () => { pause(); show(steps.length - 1); });
slider.addEventListener("input", () => { pause(); show(Number(slider.value)); });
document.addEventListener("keydown", (event) => {
  if (event.target === slider && (event.key === "ArrowLeft" || event.key === "ArrowRight")) return;
  const moves = { ArrowLeft: -1, ArrowRight: 1 };
  if (event.key in moves) { pause(); show(current + moves[event.key]); }
  else if (event.key === " ") toggle();
  else if (event.key === "Home") { pause(); show(0); }
  else if (event.key === "End") { pause(); show(steps.length - 1); }
  else return;
  event.preventDefault();
});
const start = Number(new URLSearchParams(location.search).get("step"));
show(Number.isInteger(start) ? start : 0);
</script>
</body>
</html>
"""
