"""The game state as Equinox pytrees of fixed shape (docs/rules.md#state, §2; docs/rules.md#fixed-shapes, §17).

Every class here is a single, unbatched game; batching is `jax.vmap` by the caller.
Cells are stored flat: cell index `row * 6 + col` (row 0 is the bottom row, §1).
Entity lists (enemies, transmissions) are fixed-capacity structs of arrays with an
`alive` mask, kept *compact*: the live entities occupy slots `0 .. n-1` in list order
(creation order, §17.2) and every dead slot holds zeros. Compact lists make list order
the slot order (no creation counter to carry) and make the state canonical, so two
states that mean the same game compare equal leaf by leaf. Section numbers (§) are
those of docs/rules.md.
"""

import functools
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int8, Int32

from hm.game import constants as C

_CELLS = str(C.NUM_CELLS)
_E = str(C.MAX_ENEMIES)
_T = str(C.MAX_TRANSMISSIONS)
_P = str(C.NUM_PROGRAMS)
_H = str(C.HISTORY_CAPACITY)


class Board(eqx.Module):
    """Per-cell state (§1.1, §2.4). Non-block cells hold zero payload (program −1)."""

    content: Int8[Array, _CELLS]         # EMPTY, BLOCK, PICKUP or EXIT
    block_points: Int8[Array, _CELLS]    # data points (visible or hidden data), else 0
    block_program: Int8[Array, _CELLS]   # program id (visible or hidden program), else −1
    block_question: Bool[Array, _CELLS]  # payload hidden (QUESTION block)
    block_spawn: Int8[Array, _CELLS]     # transmissions siphoning the block will create
    credits: Int8[Array, _CELLS]         # resource: credits amount (0 = none)
    energy: Int8[Array, _CELLS]          # resource: energy amount (0 = none)
    siphoned: Bool[Array, _CELLS]        # inside a siphon's reach this stage
    siphon_center: Bool[Array, _CELLS]   # the player stood here when siphoning


class Player(eqx.Module):
    """The player (§2.1). Counters are int32: credits and energy are not capped."""

    row: Int32[Array, ""]
    col: Int32[Array, ""]
    hp: Int32[Array, ""]
    credits: Int32[Array, ""]
    energy: Int32[Array, ""]
    data_siphons: Int32[Array, ""]
    attack: Int32[Array, ""]
    score: Int32[Array, ""]
    owned: Bool[Array, _P]               # program ownership, by program id


class Enemies(eqx.Module):
    """Enemy list (§2.3), compact, slot order = list order."""

    alive: Bool[Array, _E]
    kind: Int8[Array, _E]                # VIRUS, DAEMON, GLITCH, CRYPTOG
    row: Int8[Array, _E]
    col: Int8[Array, _E]
    hp: Int8[Array, _E]
    disabled: Int8[Array, _E]            # > 0: neither moves nor attacks
    stunned: Bool[Array, _E]
    from_task: Bool[Array, _E]           # killing it earns no kill reward
    from_siphon: Bool[Array, _E]         # observed; can trigger the siphon-death penalty


class Transmissions(eqx.Module):
    """Transmission list (§2.5), compact, slot order = list order."""

    alive: Bool[Array, _T]
    kind: Int8[Array, _T]                # enemy type it will become
    row: Int8[Array, _T]
    col: Int8[Array, _T]
    timer: Int32[Array, _T]              # turns remaining (DELAY can raise it without bound)
    from_task: Bool[Array, _T]
    from_siphon: Bool[Array, _T]


class Snapshot(eqx.Module):
    """What UNDO restores (§9.10, §17.5). Origin flags are stored but restored as false."""

    board: Board
    player: Player
    enemies: Enemies
    transmissions: Transmissions
    turn: Int32[Array, ""]
    show: Bool[Array, ""]
    calm: Bool[Array, ""]
    atk_uses: Int32[Array, ""]


class History(eqx.Module):
    """Bounded UNDO stack (§9.10 [RESOLUTION]) as a ring buffer of `HISTORY_CAPACITY`.

    Slot h holds one `Snapshot` packed into two rows (`pack_snapshot`): `small[h]`, its
    int8 and bool leaves as int8, and `wide[h]`, its int32 leaves, each leaf flattened in
    pytree order. A push then writes two rows in place instead of one row of each of 38
    leaves (under `vmap`, 38 scatters). `top` is the slot of the most recent entry and
    `depth` how many entries are held. Pushing onto a full stack drops the oldest.
    """

    small: Int8[Array, _H + " small"]    # see `pack_snapshot`
    wide: Int32[Array, _H + " wide"]
    top: Int32[Array, ""]
    depth: Int32[Array, ""]


class GameState(eqx.Module):
    """One HackMatrix game (§2). Globals are int32/bool scalars."""

    board: Board
    player: Player
    enemies: Enemies
    transmissions: Transmissions
    stage: Int32[Array, ""]              # 1..8; stays 8 after victory
    turn: Int32[Array, ""]               # executed enemy phases this stage
    interval: Int32[Array, ""]           # scheduled-task period
    next_task: Int32[Array, ""]          # turn at which the next scheduled transmission comes
    pending: Int32[Array, ""]            # siphon transmissions waiting to be placed
    atk_uses: Int32[Array, ""]           # ATK+ uses this stage
    show: Bool[Array, ""]                # SHOW active
    calm: Bool[Array, ""]                # CALM active (no scheduled tasks)
    step_active: Bool[Array, ""]         # STEP will swallow the next enemy phase
    won: Bool[Array, ""]
    history: History


def _i32(x) -> Int32[Array, ""]:
    return jnp.asarray(x, dtype=jnp.int32)


def programs_owned(state: "GameState") -> Int32[Array, ""]:
    """How many programs the player owns (§9): what the learner's program bonus and the
    search's reward count."""
    return jnp.sum(state.player.owned, dtype=jnp.int32)


def empty_board() -> Board:
    """A board with every cell EMPTY, no payload, no resource, no flags."""
    zeros = jnp.zeros(C.NUM_CELLS, jnp.int8)
    false = jnp.zeros(C.NUM_CELLS, bool)
    return Board(
        content=zeros, block_points=zeros, block_program=jnp.full(C.NUM_CELLS, -1, jnp.int8),
        block_question=false, block_spawn=zeros, credits=zeros, energy=zeros,
        siphoned=false, siphon_center=false)


def no_enemies() -> Enemies:
    zeros = jnp.zeros(C.MAX_ENEMIES, jnp.int8)
    false = jnp.zeros(C.MAX_ENEMIES, bool)
    return Enemies(alive=false, kind=zeros, row=zeros, col=zeros, hp=zeros, disabled=zeros,
                   stunned=false, from_task=false, from_siphon=false)


def no_transmissions() -> Transmissions:
    zeros = jnp.zeros(C.MAX_TRANSMISSIONS, jnp.int8)
    false = jnp.zeros(C.MAX_TRANSMISSIONS, bool)
    return Transmissions(alive=false, kind=zeros, row=zeros, col=zeros,
                         timer=jnp.zeros(C.MAX_TRANSMISSIONS, jnp.int32),
                         from_task=false, from_siphon=false)


def new_player(row, col) -> Player:
    """The bare fixture's player (§19): hp 3, attack 1, everything else 0."""
    zero = _i32(0)
    return Player(row=_i32(row), col=_i32(col), hp=_i32(C.MAX_HP), credits=zero, energy=zero,
                  data_siphons=zero, attack=_i32(1), score=zero,
                  owned=jnp.zeros(C.NUM_PROGRAMS, bool))


def snapshot_of(state: GameState) -> Snapshot:
    return Snapshot(board=state.board, player=state.player, enemies=state.enemies,
                    transmissions=state.transmissions, turn=state.turn, show=state.show,
                    calm=state.calm, atk_uses=state.atk_uses)


# `top` of an empty stack: the first push goes to slot 0.
EMPTY_TOP = C.HISTORY_CAPACITY - 1


def besides_snapshots(merge, a: GameState, b: GameState, *args) -> GameState:
    """`merge(a, b, *args)` over every leaf but the UNDO snapshots, which are `b`'s.

    For merges of two versions of a game (a select, a restart) where the snapshots are
    `b`'s either way: under `vmap` a select over the stacks (most of a state's bytes)
    would copy them whole.
    """
    stacks = lambda s: (s.history.small, s.history.wide)
    without = lambda s: eqx.tree_at(stacks, s, (None, None))
    return eqx.tree_at(stacks, merge(without(a), without(b), *args), stacks(b),
                       is_leaf=lambda x: x is None)


def _template_snapshot() -> Snapshot:
    zero, false = _i32(0), jnp.asarray(False)
    return Snapshot(board=empty_board(), player=new_player(0, 0), enemies=no_enemies(),
                    transmissions=no_transmissions(), turn=zero, show=false, calm=false,
                    atk_uses=zero)


class _Packed(NamedTuple):
    """Where one snapshot leaf lives in a packed slot."""

    wide: bool                 # in the int32 row (else the int8 row)
    start: int
    shape: tuple[int, ...]
    is_bool: bool


@functools.cache
def _snapshot_layout() -> tuple[jax.tree_util.PyTreeDef, tuple[_Packed, ...], int, int]:
    """The snapshot's tree, where each leaf is packed, and the two row sizes."""
    leaves, tree = jax.tree.flatten(jax.eval_shape(_template_snapshot))
    used = {False: 0, True: 0}
    layout = []
    for leaf in leaves:
        wide = leaf.dtype == jnp.int32
        assert wide or leaf.dtype in (jnp.int8, jnp.bool_), leaf.dtype
        layout.append(_Packed(wide, used[wide], leaf.shape, leaf.dtype == jnp.bool_))
        used[wide] += leaf.size
    return tree, tuple(layout), used[False], used[True]


def pack_snapshot(snapshot: Snapshot) -> tuple[Int8[Array, " small"], Int32[Array, " wide"]]:
    """A snapshot as the two rows of a `History` slot (bools as int8 0/1)."""
    _, layout, _, _ = _snapshot_layout()
    rows = {False: [], True: []}
    for x, where in zip(jax.tree.leaves(snapshot), layout):
        rows[where.wide].append(x.reshape(-1).astype(jnp.int32 if where.wide else jnp.int8))
    return jnp.concatenate(rows[False]), jnp.concatenate(rows[True])


def unpack_snapshot(small: Int8[Array, "*lead small"], wide: Int32[Array, "*lead wide"]
                    ) -> Snapshot:
    """The snapshot (or, with leading axes, the snapshots) held in packed rows."""
    tree, layout, _, _ = _snapshot_layout()
    lead = small.shape[:-1]
    leaves = []
    for where in layout:
        size = math.prod(where.shape)
        x = (wide if where.wide else small)[..., where.start:where.start + size]
        x = x.reshape(lead + where.shape)
        leaves.append(x != 0 if where.is_bool else x)
    return jax.tree.unflatten(tree, leaves)


def empty_history() -> History:
    """An empty stack whose slots hold zeros.

    A stack is emptied as well by setting `top` to `EMPTY_TOP` and `depth` to 0 alone:
    slots past the depth are never read.
    """
    _, _, small, wide = _snapshot_layout()
    return History(small=jnp.zeros((C.HISTORY_CAPACITY, small), jnp.int8),
                   wide=jnp.zeros((C.HISTORY_CAPACITY, wide), jnp.int32),
                   top=_i32(EMPTY_TOP), depth=_i32(0))


def bare_state(row=0, col=0) -> GameState:
    """The bare fixture F(row, col) of §19: stage 1, exit at (5,5), nothing else."""
    board = empty_board()
    board = eqx.tree_at(lambda b: b.content, board,
                        board.content.at[5 * C.COLS + 5].set(C.EXIT))
    zero = _i32(0)
    false = jnp.asarray(False)
    player, enemies, transmissions = new_player(row, col), no_enemies(), no_transmissions()
    return GameState(
        board=board, player=player, enemies=enemies, transmissions=transmissions,
        stage=_i32(1), turn=zero, interval=_i32(C.FIRST_INTERVAL),
        next_task=_i32(C.FIRST_INTERVAL), pending=zero, atk_uses=zero, show=false,
        calm=false, step_active=false, won=false, history=empty_history())
