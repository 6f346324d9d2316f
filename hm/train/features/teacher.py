"""The teacher: kickstarting from a scripted player (Schmitt et al., 2018).

`teacher_coef` > 0 adds to the loss that coefficient times the cross-entropy between
the policy and a scripted teacher's action, on the states the agent itself visits. The
coefficient falls linearly to 0 at `teacher_steps` env steps (by default 2/5 of the
run), after which the teacher is no longer run and training is plain PPO. The teacher
labels one env slot in every `teacher_every` (by default 8, or the largest divisor of 8
that divides each device's env slots); labelling simulates every legal action of the
game, so a label costs about 28 env steps. The agent always acts by its own policy.

The teacher is the greedy scripted player of `bin/evaluate --baseline greedy`
(`hm.players.greedy`), which plays HackMatrix's game states; tests give other teachers
(`Teacher(policy=...)`). docs/results.md has the evidence for the defaults.
"""

import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int32, Key, UInt32

from hm import game
from hm.players import greedy
from hm.train import distributions, ppo
from hm.train.checks import ConfigError, any_member_above_zero, auto_every, check_every, check_float, check_int
from hm.train.features.base import Feature, Hyper

# The teacher labels one env slot in this many unless `teacher_every` says otherwise.
TEACHER_EVERY = 8
# By default the teacher's weight reaches 0 at this share of the run's env steps.
TEACHER_SHARE = 0.4
# The teacher draws its randomness from each step's key folded with this (a stream of its
# own: the agent's actions and the env's steps keep the keys they have without a teacher).
TEACHER_STREAM = 0x7EAC


@dataclasses.dataclass(frozen=True)
class TeacherConfig:
    """The teacher's fields of `TrainConfig` (see the module docstring)."""

    # weight of the cross-entropy to the teacher's action; 0: no teacher
    teacher_coef: float = 1.0
    # env steps at which the weight reaches 0; None: 2/5 of total_timesteps
    teacher_steps: int | None = None
    # the teacher labels env slots 0, k, 2k, ... (global index); None: 8, or the largest
    # divisor of 8 that divides each device's env slots
    teacher_every: int | None = None


SWEEPABLE = ("teacher_coef",)


def used(config) -> bool:
    """Whether any member trains with a teacher (`teacher_coef` > 0, or swept)."""
    return any_member_above_zero(config, "teacher_coef")


def auto_teacher_steps(total_timesteps: int) -> int:
    """`TEACHER_SHARE` of the run, at least 1."""
    return max(1, round(TEACHER_SHARE * total_timesteps))


def validate(config, devices: int) -> None:
    check_float(config, "teacher_coef", 0.0, None)
    check_int(config, "teacher_steps", 1, optional=True)
    check_int(config, "teacher_every", 1, optional=True)
    if used(config):
        check_every(config, "teacher_every", devices)


def resolve(config, devices: int) -> tuple[dict, list[str]]:
    """The concrete `teacher_steps` and `teacher_every`, and which of them were automatic."""
    fields, auto = {}, []
    if config.teacher_steps is None:
        fields["teacher_steps"] = auto_teacher_steps(config.total_timesteps)
        auto.append("teacher_steps")
    if config.teacher_every is None:
        fields["teacher_every"] = auto_every(config, devices, TEACHER_EVERY)
        auto.append("teacher_every")
    return fields, auto


def teacher_weight(coef: Float[Array, "*P"], env_steps: UInt32[Array, "2"], teacher_steps: int) -> Float[Array, "*P"]:
    """The teacher's weight after `env_steps` env steps: `coef`, falling linearly to 0
    at `teacher_steps`."""
    done = env_steps[1].astype(jnp.float32) * 2.0**32 + env_steps[0].astype(jnp.float32)
    return coef * jnp.clip(1.0 - done / teacher_steps, 0.0, 1.0)


def greedy_teacher(states: game.GameState, mask: Bool[Array, "n actions"], keys: Key[Array, " n"]) -> Int32[Array, " n"]:
    """The greedy scripted player's action in each game, game i's randomness from `keys[i]`."""
    return greedy.choose_each(states, mask, keys)


def check(env, config) -> None:
    """Refuse the greedy teacher for an env whose games are not HackMatrix's.

    Raises:
        ConfigError: naming `--teacher-coef`.
    """
    from hm.train.vector import game_shapes

    if used(config) and not isinstance(game_shapes(env), game.GameState):
        raise ConfigError("--teacher-coef", f"--teacher-coef: the greedy teacher plays HackMatrix; "
                                            f"{type(env).__name__} has no such teacher; use --teacher-coef 0 "
                                            "(or --config plain)")


class Teacher(Feature):
    """Labels one slot in `every` with the teacher's action; adds the weighted
    cross-entropy to it to the loss. `policy(states, mask, keys)` is the teacher."""

    teacher_steps: int = eqx.field(static=True)
    every: int = eqx.field(static=True)
    policy: Callable = eqx.field(static=True, default=greedy_teacher)

    def anneal(self, hyper: Hyper, env_steps: UInt32[Array, "2"]) -> Hyper:
        return {**hyper, "teacher_coef": teacher_weight(hyper["teacher_coef"], env_steps, self.teacher_steps)}

    def labels(self, learner, params, envs, keys, t, hyper) -> dict[str, Array]:
        """The teacher's action on the slots it labels (global index a multiple of
        `every`), -1 on the others; all -1, without running the teacher, once every
        member's (annealed) weight is 0."""
        members, n, every = learner.members, learner.local_envs, self.every
        none = jnp.full((members, n), -1, jnp.int32)

        def label():
            step_keys = jax.vmap(lambda key: jax.random.fold_in(jax.random.fold_in(key, t), TEACHER_STREAM))(keys)
            # `every` divides the slots of each device, so local slot i is labelled
            # exactly when its global index is.
            pick = lambda x: x[:, ::every]  # noqa: E731
            flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
            states = jax.tree.map(lambda x: flat(pick(x)), envs.state)
            label_keys = flat(pick(learner.per_env_keys(step_keys)))
            actions = self.policy(states, flat(pick(envs.mask)), label_keys)
            return none.at[:, ::every].set(actions.reshape(members, -1))

        action = lax.cond(jnp.any(hyper["teacher_coef"] > 0), label, lambda: none)
        return {"teacher_action": action}

    def loss(self, logits, batch, hyper, axis_name):
        """`teacher_coef` × the policy's cross-entropy to the teacher's action, averaged
        over the samples the teacher labelled (over the global minibatch; 0 when it
        labelled none), and the metrics: the cross-entropy and the share of labels where
        the policy's likeliest action is the teacher's.

        Like PPO's terms it is this device's share: its sum over the local labelled
        samples, divided by the global labelled share times the local batch, so that the
        gradients' `pmean` over devices is the gradient of the global mean.
        """
        teacher_action = batch.extras["teacher_action"]
        taught = teacher_action >= 0
        # an unlabelled sample scores the action it took (any legal action would do: the
        # teacher's -1 is not an action, and `where` discards the value)
        target = jnp.where(taught, teacher_action, batch.action)
        cross_entropy = -distributions.log_prob(logits, batch.mask, target)
        share = lax.stop_gradient(jnp.maximum(ppo.mean(taught.astype(jnp.float32), axis_name), 1e-12))
        loss = jnp.mean(jnp.where(taught, cross_entropy, 0.0)) / share
        likeliest = jnp.argmax(jnp.where(batch.mask, logits.astype(jnp.float32), -jnp.inf), axis=-1)
        agreement = jnp.mean((taught & (likeliest == teacher_action)).astype(jnp.float32)) / share
        return hyper["teacher_coef"] * loss, {"loss/teacher": loss, "teacher/agreement": agreement}

    def metrics(self, params, hyper):
        return {"teacher/coef": hyper["teacher_coef"]}


def build(env, config, axis_name: str | None, policy: Callable | None = None) -> Teacher | None:
    """The teacher, or None when no member has one. `policy` None: the greedy player,
    which needs HackMatrix's games (`check`)."""
    del axis_name
    if not used(config):
        return None
    if policy is None:
        check(env, config)
        policy = greedy_teacher
    return Teacher(teacher_steps=config.teacher_steps, every=config.teacher_every, policy=policy)
