"""The numeric observation (GAME_RULES.md §15), computed from a state after a step."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float32, Int32

from hm.game import constants as C
from hm.game import entities
from hm.game.state import GameState

_CELL_IDS = np.arange(C.NUM_CELLS, dtype=np.int32)
_PROGRAM_IDS = np.arange(C.NUM_PROGRAMS, dtype=np.int8)


class Observation(eqx.Module):
    """Player vector, program ownership and the 6×6×42 grid, indexed [row][col][channel]."""

    player: Float32[Array, "10"]
    programs: Int32[Array, "23"]
    grid: Float32[Array, "6 6 42"]

    def flat(self) -> Float32[Array, "*batch 1545"]:
        """The conventional flat layout: player, programs as float, grid row-major.

        Works on batched observations too (leading axes are kept).
        """
        grid = self.grid.reshape(self.grid.shape[:-3] + (-1,))
        return jnp.concatenate([self.player, self.programs.astype(jnp.float32), grid], axis=-1)


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


def observe(state: GameState) -> Observation:
    """Encode `state` exactly as §15 specifies (float32 quotients)."""
    p, b = state.player, state.board
    player = jnp.stack([
        _quotient(p.row, 5), _quotient(p.col, 5), _quotient(p.hp, 3),
        jnp.minimum(_quotient(p.credits, 50), 1.0), jnp.minimum(_quotient(p.energy, 50), 1.0),
        _quotient(state.stage - 1, 7), _quotient(p.data_siphons, 10),
        _f32(p.attack - 1) * 0.5,                       # halving is exact
        _f32(state.show), _f32(state.calm)])

    # Enemy channels: the first enemy in list order on each cell, unless a hidden cryptog.
    e = state.enemies
    slot = entities.first_at(e, jnp.asarray(_CELL_IDS))
    has_enemy = slot < C.MAX_ENEMIES
    slot = jnp.minimum(slot, C.MAX_ENEMIES - 1)
    shown = has_enemy & cryptog_visible(state)[slot]
    kind = e.kind[slot]
    enemy = jnp.concatenate([
        (kind[:, None] == np.arange(C.NUM_ENEMY_TYPES, dtype=np.int8)[None, :]) & shown[:, None],
        jnp.where(shown, _quotient(e.hp[slot], 3), 0.0)[:, None],
        (shown & e.stunned[slot])[:, None],
        (shown & e.from_siphon[slot])[:, None],
    ], axis=1, dtype=jnp.float32)

    is_block = b.content == C.BLOCK
    question = is_block & b.block_question
    program = is_block & ~b.block_question & (b.block_program >= 0)
    data = is_block & ~b.block_question & (b.block_program < 0)
    visible = data | program
    block = jnp.concatenate([
        data[:, None], program[:, None], question[:, None],
        jnp.where(data, _quotient(b.block_points, 9), 0.0)[:, None],
        (is_block & b.siphoned)[:, None],
        (b.block_program[:, None] == _PROGRAM_IDS[None, :]) & program[:, None],
        jnp.where(visible, _quotient(b.block_spawn, 9), 0.0)[:, None],
    ], axis=1, dtype=jnp.float32)

    t = state.transmissions
    tslot = entities.first_at(t, jnp.asarray(_CELL_IDS))
    has_transmission = tslot < C.MAX_TRANSMISSIONS
    timer = t.timer[jnp.minimum(tslot, C.MAX_TRANSMISSIONS - 1)]
    transmission = jnp.where(has_transmission, jnp.minimum(_f32(timer) * 0.25, 1.0), 0.0)

    resource_shown = ~is_block | b.siphoned
    rest = jnp.stack([
        transmission,
        jnp.where(resource_shown, _quotient(b.credits, 3), 0.0),
        jnp.where(resource_shown, _quotient(b.energy, 3), 0.0),
        _f32(b.content == C.PICKUP), _f32(b.content == C.EXIT), _f32(b.siphon_center),
    ], axis=1)

    grid = jnp.concatenate([enemy, block, rest], axis=1)
    return Observation(player=player, programs=p.owned.astype(jnp.int32),
                       grid=grid.reshape(C.ROWS, C.COLS, C.GRID_CHANNELS))
