"""One environment step and a new game (docs/rules.md#step, §6; docs/rules.md#game-start,
§12.5; docs/rules.md#episode-end, §13). Section numbers (§) in this module are those of
docs/rules.md.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float32, Int32, Key

from hm.game import actions, batching, entities, generation, programs
from hm.game import constants as C
from hm.game.enemy_phase import enemy_phase, push_snapshot
from hm.game.observation import Observation, observe
from hm.game.reward import exit_distance, reward_terms
from hm.game.state import GameState, besides_snapshots

Info = dict


def canonical(state: GameState) -> GameState:
    """Compact both entity lists (removals leave holes; §17.2 list order is kept)."""
    return _compact_where(state, ~entities.is_compact(state.enemies)
                          | ~entities.is_compact(state.transmissions))


def _compact(state: GameState, active: Bool[Array, ""]) -> GameState:
    del active  # compacting a compact list changes nothing
    return eqx.tree_at(lambda s: (s.enemies, s.transmissions), state,
                       (entities.compact(state.enemies), entities.compact(state.transmissions)))


# Under `vmap`, only the games whose lists have holes (a few per step) are compacted.
_compact_where = batching.where_selected(_compact, ("enemies", "transmissions"), 16, 8)


def restart(done: Bool[Array, ""], state: GameState, fresh: GameState) -> GameState:
    """`fresh` where `done`, else `state`: the auto-reset of a vectorised environment.

    `fresh` must be a new game (`reset`). This is a leafwise `where` except for the UNDO
    snapshots, which stay as in `state`: a new game's stack is empty (depth 0) and slots
    past the depth are never read, so the game is the same.
    """
    return besides_snapshots(lambda f, s: batching.select(done, f, s), fresh, state)


def _fresh_game(current: tuple[GameState, Float32[Array, " obs"]], active: Bool[Array, ""],
                key: Key[Array, ""], stage: Int32[Array, ""] | int = 1
                ) -> tuple[GameState, Float32[Array, " obs"]]:
    state, _ = current
    fresh = generation.curriculum_game(key, stage, active)   # new_game at stage 1
    # A new game's UNDO stack is empty, so it may keep `state`'s snapshots (see `restart`):
    # then the batched update below never carries or scatters the stacks.
    fresh = besides_snapshots(lambda new, _: new, fresh, state)
    return fresh, observe(fresh).values


# Chunks of batch / 64 games: random play ends ~2% of 2048 games a step (one or two chunks).
# The new game and its observation replace every field but the UNDO snapshots.
_fresh_game_where = batching.where_selected(
    _fresh_game, [f"0.{f.name}" for f in dataclasses.fields(GameState) if f.name != "history"]
    + ["0.history.top", "0.history.depth", "1"], 64, 8)


@jax.jit
def reset_where(done: Bool[Array, ""], state: GameState, obs: Observation, key: Key[Array, ""],
                stage: Int32[Array, ""] | int = 1) -> tuple[GameState, Observation]:
    """`reset(key, stage)` where `done`, else `(state, obs)`: the auto-reset of a vectorised env.

    Under `vmap` only the games that are done generate a new game and compute its
    observation (`batching.where_selected`), so a batch pays for its finished games, not
    for a `reset` of every game (`jnp.where(done, reset(key), ...)`). The new game is the
    one `reset(key, stage)` makes, except for the UNDO slots it never reads (as in `restart`).
    """
    state, values = _fresh_game_where((state, obs.values), done, key, jnp.asarray(stage, jnp.int32))
    return state, Observation(values=values)


def _keep_legal(is_legal: Bool[Array, ""], acted: GameState, state: GameState) -> GameState:
    """`acted` if the action was legal, else `state`. Under `vmap` there is no select at all
    when every game's action was legal (a masked policy's always are). No rule of a step
    writes the UNDO snapshots, so they are the same in both."""
    return besides_snapshots(lambda a, s: _select_unless_all(is_legal, a, s), acted, state)


@batching.custom_batching(lambda _, pred, a, b: jax.lax.cond(
    jnp.all(pred), lambda: a, lambda: jax.vmap(batching.select)(pred, a, b)))
def _select_unless_all(pred, a, b):
    return batching.select(pred, a, b)


@jax.jit
def reset(key: Key[Array, ""], stage: Int32[Array, ""] | int = 1) -> tuple[GameState, Observation]:
    """A new game (§12.5) and its observation. A `stage` above 1 is a curriculum start
    (`generation.curriculum_game`, docs/rules.md#curriculum-starts), not a rule of the game."""
    state = generation.curriculum_game(key, stage)
    return state, observe(state)


@jax.jit
def step(state: GameState, action: Int32[Array, ""], key: Key[Array, ""]
         ) -> tuple[GameState, Observation, Float32[Array, ""], Bool[Array, ""], Info]:
    """Apply one action (§6). An illegal action leaves the state as it was, gives reward 0
    and ends the episode (§5)."""
    action = jnp.asarray(action, jnp.int32)
    with jax.named_scope("legal"):
        legal = actions.legal_actions(state)
    in_range = (action >= 0) & (action < C.NUM_ACTIONS)
    is_legal = in_range & legal[jnp.clip(action, 0, C.NUM_ACTIONS - 1)]
    key_program, key_stage, key_phase = jax.random.split(key, 3)

    distance_before = exit_distance(state.board, actions.player_cell(state))
    # Non-program actions run WAIT (no effect, result discarded), so that under `vmap` the
    # PUSH/PULL pass runs only when some game really pushes or pulls.
    program = jnp.where(action >= C.PROGRAM_ACTION_OFFSET,
                        jnp.clip(action - C.PROGRAM_ACTION_OFFSET, 0, C.NUM_PROGRAMS - 1),
                        C.WAIT)
    # Named scopes label the parts in profiles (`jax.profiler`) at no cost.
    with jax.named_scope("directional"):
        moved, moved_outcome = actions.directional(state, jnp.clip(action, 0, 3))
    with jax.named_scope("siphon"):
        siphoned, siphon_outcome = actions.siphon(state)
    with jax.named_scope("program"):
        ran, program_outcome = programs.run_program(state, program, key_program)
    is_move = action < C.ACTION_SIPHON
    is_siphon = action == C.ACTION_SIPHON
    # No action writes the UNDO snapshots: the select leaves them out.
    acted = besides_snapshots(
        lambda m, o: batching.select(is_move, m, o), moved,
        besides_snapshots(lambda s, r: batching.select(is_siphon, s, r), siphoned, ran))
    outcome = batching.select(is_move, moved_outcome,
                              batching.select(is_siphon, siphon_outcome, program_outcome))

    # Removals leave holes; what follows appends (stage generation, hatching, placement)
    # and every append goes after the last live entry, so compact now, once. Nothing
    # after this point removes an entity, so the returned lists stay compact.
    with jax.named_scope("compact"):
        acted = canonical(acted)
    reached_exit = outcome.reached_exit
    ends_turn = (is_move | is_siphon | (action == C.PROGRAM_ACTION_OFFSET + C.WAIT)) & ~reached_exit
    with jax.named_scope("complete_stage"):
        acted = generation.maybe_complete_stage(acted, reached_exit, key_stage)
    with jax.named_scope("enemy_phase"):
        acted, phase_executed = enemy_phase(acted, ends_turn, key_phase)

    with jax.named_scope("reward"):
        terms = reward_terms(state, acted, outcome, reached_exit,
                             action == C.PROGRAM_ACTION_OFFSET + C.RESET, distance_before)
    reward = sum(terms[name] for name in C.REWARD_TERMS)
    died = acted.player.hp == 0
    done = died | acted.won

    # No rule above writes the UNDO snapshots (a stage change empties the stack by its
    # depth), so this select skips them and the push below writes them in place.
    with jax.named_scope("keep_legal"):
        new_state = _keep_legal(is_legal, acted, state)
        new_state = push_snapshot(new_state, is_legal & phase_executed)
    info = {
        "reward_terms": {k: jnp.where(is_legal, v, 0.0) for k, v in terms.items()},
        "stage_completed": is_legal & reached_exit,
        "won": is_legal & acted.won,
        "died": is_legal & died,
        "illegal": ~is_legal,
    }
    with jax.named_scope("observe"):
        obs = observe(new_state)
    return (new_state, obs, jnp.where(is_legal, reward, 0.0),
            jnp.where(is_legal, done, True), info)
