"""The reward (docs/rules.md#reward, §14): fifteen terms, each reported on its own.

Section numbers (§) are those of docs/rules.md; the terms' names are `constants.REWARD_TERMS`.
"""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float32, Int32

from hm.game import bitboard, entities, geometry
from hm.game import constants as C
from hm.game.actions import ActionOutcome
from hm.game.state import Board, GameState


def exit_distance(board: Board, cell: Int32[Array, ""]) -> Int32[Array, ""]:
    """Breadth-first path length from `cell` to the exit over non-block cells (§14.2).

    The start cell itself may hold a block; no path counts as 0.
    """
    exit_cells = bitboard.from_mask(board.content == C.EXIT)
    open_cells = bitboard.from_mask(board.content != C.BLOCK)
    distance = bitboard.distance_to(exit_cells, open_cells, bitboard.of_cell(cell))
    return jnp.maximum(distance, 0)


def reward_terms(before: GameState, after: GameState, outcome: ActionOutcome,
                 stage_completed: Bool[Array, ""], reset_used: Bool[Array, ""],
                 distance_before: Int32[Array, ""]) -> dict[str, Float32[Array, ""]]:
    """Every term of §14.1 for one successful step, by name (constants.REWARD_TERMS)."""
    p0, p = before.player, after.player
    f32 = lambda x: jnp.asarray(x).astype(jnp.float32)
    died = p.hp == 0
    won_now = after.won & ~before.won
    here = p.row * C.COLS + p.col
    distance_after = exit_distance(after.board, here)
    delta = jnp.where(died, 0, jnp.where(stage_completed, distance_before,
                                         distance_before - distance_after))
    completed_stage = before.stage                      # the stage just completed
    e = after.enemies
    adjacent = e.alive & (jnp.asarray(geometry.MANHATTAN)[entities.cells(e), here] == 1)
    terms = {
        "step": jnp.float32(C.STEP_PENALTY),
        "stage": jnp.where(stage_completed,
                           jnp.asarray(C.STAGE_REWARD)[completed_stage - 1], 0.0),
        "score": C.SCORE_REWARD * f32(p.score - p0.score),
        "kills": C.KILL_REWARD * f32(outcome.kills),
        "pickup": jnp.where(outcome.pickup, C.PICKUP_REWARD, 0.0),
        "distance": C.DISTANCE_REWARD * f32(jnp.maximum(delta, 0)),
        "victory": jnp.where(won_now, C.VICTORY_REWARD + C.VICTORY_SCORE_REWARD * f32(p.score), 0.0),
        "death": jnp.where(died, jnp.asarray(C.DEATH_PENALTY)[after.stage - 1], 0.0),
        "resources": C.RESOURCE_REWARD * f32(p.credits - p0.credits)
        + C.RESOURCE_REWARD * f32(p.energy - p0.energy),
        "holding": jnp.where(stage_completed,
                             C.HOLDING_REWARD * f32(p.credits) + C.HOLDING_REWARD * f32(p.energy), 0.0),
        "damage": C.DAMAGE_REWARD * f32(jnp.maximum(p0.hp - p.hp, 0)),
        "recovery": C.RECOVERY_REWARD * f32(jnp.maximum(p.hp - p0.hp, 0)),
        "siphon_quality": C.SIPHON_QUALITY_REWARD * f32(outcome.missed_resources),
        "program_waste": jnp.where(reset_used & (p0.hp == 2), C.PROGRAM_WASTE_REWARD, 0.0),
        "siphon_death": jnp.where(died & jnp.any(adjacent & e.from_siphon), C.SIPHON_DEATH_REWARD, 0.0),
    }
    return {name: f32(terms[name]) for name in C.REWARD_TERMS}
