"""Scenario I/O: JSON-able dicts to and from `GameState` (the format: docs/scenarios.md).

A scenario is the human-writable form of one unbatched state, in the rules' own terms
(docs/rules.md#state); a key left out takes its value from the bare fixture
(docs/rules.md#fixture). `from_dict` validates the whole dict first and only then
builds the arrays, so it either returns a complete state or raises `ValueError` naming
the offending key and value; it never returns a half-built state. `to_dict` writes
every key, so `from_dict(to_dict(s))` equals `s` leaf by leaf except `history`, which a
scenario cannot describe (`from_dict` always starts with an empty UNDO stack).

This is host-side code: plain Python and numpy, no tracing. The dtypes and capacities
of the arrays it builds come from `bare_state()`, so they follow `state.py`.
"""

import dataclasses
import functools
import numbers
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from hm.game import constants as C
from hm.game.state import Board, GameState, Player, bare_state

# docs/scenarios.md: program names are case-insensitive; these aliases name the same programs.
_PROGRAM_ALIASES = {
    "siphplus": C.SIPH_PLUS, "siph_plus": C.SIPH_PLUS,
    "dbom": C.D_BOM, "d_bomb": C.D_BOM,
    "antiv": C.ANTI_V, "anti_v": C.ANTI_V,
    "atkplus": C.ATK_PLUS, "atk_plus": C.ATK_PLUS,
}
PROGRAM_IDS: dict[str, int] = {
    **{name.lower(): i for i, name in enumerate(C.PROGRAM_NAMES)}, **_PROGRAM_ALIASES}
ENEMY_IDS: dict[str, int] = {name: i for i, name in enumerate(C.ENEMY_NAMES)}

FIRST_PROGRAM_ACTION = C.PROGRAM_ACTION_OFFSET
LAST_PROGRAM_ACTION = C.PROGRAM_ACTION_OFFSET + C.NUM_PROGRAMS - 1


def program_name(program: int) -> str:
    """The scenario name of program id `program` (lower case, e.g. `"siph+"`)."""
    return C.PROGRAM_NAMES[program].lower()


_TOP_KEYS = frozenset({
    "player", "enemies", "transmissions", "blocks", "resources", "ownedPrograms",
    "stage", "turn", "showActivated", "scheduledTasksDisabled",
    "exit", "scheduledTaskInterval", "nextScheduledTaskTurn", "pendingSiphonTransmissions",
    "stepActive", "atkPlusUses", "won", "siphonedCells", "siphonCenters", "undoDepth",
})
_PLAYER_KEYS = frozenset({
    "row", "col", "hp", "credits", "energy", "dataSiphons", "attackDamage", "score"})
_ENEMY_KEYS = frozenset({
    "type", "row", "col", "hp", "stunned", "spawnedFromSiphon", "isFromScheduledTask",
    "disabledTurns"})
_TRANSMISSION_KEYS = frozenset({
    "row", "col", "turnsRemaining", "enemyType", "spawnedFromSiphon", "isFromScheduledTask"})
_BLOCK_KEYS = frozenset({
    "row", "col", "type", "points", "spawnCount", "siphoned", "programType",
    "programActionIndex", "hidden"})
_RESOURCE_KEYS = frozenset({"row", "col", "credits", "energy", "dataSiphon"})

# Payload keys only program blocks take: a data block naming a program is an error.
_PROGRAM_KEYS = frozenset({"programType", "programActionIndex"})

_REQUIRED = object()


@functools.cache
def _template() -> GameState:
    """The bare fixture on the host: the source of every dtype and capacity used here."""
    return jax.device_get(bare_state())


def _max_of(leaf) -> int:
    return int(np.iinfo(np.asarray(leaf).dtype).max)


# --------------------------------------------------------------------------- reading


def _fail(path: str, message: str, value: Any):
    raise ValueError(f"{path}: {message} (got {value!r})")


def _fields(value: Any, path: str, allowed: frozenset) -> dict:
    """Check that `value` is an object with only `allowed` keys; drop `null` entries."""
    if not isinstance(value, Mapping):
        _fail(path, "expected an object", value)
    for key, item in value.items():
        if key not in allowed:
            raise ValueError(f"{path}: unknown key {key!r} with value {item!r}")
    return {key: item for key, item in value.items() if item is not None}


def _list(fields: dict, key: str, path: str) -> list:
    value = fields.get(key, [])
    if not isinstance(value, (list, tuple)):
        _fail(f"{path}{key}", "expected a list", value)
    return list(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _int(fields: dict, key: str, path: str, default: Any, lo: int, hi: int) -> int:
    """Read an integer in `lo..hi`; `hi` is also the ceiling of the target dtype."""
    if key not in fields:
        if default is _REQUIRED:
            raise ValueError(f"{path}{key}: missing required key")
        return default
    value = fields[key]
    if not _is_int(value):
        _fail(f"{path}{key}", "expected an integer", value)
    if not lo <= value <= hi:
        _fail(f"{path}{key}", f"must be in {lo}..{hi}", value)
    return int(value)


def _bool(fields: dict, key: str, path: str) -> bool:
    value = fields.get(key, False)
    if not isinstance(value, (bool, np.bool_)):
        _fail(f"{path}{key}", "expected true or false", value)
    return bool(value)


def _name(fields: dict, key: str, path: str, table: dict[str, int], what: str) -> int:
    if key not in fields:
        raise ValueError(f"{path}{key}: missing required key")
    value = fields[key]
    if not isinstance(value, str) or value.lower() not in table:
        _fail(f"{path}{key}", f"unknown {what}", value)
    return table[value.lower()]


def _position(fields: dict, path: str) -> int:
    """The flat cell index of an entry's required `row` and `col`."""
    row = _int(fields, "row", path, _REQUIRED, -(2**31), 2**31 - 1)
    col = _int(fields, "col", path, _REQUIRED, -(2**31), 2**31 - 1)
    if not 0 <= row < C.ROWS:
        _fail(f"{path}row", f"off the board (rows are 0..{C.ROWS - 1})", row)
    if not 0 <= col < C.COLS:
        _fail(f"{path}col", f"off the board (columns are 0..{C.COLS - 1})", col)
    return row * C.COLS + col


def _pair(value: Any, path: str) -> int:
    """The flat cell index of a `[row, col]` pair."""
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(_is_int(v) for v in value)):
        _fail(path, "expected [row, col]", value)
    row, col = int(value[0]), int(value[1])
    if not (0 <= row < C.ROWS and 0 <= col < C.COLS):
        _fail(path, "position is off the board", value)
    return row * C.COLS + col


def _cell_name(cell: int) -> str:
    return f"({cell // C.COLS}, {cell % C.COLS})"


def _program(fields: dict, path: str) -> int:
    """The program a (visible or hidden) program block names, by name or action index."""
    by_name = by_index = None
    if "programType" in fields:
        by_name = _name(fields, "programType", path, PROGRAM_IDS, "program name")
    if "programActionIndex" in fields:
        action = _int(fields, "programActionIndex", path, _REQUIRED,
                      FIRST_PROGRAM_ACTION, LAST_PROGRAM_ACTION)
        by_index = action - C.PROGRAM_ACTION_OFFSET
    if by_name is None and by_index is None:
        raise ValueError(f"{path}programType: missing required key "
                         "(or programActionIndex) for a program block")
    if by_name is not None and by_index is not None and by_name != by_index:
        raise ValueError(
            f"{path}programType/programActionIndex: {fields['programType']!r} is action "
            f"{by_name + C.PROGRAM_ACTION_OFFSET}, not {fields['programActionIndex']!r}")
    return by_name if by_name is not None else by_index


def _reject(fields: dict, keys: frozenset, path: str, kind: str):
    extra = sorted(keys & fields.keys())
    if extra:
        raise ValueError(f"{path}{extra[0]}: not a key of a {kind} block "
                         f"(value {fields[extra[0]]!r})")


# --------------------------------------------------------------------------- from_dict


@dataclasses.dataclass
class _Cells:
    """Per-cell values collected while reading, before any array is built."""

    content: list = dataclasses.field(default_factory=lambda: [C.EMPTY] * C.NUM_CELLS)
    points: list = dataclasses.field(default_factory=lambda: [0] * C.NUM_CELLS)
    program: list = dataclasses.field(default_factory=lambda: [-1] * C.NUM_CELLS)
    question: list = dataclasses.field(default_factory=lambda: [False] * C.NUM_CELLS)
    spawn: list = dataclasses.field(default_factory=lambda: [0] * C.NUM_CELLS)
    credits: list = dataclasses.field(default_factory=lambda: [0] * C.NUM_CELLS)
    energy: list = dataclasses.field(default_factory=lambda: [0] * C.NUM_CELLS)
    siphoned: list = dataclasses.field(default_factory=lambda: [False] * C.NUM_CELLS)
    siphon_center: list = dataclasses.field(default_factory=lambda: [False] * C.NUM_CELLS)


# Board field -> the `_Cells` list that fills it.
_BOARD_FIELDS = {
    "content": "content", "block_points": "points", "block_program": "program",
    "block_question": "question", "block_spawn": "spawn", "credits": "credits",
    "energy": "energy", "siphoned": "siphoned", "siphon_center": "siphon_center"}


def _read_player(d: dict, t: GameState) -> dict:
    if "player" not in d:
        raise ValueError("player: missing required key")
    path = "player."
    f = _fields(d["player"], "player", _PLAYER_KEYS)
    cell = _position(f, path)
    return dict(
        row=cell // C.COLS, col=cell % C.COLS,
        hp=_int(f, "hp", path, C.MAX_HP, 1, C.MAX_HP),
        credits=_int(f, "credits", path, 0, 0, _max_of(t.player.credits)),
        energy=_int(f, "energy", path, 0, 0, _max_of(t.player.energy)),
        data_siphons=_int(f, "dataSiphons", path, 0, 0, _max_of(t.player.data_siphons)),
        attack=_int(f, "attackDamage", path, 1, 1, _max_of(t.player.attack)),
        score=_int(f, "score", path, 0, 0, _max_of(t.player.score)),
    )


def _read_enemies(d: dict, t: GameState) -> list[dict]:
    entries = _list(d, "enemies", "")
    capacity = t.enemies.alive.shape[0]
    if len(entries) > capacity:
        raise ValueError(f"enemies: {len(entries)} entries, more than the capacity {capacity}")
    enemies = []
    for i, entry in enumerate(entries):
        path = f"enemies[{i}]."
        f = _fields(entry, f"enemies[{i}]", _ENEMY_KEYS)
        kind = _name(f, "type", path, ENEMY_IDS, "enemy type")
        cell = _position(f, path)
        max_hp = int(C.ENEMY_MAX_HP[kind])
        enemies.append(dict(
            kind=kind, row=cell // C.COLS, col=cell % C.COLS,
            hp=_int(f, "hp", path, max_hp, 1, max_hp),
            disabled=_int(f, "disabledTurns", path, 0, 0, _max_of(t.enemies.disabled)),
            stunned=_bool(f, "stunned", path),
            from_task=_bool(f, "isFromScheduledTask", path),
            from_siphon=_bool(f, "spawnedFromSiphon", path),
        ))
    return enemies


def _read_transmissions(d: dict, t: GameState) -> list[dict]:
    entries = _list(d, "transmissions", "")
    capacity = t.transmissions.alive.shape[0]
    if len(entries) > capacity:
        raise ValueError(
            f"transmissions: {len(entries)} entries, more than the capacity {capacity}")
    transmissions = []
    for i, entry in enumerate(entries):
        path = f"transmissions[{i}]."
        f = _fields(entry, f"transmissions[{i}]", _TRANSMISSION_KEYS)
        cell = _position(f, path)
        transmissions.append(dict(
            kind=_name(f, "enemyType", path, ENEMY_IDS, "enemy type"),
            row=cell // C.COLS, col=cell % C.COLS,
            timer=_int(f, "turnsRemaining", path, 1, 1, _max_of(t.transmissions.timer)),
            from_task=_bool(f, "isFromScheduledTask", path),
            from_siphon=_bool(f, "spawnedFromSiphon", path),
        ))
    return transmissions


def _read_blocks(d: dict, t: GameState, cells: _Cells, exit_cell: int):
    max_points = _max_of(t.board.block_points)
    max_spawn = _max_of(t.board.block_spawn)
    owner: dict[int, int] = {}
    for i, entry in enumerate(_list(d, "blocks", "")):
        path = f"blocks[{i}]."
        f = _fields(entry, f"blocks[{i}]", _BLOCK_KEYS)
        cell = _position(f, path)
        if "type" not in f:
            raise ValueError(f"{path}type: missing required key")
        kind = f["type"]
        if not isinstance(kind, str) or kind.lower() not in ("data", "program", "question"):
            _fail(f"{path}type", 'expected "data", "program" or "question"', kind)
        kind = kind.lower()
        if kind == "question":
            hidden = f.get("hidden")
            if hidden is None:   # leniency: infer the hidden kind from the payload keys
                hidden = "program" if _PROGRAM_KEYS & f.keys() else "data"
            if not isinstance(hidden, str) or hidden.lower() not in ("data", "program"):
                _fail(f"{path}hidden", 'expected "data" or "program"', hidden)
            payload = hidden.lower()
        else:
            if "hidden" in f:
                raise ValueError(f"{path}hidden: only question blocks hide a payload "
                                 f"(value {f['hidden']!r})")
            payload = kind
        described = kind if kind == payload else f"question ({payload})"
        if payload == "data":
            _reject(f, _PROGRAM_KEYS, path, described)
            points = _int(f, "points", path, C.SCENARIO_DATA_POINTS_DEFAULT, 0, max_points)
            program = -1
            spawn = _int(f, "spawnCount", path, points, 0, max_spawn)
        else:
            # The original's parity protocol writes `"points": 0` on every block, program
            # blocks too (its setState ignores the key there). 0 is what a program block
            # holds, so that value is accepted; any other contradicts the block's type.
            points = f.get("points", 0)
            if not _is_int(points) or points != 0:
                raise ValueError(f"{path}points: a {described} block has no points, only 0 "
                                 f"is accepted (got {points!r})")
            points = 0
            program = _program(f, path)
            spawn = _int(f, "spawnCount", path, C.SCENARIO_PROGRAM_SPAWN_DEFAULT, 0, max_spawn)
        siphoned = _bool(f, "siphoned", path)
        if cell in owner:
            raise ValueError(f"blocks[{i}]: two blocks on cell {_cell_name(cell)} "
                             f"(blocks[{owner[cell]}] is there too)")
        if cell == exit_cell:
            raise ValueError(f"blocks[{i}]: a block on the exit cell {_cell_name(cell)}")
        owner[cell] = i
        cells.content[cell] = C.BLOCK
        cells.points[cell] = points
        cells.program[cell] = program
        cells.question[cell] = kind == "question"
        cells.spawn[cell] = spawn
        cells.siphoned[cell] = cells.siphoned[cell] or siphoned


def _read_resources(d: dict, t: GameState, cells: _Cells, exit_cell: int):
    max_credits = _max_of(t.board.credits)
    max_energy = _max_of(t.board.energy)
    setter: dict[int, tuple[int, tuple[str, int]]] = {}   # cell -> (entry, resource)
    for i, entry in enumerate(_list(d, "resources", "")):
        path = f"resources[{i}]."
        f = _fields(entry, f"resources[{i}]", _RESOURCE_KEYS)
        cell = _position(f, path)
        credits = _int(f, "credits", path, 0, 0, max_credits)
        energy = _int(f, "energy", path, 0, 0, max_energy)
        pickup = _bool(f, "dataSiphon", path)
        if credits > 0 and energy > 0:
            raise ValueError(f"resources[{i}]: credits {credits} and energy {energy} in one "
                             "entry; a cell holds at most one resource")
        if pickup:
            if cells.content[cell] == C.BLOCK:
                raise ValueError(f"resources[{i}].dataSiphon: a pickup on the block cell "
                                 f"{_cell_name(cell)}")
            if cell == exit_cell:
                raise ValueError(f"resources[{i}].dataSiphon: a pickup on the exit cell "
                                 f"{_cell_name(cell)}")
            cells.content[cell] = C.PICKUP
        if credits == 0 and energy == 0:
            continue
        resource = ("credits", credits) if credits > 0 else ("energy", energy)
        if cell in setter and setter[cell][1] != resource:
            other, (other_kind, other_amount) = setter[cell]
            raise ValueError(
                f"resources[{i}]: {resource[0]} {resource[1]} on cell {_cell_name(cell)}, "
                f"but resources[{other}] sets {other_kind} {other_amount} there")
        setter[cell] = (i, resource)
        cells.credits[cell] = credits
        cells.energy[cell] = energy


def _read_cell_lists(d: dict, cells: _Cells):
    for i, value in enumerate(_list(d, "siphonedCells", "")):
        cell = _pair(value, f"siphonedCells[{i}]")
        if cells.content[cell] == C.BLOCK:
            _fail(f"siphonedCells[{i}]", "the cell holds a block; mark the block "
                  '"siphoned" instead', value)
        cells.siphoned[cell] = True
    for i, value in enumerate(_list(d, "siphonCenters", "")):
        cells.siphon_center[_pair(value, f"siphonCenters[{i}]")] = True


def _read_owned(d: dict) -> list[bool]:
    owned = [False] * C.NUM_PROGRAMS
    for i, action in enumerate(_list(d, "ownedPrograms", "")):
        if not _is_int(action):
            _fail(f"ownedPrograms[{i}]", "expected a program action index", action)
        if not FIRST_PROGRAM_ACTION <= action <= LAST_PROGRAM_ACTION:
            _fail(f"ownedPrograms[{i}]",
                  f"must be in {FIRST_PROGRAM_ACTION}..{LAST_PROGRAM_ACTION}", action)
        owned[int(action) - C.PROGRAM_ACTION_OFFSET] = True
    return owned


def _entity_arrays(template, entries: list[dict]):
    """A compact entity list of `template`'s type: `entries` in slots 0..n-1, zeros after."""
    arrays = {}
    for field in dataclasses.fields(template):
        leaf = np.asarray(getattr(template, field.name))
        column = np.zeros_like(leaf)
        if field.name == "alive":
            column[:len(entries)] = True
        elif entries:
            column[:len(entries)] = [e[field.name] for e in entries]
        arrays[field.name] = jnp.asarray(column)
    return type(template)(**arrays)


def from_dict(d: Any) -> GameState:
    """Build a state from a scenario dict (docs/scenarios.md).

    Args:
        d: the scenario dict, e.g. from `json.load`. Only `player.row` and `player.col`
            are required; `null` counts as missing; see docs/scenarios.md for keys and
            defaults. Typed `Any` because anything else is rejected with `ValueError`
            too, not with a type-checker's `TypeError`.

    Returns:
        An unbatched `GameState` with the dtypes of `state.py` and an empty UNDO history.

    Raises:
        ValueError: naming the offending key and value, for any input the format does
            not allow. Nothing is built until the whole dict has been checked.
    """
    t = _template()
    d = _fields(d, "scenario", _TOP_KEYS)
    player = _read_player(d, t)
    enemies = _read_enemies(d, t)
    transmissions = _read_transmissions(d, t)

    exit_cell = _pair(d.get("exit", [C.ROWS - 1, C.COLS - 1]), "exit")
    cells = _Cells()
    cells.content[exit_cell] = C.EXIT
    _read_blocks(d, t, cells, exit_cell)
    _read_resources(d, t, cells, exit_cell)
    _read_cell_lists(d, cells)
    owned = _read_owned(d)

    int32_max = _max_of(t.turn)
    scalars = dict(
        stage=_int(d, "stage", "", 1, 1, C.NUM_STAGES),
        turn=_int(d, "turn", "", 0, 0, int32_max),
        interval=_int(d, "scheduledTaskInterval", "", C.FIRST_INTERVAL, 0, int32_max),
        next_task=_int(d, "nextScheduledTaskTurn", "", C.FIRST_INTERVAL, 0, int32_max),
        pending=_int(d, "pendingSiphonTransmissions", "", 0, 0, int32_max),
        atk_uses=_int(d, "atkPlusUses", "", 0, 0, int32_max),
        show=_bool(d, "showActivated", ""),
        calm=_bool(d, "scheduledTasksDisabled", ""),
        step_active=_bool(d, "stepActive", ""),
        won=_bool(d, "won", ""),
    )
    _int(d, "undoDepth", "", 0, 0, int32_max)   # read-only: checked, then ignored

    # Everything is valid: build the arrays.
    def array(values, leaf):
        return jnp.asarray(np.asarray(values, np.asarray(leaf).dtype))

    board = Board(**{name: array(getattr(cells, attr), getattr(t.board, name))
                     for name, attr in _BOARD_FIELDS.items()})
    player = Player(**{name: array(value, getattr(t.player, name))
                       for name, value in player.items()},
                    owned=array(owned, t.player.owned))
    return eqx.tree_at(
        lambda s: (s.board, s.player, s.enemies, s.transmissions, s.stage, s.turn,
                   s.interval, s.next_task, s.pending, s.atk_uses, s.show, s.calm,
                   s.step_active, s.won),
        bare_state(),
        (board, player, _entity_arrays(t.enemies, enemies),
         _entity_arrays(t.transmissions, transmissions),
         *(array(value, getattr(t, name)) for name, value in scalars.items())))


# --------------------------------------------------------------------------- to_dict


def _cell_pair(cell: int) -> list[int]:
    return [cell // C.COLS, cell % C.COLS]


def _block_dict(b: Board, cell: int) -> dict:
    entry: dict[str, Any] = {"row": cell // C.COLS, "col": cell % C.COLS}
    program = int(b.block_program[cell])
    payload = "data" if program < 0 else "program"
    if bool(b.block_question[cell]):
        entry["type"] = "question"
        entry["hidden"] = payload
    else:
        entry["type"] = payload
    if payload == "data":
        entry["points"] = int(b.block_points[cell])
    else:
        entry["programType"] = program_name(program)
        entry["programActionIndex"] = program + C.PROGRAM_ACTION_OFFSET
    entry["spawnCount"] = int(b.block_spawn[cell])
    entry["siphoned"] = bool(b.siphoned[cell])
    return entry


def _resource_dicts(b: Board, cell: int) -> list[dict]:
    position = {"row": cell // C.COLS, "col": cell % C.COLS}
    entries = []
    if int(b.content[cell]) == C.PICKUP:
        entries.append({**position, "dataSiphon": True})
    if int(b.credits[cell]) > 0:
        entries.append({**position, "credits": int(b.credits[cell])})
    if int(b.energy[cell]) > 0:
        entries.append({**position, "energy": int(b.energy[cell])})
    return entries


def to_dict(state: GameState) -> dict:
    """Write every scenario key of an unbatched state (docs/scenarios.md).

    Enemies and transmissions come in list order; blocks, resources, `siphonedCells`
    and `siphonCenters` are sorted by cell. A pickup cell that also holds a resource is
    written as two resource entries, the form the original game reads. The result holds
    only plain ints, bools, strings, lists and dicts, so `json.dumps` accepts it.

    Raises:
        ValueError: if the board does not hold exactly one exit cell.
    """
    s = jax.device_get(state)
    b, p = s.board, s.player
    exits = np.flatnonzero(b.content == C.EXIT)
    if len(exits) != 1:
        raise ValueError(f"exit: the board holds {len(exits)} exit cells, not 1")
    cells = range(C.NUM_CELLS)
    is_block = b.content == C.BLOCK
    e, tr = s.enemies, s.transmissions
    return {
        "player": {
            "row": int(p.row), "col": int(p.col), "hp": int(p.hp),
            "credits": int(p.credits), "energy": int(p.energy),
            "dataSiphons": int(p.data_siphons), "attackDamage": int(p.attack),
            "score": int(p.score)},
        "enemies": [
            {"type": C.ENEMY_NAMES[int(e.kind[i])], "row": int(e.row[i]),
             "col": int(e.col[i]), "hp": int(e.hp[i]), "stunned": bool(e.stunned[i]),
             "spawnedFromSiphon": bool(e.from_siphon[i]),
             "isFromScheduledTask": bool(e.from_task[i]),
             "disabledTurns": int(e.disabled[i])}
            for i in np.flatnonzero(e.alive)],
        "transmissions": [
            {"row": int(tr.row[i]), "col": int(tr.col[i]),
             "turnsRemaining": int(tr.timer[i]),
             "enemyType": C.ENEMY_NAMES[int(tr.kind[i])],
             "spawnedFromSiphon": bool(tr.from_siphon[i]),
             "isFromScheduledTask": bool(tr.from_task[i])}
            for i in np.flatnonzero(tr.alive)],
        "blocks": [_block_dict(b, cell) for cell in cells if is_block[cell]],
        "resources": [entry for cell in cells for entry in _resource_dicts(b, cell)],
        "ownedPrograms": [int(i) + C.PROGRAM_ACTION_OFFSET for i in np.flatnonzero(p.owned)],
        "stage": int(s.stage),
        "turn": int(s.turn),
        "showActivated": bool(s.show),
        "scheduledTasksDisabled": bool(s.calm),
        "exit": _cell_pair(int(exits[0])),
        "scheduledTaskInterval": int(s.interval),
        "nextScheduledTaskTurn": int(s.next_task),
        "pendingSiphonTransmissions": int(s.pending),
        "stepActive": bool(s.step_active),
        "atkPlusUses": int(s.atk_uses),
        "won": bool(s.won),
        "siphonedCells": [_cell_pair(cell) for cell in cells
                          if b.siphoned[cell] and not is_block[cell]],
        "siphonCenters": [_cell_pair(cell) for cell in cells if b.siphon_center[cell]],
        "undoDepth": int(s.history.depth),
    }


def states_equal(a: GameState, b: GameState, ignore_history: bool = True) -> bool:
    """Whether two unbatched states agree leaf by leaf: structure, shape, dtype, values.

    Args:
        ignore_history: skip the UNDO stack, which a scenario cannot carry.
    """
    if ignore_history:
        a, b = (eqx.tree_at(lambda s: s.history, x, None, is_leaf=lambda v: v is None)
                for x in (a, b))
    a, b = jax.device_get((a, b))
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    if tree_a != tree_b:
        return False
    for x, y in zip(leaves_a, leaves_b):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y):
            return False
    return True
