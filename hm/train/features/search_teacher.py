"""The search teacher: expert iteration with Gumbel MuZero over the real game.

`search_coef` > 0 runs, on one env slot in every `search_every`, a Gumbel MuZero search
(`hm.search`, `mctx`) over the exact game with the learner's own network as prior and
value (`NetworkEvaluator`), and adds to the loss that coefficient times the cross-entropy
between the policy and the search's improved policy (the completed-Q target of Gumbel
AlphaZero: Danihelka et al., "Policy improvement by planning with Gumbel", 2022). The
teacher improves as the learner does, so by default its weight does not fall;
`search_steps` makes it fall linearly to 0 at that many env steps, as the greedy
teacher's does (`hm.train.features.teacher.teacher_weight`), after which nothing is
searched. The agent always acts by its own policy. The search's edges pay the learner's reward (the reward weights and
the member's program bonus, `hm.search.SearchReward`), so reward and value add up, unless
`search_program_bonus` gives the search a program bonus of its own (0: the search is not
paid for programs, the learner still is); its randomness comes from a key stream of its
own.

A label costs `search_simulations` game steps and network evaluations, so the teacher
slows training by about `search_simulations / search_every` env steps per env step.
It is off by default: it replaces the greedy teacher as the default only if it learns
better per wall-clock at equal env steps (docs/results.md).
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float, UInt32

from hm import game, search
from hm.train import distributions, ppo
from hm.train.checks import ConfigError, any_member_above_zero, auto_every, check_every, check_float, check_int
from hm.train.features.base import Feature, Hyper
from hm.train.features.teacher import teacher_weight
from hm.train.network import Network, evaluate

# The search draws its randomness from each step's key folded with this.
SEARCH_STREAM = 0x5EA5
SEARCH_EVERY = 8
SWEEPABLE = ("search_coef",)


@dataclasses.dataclass(frozen=True)
class SearchTeacherConfig:
    """The search teacher's fields of `TrainConfig` (see the module docstring)."""

    # weight of the cross-entropy to the search's improved policy; 0: off
    search_coef: float = 0.0
    # simulations of each search
    search_simulations: int = 8
    # the search labels env slots 0, k, 2k, ... (global index); None: 8, or the largest
    # divisor of 8 that divides each device's env slots
    search_every: int | None = None
    # env steps at which the weight reaches 0 (falling linearly); None: it does not fall
    search_steps: int | None = None
    # the program bonus the search's edges pay; None: the member's `program_bonus`
    search_program_bonus: float | None = None


class NetworkEvaluator(search.AbstractEvaluator):
    """An actor-critic as the search's prior (its logits) and value (its critic)."""

    network: Network
    precision: str = eqx.field(static=True, default="f32")

    def __call__(self, states, obs):
        del states
        return evaluate(self.network, obs, self.precision)


def used(config) -> bool:
    return any_member_above_zero(config, "search_coef")


def validate(config, devices: int) -> None:
    check_float(config, "search_coef", 0.0, None)
    check_int(config, "search_simulations", 1, 1024)
    check_int(config, "search_every", 1, optional=True)
    check_int(config, "search_steps", 1, optional=True)
    check_float(config, "search_program_bonus", 0.0, None, optional=True)
    if used(config):
        check_every(config, "search_every", devices)


def resolve(config, devices: int) -> tuple[dict, list[str]]:
    """The concrete `search_every`, and whether it was automatic."""
    if config.search_every is not None:
        return {}, []
    return {"search_every": auto_every(config, devices, SEARCH_EVERY)}, ["search_every"]


class SearchTeacher(Feature):
    """Labels one slot in `every` with the search's improved policy; adds the weighted
    cross-entropy to it to the loss."""

    every: int = eqx.field(static=True)
    settings: search.Search = eqx.field(static=True)
    term_weights: tuple[tuple[str, float], ...] = eqx.field(static=True)
    precision: str = eqx.field(static=True)
    search_steps: int | None = eqx.field(static=True, default=None)
    program_bonus: float | None = eqx.field(static=True, default=None)

    def anneal(self, hyper: Hyper, env_steps: UInt32[Array, "2"]) -> Hyper:
        if self.search_steps is None:
            return hyper
        return {**hyper, "search_coef": teacher_weight(hyper["search_coef"], env_steps, self.search_steps)}

    def search_reward(self, member_bonus: Float[Array, ""]) -> search.SearchReward:
        """What the search's edges pay: the learner's reward terms, and the member's program
        bonus unless `search_program_bonus` sets the search's own."""
        bonus = member_bonus if self.program_bonus is None else jnp.float32(self.program_bonus)
        return search.SearchReward(dict(self.term_weights), bonus)

    def labels(self, learner, params, envs, keys, t, hyper) -> dict[str, Array]:
        """`search_policy` [P, n, A]: the search's improved policy on the slots it labels
        (zeros elsewhere), and `search_labelled` [P, n]; nothing is searched once every
        member's `search_coef` is 0."""
        members, n, k = learner.members, learner.local_envs, self.every
        actions = learner.env.num_actions
        none = (jnp.zeros((members, n, actions), jnp.float32), jnp.zeros((members, n), bool))

        def label():
            step_keys = jax.vmap(lambda key: jax.random.fold_in(jax.random.fold_in(key, t), SEARCH_STREAM))(keys)
            # `k` divides the slots of each device; each device's slots get keys of their own
            step_keys = jax.vmap(lambda key: jax.random.fold_in(key, learner.env_ids()[0]))(step_keys)
            states = jax.tree.map(lambda x: x[:, ::k], envs.state)

            def member(network, games, key, bonus):
                evaluator = NetworkEvaluator(network, self.precision)
                return search.plan(evaluator, games, key, self.settings, self.search_reward(bonus)).policy

            policy = jax.vmap(member)(params, states, step_keys, hyper["program_bonus"])
            return none[0].at[:, ::k].set(policy.astype(jnp.float32)), none[1].at[:, ::k].set(True)

        policy, labelled = lax.cond(jnp.any(hyper["search_coef"] > 0), label, lambda: none)
        return {"search_policy": policy, "search_labelled": labelled}

    def loss(self, logits, batch, hyper: Hyper, axis_name):
        """`search_coef` × the cross-entropy from the search's policy to the learner's,
        averaged over the labelled samples of the global minibatch (0 when none was)."""
        target: Float[Array, "B actions"] = batch.extras["search_policy"]
        labelled = batch.extras["search_labelled"]
        log_p = distributions.log_probs(logits, batch.mask)
        cross_entropy = -jnp.sum(jnp.where(target > 0, target * log_p, 0.0), axis=-1)
        share = lax.stop_gradient(jnp.maximum(ppo.mean(labelled.astype(jnp.float32), axis_name), 1e-12))
        loss = jnp.mean(jnp.where(labelled, cross_entropy, 0.0)) / share
        likeliest = jnp.argmax(jnp.where(batch.mask, logits.astype(jnp.float32), -jnp.inf), axis=-1)
        agreement = jnp.mean((labelled & (likeliest == jnp.argmax(target, axis=-1))).astype(jnp.float32)) / share
        return hyper["search_coef"] * loss, {"loss/search": loss, "search/agreement": agreement}

    def metrics(self, params, hyper):
        return {"search/coef": hyper["search_coef"]}


def build(env, config, axis_name: str | None) -> SearchTeacher | None:
    """The search teacher, or None when no member has one.

    Raises:
        ConfigError: for an env whose games are not HackMatrix's (`--search-coef`).
    """
    from hm.train.vector import game_shapes

    del axis_name
    if not used(config):
        return None
    if not isinstance(game_shapes(env), game.GameState):
        raise ConfigError("--search-coef", f"--search-coef: the search plans over HackMatrix's games; "
                                           f"{type(env).__name__} has none; use --search-coef 0")
    settings = search.Search(num_simulations=config.search_simulations,
                             max_num_considered_actions=min(16, env.num_actions), discount=config.gamma)
    return SearchTeacher(every=config.search_every, settings=settings, term_weights=tuple(config.reward_weights),
                         precision=config.precision, search_steps=config.search_steps,
                         program_bonus=config.search_program_bonus)
