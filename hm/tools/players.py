"""The players `bin/evaluate` runs: a trained network, and two baselines to compare it with.

Every player chooses one action per game for a batch of games (`AbstractPlayer.choose`),
inside the evaluation's compiled program. A player's configuration is static and its
arrays are traced, so there is one compiled program per kind of player (and network
shape), whatever the weights.

* `NetworkPlayer` samples a trained network's masked policy, or takes its likeliest action.
* `random_player` is the uniform-random-legal baseline: a `NetworkPlayer` whose weights
  are all zero (so it shares the compiled program of a policy of the same shape).
* `GreedyPlayer` is the scripted baseline: a one-step reward-greedy player with a small
  heuristic value on top (see its docstring).
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int32, Key

from hm import game
from hm.game import constants as C
from hm.game import geometry
from hm.game.reward import exit_distance
from hm.tools.policy import act, uniform_network
from hm.train.network import Network


class AbstractPlayer(eqx.Module):
    """Something that chooses actions for a batch of games."""

    @abc.abstractmethod
    def choose(self, states: game.GameState, obs: Float[Array, "n obs"], mask: Bool[Array, "n actions"],
               key: Key[Array, ""]) -> Int32[Array, " n"]:
        """One legal action per game.

        Args:
            states: the games, batched (leading axis n).
            obs: their flat observations.
            mask: their legal actions (`hm.game.legal_actions`).
            key: this step's randomness for the player's own use; independent of the
                key the environment steps with.
        """


class NetworkPlayer(AbstractPlayer):
    """A trained actor-critic: samples its masked policy, or plays the likeliest action."""

    network: Network
    greedy: Bool[Array, ""]      # an array, so sampling and greedy play share one program
    precision: str = eqx.field(static=True, default="f32")   # compute precision (hm.train.precision)

    def choose(self, states, obs, mask, key):
        del states
        action, _, _ = act(self.network, obs, mask, jax.random.uniform(key, obs.shape[:1]), self.greedy,
                           self.precision)
        return action


def random_player(like: Network | None = None) -> NetworkPlayer:
    """The uniform-random-legal baseline, as a network of `like`'s shape (see `uniform_network`)."""
    return NetworkPlayer(network=uniform_network(like), greedy=jnp.asarray(False))


_MANHATTAN = geometry.MANHATTAN.astype(np.int32)


class GreedyPlayer(AbstractPlayer):
    """The scripted baseline: the legal action with the best immediate reward plus a
    heuristic value of the state it leads to.

    Every legal action is tried on a copy of the game (`hm.game.step` on 28 copies, one
    batch) and scored

        reward of the step + value(state after), value = 0 when the game ended, else
            − `distance_weight` × exit distance
            − `threat_weight` × enemies next to the player that can act next turn.

    The reward already pays for approaching the exit, siphoning, picking up, killing,
    and charges for damage and death, but a pure one-step player (both weights 0) picks
    at random among the actions that pay nothing (when a block or an enemy is in the way
    of the exit, say). The exit distance makes it head for the exit through those ties
    (0.01 per cell, a fifth of what the reward pays for a step closer), and the threat
    term makes it step away from, or attack, the enemies that would hit it on the next
    enemy phase, which the one simulated phase does not yet show. On 256 games
    (docs/evaluation.md) the pure one-step player reaches a mean highest stage of 2.60,
    this one 3.55, uniform random play 1.21.

    Randomness: the simulated steps draw their enemy phase (activation order, new
    transmissions) and program effects from the player's own key, never from the key
    the real step will use: it cannot see the future, only sample it as any player
    could. All 28 trials of a game share that one key (common random numbers), so they
    differ by the action alone. Exact ties (equal scores) go to a uniformly random one
    among them, from a second key.
    """

    distance_weight: float = eqx.field(static=True, default=0.01)
    threat_weight: float = eqx.field(static=True, default=0.5)

    def scores(self, states: game.GameState, mask: Bool[Array, "n actions"], key: Key[Array, ""]
               ) -> Float[Array, "n actions"]:
        """Every action's score in every game (−inf where it is illegal)."""
        n, actions = mask.shape
        # One flat batch of n × 28 trials: nested vmaps would turn the game's batch-level
        # skips (`hm.game.batching`) into selects that run every branch.
        trials = jax.tree.map(lambda x: jnp.repeat(x, actions, axis=0), states)
        action = jnp.tile(jnp.arange(actions, dtype=jnp.int32), n)
        keys = jnp.repeat(jax.random.split(key, n), actions, axis=0)
        after, _, reward, done, _ = jax.vmap(game.step)(trials, action, keys)
        score = reward + jnp.where(done, 0.0, jax.vmap(self.value)(after))
        return jnp.where(mask, score.reshape(n, actions), -jnp.inf)

    def value(self, state: game.GameState) -> Float[Array, ""]:
        """The heuristic value of a game still running (see the class docstring)."""
        here = state.player.row * C.COLS + state.player.col
        e = state.enemies
        cells = e.row.astype(jnp.int32) * C.COLS + e.col.astype(jnp.int32)
        threats = jnp.sum(e.alive & (e.disabled == 0) & (jnp.asarray(_MANHATTAN)[cells, here] == 1),
                          dtype=jnp.int32)
        distance = exit_distance(state.board, here)
        return (-self.distance_weight * distance.astype(jnp.float32)
                - self.threat_weight * threats.astype(jnp.float32))

    def choose(self, states, obs, mask, key):
        del obs
        trial_key, tie_key = jax.random.split(key)
        score = self.scores(states, mask, trial_key)
        best = score >= jnp.max(score, axis=-1, keepdims=True)
        # A uniform draw per action picks uniformly among the best (mask keeps it legal).
        draw = jax.random.uniform(tie_key, mask.shape)
        return jnp.argmax(jnp.where(best & mask, draw, -1.0), axis=-1).astype(jnp.int32)
