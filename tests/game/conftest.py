"""Shared fixtures for the game tests.

Every jitted engine function is compiled once per session: all states have the same
shapes, so the 54 observable checks (docs/rules.md §19) reuse one compiled `step`,
one `legal_actions` and one `observe`.

Scenarios are docs/scenarios.md dicts. The `scenario` fixture (`build_scenario` here),
called as `scenario(r, c, **extra)`, builds the bare fixture F(r, c) of §19 with
every key spelled out, then applies `extra`: player fields (`hp`, `credits`,
`energy`, `dataSiphons`, `attackDamage`, `score`) go into `"player"`, everything
else replaces the top-level key. The small builders (`virus(...)`, `data_block(...)`,
...) and readers (`enemies_at(d, r, c)`, ...) are plain functions, available to
tests through the `hmx` fixture.
"""

import copy
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hm.game as game

# Numbers from the spec, spelled out here rather than read from hm.game.constants, so
# that a wrong table in the engine fails the tests instead of agreeing with them.
ROWS = COLS = 6                                          # §1
CORNERS = ((0, 0), (0, 5), (5, 0), (5, 5))               # §1
DIRECTION_DELTAS = ((1, 0), (-1, 0), (0, -1), (0, 1))    # §1: up, down, left, right
PROGRAM_NAMES = (                                        # §4, in id order
    "PUSH", "PULL", "CRASH", "WARP", "POLY", "WAIT", "DEBUG", "ROW", "COL", "UNDO",
    "STEP", "SIPH+", "EXCH", "SHOW", "RESET", "CALM", "D_BOM", "DELAY", "ANTI-V",
    "SCORE", "REDUC", "ATK+", "HACK",
)
PROGRAM_SPAWN_COUNT = (4, 4, 6, 5, 3, 1, 4, 2, 2, 3, 4, 7, 3, 2, 2, 6, 4, 4, 4, 5, 3, 8, 4)
PROGRAM_ACTION_OFFSET = 5                                # §3

PLAYER_KEYS = ("hp", "credits", "energy", "dataSiphons", "attackDamage", "score")

# Action index of each program, by its §4 name ("WAIT" -> 10).
ACTION = {name: PROGRAM_ACTION_OFFSET + i for i, name in enumerate(PROGRAM_NAMES)}

_PROGRAM_ALIASES = {
    "siphplus": "siph+", "siph_plus": "siph+", "dbom": "d_bom", "d_bomb": "d_bom",
    "antiv": "anti-v", "anti_v": "anti-v", "atkplus": "atk+", "atk_plus": "atk+",
}


# --------------------------------------------------------------------------- builders

def fixture_dict(r, c):
    """The bare fixture F(r, c) of docs/rules.md §19, every key explicit."""
    return {
        "player": {"row": r, "col": c, "hp": 3, "credits": 0, "energy": 0,
                   "dataSiphons": 0, "attackDamage": 1, "score": 0},
        "enemies": [], "transmissions": [], "blocks": [], "resources": [],
        "ownedPrograms": [],
        "stage": 1, "turn": 0, "showActivated": False, "scheduledTasksDisabled": False,
        "exit": [5, 5], "scheduledTaskInterval": 12, "nextScheduledTaskTurn": 12,
        "pendingSiphonTransmissions": 0, "stepActive": False, "atkPlusUses": 0,
        "won": False, "siphonedCells": [], "siphonCenters": [],
    }


def build_scenario(r, c, **extra):
    """F(r, c) merged with `extra` (player fields into "player", the rest top-level)."""
    d = fixture_dict(r, c)
    for key, value in extra.items():
        if key in PLAYER_KEYS:
            d["player"][key] = value
        else:
            d[key] = copy.deepcopy(value)
    return d


def enemy(kind, r, c, hp=None, stunned=False, from_siphon=False, from_task=False,
          disabled=0):
    e = {"type": kind, "row": r, "col": c, "stunned": stunned,
         "spawnedFromSiphon": from_siphon, "isFromScheduledTask": from_task,
         "disabledTurns": disabled}
    if hp is not None:
        e["hp"] = hp
    return e


def virus(r, c, hp=2, **kw):
    return enemy("virus", r, c, hp, **kw)


def daemon(r, c, hp=3, **kw):
    return enemy("daemon", r, c, hp, **kw)


def glitch(r, c, hp=2, **kw):
    return enemy("glitch", r, c, hp, **kw)


def cryptog(r, c, hp=2, **kw):
    return enemy("cryptog", r, c, hp, **kw)


def transmission(r, c, timer, kind="virus", from_siphon=False, from_task=False):
    return {"row": r, "col": c, "turnsRemaining": timer, "enemyType": kind,
            "spawnedFromSiphon": from_siphon, "isFromScheduledTask": from_task}


def data_block(r, c, points, spawn=None, siphoned=False):
    return {"row": r, "col": c, "type": "data", "points": points,
            "spawnCount": points if spawn is None else spawn, "siphoned": siphoned}


def program_block(r, c, name, spawn, siphoned=False):
    return {"row": r, "col": c, "type": "program", "programType": name.lower(),
            "programActionIndex": ACTION[name.upper()], "spawnCount": spawn,
            "siphoned": siphoned}


def question_block(r, c, hidden, points=None, program=None, spawn=None):
    b = {"row": r, "col": c, "type": "question", "hidden": hidden, "siphoned": False}
    if points is not None:
        b["points"] = points
    if program is not None:
        b["programType"] = program.lower()
    if spawn is not None:
        b["spawnCount"] = spawn
    return b


def credits_at(r, c, n):
    return {"row": r, "col": c, "credits": n}


def energy_at(r, c, n):
    return {"row": r, "col": c, "energy": n}


def pickup_at(r, c):
    return {"row": r, "col": c, "dataSiphon": True}


# --------------------------------------------------------------------------- readers

def enemies_at(d, r, c):
    """Enemies (dicts, list order) standing on (r, c) in a to_dict output."""
    return [e for e in d["enemies"] if e["row"] == r and e["col"] == c]


def enemy_at(d, r, c):
    """The single enemy on (r, c), or None; fails if several are stacked there."""
    found = enemies_at(d, r, c)
    assert len(found) <= 1, f"{len(found)} enemies stacked on {(r, c)}: {found}"
    return found[0] if found else None


def transmissions_at(d, r, c):
    return [t for t in d["transmissions"] if t["row"] == r and t["col"] == c]


def block_at(d, r, c):
    found = [b for b in d["blocks"] if b["row"] == r and b["col"] == c]
    assert len(found) <= 1, f"two blocks on {(r, c)}: {found}"
    return found[0] if found else None


def block_cells(d):
    return {(b["row"], b["col"]) for b in d["blocks"]}


def resource_at(d, r, c):
    """(credits, energy, pickup) of cell (r, c) in a to_dict output."""
    credits = energy = 0
    pickup = False
    for e in d["resources"]:
        if e["row"] == r and e["col"] == c:
            credits += e.get("credits") or 0
            energy += e.get("energy") or 0
            pickup = pickup or bool(e.get("dataSiphon"))
    return credits, energy, pickup


def pickup_cells(d):
    return {(e["row"], e["col"]) for e in d["resources"] if e.get("dataSiphon")}


def player_cell(d):
    return d["player"]["row"], d["player"]["col"]


def program_id_of_block(b):
    """Program id (0..22) named by a program or hidden-program block dict."""
    idx = b.get("programActionIndex")
    if idx is not None:
        return idx - PROGRAM_ACTION_OFFSET
    name = b["programType"].lower()
    name = _PROGRAM_ALIASES.get(name, name)
    return [n.lower() for n in PROGRAM_NAMES].index(name)


def line_of_fire(d):
    """Cells in the player's line of fire (§11): same row/column, nothing between
    the player and the cell holds an enemy or a block (transmissions don't shelter)."""
    pr, pc = player_cell(d)
    stoppers = block_cells(d) | {(e["row"], e["col"]) for e in d["enemies"]}
    cells = set()
    for dr, dc in DIRECTION_DELTAS:
        r, c = pr + dr, pc + dc
        while 0 <= r < ROWS and 0 <= c < COLS:
            cells.add((r, c))
            if (r, c) in stoppers:
                break
            r, c = r + dr, c + dc
    return cells


# --------------------------------------------------------------------------- asserts

def reward_tolerance(expected):
    """1e-4, widened to a few float32 ulps for large rewards (1600.04 has an ulp of
    1.2e-4 in float32, so a float32 sum cannot be held to 1e-4 there)."""
    return max(1e-4, 4.0 * float(np.spacing(np.float32(abs(expected)))))


def _terms(info):
    try:
        return {k: round(float(v), 6) for k, v in info["reward_terms"].items()
                if float(v) != 0.0}
    except Exception:  # noqa: BLE001 - only used to decorate a failure message
        return "<no reward_terms>"


def assert_reward(reward, expected, info=None):
    got = float(reward)
    tol = reward_tolerance(expected)
    assert math.isclose(got, expected, rel_tol=0.0, abs_tol=tol), (
        f"reward {got!r} != expected {expected!r} (tol {tol:g}); "
        f"non-zero terms: {_terms(info) if info is not None else '?'}")


def assert_close(got, expected, what="value", tol=1e-5):
    got = float(got)
    assert math.isclose(got, expected, rel_tol=0.0, abs_tol=tol), (
        f"{what}: got {got!r}, expected {expected!r}")


# --------------------------------------------------------------------------- engine

def _as_key(key):
    if isinstance(key, (int, np.integer)):
        return jax.random.key(int(key))
    return key


@pytest.fixture(scope="session")
def jitted():
    """One compiled program per engine function, shared by the whole session."""
    return types.SimpleNamespace(
        step=jax.jit(game.step),
        legal_actions=jax.jit(game.legal_actions),
        observe=jax.jit(game.observe),
    )


@pytest.fixture(scope="session")
def step(jitted):
    """step(state, action, key=0) -> (state, obs, reward, done, info); `key` may be an
    int seed or a jax key. The action is always passed as an int32 scalar so the
    compiled program is reused."""

    def _step(state, action, key=0):
        return jitted.step(state, jnp.asarray(action, dtype=jnp.int32), _as_key(key))

    return _step


@pytest.fixture(scope="session")
def legal_actions(jitted):
    """legal_actions(state) -> numpy bool[28]."""

    def _legal(state):
        return np.asarray(jitted.legal_actions(state))

    return _legal


@pytest.fixture(scope="session")
def observe(jitted):
    return jitted.observe


@pytest.fixture(scope="session")
def hmx():
    """The plain helpers of this module, as one namespace."""
    return types.SimpleNamespace(
        ROWS=ROWS, COLS=COLS, CORNERS=CORNERS, DIRECTION_DELTAS=DIRECTION_DELTAS,
        PROGRAM_NAMES=PROGRAM_NAMES, PROGRAM_SPAWN_COUNT=PROGRAM_SPAWN_COUNT,
        ACTION=ACTION, fixture_dict=fixture_dict, scenario=build_scenario, enemy=enemy,
        virus=virus, daemon=daemon, glitch=glitch, cryptog=cryptog,
        transmission=transmission, data_block=data_block, program_block=program_block,
        question_block=question_block, credits_at=credits_at, energy_at=energy_at,
        pickup_at=pickup_at, enemies_at=enemies_at, enemy_at=enemy_at,
        transmissions_at=transmissions_at, block_at=block_at, block_cells=block_cells,
        resource_at=resource_at, pickup_cells=pickup_cells, player_cell=player_cell,
        program_id_of_block=program_id_of_block, line_of_fire=line_of_fire,
        assert_reward=assert_reward, assert_close=assert_close,
        reward_tolerance=reward_tolerance,
    )


@pytest.fixture(scope="session")
def scenario():
    """scenario(r, c, **extra) -> docs/scenarios.md dict of F(r, c) plus `extra`."""
    return build_scenario
