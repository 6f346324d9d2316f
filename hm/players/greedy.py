"""The greedy scripted player's rule, on game states alone.

`bin/evaluate --baseline greedy` plays it (`hm.tools.players.GreedyPlayer`), the
trainer's teacher (`--teacher-coef`, `hm.train.features.teacher`) labels training states
with it, and the search's planning baseline (`--baseline search`) takes its value. It
needs nothing but `hm.game`.

Every legal action is tried on a copy of the game (`hm.game.step` on 28 copies, one
batch) and scored

    reward of the step + value(state after), value = 0 when the game ended, else
        − `distance_weight` × exit distance
        − `threat_weight` × enemies next to the player that can act next turn.

The reward already pays for approaching the exit, siphoning, picking up, killing, and
charges for damage and death, but a pure one-step player (both weights 0) picks at
random among the actions that pay nothing (when a block or an enemy is in the way of
the exit, say). The exit distance makes it head for the exit through those ties (0.01
per cell, a fifth of what the reward pays for a step closer), and the threat term makes
it step away from, or attack, the enemies that would hit it on the next enemy phase,
which the one simulated phase does not yet show. On 256 games (docs/evaluation.md) the
pure one-step player reaches a mean highest stage of 2.60, this one 3.55, uniform
random play 1.21.

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
from jaxtyping import Array, Bool, Float, Int32, Key

from hm import game
from hm.game import constants as C
from hm.game import geometry
from hm.game.reward import exit_distance

DISTANCE_WEIGHT = 0.01
THREAT_WEIGHT = 0.5
_MANHATTAN = geometry.MANHATTAN.astype(np.int32)


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


def scores(states: game.GameState, mask: Bool[Array, "n actions"], trial_keys: Key[Array, " n"],
           distance_weight: float = DISTANCE_WEIGHT, threat_weight: float = THREAT_WEIGHT
           ) -> Float[Array, "n actions"]:
    """Every action's score in every game (−inf where it is illegal); game i's trials
    draw their randomness from `trial_keys[i]`."""
    n, actions = mask.shape
    # One flat batch of n × 28 trials: nested vmaps would turn the game's batch-level
    # skips (`hm.game.batching`) into selects that run every branch.
    trials = jax.tree.map(lambda x: jnp.repeat(x, actions, axis=0), states)
    action = jnp.tile(jnp.arange(actions, dtype=jnp.int32), n)
    keys = jnp.repeat(trial_keys, actions, axis=0)
    after, _, reward, done, _ = jax.vmap(game.step)(trials, action, keys)
    after_value = jax.vmap(lambda s: value(s, distance_weight, threat_weight))(after)
    score = reward + jnp.where(done, 0.0, after_value)
    return jnp.where(mask, score.reshape(n, actions), -jnp.inf)


def best(score: Float[Array, "n actions"], mask: Bool[Array, "n actions"],
         draw: Float[Array, "n actions"]) -> Int32[Array, " n"]:
    """Each game's best-scoring legal action; exact ties go to the largest of `draw`
    (uniform draws make that a uniformly random one of the best)."""
    top = score >= jnp.max(score, axis=-1, keepdims=True)
    return jnp.argmax(jnp.where(top & mask, draw, -1.0), axis=-1).astype(jnp.int32)


def choose_each(states: game.GameState, mask: Bool[Array, "n actions"], keys: Key[Array, " n"],
                distance_weight: float = DISTANCE_WEIGHT, threat_weight: float = THREAT_WEIGHT
                ) -> Int32[Array, " n"]:
    """The greedy action of each game, game i's randomness (its trials and its tie
    break) from `keys[i]` alone: a game's choice does not depend on the others in the
    batch."""
    split = jax.vmap(jax.random.split)(keys)
    score = scores(states, mask, split[:, 0], distance_weight, threat_weight)
    draw = jax.vmap(lambda key: jax.random.uniform(key, mask.shape[1:]))(split[:, 1])
    return best(score, mask, draw)
