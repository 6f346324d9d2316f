"""Differential tests: the JAX engine `hm.game` against the reference model.

The two engines draw different random numbers, so only what the rules determine is
compared. For each (state, legal action) the model lists *every* outcome the rules allow
(`model.enumerate_outcomes` walks every branch of every random draw: activation orders,
transmission cells and types, WARP targets, POLY types). Then

* a single distinct outcome (the step is deterministic): the engine must produce it
  exactly: `to_dict` (canonicalised), reward and every reward term (to 1e-5), done,
  info flags, and the returned observation bit for bit;
* several outcomes: the engine's must be one of them (same checks against that one);
* too many branches to list (stage generation, several siphon transmissions, crowded
  enemy phases): only projections that no random draw can change are compared (listed
  in `_deterministic_fields`); six seeded model runs must agree on them, as a check of
  that list, and the engine must match them. When the stage advanced, the engine's new
  stage is also checked against §12.2-§12.4 and §11 (`_check_new_stage`).

For every generated state the legal-action mask and the observation must be identical,
an illegal action must leave the state unchanged with reward 0 and done, and
`to_dict(from_dict(d))` must describe the same state as `d`.

Random walks start from `hm.game.reset` and from generated scenarios, follow random
legal actions of the engine, and keep the model in lock-step (including the UNDO
history, bounded like the engine's) so UNDO is compared too.

Engine functions are jit-compiled once per module. The quick tests run by default
(a few minutes on 2 cores); the big sweeps are marked `sweep`, which pyproject.toml
deselects by default (they take far longer than the `slow` tests): `bin/test -m sweep`.
`test_harness_accepts_the_model_itself` runs the harness with the model as the engine
(own random draws): it proves the comparisons raise no false alarms.
"""

import collections
import dataclasses
import json
import random
import re

import jax
import numpy as np
import pytest

import hm.game

from . import model as M

ENUMERATION_BUDGET = 256
REWARD_TOL = dict(rel=1e-6, abs=1e-5)
MAX_REPORTED = 6
STATS = collections.Counter()      # how steps were compared (printed with -s)


# ---------------------------------------------------------------------------
# Engine access
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class Engine:
    game: object
    jax: object
    step: object
    legal: object
    observe: object
    reset: object
    history_cap: int

    def key(self, i):
        return self.jax.random.key(i)


@pytest.fixture(scope="module")
def engine():
    game = hm.game
    cap = int(getattr(game.constants, "HISTORY_CAPACITY", 0)) or None
    return Engine(game=game, jax=jax, step=jax.jit(game.step), legal=jax.jit(game.legal_actions),
                  observe=jax.jit(game.observe), reset=jax.jit(game.reset), history_cap=cap)


# ---------------------------------------------------------------------------
# Random scenarios (valid per docs/scenarios.md, plausible per the rules)
# ---------------------------------------------------------------------------

ALL_CELLS = M.ALL_CELLS


def random_scenario(rng: random.Random) -> dict:
    """A random, valid scenario dict exercising every key of docs/scenarios.md."""
    stage = rng.randint(1, 8)
    exit_cell = rng.choice(M.CORNERS)
    non_exit = [x for x in ALL_CELLS if x != exit_cell]
    player = rng.choice(non_exit)
    quiet = rng.random() < 0.6          # few random events: most steps enumerable

    # blocks (never on corners or the exit; rarely under the player, as after WARP)
    blocks = {}
    n_blocks = rng.choice([0, 2, 4, 6, 8, 10])
    block_cells = [x for x in ALL_CELLS if x not in M.CORNERS
                   and (x != player or rng.random() < 0.05)]
    used_programs = set()
    for x in rng.sample(block_cells, min(n_blocks, len(block_cells))):
        siphoned = rng.random() < 0.25
        question = not siphoned and rng.random() < 0.2
        if rng.random() < 0.5:
            points = rng.randint(1, 9)
            spawn = 0 if siphoned else rng.choice([points, points, rng.randint(0, points)])
            b = {"row": x[0], "col": x[1], "type": "data", "points": points, "spawnCount": spawn}
        else:
            g = rng.choice([g for g in range(23) if g not in used_programs])
            used_programs.add(g)
            spawn = 0 if siphoned else rng.choice([M.SPAWN_COUNT[g], rng.randint(0, M.SPAWN_COUNT[g])])
            b = {"row": x[0], "col": x[1], "type": "program", "spawnCount": spawn}
            if rng.random() < 0.5:
                b["programType"] = M.PROGRAM_NAMES[g].upper() if rng.random() < 0.2 else M.PROGRAM_NAMES[g]
            else:
                b["programActionIndex"] = 5 + g
        if question:
            b["hidden"] = b["type"]
            b["type"] = "question"
        b["siphoned"] = siphoned
        blocks[x] = b

    # pickups on corners other than the exit (rarely under the player)
    pickups = [x for x in M.CORNERS if x != exit_cell and rng.random() < 0.5
               and (x != player or rng.random() < 0.2)]

    # siphoned non-block cells and siphon centres
    siphoned_cells = [x for x in rng.sample(ALL_CELLS, rng.choice([0, 0, 3, 6]))
                      if x not in blocks]
    centers = [x for x in siphoned_cells if rng.random() < 0.3]

    resources = [{"row": x[0], "col": x[1], "dataSiphon": True} for x in pickups]
    for x in ALL_CELLS:
        if x == exit_cell or x in siphoned_cells:
            continue
        if x in blocks and not (rng.random() < 0.03):
            continue
        if rng.random() < 0.6:
            amount = rng.choice([1, 1, 2, 2, 3]) if rng.random() < 0.95 else rng.randint(4, 6)
            kind = rng.choice(["credits", "energy"])
            if x in pickups and rng.random() < 0.3:
                resources[pickups.index(x)][kind] = amount     # single-entry extension
            else:
                resources.append({"row": x[0], "col": x[1], kind: amount})
    rng.shuffle(resources)

    # enemies
    enemies = []
    enemy_cells = set()
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 3, 4, 5, 7] if not quiet else [0, 1, 1, 2, 2, 3])):
        kind = rng.randrange(4)
        if enemy_cells and rng.random() < 0.08:
            x = rng.choice(sorted(enemy_cells))                       # stacked (PUSH/PULL)
        else:
            options = [y for y in ALL_CELLS if y != player and y not in enemy_cells
                       and (y not in blocks or kind == M.GLITCH or rng.random() < 0.1)]
            x = rng.choice(options)
        enemy_cells.add(x)
        origin = rng.random()
        e = {"type": M.ENEMY_NAMES[kind] if rng.random() < 0.9 else M.ENEMY_NAMES[kind].upper(),
             "row": x[0], "col": x[1], "hp": rng.randint(1, M.ENEMY_MAX_HP[kind]),
             "stunned": rng.random() < 0.2, "disabledTurns": rng.choice([0, 0, 0, 1, 2]),
             "spawnedFromSiphon": origin < 0.15, "isFromScheduledTask": 0.15 <= origin < 0.3}
        if rng.random() < 0.1:
            del e["hp"]
        enemies.append(e)

    # transmissions on free cells
    transmissions = []
    taken = set(enemy_cells) | {player}
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3] if not quiet else [0, 0, 1])):
        options = [y for y in ALL_CELLS if y not in taken and y not in blocks]
        if not options:
            break
        x = rng.choice(options)
        taken.add(x)
        origin = rng.random()
        transmissions.append({
            "row": x[0], "col": x[1], "turnsRemaining": rng.choice([1, 1, 2, 3, 4, 5, 8]),
            "enemyType": rng.choice(M.ENEMY_NAMES), "spawnedFromSiphon": origin < 0.15,
            "isFromScheduledTask": 0.15 <= origin < 0.3})

    interval = max(4, (12 if stage == 1 else 13 - stage) - rng.choice([0, 0, 0, 1, 2]))
    turn = rng.randint(0, 20)
    if quiet:
        next_task = turn + rng.randint(2, 12)
        pending = 0
    else:
        next_task = max(0, turn + rng.randint(-3, 12))
        pending = rng.choice([0, 0, 1, 2, 5])
    d = {
        "player": {"row": player[0], "col": player[1], "hp": rng.randint(1, 3),
                   "credits": rng.choice([0, 1, 2, 3, 4, 5, 8, 12, 20, 60]),
                   "energy": rng.choice([0, 1, 2, 3, 4, 5, 8, 12, 20, 55]),
                   "dataSiphons": rng.choice([0, 0, 1, 1, 2, 12]),
                   "attackDamage": rng.choice([1, 1, 1, 2, 3, 5]),
                   "score": rng.randint(0, 40)},
        "enemies": enemies,
        "transmissions": transmissions,
        "blocks": list(blocks.values()),
        "resources": resources,
        "ownedPrograms": sorted(rng.sample(range(5, 28), rng.randint(0, 23))),
        "stage": stage,
        "turn": turn,
        "showActivated": rng.random() < 0.3,
        "scheduledTasksDisabled": rng.random() < 0.2,
        "exit": list(exit_cell),
        "scheduledTaskInterval": interval,
        "nextScheduledTaskTurn": next_task,
        "pendingSiphonTransmissions": pending,
        "stepActive": rng.random() < 0.15,
        "atkPlusUses": rng.choice([0, 0, 1, 2]),
        "won": False,
        "siphonedCells": [list(x) for x in siphoned_cells],
        "siphonCenters": [list(x) for x in centers],
    }
    # drop some keys to exercise defaults (explicit null counts as missing)
    for k in ("showActivated", "atkPlusUses", "siphonCenters", "stepActive", "won"):
        if rng.random() < 0.1:
            if rng.random() < 0.5:
                del d[k]
            else:
                d[k] = None
    return d


# ---------------------------------------------------------------------------
# Comparison helpers
# ---------------------------------------------------------------------------

def _diff(a, b, path="", out=None):
    """Paths where two JSON-like values differ."""
    out = [] if out is None else out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: model={a.get(k, '<missing>')!r} engine={b.get(k, '<missing>')!r}")
            else:
                _diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: model={a!r} engine={b!r}")
    return out


def _obs_diff(model_obs, engine_obs):
    player, programs, grid = model_obs
    out = []
    ep = np.asarray(engine_obs.player)
    mp = np.asarray(player, dtype=np.float32)
    if ep.dtype != np.float32 or ep.shape != (10,) or not np.array_equal(ep, mp):
        out.append(f"obs.player: model={mp.tolist()} engine={ep.tolist()} ({ep.dtype})")
    eg = np.asarray(engine_obs.programs)
    if eg.shape != (23,) or not np.array_equal(eg, np.asarray(programs)):
        out.append(f"obs.programs: model={programs} engine={eg.tolist()}")
    ex = np.asarray(engine_obs.grid)
    mx = np.asarray(grid, dtype=np.float32)
    if ex.dtype != np.float32 or ex.shape != (6, 6, 42):
        out.append(f"obs.grid dtype/shape {ex.dtype} {ex.shape}")
    else:
        for r, c, ch in zip(*np.nonzero(ex != mx)):
            if len(out) > 8:
                out.append("obs.grid: ...")
                break
            out.append(f"obs.grid[{r}][{c}][{ch}]: model={mx[r, c, ch]!r} engine={ex[r, c, ch]!r}")
    return out


def _engine_dict(engine, state):
    d = engine.game.to_dict(state)
    json.dumps(d)                                     # must be JSON-serialisable
    depth = d.get("undoDepth")
    return M.canonical(d), depth


def _engine_terms(info):
    return {k: float(v) for k, v in info["reward_terms"].items()}


class Mismatches:
    def __init__(self):
        self.items = []
        self.count = 0
        self.kinds = collections.Counter()

    def add(self, scenario, action, problems, history_note=""):
        self.count += 1
        kinds = {re.sub(r"\[\d+\]", "[]", p.split(":")[0]) for p in problems}
        new_kind = any(k not in self.kinds for k in kinds)
        self.kinds.update(kinds)
        # report the first examples, then one more example of each new kind of problem
        if len(self.items) < MAX_REPORTED or (new_kind and len(self.items) < 3 * MAX_REPORTED):
            self.items.append(
                f"--- action {action} on scenario {history_note}\n{json.dumps(scenario)}\n  "
                + "\n  ".join(problems[:25]))

    def check(self):
        if self.count:
            pytest.fail(f"{self.count} mismatch(es); kinds: {dict(self.kinds.most_common())}\n"
                        f"first {len(self.items)}:\n"
                        + "\n".join(self.items), pytrace=False)


def _compare_outcome(model_out, engine_out, engine):
    """Problems (list of str) between one model outcome and the engine's outcome."""
    s2, obs, reward, done, info = model_out
    e_canon, e_depth, e_obs, e_reward, e_done, e_info = engine_out
    problems = []
    m_canon = M.to_scenario(s2)
    m_depth = m_canon.pop("undoDepth")
    problems += _diff(m_canon, e_canon)
    if e_depth is not None and e_depth != m_depth:
        problems.append(f"undoDepth: model={m_depth} engine={e_depth}")
    if e_reward != pytest.approx(reward, **REWARD_TOL):
        problems.append(f"reward: model={reward!r} engine={e_reward!r}")
    e_terms = _engine_terms(e_info)
    if set(e_terms) != set(M.REWARD_TERMS):
        problems.append(f"reward term names: {sorted(e_terms)}")
    for k, v in info["reward_terms"].items():
        if k in e_terms and e_terms[k] != pytest.approx(v, **REWARD_TOL):
            problems.append(f"reward_terms[{k}]: model={v!r} engine={e_terms[k]!r}")
    if bool(e_done) != bool(done):
        problems.append(f"done: model={done} engine={bool(e_done)}")
    for k, v in (("stage_completed", info["stage_completed"]), ("died", info["died"]),
                 ("illegal", info["illegal"]), ("won", s2.won)):
        if k in e_info and bool(e_info[k]) != bool(v):
            problems.append(f"info[{k}]: model={v} engine={bool(e_info[k])}")
    problems += _obs_diff(obs, e_obs)
    return problems


def _run_engine(engine, e_state, action, key_index):
    e2, e_obs, e_reward, e_done, e_info = engine.step(
        e_state, np.int32(action), engine.key(key_index))
    try:
        canon, depth = _engine_dict(engine, e2)
    except ValueError as e:
        canon, depth = {"<engine to_dict unreadable>": str(e)}, None
    return e2, (canon, depth, e_obs, float(e_reward), bool(e_done), e_info)


def _deterministic_fields(action, out):
    """Projections of an outcome that no random draw can change, for this action (§16).

    Always: credits/energy/siphons/score/attack/owned (random events never touch them),
    `pending` (cleared by an executed phase, else kept), and the step/score/pickup/
    resources/siphon-quality/waste reward terms. Unless WARP (random target, may complete
    the stage): position, stage, won, interval, the stage/victory/holding/recovery terms;
    unless WARP or POLY (random new type): the kill term.
    """
    s2, _, _, _, info = out
    d = M.to_scenario(s2)
    t = info["reward_terms"]
    p = d["player"]
    f = {"credits": p["credits"], "energy": p["energy"], "dataSiphons": p["dataSiphons"],
         "score": p["score"], "attack": p["attackDamage"], "owned": d["ownedPrograms"],
         "pending": d["pendingSiphonTransmissions"]}
    for k in ("step", "score", "pickup", "resources", "siphon_quality", "program_waste"):
        f["term." + k] = round(t[k], 9)
    if action != 5 + M.WARP:
        f.update(row=p["row"], col=p["col"], stage=d["stage"], won=d["won"],
                 interval=d["scheduledTaskInterval"])
        for k in ("stage", "victory", "holding", "recovery"):
            f["term." + k] = round(t[k], 9)
        if action != 5 + M.POLY:
            f["term.kills"] = round(t["kills"], 9)
    return f


def _engine_fields(action, engine_out):
    canon, _, _, e_reward, _, e_info = engine_out
    s2 = M.from_scenario(canon, strict=False)
    fake_info = {"reward_terms": _engine_terms(e_info)}
    return _deterministic_fields(action, (s2, None, e_reward, None, fake_info))


def _fields_differ(a, b):
    out = []
    for k in a:
        x, y = a[k], b.get(k)
        if isinstance(x, float) and isinstance(y, float):
            if y != pytest.approx(x, **REWARD_TOL):
                out.append(f"{k}: model={x!r} engine={y!r}")
        elif x != y:
            out.append(f"{k}: model={x!r} engine={y!r}")
    return out


def compare_step(engine, model_state, e_state, action, key_index, scenario, mismatches):
    """Compare one step. Returns (engine_state', model_state' or None, engine_out)."""
    e2, e_out = _run_engine(engine, e_state, action, key_index)
    if action == 5 + M.UNDO and model_state.history:
        STATS["UNDO steps"] += 1
    outs = M.enumerate_outcomes(model_state, action, ENUMERATION_BUDGET)
    if outs is not None:
        e_canon = e_out[0]
        same_state = []
        for o in outs:
            d = M.to_scenario(o[0])
            d.pop("undoDepth")
            if d == e_canon:
                same_state.append(o)
        distinct = {json.dumps(M.to_scenario(o[0]), sort_keys=True) for o in outs}
        STATS["deterministic" if len(distinct) == 1 else "enumerated"] += 1
        for o in same_state:
            if not _compare_outcome(o, e_out, engine):
                return e2, o[0], e_out
        results = [(o, _compare_outcome(o, e_out, engine)) for o in (same_state or outs[:64])]
        best = min(results, key=lambda r: len(r[1]))
        note = ("(deterministic step)" if len(distinct) == 1 else
                f"(none of {len(distinct)} possible outcomes matches; closest shown)")
        mismatches.add(scenario, action, best[1], note)
        return e2, None, e_out
    # too random to list: compare only what no random draw can change
    STATS["too random: deterministic parts only"] += 1
    seeded = [M.step(model_state, action, random.Random(seed)) for seed in range(6)]
    fields = [_deterministic_fields(action, o) for o in seeded]
    for f in fields[1:]:
        assert f == fields[0], f"model: {_fields_differ(fields[0], f)} should be deterministic"
    try:
        problems = _fields_differ(fields[0], _engine_fields(action, e_out))
        advanced = [o for o in seeded if o[4]["stage_completed"] and o[0].stage > model_state.stage]
        if advanced and e_out[0]["stage"] > model_state.stage:
            problems += _check_new_stage(model_state, advanced[0], e_out)
    except ValueError as e:
        problems = [f"engine to_dict unreadable: {e}"]
    if problems:
        mismatches.add(scenario, action, problems, "(random step: deterministic parts)")
    return e2, _resync(engine, model_state, seeded[0], e_out), e_out


def _check_new_stage(before, model_out, e_out):
    """§12.2-§12.4 properties of the engine's freshly generated stage, and equality with
    the model on everything stage generation does not draw (a model outcome that also
    advanced the stage is the reference)."""
    canon, depth = e_out[0], e_out[1]
    ref = M.to_scenario(model_out[0])
    s = M.from_scenario(canon, strict=False)
    problems = []
    for k in ("player", "enemies", "stage", "turn", "showActivated", "scheduledTasksDisabled",
              "scheduledTaskInterval", "nextScheduledTaskTurn", "pendingSiphonTransmissions",
              "stepActive", "atkPlusUses", "won", "ownedPrograms"):
        problems += _diff({k: ref[k]}, {k: canon[k]})
    if depth not in (None, 0):
        problems.append(f"new stage: undoDepth {depth}, history must be cleared")
    if canon["siphonedCells"] or canon["siphonCenters"] or any(b["siphoned"] for b in canon["blocks"]):
        problems.append("new stage: siphon flags not cleared")
    q = (s.player.row, s.player.col)
    corners = [x for x in M.CORNERS if x != q]
    if s.exit not in corners:
        problems.append(f"new stage: exit {s.exit} not a corner other than the player's")
    pickups = {x for x in M.ALL_CELLS if s.cell(*x).content == M.PICKUP}
    if pickups != {x for x in corners if x != s.exit}:
        problems.append(f"new stage: pickups {sorted(pickups)}")
    # blocks
    # The survivors come first in list order; the new stage appends `stage` new ones
    # (§12.2). The action itself may have removed some (WARP), so count from the end.
    survivors = max(0, len(ref["transmissions"]) - ref["stage"])
    old_entities = {(e.row, e.col) for e in s.enemies} | {
        (t["row"], t["col"]) for t in ref["transmissions"][:survivors]}
    eligible = [x for x in M.ALL_CELLS if x not in M.CORNERS and x not in old_entities]
    blocks = {x for x in M.ALL_CELLS if s.cell(*x).content == M.BLOCK}
    if blocks & (set(M.CORNERS) | old_entities):
        problems.append(f"new stage: blocks on corners/entities {sorted(blocks & (set(M.CORNERS) | old_entities))}")
    if blocks and not (min(5, len(eligible)) <= len(blocks) <= 11):
        problems.append(f"new stage: {len(blocks)} blocks with {len(eligible)} eligible cells")
    if not M.layout_is_valid(s, blocks):
        problems.append("new stage: invalid layout (§12.4)")
    programs = []
    for x in sorted(blocks):
        b = s.cell(*x).block
        if b.kind == "data" and not (b.spawn == b.points and 1 <= b.points <= 9):
            problems.append(f"new stage: data block {x} points {b.points} spawn {b.spawn}")
        if b.kind == "program":
            programs.append(b.program)
            if b.spawn != M.SPAWN_COUNT[b.program]:
                problems.append(f"new stage: program block {x} spawn {b.spawn}")
    if len(programs) != len(set(programs)):
        problems.append(f"new stage: repeated programs {programs}")
    for x in M.ALL_CELLS:
        cell = s.cell(*x)
        amount = (cell.credits, cell.energy)
        if cell.content in (M.EMPTY, M.PICKUP):
            if not ((amount[0] == 0) != (amount[1] == 0) and 1 <= sum(amount) <= 3):
                problems.append(f"new stage: resource at {x} = {amount}")
        elif amount != (0, 0):
            problems.append(f"new stage: resource on {cell.content} {x}")
    # transmissions: the survivors, then `stage` new ones placed per §11
    kept = model_out[4]["transmissions_kept"]
    old = ref["transmissions"][:kept]
    if canon["transmissions"][:kept] != old:
        brief = lambda ts: [(t["row"], t["col"], t["turnsRemaining"], t["enemyType"]) for t in ts]
        problems.append(f"new stage: the {kept} surviving transmission(s) {brief(old)} must "
                        f"lead the list; engine has {brief(canon['transmissions'])}")
    placed = M.from_scenario({**canon, "transmissions": canon["transmissions"][:kept]},
                             strict=False)
    new = s.transmissions[kept:]

    def free_cells():
        return [x for x in M.ALL_CELLS if x != q and not M.enemies_at(placed, *x)
                and not M.transmissions_at(placed, *x) and not M.is_block(placed, *x)]

    for t in new:
        if (t.timer, t.from_task, t.from_siphon) != (1, False, False):
            problems.append(f"new stage: new transmission {t}")
        free = free_cells()
        out_of_line = [x for x in free if not M._in_line_of_fire(placed, x)]
        if (t.row, t.col) not in (out_of_line or free):
            problems.append(f"new stage: transmission at {(t.row, t.col)} not allowed by §11")
        placed.transmissions.append(t)
    if len(new) > s.stage or (len(new) < s.stage and free_cells()):
        problems.append(f"new stage: {len(new)} new transmissions at stage {s.stage}")
    return problems


def _resync(engine, prev, seeded_out, e_out):
    """The model state equal to the engine's, with the UNDO history the rules imply."""
    canon = e_out[0]
    try:
        s = M.from_scenario(canon, history_cap=engine.history_cap, strict=False)
    except ValueError:
        return None
    info = seeded_out[4]
    if s.stage != prev.stage or info["history_cleared"]:
        s.history = []
    elif info["snapshot_pushed"]:
        s.history = list(prev.history) + [M.snapshot(s)]
        if s.history_cap is not None and len(s.history) > s.history_cap:
            del s.history[0]
    else:
        s.history = list(seeded_out[0].history)
    return s


def check_state(engine, d, mismatches, key_base, all_actions=True):
    """Checks (a), (b), round trip, illegal actions and (c) for every legal action of d."""
    s = M.from_scenario(d, history_cap=engine.history_cap)
    try:
        e_state = engine.game.from_dict(d)
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        mismatches.add(d, None, [f"from_dict raised {type(e).__name__}: {e}"])
        return
    problems = []
    # round trip
    try:
        canon, depth = _engine_dict(engine, e_state)
        problems += [f"to_dict(from_dict(d)) {p}" for p in _diff(M.canonical(d), canon)]
        if depth not in (None, 0):
            problems.append(f"undoDepth after from_dict = {depth}")
    except ValueError as e:
        problems.append(f"engine to_dict unreadable: {e}")
    # (a) masks
    m_mask = M.legal_actions(s)
    e_mask = np.asarray(engine.legal(e_state)).tolist()
    if e_mask != m_mask:
        problems.append("mask differs at " + ", ".join(
            f"{a}: model={m_mask[a]} engine={e_mask[a]}" for a in range(28) if m_mask[a] != e_mask[a]))
    # (b) observation, also in its flat layout
    m_obs, e_obs = M.observe(s), engine.observe(e_state)
    problems += _obs_diff(m_obs, e_obs)
    if hasattr(e_obs, "flat"):
        flat = np.asarray(e_obs.flat())
        if flat.shape != (1545,) or not np.array_equal(
                flat, np.asarray(M.flat_observation(m_obs), np.float32)):
            problems.append(f"obs.flat(): shape {flat.shape} or values differ from §15's layout")
    if problems:
        mismatches.add(d, None, problems, "(state checks)")
    # illegal actions, including out-of-range indices
    illegal = [a for a in range(28) if not m_mask[a]]
    rng = random.Random(key_base)
    for a in ([rng.choice(illegal)] if illegal else []) + [28 + rng.randrange(3), -1]:
        compare_step(engine, s, e_state, a, key_base, d, mismatches)
    # (c) every legal action
    legal = [a for a in range(28) if m_mask[a]]
    if not all_actions and len(legal) > 6:
        legal = rng.sample(legal, 6)
    for i, a in enumerate(legal):
        compare_step(engine, s, e_state, a, key_base * 31 + i, d, mismatches)


def sweep(engine, n_states, seed, all_actions=True):
    rng = random.Random(seed)
    mismatches = Mismatches()
    for i in range(n_states):
        check_state(engine, random_scenario(rng), mismatches, seed * 100_000 + i, all_actions)
    print("sweep:", dict(STATS))
    mismatches.check()


def walk(engine, n_walks, length, seed):
    """Random legal play by the engine; the model follows in lock-step."""
    rng = random.Random(seed)
    mismatches = Mismatches()
    for w in range(n_walks):
        if w % 2 == 0:
            e_state, _ = engine.reset(engine.key(seed * 1000 + w))
            start = engine.game.to_dict(e_state)
        else:
            start = random_scenario(rng)
            e_state = engine.game.from_dict(start)
        start = {k: v for k, v in start.items() if k != "undoDepth"}
        s = M.from_scenario(start, history_cap=engine.history_cap)
        for t in range(length):
            scenario = M.to_scenario(s)
            scenario.pop("undoDepth")
            mask = np.asarray(engine.legal(e_state)).tolist()
            if mask != M.legal_actions(s):
                mismatches.add(scenario, None, [f"walk {w} step {t}: masks differ"])
                break
            legal = [a for a in range(28) if mask[a]]
            # prefer programs a little, so that UNDO/STEP/... get exercised
            a = rng.choice([a for a in legal if a >= 5] or legal) if rng.random() < 0.4 \
                else rng.choice(legal)
            before = mismatches.count
            e_state, s2, e_out = compare_step(
                engine, s, e_state, a, seed * 7919 + w * 1000 + t, scenario, mismatches)
            if mismatches.count != before or s2 is None:
                break
            s = s2
            if e_out[4]:                      # done
                break
    print("walk:", dict(STATS))
    mismatches.check()


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------

def test_generator_makes_valid_scenarios():
    """The generator's scenarios are valid for the model and round-trip through it."""
    rng = random.Random(5)
    for _ in range(300):
        d = random_scenario(rng)
        s = M.from_scenario(d)
        assert M.canonical(M.to_scenario(s)) == M.canonical(d)


class _ModelObs:
    def __init__(self, obs):
        self.player = np.asarray(obs[0], dtype=np.float32)
        self.programs = np.asarray(obs[1], dtype=np.int32)
        self.grid = np.asarray(obs[2], dtype=np.float32)


def _model_as_engine() -> Engine:
    """The model dressed as the engine (own random draws), to test this harness itself."""
    import types

    def step(s, action, key):
        s2, obs, reward, done, info = M.step(s, int(action), random.Random(key))
        return s2, _ModelObs(obs), np.float32(reward), done, info

    def reset(key):
        s = M.new_game(random.Random(key))
        s.history_cap = 8
        return s, _ModelObs(M.observe(s))

    game = types.SimpleNamespace(from_dict=lambda d: M.from_scenario(d, history_cap=8),
                                 to_dict=M.to_scenario)
    eng = Engine(game=game, jax=None, step=step, legal=lambda s: np.array(M.legal_actions(s)),
                 observe=lambda s: _ModelObs(M.observe(s)), reset=reset, history_cap=8)
    eng.key = lambda i: i
    return eng


def test_harness_accepts_the_model_itself():
    """No false alarms: the model, with its own random draws, passes as an engine."""
    eng = _model_as_engine()
    sweep(eng, n_states=25, seed=3)
    walk(eng, n_walks=6, length=60, seed=4)


def _edge_scenarios():
    """Hand-made states for rare rules the random generator seldom reaches."""
    from .test_model import F, act, data_block, enemy, program_block, trans

    everything = list(range(5, 28))
    rich = dict(credits=30, energy=30, ownedPrograms=everything)
    wall = [data_block(r, c, 1) for r, c in ((1, 1), (1, 2), (1, 3), (2, 1), (2, 3), (3, 1),
                                             (3, 3), (3, 2))]
    crowd = [enemy("daemon", r, c) for r in range(6) for c in range(6)
             if (r, c) not in ((0, 0), (5, 5), (0, 1))]
    return [
        # victory, with resources held and recovery
        F(5, 4, stage=8, score=10, hp=2, credits=7, energy=3),
        # WARP onto the exit among several targets; WARP landing on a block/pickup
        F(0, 0, credits=2, energy=2, ownedPrograms=[act("warp")],
          enemies=[enemy("virus", 5, 5), enemy("glitch", 2, 2), enemy("daemon", 0, 3)],
          blocks=[data_block(2, 2, 4)], transmissions=[trans(5, 0, 2)],
          resources=[{"row": 5, "col": 0, "dataSiphon": True}]),
        # player on a block (after WARP): siphon takes the block under the player
        F(2, 2, dataSiphons=1, blocks=[data_block(2, 2, 4), program_block(3, 2, "row", 2)],
          resources=[{"row": 1, "col": 2, "credits": 3}, {"row": 4, "col": 4, "energy": 2}],
          **{"ownedPrograms": [act("row")]}),
        # an enemy on the player's cell (WARP onto a transmission a PUSH had stacked on)
        F(2, 2, energy=3, ownedPrograms=[act("wait"), act("row"), act("col"), act("push")],
          credits=6, enemies=[enemy("virus", 2, 2), enemy("daemon", 4, 2)]),
        # PUSH / PULL collisions at the edge
        F(2, 2, energy=4, ownedPrograms=[act("push"), act("pull")],
          enemies=[enemy("glitch", 5, 3), enemy("virus", 4, 4), enemy("daemon", 5, 4),
                   enemy("cryptog", 3, 3), enemy("virus", 2, 4)]),
        # CRASH / D_BOM with stacked entities and task flags
        F(3, 3, **rich, enemies=[
            enemy("virus", 4, 4, isFromScheduledTask=True), enemy("daemon", 4, 4),
            enemy("daemon", 2, 2), enemy("daemon", 4, 2), enemy("glitch", 2, 2, hp=1),
            enemy("glitch", 1, 1, hp=1), enemy("virus", 3, 1, hp=1)],
          transmissions=[trans(2, 4, 3, isFromScheduledTask=True), trans(4, 3, 2)],
          blocks=[data_block(2, 3, 2), program_block(3, 2, "crash", 6)]),
        # enemy walled in (rules B and C), player boxed in (no exit path: distance 0)
        F(2, 2, energy=5, ownedPrograms=[act("wait")], blocks=wall,
          enemies=[enemy("daemon", 5, 0), enemy("cryptog", 0, 2), enemy("glitch", 4, 4)]),
        # corridor jam: the shortest path is blocked by other enemies
        F(0, 0, energy=5, ownedPrograms=[act("wait")],
          blocks=[data_block(1, c, 1) for c in range(0, 5)] + [data_block(3, c, 1) for c in range(1, 6)],
          enemies=[enemy("daemon", 2, 3), enemy("daemon", 2, 4), enemy("virus", 2, 5),
                   enemy("virus", 4, 0, disabledTurns=1)]),
        # nowhere to place transmissions (crowded board), pending and a due scheduled task
        F(0, 0, energy=5, ownedPrograms=[act("wait"), act("undo")], credits=3, turn=12,
          nextScheduledTaskTurn=12, pendingSiphonTransmissions=4, enemies=crowd[:33]),
        # STEP armed with pending spawns and stuns that must carry over
        F(3, 3, stepActive=True, pendingSiphonTransmissions=2, dataSiphons=1,
          enemies=[enemy("virus", 5, 5, stunned=True), enemy("daemon", 0, 0, disabledTurns=2)]),
        # siphon: question blocks, owned programs, missed value with programs in the set
        F(2, 2, dataSiphons=2, ownedPrograms=[act("push")], blocks=[
            {"row": 3, "col": 2, "type": "question", "hidden": "program", "programType": "push"},
            {"row": 2, "col": 3, "type": "question", "hidden": "data", "points": 3},
            program_block(2, 1, "hack", 4)],
          resources=[{"row": 3, "col": 3, "credits": 3}, {"row": 1, "col": 2, "energy": 1},
                     {"row": 3, "col": 1, "energy": 2}]),
        # HACK / DEBUG on siphoned block cells, ANTI-V and POLY on damaged enemies
        F(3, 3, **rich, attackDamage=2, blocks=[data_block(4, 4, 3, 0, siphoned=True)],
          siphonedCells=[[0, 0], [3, 3]], enemies=[
              enemy("glitch", 4, 4), enemy("virus", 0, 0, hp=1), enemy("daemon", 3, 3, hp=2),
              enemy("cryptog", 5, 0, hp=1)]),
        # stage advance with many persisting entities (block count reduced)
        F(5, 4, stage=3, enemies=crowd[3:30], transmissions=[trans(0, 1, 4)]),
        # DELAY with long timers, REDUC on a question block, SCORE at stage 7
        F(3, 3, **rich, stage=7, transmissions=[trans(0, 5, 9), trans(5, 0, 1)],
          blocks=[{"row": 1, "col": 1, "type": "question", "hidden": "data", "points": 2}]),
    ]


def test_differential_edge_cases(engine):
    mismatches = Mismatches()
    for i, d in enumerate(_edge_scenarios()):
        check_state(engine, d, mismatches, 900_000 + i)
    mismatches.check()


def test_warp_onto_exit_keeps_later_transmissions(engine):
    """WARP removes a transmission on the exit and completes the stage; a transmission
    later in the list must survive into the new stage (§12.2), ahead of the new ones."""
    d = {"player": {"row": 0, "col": 0, "credits": 2, "energy": 2}, "ownedPrograms": [5 + M.WARP],
         "transmissions": [{"row": 5, "col": 5, "turnsRemaining": 4, "enemyType": "daemon"},
                           {"row": 2, "col": 3, "turnsRemaining": 3, "enemyType": "virus"}]}
    s = M.from_scenario(d, history_cap=engine.history_cap)
    e_state = engine.game.from_dict(d)
    mismatches = Mismatches()
    for k in range(32):
        _, _, e_out = compare_step(engine, s, e_state, 5 + M.WARP, 77_000 + k, d, mismatches)
        if e_out[0].get("stage") == 2:
            break
    else:
        pytest.fail("the engine's WARP never picked the exit in 32 keys")
    mismatches.check()


def test_differential_quick(engine):
    sweep(engine, n_states=200, seed=1)


def test_random_walks_quick(engine):
    walk(engine, n_walks=6, length=80, seed=2)


@pytest.mark.sweep
def test_differential_sweep(engine):
    sweep(engine, n_states=3000, seed=10)


@pytest.mark.sweep
def test_random_walks(engine):
    walk(engine, n_walks=200, length=300, seed=11)
