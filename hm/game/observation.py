"""The numeric observation (docs/rules.md#observation, §15), computed from a state after a step.

What it is: the player vector (10 floats, §15.1), program ownership (23 integers,
§15.2) and the 6×6×42 grid (§15.3), which `flat()` lays out as one 1545-float vector;
every value is the correctly rounded float32 quotient. docs/rules.md#grid lists the
channels; their numbers are `constants.CH_*`. Section numbers (§) are those of
docs/rules.md.

How it is built. The output is the only large array of a step (1545 floats per game),
so nothing before it is larger than one value per cell, and the output is written in
one pass:

1. `_source` packs what a game's observation shows into one small int32 table (321
   words): the 33 head values (player vector and programs, as float32 bits), then,
   word-major, 8 words per cell: the 6 fractional channels as float32 bits (quotients
   are looked up per cell, not per output element) and 2 *code* words of 4 bytes for the
   one-hot and 0/1 channels. The first enemy and the first transmission on each cell
   come from one scatter-min each of `slot << 24 | payload` (no [36, 36] compare).
2. `_expand` writes the flat observation in one pass: output element `i` reads word
   `_WORD[i]` of the table and is either that word's float32 bits or the 0/1 test
   `byte == _WANT[i]` of one of its bytes. One gathered load per element, no
   intermediate as large as the output.

`Observation` keeps the flat vector itself (the §15 flat layout) so that `flat()` is
free; `player`, `programs` and `grid` are read from it.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Bool, Float32, Int32, UInt8

from hm.game import constants as C
from hm.game import entities
from hm.game.state import GameState

_HEAD = C.PLAYER_FEATURES + C.NUM_PROGRAMS   # player vector, then programs (as float)


class Observation(eqx.Module):
    """Player vector, program ownership and the 6×6×42 grid (indexed [row][col][channel]).

    Stored as the flat vector of §15 (`concat(player, float(programs), grid.reshape(-1))`,
    1545 float32); the three parts are views of it. Works on batched observations too
    (leading axes are kept).
    """

    values: Float32[Array, "*batch 1545"]

    @property
    def player(self) -> Float32[Array, "*batch 10"]:
        return self.values[..., :C.PLAYER_FEATURES]

    @property
    def programs(self) -> Int32[Array, "*batch 23"]:
        return self.values[..., C.PLAYER_FEATURES:_HEAD].astype(jnp.int32)

    @property
    def grid(self) -> Float32[Array, "*batch 6 6 42"]:
        batch = self.values.shape[:-1]
        return self.values[..., _HEAD:].reshape(batch + (C.ROWS, C.COLS, C.GRID_CHANNELS))

    def flat(self) -> Float32[Array, "*batch 1545"]:
        """The conventional flat layout: player, programs as float, grid row-major."""
        return self.values


def _f32(x) -> Float32[Array, "..."]:
    return jnp.asarray(x).astype(jnp.float32)


# §15 wants every feature to be the float32 quotient itself (correctly rounded). Compiled
# float division is not that on every backend (XLA on CPU multiplies by a reciprocal and
# is off by one ulp for e.g. 20 / 50), so quotients come from tables computed on the host
# in float64 and rounded once. Counters past the table (far beyond anything the rules
# reach in play) fall back to division.
_TABLE_SIZE = 1024
_QUOTIENTS = {d: (np.arange(_TABLE_SIZE, dtype=np.float64) / d).astype(np.float32)
              for d in (3, 5, 7, 9, 10, 50)}


def _quotient(x, divisor: int) -> Float32[Array, "..."]:
    """Correctly rounded float32 `x / divisor` for integer `x` ≥ 0."""
    x = jnp.asarray(x).astype(jnp.int32)
    exact = jnp.asarray(_QUOTIENTS[divisor])[jnp.clip(x, 0, _TABLE_SIZE - 1)]
    return jnp.where((x >= 0) & (x < _TABLE_SIZE), exact, _f32(x) / divisor)


def cryptog_visible(state: GameState) -> Bool[Array, "36"]:
    """Per enemy slot: false only for a cryptog hidden from the player (§2.3, §15.3)."""
    e, p = state.enemies, state.player
    in_line = (e.row.astype(jnp.int32) == p.row) | (e.col.astype(jnp.int32) == p.col)
    return (e.kind != C.CRYPTOG) | state.show | in_line


# --- the source table --------------------------------------------------------------------
# Per-cell words, in table order after the head: word k of cell c is at _HEAD + 36 k + c.
# Float words hold float32 bits; code words hold 4 bytes, byte b tested against a value.
_FLOAT_WORDS = (C.CH_ENEMY_HP, C.CH_BLOCK_POINTS, C.CH_BLOCK_SPAWN, C.CH_TRANSMISSION,
                C.CH_CREDITS, C.CH_ENERGY)
_CODE_A, _CODE_B = len(_FLOAT_WORDS), len(_FLOAT_WORDS) + 1
_NUM_WORDS = len(_FLOAT_WORDS) + 2
_NO_BYTE = 0xFF                       # "no enemy shown" / "no visible program" / no block
_BLOCK_DATA, _BLOCK_PROGRAM, _BLOCK_QUESTION = 0, 1, 2    # code A byte 3
_CODES = {                            # channel: (code word, byte, value that sets it)
    **{C.CH_ENEMY_TYPE + k: (_CODE_A, 0, k) for k in range(C.NUM_ENEMY_TYPES)},
    C.CH_ENEMY_STUNNED: (_CODE_A, 1, 1),
    C.CH_ENEMY_FROM_SIPHON: (_CODE_A, 2, 1),
    C.CH_BLOCK_DATA: (_CODE_A, 3, _BLOCK_DATA),
    C.CH_BLOCK_PROGRAM: (_CODE_A, 3, _BLOCK_PROGRAM),
    C.CH_BLOCK_QUESTION: (_CODE_A, 3, _BLOCK_QUESTION),
    C.CH_BLOCK_SIPHONED: (_CODE_B, 0, 1),
    **{C.CH_BLOCK_PROGRAM_ID + g: (_CODE_B, 1, g) for g in range(C.NUM_PROGRAMS)},
    C.CH_PICKUP: (_CODE_B, 2, C.PICKUP),
    C.CH_EXIT: (_CODE_B, 2, C.EXIT),
    C.CH_SIPHON_CENTER: (_CODE_B, 3, 1),
}
assert sorted(list(_CODES) + list(_FLOAT_WORDS)) == list(range(C.GRID_CHANNELS))


def _expansion_tables():
    """Per output element: table word, byte shift, wanted byte, and whether it is a float."""
    word = np.arange(C.OBS_FLAT_SIZE, dtype=np.int32)      # the head copies itself
    shift = np.zeros(C.OBS_FLAT_SIZE, np.int32)
    want = np.zeros(C.OBS_FLAT_SIZE, np.int32)
    is_float = np.zeros(C.OBS_FLAT_SIZE, bool)
    is_float[:_HEAD] = True
    for cell in range(C.NUM_CELLS):
        for ch in range(C.GRID_CHANNELS):
            i = _HEAD + cell * C.GRID_CHANNELS + ch
            if ch in _FLOAT_WORDS:
                word[i] = _HEAD + _FLOAT_WORDS.index(ch) * C.NUM_CELLS + cell
                is_float[i] = True
            else:
                w, byte, value = _CODES[ch]
                word[i] = _HEAD + w * C.NUM_CELLS + cell
                shift[i], want[i] = 8 * byte, value
    return word, shift, want, is_float


_WORD, _SHIFT, _WANT, _IS_FLOAT = _expansion_tables()
assert _HEAD + _NUM_WORDS * C.NUM_CELLS == 321      # the table size in the annotations
_NONE = np.int32(np.iinfo(np.int32).max)


def _pack(b0, b1=0, b2=0, b3=0) -> Int32[Array, "..."]:
    """Four integers (each taken modulo 256) as the bytes of an int32, b0 lowest."""
    word = jnp.asarray(b0).astype(jnp.int32) & 0xFF
    for k, b in enumerate((b1, b2, b3), start=1):
        word = word | ((jnp.asarray(b).astype(jnp.int32) & 0xFF) << (8 * k))
    return word


def _byte(word, k: int) -> Int32[Array, "..."]:
    """Byte `k` of `word`, sign-extended."""
    return (word << (24 - 8 * k)) >> 24


def _bits(x) -> Int32[Array, "..."]:
    return lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.int32)


def _first_per_cell(ents: entities.EntityList, payload: Int32[Array, " N"]) -> Int32[Array, "36"]:
    """Per cell: `slot << 24 | payload` (24 low bits) of the first live entity standing
    there in list order (§15.3), `_NONE` where none stands.

    A scatter-min of 36 keys: the smallest slot wins. Under `vmap` it costs a fraction of
    a [36 cells, 36 slots] compare.
    """
    capacity = ents.alive.shape[0]
    assert capacity < 128                     # slot << 24 stays a positive int32
    key = (jnp.arange(capacity, dtype=jnp.int32) << 24) | (payload & 0xFFFFFF)
    target = jnp.where(ents.alive, entities.cells(ents), C.NUM_CELLS)  # dead: dropped
    numbers = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,))
    return lax.scatter_min(jnp.full(C.NUM_CELLS, _NONE), target[:, None], key, numbers,
                           mode=lax.GatherScatterMode.FILL_OR_DROP)


def _source(state: GameState) -> Int32[Array, "321"]:
    """The table `_expand` reads: head, then 8 words per cell (see the module docstring)."""
    p, b = state.player, state.board
    player = jnp.stack([
        _quotient(p.row, 5), _quotient(p.col, 5), _quotient(p.hp, 3),
        jnp.minimum(_quotient(p.credits, 50), 1.0), jnp.minimum(_quotient(p.energy, 50), 1.0),
        _quotient(state.stage - 1, 7), _quotient(p.data_siphons, 10),
        _f32(p.attack - 1) * 0.5,                       # halving is exact
        _f32(state.show), _f32(state.calm)])
    head = _bits(jnp.concatenate([player, _f32(p.owned)]))

    # Enemy channels: the first enemy in list order on each cell, unless a hidden cryptog
    # (which then hides whatever is stacked beneath it). Payload: kind, hp, flags bytes.
    e, t = state.enemies, state.transmissions
    flags = e.stunned.astype(jnp.int32) | (e.from_siphon.astype(jnp.int32) << 1)
    enemy = _first_per_cell(e, jnp.where(cryptog_visible(state), _pack(e.kind, e.hp, flags),
                                         _NO_BYTE))
    enemy = jnp.where(enemy == _NONE, _NO_BYTE, enemy)
    enemy_flags = _byte(enemy, 2)
    # Transmission channel: the first transmission's timer, min(timer / 4, 1). Timers are
    # ≥ 1 (§2.5); the lower clip only keeps the payload within 24 bits.
    transmission = _first_per_cell(t, jnp.clip(t.timer, -(1 << 23), 4))
    timer = jnp.where(transmission == _NONE, 0, (transmission << 8) >> 8)

    is_block = b.content == C.BLOCK
    question = is_block & b.block_question
    program = is_block & ~b.block_question & (b.block_program >= 0)
    data = is_block & ~b.block_question & (b.block_program < 0)
    visible = data | program
    block = jnp.where(data, _BLOCK_DATA, jnp.where(program, _BLOCK_PROGRAM,
                                                   jnp.where(question, _BLOCK_QUESTION, _NO_BYTE)))
    resource_shown = ~is_block | b.siphoned
    words = {
        C.CH_ENEMY_HP: _quotient(_byte(enemy, 1), 3),   # hp byte is 0 unless shown
        C.CH_BLOCK_POINTS: jnp.where(data, _quotient(b.block_points, 9), 0.0),
        C.CH_BLOCK_SPAWN: jnp.where(visible, _quotient(b.block_spawn, 9), 0.0),
        C.CH_TRANSMISSION: jnp.minimum(_f32(timer) * 0.25, 1.0),   # quarter: exact
        C.CH_CREDITS: jnp.where(resource_shown, _quotient(b.credits, 3), 0.0),
        C.CH_ENERGY: jnp.where(resource_shown, _quotient(b.energy, 3), 0.0),
    }
    code_a = _pack(enemy, enemy_flags & 1, (enemy_flags >> 1) & 1, block)
    code_b = _pack(is_block & b.siphoned, jnp.where(program, b.block_program, _NO_BYTE),
                   b.content, b.siphon_center)
    return jnp.concatenate([head] + [_bits(words[ch]) for ch in _FLOAT_WORDS] + [code_a, code_b])


def _expand(table: Int32[Array, "321"]) -> Float32[Array, "1545"]:
    """The flat observation from the table: one gathered word per output element."""
    # Tie the (constant) word indices to the table so that under `vmap` the gather is
    # batched over games: XLA then writes the output row by row. With unbatched indices
    # it gathers game-minor and transposes (about 2x slower).
    word = table[_WORD + table[0] * 0]
    hit = ((word >> _SHIFT) & 0xFF) == _WANT
    return jnp.where(_IS_FLOAT, lax.bitcast_convert_type(word, jnp.float32), _f32(hit))


@jax.jit
def observe(state: GameState) -> Observation:
    """Encode `state` exactly as §15 specifies (float32 quotients)."""
    return Observation(values=_expand(_source(state)))


# --- compact observations --------------------------------------------------------------

# Every value the game puts in the programs vector and the grid is k/3, k/4 or k/9
# (docs/rules.md §15) for small k: a multiple of 1/36. The tail is stored as the uint8
# round(36 x) and decoded as `u / 36` by the same XLA division the game uses, which
# reproduces the game's float32 values bit for bit over their range (k/3 for k <= 3,
# k/4, k/9 for k <= 9; tested on real observations). XLA on CPU turns division by a
# constant into multiplication by the reciprocal, so neither side is always the
# correctly rounded quotient (17/36, 5/3 are 1 ulp off), but both sides agree.
# The player vector (row/5, credits/50, ...) is kept as float32.
QUANTUM = 36


class PackedObservation(eqx.Module):
    """A flat observation with its tail stored as uint8 multiples of 1/36."""

    head: Float32[Array, "*batch head"]
    tail: UInt8[Array, "*batch tail"]


def pack(obs: Float32[Array, "*batch obs"], head_size: int = C.PLAYER_FEATURES) -> PackedObservation:
    """`obs` with everything after its first `head_size` values as uint8 multiples of 1/36
    (`HackMatrix.compact_observation`: a rollout buffer a quarter of the size)."""
    tail = jnp.clip(jnp.round(obs[..., head_size:] * QUANTUM), 0, 255).astype(jnp.uint8)
    return PackedObservation(head=obs[..., :head_size], tail=tail)


def unpack(packed: PackedObservation) -> Float32[Array, "*batch obs"]:
    """The observation `pack` stored, bit for bit for the values the game makes."""
    tail = packed.tail.astype(jnp.float32) / QUANTUM
    return jnp.concatenate([packed.head, tail], axis=-1)
