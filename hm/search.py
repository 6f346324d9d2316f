"""Planning with the exact simulator: Gumbel MuZero search over the real game (mctx).

`hm.game.step` is the search's model, so the tree holds real game states: nothing is
learned about the dynamics, and a plan is only as uncertain as the game's own randomness.
An evaluator gives each node its prior (logits over the 28 actions) and its value; the
reward of an edge is the game's, reweighted as the evaluator's value was trained
(`SearchReward`).

    from hm.search import Search, SearchReward, plan
    out = plan(evaluator, states, key, Search(num_simulations=32))
    out.action            # [n] the chosen actions
    out.policy            # [n, 28] the search's improved policy (the completed-Q target)
    out.visit_counts, out.qvalues, out.prior, out.value

`states` is a batch of `hm.game.GameState` (a leading axis; `hm.env` users pass
`env_state.game`, Gymnasium users `env.game_state()`). Evaluators: `hm.tools.players`
has a trained network's (`NetworkEvaluator`) and the planning baseline's, a uniform prior
with the greedy player's heuristic value (`HeuristicEvaluator`); any `AbstractEvaluator`
works.

What the tree does (docs/search.md has the reasons and the measurements):

* The search is `mctx.gumbel_muzero_policy`. Each edge is expanded once, by a
  `hm.game.step` whose randomness (enemy activation order, new transmissions, program
  effects) is drawn from the search's own key, never from the key the real step will
  use: the player samples the future, it does not see it.
* Legal actions only: the root masks illegal actions (`invalid_actions`), and inside the
  tree their logits are `ILLEGAL_LOGIT`, which Gumbel's interior selection never picks
  (a legal action always scores higher).
* A node whose game has ended (won, died) has value 0 and discount 0, and so has any
  node below it, whatever action reaches it: the reward stops at the end of the game.
* Q-values are normalised by `mctx.qtransform_completed_by_mix_value`, whose min-max
  rescaling maps the Q-values' span onto [0, 1]. `Search.q_span` is the least span it
  divides by (mctx's `epsilon`, 1e-8 there): with a span in reward units, differences
  smaller than it move the choice only in proportion, instead of being stretched to the
  whole scale.
* A node still running adds to the evaluator's value `distance_weight` per cell it
  stands closer to the exit than the root does (less, per cell farther): a trained
  critic's value hardly changes from one cell to the next on a quiet board, and without
  this pull a search that kept the player alive often went round in circles instead of
  leaving the stage. It is a function of the state, not a reward, so no loop of moves
  can farm it; measured from the root's distance, it is 0 where the player stands, so an
  ended game (value 0) is not made to look better than standing still.
* `root_searches` K > 1 runs K independent searches of the same root (K × the
  simulations) and plays the likeliest action of their mean improved policy: a second
  way to average over the enemy phase's randomness.

Memory: mctx stores one game state per node, `num_simulations + 1` nodes per search
(`state_bytes` measures a state: about 9.7 KB).
"""

import abc
import functools
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import mctx
import numpy as np
from jaxtyping import Array, Bool, Float, Int32, PRNGKeyArray

from hm import game
from hm.game import constants as C
from hm.game.actions import player_cell
from hm.game.reward import exit_distance

ILLEGAL_LOGIT = -1e9
# The least Q span the normalisation stretches to [0, 1], in reward units, and the leaf
# value's cost per cell of exit distance (docs/journal/2026-12-02-search-at-play.md).
DEFAULT_Q_SPAN = 1.0
DEFAULT_DISTANCE_WEIGHT = 0.05


class AbstractEvaluator(eqx.Module):
    """The prior and the value of a batch of game states, for the search's nodes."""

    @abc.abstractmethod
    def __call__(self, states: game.GameState, obs: Float[Array, "n obs"]
                 ) -> tuple[Float[Array, "n actions"], Float[Array, " n"]]:
        """`(prior logits, value)` of each state (a leading axis n); `obs` are their
        flat observations. Illegal actions are masked by the search, not here."""


class SearchReward(eqx.Module):
    """The reward of a search edge: the game's reward terms (`C.REWARD_TERMS`) weighted
    by `term_weights`, plus `program_bonus` × the change in the programs owned.

    Set these as the evaluator's value was trained (a policy's training config:
    `hm.tools.players.reward_of_config`), so that reward and value add up. All weights 1
    and no bonus is the game's own reward, bit for bit.
    """

    term_weights: Float[Array, " terms"]
    program_bonus: Float[Array, ""]

    def __init__(self, term_weights: Mapping[str, float] | None = None, program_bonus: float | Float[Array, ""] = 0.0):
        weights = dict(term_weights or {})
        if unknown := sorted(set(weights) - set(C.REWARD_TERMS)):
            raise ValueError(f"SearchReward: unknown reward terms {unknown}; the terms are {list(C.REWARD_TERMS)}")
        self.term_weights = jnp.asarray([weights.get(name, 1.0) for name in C.REWARD_TERMS], jnp.float32)
        self.program_bonus = jnp.asarray(program_bonus, jnp.float32)

    def __call__(self, before: game.GameState, after: game.GameState, reward: Float[Array, ""],
                 terms: Float[Array, " terms"]) -> Float[Array, ""]:
        """The edge's reward from one game's step (`reward` and `terms` from `hm.game.step`)."""
        reweighted = reward + jnp.sum((self.term_weights - 1.0) * terms)
        gained = (game.programs_owned(after) - game.programs_owned(before)).astype(jnp.float32)
        return reweighted + self.program_bonus * gained


class Node(eqx.Module):
    """What the tree stores per node (batched): the game, whether it has ended, and the
    root's exit distance (the zero of the distance pull)."""

    state: game.GameState
    ended: Bool[Array, ""]
    root_distance: Float[Array, ""]


class SearchOutput(eqx.Module):
    """One search of each game of a batch (a leading axis n)."""

    action: Int32[Array, " n"]                 # the action to play
    policy: Float[Array, "n actions"]          # the improved policy: softmax(prior logits + completed Q)
    visit_counts: Int32[Array, "n actions"]    # root children's visits
    qvalues: Float[Array, "n actions"]         # root children's Q (reward + discount × value); 0 unvisited
    prior: Float[Array, "n actions"]           # the evaluator's policy at the root, 0 on illegal actions
    prior_value: Float[Array, " n"]            # the evaluator's value of the root, before the search
    value: Float[Array, " n"]                  # the root's value after the search


def _step(reward: SearchReward, node: Node, action: Int32[Array, ""], key: PRNGKeyArray
          ) -> tuple[Node, Float[Array, " obs"], Float[Array, ""], Bool[Array, " actions"]]:
    """One edge of one game: the child node, its observation, the edge's reward, and
    the child's legal actions. Below a game's end nothing changes and nothing is paid."""
    after, obs, game_reward, done, info = game.step(node.state, action, key)
    terms = jnp.stack([info["reward_terms"][name] for name in C.REWARD_TERMS]).astype(jnp.float32)
    paid = reward(node.state, after, jnp.asarray(game_reward, jnp.float32), terms)
    after = jax.tree.map(lambda new, old: jnp.where(node.ended, old, new), after, node.state)
    child = Node(state=after, ended=node.ended | done, root_distance=node.root_distance)
    return child, obs.flat(), jnp.where(node.ended, 0.0, paid), game.legal_actions(after)


def _exit_distance(state: game.GameState) -> Float[Array, ""]:
    return exit_distance(state.board, player_cell(state)).astype(jnp.float32)


def _recurrent_fn(params: tuple[AbstractEvaluator, SearchReward, float | Float[Array, ""], float | Float[Array, ""]],
                  rng_key: PRNGKeyArray, action: Int32[Array, " n"], node: Node) -> tuple[mctx.RecurrentFnOutput, Node]:
    evaluator, reward, discount, distance_weight = params
    keys = jax.random.split(rng_key, action.shape[0])
    child, obs, paid, mask = jax.vmap(functools.partial(_step, reward))(node, action, keys)
    logits, value = evaluator(child.state, obs)
    value = value + distance_weight * (child.root_distance - jax.vmap(_exit_distance)(child.state))
    output = mctx.RecurrentFnOutput(
        reward=paid,
        discount=jnp.where(child.ended, 0.0, discount).astype(jnp.float32),
        prior_logits=jnp.where(mask, logits, ILLEGAL_LOGIT),
        value=jnp.where(child.ended, 0.0, value))
    return output, child


class Search(eqx.Module):
    """Gumbel MuZero search settings (every field static: one compiled program per setting).

    Call it as `search(evaluator, reward, states, key)`, or use `plan`.
    """

    num_simulations: int = eqx.field(static=True, default=32)
    max_num_considered_actions: int = eqx.field(static=True, default=16)
    gumbel_scale: float = eqx.field(static=True, default=1.0)   # 0: the root's top-k by prior, no noise
    discount: float = eqx.field(static=True, default=0.99)      # the learner's gamma
    q_span: float = eqx.field(static=True, default=DEFAULT_Q_SPAN)
    value_scale: float = eqx.field(static=True, default=0.1)    # mctx's σ scale
    maxvisit_init: float = eqx.field(static=True, default=50.0)
    root_searches: int = eqx.field(static=True, default=1)
    # a node still running gains this per cell it stands closer to the exit than the root
    distance_weight: float = eqx.field(static=True, default=DEFAULT_DISTANCE_WEIGHT)

    def __check_init__(self):
        checks = (("num_simulations", self.num_simulations >= 1, "at least 1"),
                  ("max_num_considered_actions", self.max_num_considered_actions >= 1, "at least 1"),
                  ("gumbel_scale", self.gumbel_scale >= 0, "at least 0"),
                  ("discount", 0 <= self.discount <= 1, "in [0, 1]"),
                  ("q_span", self.q_span > 0, "above 0"),
                  ("value_scale", self.value_scale > 0, "above 0"),
                  ("maxvisit_init", self.maxvisit_init >= 0, "at least 0"),
                  ("root_searches", self.root_searches >= 1, "at least 1"),
                  ("distance_weight", self.distance_weight >= 0, "at least 0"))
        for name, ok, span in checks:
            if not ok:
                raise ValueError(f"Search.{name} must be {span}, got {getattr(self, name)}")

    def settings(self) -> dict[str, float | int]:
        """The settings, JSON-able (evaluation reports record them)."""
        return {name: getattr(self, name) for name in (
            "num_simulations", "max_num_considered_actions", "gumbel_scale", "discount", "q_span",
            "value_scale", "maxvisit_init", "root_searches", "distance_weight")}

    def __call__(self, evaluator: AbstractEvaluator, reward: SearchReward, states: game.GameState,
                 key: PRNGKeyArray) -> SearchOutput:
        """Search each game of `states` (a leading axis n); `key` is the search's own."""
        n = states.stage.shape[0]
        k = self.root_searches
        if k > 1:
            states = jax.tree.map(lambda x: jnp.concatenate([x] * k, axis=0), states)
        obs = jax.vmap(lambda s: game.observe(s).flat())(states)
        mask = jax.vmap(game.legal_actions)(states)
        logits, value = evaluator(states, obs)
        logits = jnp.where(mask, logits, ILLEGAL_LOGIT)
        ended = states.won | (states.player.hp <= 0)
        root = mctx.RootFnOutput(prior_logits=logits, value=jnp.where(ended, 0.0, value),
                                 embedding=jax.vmap(Node)(states, ended, jax.vmap(_exit_distance)(states)))
        qtransform = functools.partial(mctx.qtransform_completed_by_mix_value, value_scale=self.value_scale,
                                       maxvisit_init=self.maxvisit_init, epsilon=self.q_span)
        # mctx mixes int32 visit counts with float32 values, which `hm`'s tests (strict
        # dtype promotion) would refuse; its code is run under the standard rules
        with jax.numpy_dtype_promotion("standard"):
            out = mctx.gumbel_muzero_policy(
                params=(evaluator, reward, self.discount, self.distance_weight), rng_key=key, root=root, recurrent_fn=_recurrent_fn,
                num_simulations=self.num_simulations, invalid_actions=~mask, qtransform=qtransform,
                max_num_considered_actions=self.max_num_considered_actions, gumbel_scale=self.gumbel_scale)
            summary = out.search_tree.summary()
        visits = out.search_tree.children_visits[:, mctx.Tree.ROOT_INDEX].astype(jnp.int32)
        prior = jnp.where(mask, jax.nn.softmax(logits, axis=-1), 0.0)
        result = SearchOutput(action=out.action.astype(jnp.int32), policy=out.action_weights,
                              visit_counts=visits, qvalues=jnp.where(visits > 0, summary.qvalues, 0.0),
                              prior=prior, prior_value=value, value=summary.value)
        if k == 1:
            return result
        return _merge(jax.tree.map(lambda x: x.reshape((k, n) + x.shape[1:]), result), mask[:n])


def _merge(runs: SearchOutput, mask: Bool[Array, "n actions"]) -> SearchOutput:
    """K searches of the same roots (a leading axis K) as one: their mean improved policy,
    its likeliest legal action, the summed visits and the visit-weighted Q-values."""
    policy = jnp.mean(runs.policy, axis=0)
    visits = jnp.sum(runs.visit_counts, axis=0)
    weighted = jnp.sum(runs.qvalues * runs.visit_counts.astype(jnp.float32), axis=0)
    action = jnp.argmax(jnp.where(mask, policy, -1.0), axis=-1).astype(jnp.int32)
    return SearchOutput(action=action, policy=policy, visit_counts=visits,
                        qvalues=jnp.where(visits > 0, weighted / jnp.maximum(visits, 1).astype(jnp.float32), 0.0),
                        prior=runs.prior[0], prior_value=runs.prior_value[0], value=jnp.mean(runs.value, axis=0))


@eqx.filter_jit
def plan(evaluator: AbstractEvaluator, states: game.GameState, key: PRNGKeyArray,
         search: Search = Search(), reward: SearchReward | None = None) -> SearchOutput:
    """Search each game of `states` and return the actions to play.

    `states` is a batch (a leading axis), or one game (the output then has no batch axis
    either: `hm.gym`'s single env gives one). One compiled program per evaluator kind,
    search setting and batch size. `reward` defaults to the game's own; pass the one the
    evaluator's value was trained on.
    """
    reward = SearchReward() if reward is None else reward
    if states.stage.ndim == 0:
        out = search(evaluator, reward, jax.tree.map(lambda x: x[None], states), key)
        return jax.tree.map(lambda x: x[0], out)
    return search(evaluator, reward, states, key)


def state_bytes(state: game.GameState) -> int:
    """Bytes of one unbatched game state: what each search node stores."""
    return int(sum(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(state)))
