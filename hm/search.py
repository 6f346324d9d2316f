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
  ended game (value 0) is not made to look better than standing still. A node on a later
  stage than the root's counts as at that exit (the whole pull): the next stage's exit
  is on another board, and measured there, leaving the stage looked worse than standing
  next to the exit whenever the new exit was farther than the old one had been.
* The pull doubles every `patience` moves the player has made on its stage (the root's
  count, so one weight per tree). A critic that fears a corner of the board can hold a
  search in a loop of two cells for hundreds of moves (each move's best is going back),
  and one that fears death can hold it in a loop of a step and UNDO for ever; the
  growing pull ends such loops: on a stage played at an ordinary pace it is a few
  tenths a cell, after a few hundred moves it outweighs any value the critic gives
  (so the player heads for the exit even at a risk: a game cut at the step limit ends
  where it stands, as a death would). The count is the
  caller's (`stage_moves`: an evaluation counts the moves it plays), since UNDO rewinds
  the game's own turn count and a loop through UNDO would stop the clock; without one,
  the game's turn stands in for it.
* An UNDO edge pays back the kills and pickups it brings back (`SearchReward.charge_undo`):
  the game pays them again when they are taken again, and a tree found that loop.
* `chance_samples` K > 1 draws each edge's step K times at its expansion and starts the
  edge's estimate at their mean (the tree keeps one child).
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
UNDO_ACTION = C.PROGRAM_ACTION_OFFSET + C.UNDO
# The least Q span the normalisation stretches to [0, 1], in reward units, the leaf
# value's cost per cell of exit distance, and the moves on a stage by which that cost
# doubles (docs/journal/2026-12-02-search-at-play.md, 2026-12-02-search-wandering.md,
# 2026-12-06-search-stalls.md).
DEFAULT_Q_SPAN = 1.0
DEFAULT_DISTANCE_WEIGHT = 0.05
DEFAULT_PATIENCE = 40.0
# the pull stops doubling here (2^24 times distance_weight: far above any value a critic gives)
MAX_DOUBLINGS = 24.0


class AbstractEvaluator(eqx.Module):
    """The prior and the value of a batch of game states, for the search's nodes."""

    @abc.abstractmethod
    def __call__(self, states: game.GameState, obs: Float[Array, "n obs"]
                 ) -> tuple[Float[Array, "n actions"], Float[Array, " n"]]:
        """`(prior logits, value)` of each state (a leading axis n); `obs` are their
        flat observations. Illegal actions are masked by the search, not here."""


class SearchReward(eqx.Module):
    """The reward of a search edge: the game's reward terms (`C.REWARD_TERMS`) weighted
    by `term_weights`, plus `program_bonus` × the change in the programs owned, less,
    on an UNDO edge with `charge_undo`, the kills and pickups it brings back.

    Set the weights as the evaluator's value was trained (a policy's training config:
    `hm.tools.players.reward_of_config`), so that reward and value add up. All weights 1,
    no bonus and no charge is the game's own reward, bit for bit.

    The charge: the game pays a kill per enemy or transmission removed and a pickup per
    pickup walked onto, and UNDO brings them back without taking the pay back (§9.10),
    so a tree can farm a loop of kill (or pickup) and UNDO, paid each time round. With
    `charge_undo`, an UNDO edge pays back the kill reward of each enemy and transmission
    it restores and the pickup reward of each pickup cell, weighted like the terms, so a
    loop nets nothing. The counts are net per kind of entity (enemies of each of the four
    types, transmissions of each type they hatch into): an UNDO that brings back a killed
    virus is charged for it even if it also takes away a transmission spawned, or a
    daemon hatched, since its snapshot. Only a kill and a spawn of the same kind and type
    between the snapshot and the UNDO still cancel out.
    """

    term_weights: Float[Array, " terms"]
    program_bonus: Float[Array, ""]
    charge_undo: bool = eqx.field(static=True)

    def __init__(self, term_weights: Mapping[str, float] | None = None, program_bonus: float | Float[Array, ""] = 0.0,
                 charge_undo: bool = True):
        weights = dict(term_weights or {})
        if unknown := sorted(set(weights) - set(C.REWARD_TERMS)):
            raise ValueError(f"SearchReward: unknown reward terms {unknown}; the terms are {list(C.REWARD_TERMS)}")
        self.term_weights = jnp.asarray([weights.get(name, 1.0) for name in C.REWARD_TERMS], jnp.float32)
        self.program_bonus = jnp.asarray(program_bonus, jnp.float32)
        self.charge_undo = charge_undo

    def __call__(self, before: game.GameState, after: game.GameState, action: Int32[Array, ""],
                 reward: Float[Array, ""], terms: Float[Array, " terms"]) -> Float[Array, ""]:
        """The edge's reward from one game's step of `action` (`reward` and `terms` from `hm.game.step`)."""
        reweighted = reward + jnp.sum((self.term_weights - 1.0) * terms)
        gained = (game.programs_owned(after) - game.programs_owned(before)).astype(jnp.float32)
        paid = reweighted + self.program_bonus * gained
        if not self.charge_undo:
            return paid
        weight = lambda name: self.term_weights[C.REWARD_TERMS.index(name)]
        restored = lambda count: jnp.sum(jnp.maximum(count(after) - count(before), 0)).astype(jnp.float32)
        entities = restored(_entities_by_kind)
        pickups = restored(lambda s: jnp.sum(s.board.content == C.PICKUP, dtype=jnp.int32))
        charge = weight("kills") * C.KILL_REWARD * entities + weight("pickup") * C.PICKUP_REWARD * pickups
        return paid - jnp.where(action == UNDO_ACTION, charge, 0.0)


def _entities_by_kind(state: game.GameState) -> Int32[Array, " kinds"]:
    """Live enemies of each type, then live transmissions of each type they hatch into."""
    count = lambda alive, kind: jnp.sum(alive[None, :] & (kind[None, :] == jnp.arange(C.NUM_ENEMY_TYPES, dtype=jnp.int8)[:, None]),
                                        axis=1, dtype=jnp.int32)
    return jnp.concatenate([count(state.enemies.alive, state.enemies.kind),
                            count(state.transmissions.alive, state.transmissions.kind)])


class Node(eqx.Module):
    """What the tree stores per node (batched): the game, whether it has ended, and its
    root's stage, exit distance (the zero of the distance pull) and pull per cell."""

    state: game.GameState
    ended: Bool[Array, ""]
    root_distance: Float[Array, ""]
    root_stage: Int32[Array, ""]
    pull_weight: Float[Array, ""]


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
    paid = reward(node.state, after, action, jnp.asarray(game_reward, jnp.float32), terms)
    after = jax.tree.map(lambda new, old: jnp.where(node.ended, old, new), after, node.state)
    child = eqx.tree_at(lambda n: (n.state, n.ended), node, (after, node.ended | done))
    return child, obs.flat(), jnp.where(node.ended, 0.0, paid), game.legal_actions(after)


def _exit_distance(state: game.GameState) -> Float[Array, ""]:
    return exit_distance(state.board, player_cell(state)).astype(jnp.float32)


def _pull(node: Node) -> Float[Array, ""]:
    """The distance pull's cells: how much closer to the root stage's exit the player of
    `node` stands than the root's; a node past the root's stage has reached that exit
    (distance 0; the next stage's exit is measured on another board)."""
    left = jnp.where(node.state.stage == node.root_stage, _exit_distance(node.state), 0.0)
    return node.root_distance - left


def _recurrent_fn(params: tuple[AbstractEvaluator, SearchReward, float | Float[Array, ""]],
                  rng_key: PRNGKeyArray, action: Int32[Array, " n"], node: Node, samples: int = 1
                  ) -> tuple[mctx.RecurrentFnOutput, Node]:
    """Expand one edge of each game.

    With `samples` K > 1 the edge's step is drawn K times (K enemy phases), and the tree
    keeps the first child below the edge. The edge's first estimate, reward + discount ×
    value, is then the mean over the K draws: the reward carries the other draws'
    difference from the first (later simulations below the edge refine the first child's
    value only)."""
    evaluator, reward, discount = params
    n = action.shape[0]
    keys = jax.random.split(rng_key, samples * n)
    repeat = lambda x: jnp.concatenate([x] * samples, axis=0)
    child, obs, paid, mask = jax.vmap(functools.partial(_step, reward))(
        jax.tree.map(repeat, node), repeat(action), keys)
    logits, value = evaluator(child.state, obs)
    value = jnp.where(child.ended, 0.0, value + child.pull_weight * jax.vmap(_pull)(child))
    gamma = jnp.where(child.ended, 0.0, discount).astype(jnp.float32)
    estimate = jnp.mean((paid + gamma * value).reshape(samples, n), axis=0)
    child, mask, logits, value, gamma, paid = jax.tree.map(lambda x: x[:n], (child, mask, logits, value, gamma, paid))
    output = mctx.RecurrentFnOutput(
        reward=paid if samples == 1 else estimate - gamma * value,
        discount=gamma,
        prior_logits=jnp.where(mask, logits, ILLEGAL_LOGIT),
        value=value)
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
    # draws of each edge's step (enemy phase) at its expansion, their estimates averaged
    chance_samples: int = eqx.field(static=True, default=1)
    # a node still running gains this per cell it stands closer to the exit than the root
    distance_weight: float = eqx.field(static=True, default=DEFAULT_DISTANCE_WEIGHT)
    # moves on a stage (the root's) by which the pull doubles; inf: it does not grow
    patience: float = eqx.field(static=True, default=DEFAULT_PATIENCE)

    def __check_init__(self):
        checks = (("num_simulations", self.num_simulations >= 1, "at least 1"),
                  ("max_num_considered_actions", self.max_num_considered_actions >= 1, "at least 1"),
                  ("gumbel_scale", self.gumbel_scale >= 0, "at least 0"),
                  ("discount", 0 <= self.discount <= 1, "in [0, 1]"),
                  ("q_span", self.q_span > 0, "above 0"),
                  ("value_scale", self.value_scale > 0, "above 0"),
                  ("maxvisit_init", self.maxvisit_init >= 0, "at least 0"),
                  ("root_searches", self.root_searches >= 1, "at least 1"),
                  ("chance_samples", self.chance_samples >= 1, "at least 1"),
                  ("distance_weight", self.distance_weight >= 0, "at least 0"),
                  ("patience", self.patience > 0, "above 0"))
        for name, ok, span in checks:
            if not ok:
                raise ValueError(f"Search.{name} must be {span}, got {getattr(self, name)}")

    def settings(self) -> dict[str, float | int]:
        """The settings, JSON-able (evaluation reports record them)."""
        return {name: getattr(self, name) for name in (
            "num_simulations", "max_num_considered_actions", "gumbel_scale", "discount", "q_span",
            "value_scale", "maxvisit_init", "root_searches", "chance_samples", "distance_weight",
            "patience")}

    def pull_weight(self, stage_moves: Int32[Array, " n"]) -> Float[Array, " n"]:
        """The distance pull per cell at each root: `distance_weight`, doubled every
        `patience` moves the player has made on its stage (at most MAX_DOUBLINGS times)."""
        doublings = jnp.minimum(stage_moves.astype(jnp.float32) / self.patience, MAX_DOUBLINGS)
        return self.distance_weight * jnp.exp2(doublings)

    def __call__(self, evaluator: AbstractEvaluator, reward: SearchReward, states: game.GameState,
                 key: PRNGKeyArray, stage_moves: Int32[Array, " n"] | None = None) -> SearchOutput:
        """Search each game of `states` (a leading axis n); `key` is the search's own.
        `stage_moves`: the moves each game has made on its current stage, counted by the
        caller (patience's clock, which UNDO cannot rewind); None: the game's turn."""
        n = states.stage.shape[0]
        stage_moves = states.turn if stage_moves is None else jnp.asarray(stage_moves, jnp.int32)
        k = self.root_searches
        if k > 1:
            states, stage_moves = jax.tree.map(lambda x: jnp.concatenate([x] * k, axis=0), (states, stage_moves))
        obs = jax.vmap(lambda s: game.observe(s).flat())(states)
        mask = jax.vmap(game.legal_actions)(states)
        logits, value = evaluator(states, obs)
        logits = jnp.where(mask, logits, ILLEGAL_LOGIT)
        ended = states.won | (states.player.hp <= 0)
        root = mctx.RootFnOutput(prior_logits=logits, value=jnp.where(ended, 0.0, value),
                                 embedding=jax.vmap(Node)(states, ended, jax.vmap(_exit_distance)(states),
                                                          states.stage.astype(jnp.int32), self.pull_weight(stage_moves)))
        qtransform = functools.partial(mctx.qtransform_completed_by_mix_value, value_scale=self.value_scale,
                                       maxvisit_init=self.maxvisit_init, epsilon=self.q_span)
        # mctx mixes int32 visit counts with float32 values, which `hm`'s tests (strict
        # dtype promotion) would refuse; its code is run under the standard rules
        with jax.numpy_dtype_promotion("standard"):
            out = mctx.gumbel_muzero_policy(
                params=(evaluator, reward, self.discount), rng_key=key, root=root,
                recurrent_fn=functools.partial(_recurrent_fn, samples=self.chance_samples),
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


def plan(evaluator: AbstractEvaluator, states: game.GameState, key: PRNGKeyArray,
         search: Search = Search(), reward: SearchReward | None = None,
         stage_moves: Int32[Array, "*n"] | None = None) -> SearchOutput:
    """Search each game of `states` and return the actions to play.

    `states` is a batch (a leading axis), or one game (the output then has no batch axis
    either: `hm.gym`'s single env gives one). One compiled program per evaluator kind,
    search setting and batch size. `reward` defaults to the game's own; pass the one the
    evaluator's value was trained on. `stage_moves`, the moves each game has made on its
    current stage, is patience's clock (`Search.__call__`); a caller that plays whole
    games should count them, since UNDO rewinds the game's turn, which stands in without.
    """
    reward = SearchReward() if reward is None else reward
    stage_moves = states.turn if stage_moves is None else jnp.asarray(stage_moves, jnp.int32)
    return _plan(evaluator, states, key, search, reward, stage_moves)


@eqx.filter_jit
def _plan(evaluator: AbstractEvaluator, states: game.GameState, key: PRNGKeyArray, search: Search,
          reward: SearchReward, stage_moves: Int32[Array, "*n"]) -> SearchOutput:
    if states.stage.ndim == 0:
        out = search(evaluator, reward, jax.tree.map(lambda x: x[None], states), key, stage_moves[None])
        return jax.tree.map(lambda x: x[0], out)
    return search(evaluator, reward, states, key, stage_moves)


def state_bytes(state: game.GameState) -> int:
    """Bytes of one unbatched game state: what each search node stores."""
    return int(sum(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(state)))
