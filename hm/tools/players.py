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
* `SearchPlayer` plans with the exact simulator (`hm.search`): Gumbel MuZero search
  with a network's prior and value (`NetworkEvaluator`), or, as the planning baseline
  that needs no training, a uniform prior and the greedy player's heuristic value
  (`HeuristicEvaluator`).
* `ProgramRule` wraps another player and bans programs or makes it run one whenever it
  can: the arms of `hm.tools.program_ablation`, which asks whether programs pay.
"""

import abc
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int32, Key

from hm import game, search
from hm.game import constants as C
from hm.players import greedy
from hm.tools.policy import act, uniform_network
from hm.train.config import TrainConfig
from hm.train.features.search_teacher import NetworkEvaluator as NetworkEvaluator  # the public home of the search players
from hm.train.network import Network


class AbstractPlayer(eqx.Module):
    """Something that chooses actions for a batch of games."""

    @abc.abstractmethod
    def choose(self, states: game.GameState, obs: Float[Array, "n obs"], mask: Bool[Array, "n actions"],
               key: Key[Array, ""], stage_moves: Int32[Array, " n"]) -> Int32[Array, " n"]:
        """One legal action per game.

        Args:
            states: the games, batched (leading axis n).
            obs: their flat observations.
            mask: their legal actions (`hm.game.legal_actions`).
            key: this step's randomness for the player's own use; independent of the
                key the environment steps with.
            stage_moves: the moves each game has made on its current stage, as the
                caller counts them (UNDO rewinds the game's own turn, not this count).
        """


class NetworkPlayer(AbstractPlayer):
    """A trained actor-critic: samples its masked policy, or plays the likeliest action."""

    network: Network
    greedy: Bool[Array, ""]      # an array, so sampling and greedy play share one program
    precision: str = eqx.field(static=True, default="f32")   # compute precision (hm.train.precision)

    def choose(self, states, obs, mask, key, stage_moves):
        del states, stage_moves
        action, _, _ = act(self.network, obs, mask, jax.random.uniform(key, obs.shape[:1]), self.greedy,
                           self.precision)
        return action


def random_player(like: Network | None = None) -> NetworkPlayer:
    """The uniform-random-legal baseline, as a network of `like`'s shape (see `uniform_network`)."""
    return NetworkPlayer(network=uniform_network(like), greedy=jnp.asarray(False))


class GreedyPlayer(AbstractPlayer):
    """The scripted baseline: the legal action with the best immediate reward plus a
    heuristic value of the state it leads to (`hm.players.greedy` has the rule, its
    weights and its randomness)."""

    distance_weight: float = eqx.field(static=True, default=greedy.DISTANCE_WEIGHT)
    threat_weight: float = eqx.field(static=True, default=greedy.THREAT_WEIGHT)

    def scores(self, states: game.GameState, mask: Bool[Array, "n actions"], key: Key[Array, ""]
               ) -> Float[Array, "n actions"]:
        """Every action's score in every game (−inf where it is illegal)."""
        return greedy.scores(states, mask, jax.random.split(key, mask.shape[0]),
                             self.distance_weight, self.threat_weight)

    def value(self, state: game.GameState) -> Float[Array, ""]:
        """The heuristic value of a game still running (`hm.players.greedy.value`)."""
        return greedy.value(state, self.distance_weight, self.threat_weight)

    def choose(self, states, obs, mask, key, stage_moves):
        del obs, stage_moves
        trial_key, tie_key = jax.random.split(key)
        score = self.scores(states, mask, trial_key)
        return greedy.best(score, mask, jax.random.uniform(tie_key, mask.shape))


class HeuristicEvaluator(search.AbstractEvaluator):
    """The planning baseline's evaluator: a uniform prior and the greedy player's
    heuristic value (`hm.players.greedy.value`), so search needs no training."""

    def __call__(self, states, obs):
        logits = jnp.zeros((obs.shape[0], C.NUM_ACTIONS), jnp.float32)
        return logits, jax.vmap(greedy.value)(states)


def reward_of_config(config: Mapping[str, Any] | None) -> search.SearchReward:
    """The reward a policy's critic was trained on, from its training config (reward
    weights and program bonus; a field left unset, or no config at all, is the default
    config's)."""
    config = config or {}
    defaults = TrainConfig()
    weights = config.get("reward_weights")
    weights = defaults.reward_weights if weights is None else weights
    bonus = config.get("program_bonus")
    bonus = defaults.program_bonus if bonus is None else bonus
    return search.SearchReward({name: float(weight) for name, weight in weights}, float(bonus))


class SearchPlayer(AbstractPlayer):
    """Plays the action that Gumbel MuZero search over the real game chooses
    (`hm.search`); the key it is given is the search's own."""

    evaluator: search.AbstractEvaluator
    reward: search.SearchReward
    search: search.Search

    def plan(self, states: game.GameState, key: Key[Array, ""], stage_moves: Int32[Array, " n"] | None = None
             ) -> search.SearchOutput:
        """The whole search output (visits, Q-values, prior) of each game; `stage_moves`
        is the search's patience clock (`hm.search.Search.__call__`)."""
        return self.search(self.evaluator, self.reward, states, key, stage_moves)

    def choose(self, states, obs, mask, key, stage_moves):
        del obs, mask   # the search masks illegal actions itself
        return self.plan(states, key, stage_moves).action


PROGRAM_RULES = ("ban", "eager")
# "as-is" leaves the mask alone: the arm that plays as the player itself does
RULES = ("as-is",) + PROGRAM_RULES


class ProgramRule(AbstractPlayer):
    """`inner` with a rule about programs (`hm.tools.program_ablation`).

    * "ban": the program actions are masked out (where nothing else is legal, the mask is
      left as it is, so there is always an action).
    * "eager": whenever some program is legal, only programs are; `inner` picks which.
    * "as-is": the mask is left alone, so it plays exactly as `inner` does.

    Until a program is first legal in a game the mask `inner` sees is the game's own, so
    the game is played exactly as `inner` plays it (same mask, same key). The rule is an
    array, not a static field, so the three rules of one `inner` share one compiled program.
    """

    inner: AbstractPlayer
    rule: Int32[Array, ""]

    def __init__(self, inner: AbstractPlayer, rule: str):
        if rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}; got {rule!r}")
        self.inner = inner
        self.rule = jnp.asarray(RULES.index(rule), jnp.int32)

    def choose(self, states, obs, mask, key, stage_moves):
        program = jnp.broadcast_to(jnp.arange(mask.shape[-1]) >= C.PROGRAM_ACTION_OFFSET, mask.shape)
        banned = mask & ~program
        banned = jnp.where(jnp.any(banned, axis=-1, keepdims=True), banned, mask)
        eager = jnp.where(jnp.any(mask & program, axis=-1, keepdims=True), mask & program, mask)
        allowed = jnp.select([self.rule == RULES.index("ban"), self.rule == RULES.index("eager")],
                             [banned, eager], mask)
        return self.inner.choose(states, obs, allowed, key, stage_moves)
