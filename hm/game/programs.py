"""Running a program (docs/rules.md#program-effects, §9): pay its cost, then apply its
effect, for one game or, under `jax.vmap`, for a whole batch.

What each program does is its entry in `program_table.PROGRAMS`; this module is how the
entries are run. `run_program(state, program, key)` runs one program in one game;
legality (docs/rules.md#legal-actions, §5) is the caller's. Section numbers (§) are those
of docs/rules.md.

Why it is shaped so. Under `vmap` every branch of a `switch` runs, so every game's result
is assembled field by field from the entries' results with `where(program == id, ...)`:

* **Batch view.** `run_program` has a custom batching rule (`batching.custom_batching`):
  under `vmap` it sees the whole batch at once, as rows, so it can ask batch-wide
  questions ("does any game need this?") and gather the few games that need expensive
  work. Unbatched, it is the same code run on a batch of one.
* **Dense and sparse programs.** The cheap programs and PUSH/PULL (`DENSE_PROGRAMS`) are
  computed for every game with elementwise `[B, 36]` arithmetic (PUSH/PULL skip their
  collision pass when no game of the batch runs them; the step runs WAIT for actions
  that are not programs). The others are rare per game but costly for a whole batch
  (random draws, snapshot gathers, per-list sums): only the games running one of them
  are gathered, `SPARSE_ROWS` at a time, their entries run on those rows, and the fields
  they write are scattered back. Further chunks run only when more games need them.
* **Declared writes.** Only the fields an entry declares (`Program.writes`, plus the
  cost and the outcome) are taken from its result, so the assembly copies no field that
  no program writes; tests/game/test_batching.py checks every entry against its
  declaration.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int32, Key, UInt32

from hm.game import batching, program_table, random_draws
from hm.game import constants as C
from hm.game.actions import ActionOutcome, no_outcome
from hm.game.program_table import PROGRAMS, Given, Program, Result
from hm.game.state import GameState, unpack_snapshot

# Programs run for the whole batch (cheap, or common as PUSH is) and the rest, run only
# for the games that chose them.
DENSE_PROGRAMS = frozenset((C.PUSH, C.PULL, C.WAIT, C.STEP, C.SIPH_PLUS, C.EXCH, C.SHOW,
                            C.RESET, C.CALM, C.DELAY, C.SCORE, C.REDUC, C.ATK_PLUS))
SPARSE_PROGRAMS = frozenset(range(C.NUM_PROGRAMS)) - DENSE_PROGRAMS
_IS_SPARSE = np.array([g in SPARSE_PROGRAMS for g in range(C.NUM_PROGRAMS)])
# Games gathered per sparse chunk.
SPARSE_ROWS = 64

# What every program writes besides its entry's `writes`: the cost (§9: paid first) and
# the outcome; paths in a `Result`.
_PAID = ("game.player.credits", "game.player.energy")
_OUTCOME = ("kills", "reached_exit")


def result_writes(program: Program) -> tuple[str, ...]:
    """The fields of a `Result` that running `program` may change."""
    return tuple(f"game.{w}" for w in program.writes) + _PAID + _OUTCOME


# What the sparse programs write, together (for the tests and docs).
SPARSE_WRITES = tuple(sorted({w for g in SPARSE_PROGRAMS for w in result_writes(PROGRAMS[g])}))


# The programs read and return a `GameState` without its UNDO snapshots (`_game`): no
# program writes them (UNDO reads the top one and moves `top`), and the sparse programs
# gather and scatter every leaf they write.
def _stacks(state: GameState) -> tuple:
    return state.history.small, state.history.wide


def _game(state: GameState) -> GameState:
    """`state` with `None` for its UNDO snapshots."""
    return eqx.tree_at(_stacks, state, (None, None))


def _paid(g: GameState, program: Int32[Array, " R"]) -> GameState:
    """The game after paying the program's cost (§9: paid first)."""
    p = g.player
    return eqx.tree_at(lambda s: (s.player.credits, s.player.energy), g,
                       (p.credits - jnp.asarray(program_table.CREDIT_COST)[program],
                        p.energy - jnp.asarray(program_table.ENERGY_COST)[program]))


def _complete(result: Result, rows: int) -> Result:
    """`result` with its outcome filled in (no kills, exit not reached)."""
    return Result(result.game,
                  jnp.zeros(rows, jnp.int32) if result.kills is None else result.kills,
                  jnp.zeros(rows, bool) if result.reached_exit is None else result.reached_exit)


def _run(entry: Program, games: GameState, program: Int32[Array, " R"], given: Given) -> Result:
    """`entry`'s effect on every row, as a complete `Result`."""
    return _complete(entry.effect(games, given._replace(runs=program == entry.id)), program.shape[0])


def _written(entry: Program, like: Result) -> list[bool]:
    """Per leaf of a `Result`, whether running `entry` may change it."""
    return batching.written_leaves(like, result_writes(entry), f"PROGRAMS[{entry.name}].writes")


def _dense(paid: GameState, program: Int32[Array, " B"], key: UInt32[Array, "B 2"], impl) -> Result:
    """Every game's result if its program is a dense one (for the others: the paid game,
    replaced later)."""
    rows = program.shape[0]
    out = _complete(Result(paid), rows)
    leaves, tree = jax.tree.flatten(out)
    given = Given(runs=None, key=key, impl=impl, snapshot=None)
    for g in sorted(DENSE_PROGRAMS):
        entry = PROGRAMS[g]
        runs = program == g
        result = jax.tree.leaves(_run(entry, paid, program, given))
        leaves = [jnp.where(runs.reshape((-1,) + (1,) * (x.ndim - 1)), new, x) if written else x
                  for x, new, written in zip(leaves, result, _written(entry, out))]
    return tree.unflatten(leaves)


def _run_batch(state: GameState, program: Int32[Array, " B"], key: UInt32[Array, "B 2"],
               impl=None) -> Result:
    """All games' results: the dense programs for every game, then the sparse ones for
    the games that run one, gathered `SPARSE_ROWS` at a time and scattered back."""
    batch = program.shape[0]
    paid = _paid(_game(state), program)
    out = _dense(paid, program, key, impl)
    history = state.history
    sparse = [PROGRAMS[g] for g in sorted(SPARSE_PROGRAMS)]
    # Per leaf of the result, the sparse programs that write it.
    writers = [[entry for entry, written in zip(sparse, column) if written]
               for column in zip(*(_written(entry, out) for entry in sparse))]

    def chunk(index, out):
        safe = jnp.minimum(index, batch - 1)
        games = jax.tree.map(lambda x: x[safe], paid)
        rows_program = program[safe]
        # One row per game of the flattened `[B * H, ...]` stack: a plain row gather.
        at = safe * C.HISTORY_CAPACITY + history.top[safe]
        snapshot = unpack_snapshot(*(x.reshape((-1, x.shape[-1]))[at]
                                     for x in (history.small, history.wide)))
        given = Given(runs=None, key=key[safe], impl=impl, snapshot=snapshot)
        results = {entry.id: jax.tree.leaves(_run(entry, games, rows_program, given)) for entry in sparse}

        def put(i, x, entries):
            """Leaf `i`: each row's value from its own program's entry, scattered to the
            rows whose program writes it."""
            if not entries:
                return x
            value = results[entries[0].id][i]
            writes = rows_program == entries[0].id
            for entry in entries[1:]:
                runs = rows_program == entry.id
                value = jnp.where(runs.reshape((-1,) + (1,) * (value.ndim - 1)), results[entry.id][i], value)
                writes = writes | runs
            return x.at[jnp.where(writes, index, batch)].set(value, mode="drop")

        leaves, tree = jax.tree.flatten(out)
        return tree.unflatten([put(i, x, entries) for i, (x, entries) in enumerate(zip(leaves, writers))])

    # One instance of the sparse programs (they are most of this module's compiled code),
    # run once per chunk of games that need them.
    selected = jnp.asarray(_IS_SPARSE)[program]
    return batching.for_selected_chunks(selected, min(SPARSE_ROWS, batch), chunk, out)


# --------------------------------------------------------------------------- entry point

def run_program(state: GameState, program: Int32[Array, ""], key: Key[Array, ""]
                ) -> tuple[GameState, ActionOutcome]:
    """Pay the cost of `program` and apply its effect (§9). Legality is the caller's.

    Batch with `jax.vmap` as usual: a custom batching rule then runs `_run_batch` on the
    whole batch; unbatched, `_run_batch` runs on a batch of one.
    """
    data, impl = random_draws.key_parts(key)
    program = jnp.asarray(program, jnp.int32)

    @batching.custom_batching(lambda _, *args: _run_batch(*args, impl=impl))
    def run_one(state, program, data):
        batch_of_one = jax.tree.map(lambda x: x[None], (state, program, data))
        return jax.tree.map(lambda x: x[0], _run_batch(*batch_of_one, impl=impl))

    changed = run_one(state, program, data)

    # The snapshots, which no program writes, come back from `state`.
    new = eqx.tree_at(_stacks, changed.game, _stacks(state), is_leaf=lambda x: x is None)
    outcome = eqx.tree_at(lambda o: (o.kills, o.reached_exit), no_outcome(),
                          (changed.kills, changed.reached_exit))
    return new, outcome
