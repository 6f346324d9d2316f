"""§14.3 siphon quality: the engine's `missed_resources` against the reference model.

The random scenarios of the differential tests rarely make the comparison of yields
hard. These boards are built to: blocks crowd the player's neighbourhood; data points
come from {0, 1, 2}, so equal values sit in different cells and equal multisets arise
in different orders; program ids come from a few values and repeat on several blocks
(a duplicate of a program already in the player's yield leaves the set unchanged, a
new one does not); some programs are owned (they count as blocks for the candidates
but add nothing to the set); question blocks hide either payload; blocks and cells are
partly siphoned; resources include the int8 maximum 127; the player sometimes stands
on a block (after WARP). Every board is compared exactly: (missedCredits, missedEnergy).
"""

import dataclasses
import random

import jax
import numpy as np
import pytest

from hm import game
from hm.game import actions

from . import model as M

N_BOARDS = 4000
PROGRAMS = (0, 1, 2, 3)            # few ids: duplicates and owned ones are common


def focused_scenario(rng: random.Random) -> dict:
    player = (rng.randrange(6), rng.randrange(6))
    exit_cell = rng.choice([x for x in M.CORNERS if x != player])
    density = rng.choice([0.2, 0.4, 0.6])
    blocks = []
    for x in M.ALL_CELLS:
        if x == exit_cell or M.manhattan(x, player) > 3:
            continue
        if x == player and rng.random() >= 0.1:
            continue
        if rng.random() >= density:
            continue
        b = {"row": x[0], "col": x[1], "siphoned": rng.random() < 0.2}
        if rng.random() < 0.5:
            b.update(type="data", points=rng.choice([0, 1, 1, 2, 2]), spawnCount=1)
        else:
            b.update(type="program", programActionIndex=5 + rng.choice(PROGRAMS), spawnCount=1)
        if not b["siphoned"] and rng.random() < 0.2:
            b["hidden"], b["type"] = b["type"], "question"
        blocks.append(b)
    block_cells = {(b["row"], b["col"]) for b in blocks}
    siphoned_cells = [list(x) for x in M.ALL_CELLS
                      if x not in block_cells and rng.random() < 0.1]
    resources = []
    for x in M.ALL_CELLS:
        if x == exit_cell or rng.random() >= 0.5:
            continue
        amount = 127 if rng.random() < 0.05 else rng.choice([1, 1, 2, 3])
        resources.append({"row": x[0], "col": x[1],
                          rng.choice(["credits", "energy"]): amount})
    owned = [5 + g for g in PROGRAMS if rng.random() < 0.4]
    return {"player": {"row": player[0], "col": player[1], "dataSiphons": 1},
            "exit": list(exit_cell), "blocks": blocks, "resources": resources,
            "siphonedCells": siphoned_cells, "ownedPrograms": owned}


_CONTENT = {M.EMPTY: 0, M.BLOCK: 1, M.PICKUP: 2, M.EXIT: 3}     # hm.game.constants order


def engine_arrays(s: M.RefState) -> dict:
    """The board and player fields §14.3 reads, from a model state, as engine arrays.

    (`from_dict` takes milliseconds a board; the quick test builds thousands of states.)"""
    cells = s.cells
    block = [c.block for c in cells]
    return {
        "content": np.array([_CONTENT[c.content] for c in cells], np.int8),
        "block_points": np.array([b.points if b and b.kind == "data" else 0 for b in block],
                                 np.int8),
        "block_program": np.array([b.program if b and b.kind == "program" else -1
                                   for b in block], np.int8),
        "siphoned": np.array([c.siphoned for c in cells], bool),
        "credits": np.array([c.credits for c in cells], np.int8),
        "energy": np.array([c.energy for c in cells], np.int8),
        "row": np.int32(s.player.row), "col": np.int32(s.player.col),
        "owned": np.array([g in s.owned for g in range(len(M.PROGRAM_NAMES))], bool),
    }


@pytest.fixture(scope="module")
def engine_missed():
    """missed_resources of the engine for a list of scenario dicts, in one batch."""
    template = game.from_dict({"player": {"row": 0, "col": 0}})

    def missed(f):
        board = dataclasses.replace(template.board, **{
            k: f[k] for k in ("content", "block_points", "block_program", "siphoned",
                              "credits", "energy")})
        player = dataclasses.replace(template.player, row=f["row"], col=f["col"],
                                     owned=f["owned"])
        return actions.missed_resources(
            dataclasses.replace(template, board=board, player=player))

    batched = jax.jit(jax.vmap(missed))

    def run(dicts):
        fields = [engine_arrays(M.from_scenario(d)) for d in dicts]
        stacked = {k: np.stack([f[k] for f in fields]) for k in fields[0]}
        credits, energy = batched(stacked)
        return [tuple(x) for x in zip(np.asarray(credits).tolist(), np.asarray(energy).tolist())]

    return run


@pytest.fixture(scope="module")
def engine_missed_from_dict():
    """The same through `from_dict`: slower, for the hand-made cases."""
    batched = jax.jit(jax.vmap(actions.missed_resources))

    def run(dicts):
        states = [game.from_dict(d) for d in dicts]
        credits, energy = batched(jax.tree.map(lambda *xs: np.stack(xs), *states))
        return [tuple(x) for x in zip(np.asarray(credits).tolist(), np.asarray(energy).tolist())]

    return run


def test_siphon_quality_focused_boards(engine_missed):
    rng = random.Random(1403)
    dicts = [focused_scenario(rng) for _ in range(N_BOARDS)]
    expected = [M.siphon_quality(M.from_scenario(d)) for d in dicts]
    # The boards must exercise the interesting cases, or the comparison proves little.
    assert sum(e != (0, 0) for e in expected) > N_BOARDS // 10
    got = engine_missed(dicts)
    wrong = [(d, e, g) for d, e, g in zip(dicts, expected, got) if g != e]
    assert not wrong, f"{len(wrong)} boards differ, first: {wrong[0]}"


def test_equal_multisets_and_duplicate_programs(engine_missed, engine_missed_from_dict):
    """Hand-made cases: the same data points in other cells, in another order; a repeated
    program (same set) next to a new one (bigger set); an owned program."""
    def board(player, blocks, resources, owned=()):
        return {"player": {"row": player[0], "col": player[1], "dataSiphons": 1},
                "blocks": blocks, "resources": resources,
                "ownedPrograms": [5 + g for g in owned]}

    def data(r, c, p):
        return {"row": r, "col": c, "type": "data", "points": p}

    def prog(r, c, g):
        return {"row": r, "col": c, "type": "program", "programActionIndex": 5 + g}

    cases = [
        # Data {1, 2} at (2,3),(3,2); (3,3) covers both. (0,5) sees an unrelated {2, 1}
        # and 9 energy, but not the player's blocks: no candidate (the [PITFALL]).
        board((2, 2), [data(2, 3, 1), data(3, 2, 2), data(0, 4, 2), data(1, 5, 1)],
              [{"row": 4, "col": 3, "credits": 3}, {"row": 0, "col": 5, "energy": 9}]),
        # Program 1 next to the player; (3,3) also sees a second block of program 1:
        # same set, so it is better.
        board((2, 2), [prog(2, 3, 1), prog(3, 4, 1)], [{"row": 4, "col": 3, "credits": 2}]),
        # ... but a block of program 2 there makes the set bigger: not better.
        board((2, 2), [prog(2, 3, 1), prog(3, 4, 2)], [{"row": 4, "col": 3, "credits": 2}]),
        # ... unless program 2 is owned.
        board((2, 2), [prog(2, 3, 1), prog(3, 4, 2)], [{"row": 4, "col": 3, "credits": 2}],
              owned=(2,)),
        # An extra data block of equal value in x's cross: {1} vs {1, 1}, not better.
        board((2, 2), [data(2, 3, 1), data(3, 4, 1)], [{"row": 4, "col": 3, "credits": 2}]),
        # Empty yield here: any position without data or new programs can be better.
        board((0, 0), [prog(0, 1, 3)], [{"row": 5, "col": 2, "credits": 1},
                                        {"row": 4, "col": 2, "energy": 2}], owned=(3,)),
    ]
    expected = [(3, 0), (2, 0), (0, 0), (2, 0), (0, 0), (1, 2)]
    assert [M.siphon_quality(M.from_scenario(d)) for d in cases] == expected
    assert engine_missed(cases) == expected
    assert engine_missed_from_dict(cases) == expected
