"""What a training feature is: one optional part of the learner, with its hooks.

A feature's module owns its config fields (a dataclass mixin of
`hm.train.config.TrainConfig`), the hyper-parameters it reads as traced values (its
`SWEEPABLE`: a population may sweep them), the concrete values of its automatic fields
(`resolve`), their checks (`validate`), and the feature itself: what it stores with each rollout step, its loss term and its metrics. The learner
(`hm.train.learner`) calls every active feature's hooks at fixed points of an update:

    anneal(hyper, env_steps)          at the update's start: its traced values now
    rollout step t:
        labels(learner, params, envs, keys, t, hyper)   what it stores with the step (dict)
        reward(reward, before, out, hyper)         the reward the learner maximises
    after the rollout (per member):
        before_epochs(params, targets, hyper, update)   e.g. PopArt's statistics
    every minibatch step (per member, inside the gradient):
        loss(logits, batch, hyper, axis_name)      a term added to PPO's loss, and metrics
    metrics(params, hyper)            per-update metrics (per member)

Each hook's default does nothing. A module's `build` returns None for a config that
does not use its feature, so an unused feature adds nothing to the compiled program. To add a
feature: one module in `hm/train/features/` with its config mixin and `Feature`
subclass, listed in `hm.train.features`, and its test.
"""

from typing import Any

import equinox as eqx
from jaxtyping import Array, Float, Int32, Key, UInt32

# Each member's traced values by config field name ([P] arrays; numpy on the host)
Hyper = dict[str, Any]


class Feature(eqx.Module):
    """One optional part of training (see the module docstring)."""

    def anneal(self, hyper: Hyper, env_steps: UInt32[Array, "2"]) -> Hyper:
        """`hyper` at the start of an update after `env_steps` env steps."""
        del env_steps
        return hyper

    def labels(self, learner: Any, params: Any, envs: Any, keys: Key[Array, " P"], t: Int32[Array, ""],
               hyper: Hyper) -> dict[str, Array]:
        """Arrays [P, n, ...] to store with rollout step `t` (`params` the members' networks
        as the rollout runs them, `envs` the slots before the step, `keys` each member's
        key of the step). They reach `loss` as `batch.extras`."""
        del learner, params, envs, keys, t, hyper
        return {}

    def reward(self, reward: Float[Array, "P n"], before: Any, out: Any, hyper: Hyper) -> Float[Array, "P n"]:
        """The learner's reward of a step: `reward` so far, `before` the slots before the
        step (`hm.train.vector.VecEnvState`), `out` the step (`StepOutput`)."""
        del before, out, hyper
        return reward

    def before_epochs(self, params: Any, targets: Float[Array, "T n"], hyper: Hyper,
                      update: Int32[Array, ""]) -> Any:
        """One member's network before its epochs (its value targets known)."""
        del targets, hyper, update
        return params

    def loss(self, logits: Float[Array, "B actions"], batch: Any, hyper: Hyper, axis_name: str | None
             ) -> tuple[Float[Array, ""] | None, dict[str, Float[Array, ""]]]:
        """A term added to one member's loss (None: none) and its metrics."""
        del logits, batch, hyper, axis_name
        return None, {}

    def metrics(self, params: Any, hyper: Hyper) -> dict[str, Float[Array, ""]]:
        """One member's metrics of an update."""
        del params, hyper
        return {}
