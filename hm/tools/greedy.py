"""The greedy scripted player's rule, on game states alone.

`bin/evaluate --baseline greedy` plays it (`hm.tools.players.GreedyPlayer`) and the
trainer's teacher (`--teacher-coef`, `hm.train.envs.HackMatrixEnv.teacher_actions`)
labels training states with it. It needs nothing but `hm.game`, so the trainer can use
it without importing the evaluation tools.

Every legal action is tried on a copy of the game (`hm.game.step` on 28 copies, one
batch) and scored

    reward of the step + value(state after), value = 0 when the game ended, else
        − `distance_weight` × exit distance
        − `threat_weight` × enemies next to the player that can act next turn
        + `program_weight` × `program_value` (the teacher's option; 0 for the baseline).

The reward already pays for approaching the exit, siphoning, picking up, killing, and
charges for damage and death, but a pure one-step player (both weights 0) picks at
random among the actions that pay nothing (when a block or an enemy is in the way of
the exit, say). The exit distance makes it head for the exit through those ties (0.01
per cell, a fifth of what the reward pays for a step closer), and the threat term makes
it step away from, or attack, the enemies that would hit it on the next enemy phase,
which the one simulated phase does not yet show. On 256 games (docs/evaluation.md) the
pure one-step player reaches a mean highest stage of 2.60, this one 3.55, uniform
random play 1.21.

The trainer's teacher may also value programs (`program_weight` w > 0; the baseline's
is 0): the value then adds w for each program owned and, while the player holds a data
siphon, up to `SEEK_SHARE` × w for standing near siphon reach of a visible program block
it does not own (`program_value`, `program_reach`), so that it walks to such blocks and siphons them. The
game's reward pays nothing for owning a program, so the baseline siphons one only when
it happens to be next to it (docs/learning.md#program-teacher).

Randomness: each game's simulated steps draw their enemy phase (activation order, new
transmissions) and program effects from that game's own trial key, never from the key
the real step will use: the player cannot see the future, only sample it as any player
could. All 28 trials of a game share that one key (common random numbers), so they
differ by the action alone. Exact ties (equal scores) go to a uniformly random one
among them.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Bool, Float, Int32, Key

from hm import game
from hm.game import bitboard, geometry
from hm.game import constants as C
from hm.game.reward import exit_distance

DISTANCE_WEIGHT = 0.01
THREAT_WEIGHT = 0.5
# The baseline values owned programs at 0; the trainer's teacher may value them
# (`--teacher-program-value`, docs/learning.md#program-teacher).
PROGRAM_WEIGHT = 0.0
# With a program weight w, a player holding a data siphon also values being near siphon
# reach of a visible program block it does not own: SEEK_SHARE × w when a siphon from
# where it stands would take the program, falling linearly to 0 at SEEK_CELLS steps away.
SEEK_SHARE = 0.3
SEEK_CELLS = 6

_MANHATTAN = geometry.MANHATTAN.astype(np.int32)


def program_reach(state: game.GameState) -> Int32[Array, ""]:
    """Steps the player must walk (over non-block cells) before a siphon from where it
    stands would take a program it does not own from a visible program block; −1 when
    it holds no data siphon or no such block can be reached. 0: a siphon here would."""
    board, player = state.board, state.player
    program = board.block_program.astype(jnp.int32)
    wanted = ((board.content == C.BLOCK) & ~board.siphoned & ~board.block_question & (program >= 0)
              & ~player.owned[jnp.maximum(program, 0)])
    here = bitboard.of_cell(player.row * C.COLS + player.col)
    # from the wanted blocks (not passable themselves) to the player: adjacent is 1
    distance = bitboard.distance_to(bitboard.from_mask(wanted), bitboard.from_mask(board.content != C.BLOCK), here)
    return jnp.where((player.data_siphons > 0) & (distance > 0), distance - 1, -1)


def value(state: game.GameState, distance_weight: float = DISTANCE_WEIGHT,
          threat_weight: float = THREAT_WEIGHT) -> Float[Array, ""]:
    """The baseline's heuristic value of a game still running (see the module docstring)."""
    here = state.player.row * C.COLS + state.player.col
    e = state.enemies
    cells = e.row.astype(jnp.int32) * C.COLS + e.col.astype(jnp.int32)
    threats = jnp.sum(e.alive & (e.disabled == 0) & (jnp.asarray(_MANHATTAN)[cells, here] == 1),
                      dtype=jnp.int32)
    distance = exit_distance(state.board, here)
    return (-distance_weight * distance.astype(jnp.float32)
            - threat_weight * threats.astype(jnp.float32))


def programs_owned(state: game.GameState) -> Float[Array, ""]:
    """How many programs the player owns (`hm.game.programs_owned`), as a float."""
    return game.programs_owned(state).astype(jnp.float32)


def program_value(state: game.GameState) -> Float[Array, ""]:
    """What a teacher with program weight w adds to `value`, divided by w: the programs
    owned, plus up to `SEEK_SHARE` for being near siphon reach of one it does not own."""
    programs = programs_owned(state)
    reach = program_reach(state)
    closeness = jnp.maximum(SEEK_CELLS - reach, 0).astype(jnp.float32) / SEEK_CELLS
    return programs + jnp.where(reach >= 0, SEEK_SHARE * closeness, 0.0)


def scores(states: game.GameState, mask: Bool[Array, "n actions"], trial_keys: Key[Array, " n"],
           distance_weight: float = DISTANCE_WEIGHT, threat_weight: float = THREAT_WEIGHT,
           program_weight: float | Float[Array, " n"] = PROGRAM_WEIGHT) -> Float[Array, "n actions"]:
    """Every action's score in every game (−inf where it is illegal); game i's trials
    draw their randomness from `trial_keys[i]`. `program_weight` may differ by game."""
    n, actions = mask.shape
    # One flat batch of n × 28 trials: nested vmaps would turn the game's batch-level
    # skips (`hm.game.batching`) into selects that run every branch.
    trials = jax.tree.map(lambda x: jnp.repeat(x, actions, axis=0), states)
    action = jnp.tile(jnp.arange(actions, dtype=jnp.int32), n)
    keys = jnp.repeat(trial_keys, actions, axis=0)
    after, _, reward, done, _ = jax.vmap(game.step)(trials, action, keys)
    after_value = jax.vmap(lambda s: value(s, distance_weight, threat_weight))(after)
    # one program weight per game (a scalar is every game's), repeated for its trials;
    # the program term's path search is skipped when no game of the batch uses it
    weight = jnp.repeat(jnp.broadcast_to(jnp.asarray(program_weight, jnp.float32), (n,)), actions)
    after_value = after_value + lax.cond(jnp.any(weight > 0), lambda: weight * jax.vmap(program_value)(after),
                                         lambda: jnp.zeros_like(weight))
    score = reward + jnp.where(done, 0.0, after_value)
    return jnp.where(mask, score.reshape(n, actions), -jnp.inf)


def best(score: Float[Array, "n actions"], mask: Bool[Array, "n actions"],
         draw: Float[Array, "n actions"]) -> Int32[Array, " n"]:
    """Each game's best-scoring legal action; exact ties go to the largest of `draw`
    (uniform draws make that a uniformly random one of the best)."""
    top = score >= jnp.max(score, axis=-1, keepdims=True)
    return jnp.argmax(jnp.where(top & mask, draw, -1.0), axis=-1).astype(jnp.int32)


def choose_each(states: game.GameState, mask: Bool[Array, "n actions"], keys: Key[Array, " n"],
                distance_weight: float = DISTANCE_WEIGHT, threat_weight: float = THREAT_WEIGHT,
                program_weight: float | Float[Array, " n"] = PROGRAM_WEIGHT) -> Int32[Array, " n"]:
    """The greedy action of each game, game i's randomness (its trials and its tie
    break) from `keys[i]` alone: a game's choice does not depend on the others in the
    batch."""
    split = jax.vmap(jax.random.split)(keys)
    score = scores(states, mask, split[:, 0], distance_weight, threat_weight, program_weight)
    draw = jax.vmap(lambda key: jax.random.uniform(key, mask.shape[1:]))(split[:, 1])
    return best(score, mask, draw)


def seeks_program(states: game.GameState, actions: Int32[Array, " n"], keys: Key[Array, " n"]) -> Bool[Array, " n"]:
    """Whether each game's action, as `choose_each` with the same `keys` tried it,
    raises `program_value`: it siphons a program, or walks towards siphon reach of a
    program block (or picks up a data siphon while one is in sight). The trainer keeps
    its teacher's weight on such labels (`--teacher-program-floor`,
    docs/learning.md#program-floor). The step replays the trial's own key, so it is the
    outcome the choice was scored on; a step that ends the game seeks nothing."""
    trial_keys = jax.vmap(jax.random.split)(keys)[:, 0]
    after, _, _, done, _ = jax.vmap(game.step)(states, actions, trial_keys)
    return ~done & (jax.vmap(program_value)(after) > jax.vmap(program_value)(states))
