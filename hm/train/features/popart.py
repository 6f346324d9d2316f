"""Value normalisation (PopArt: van Hasselt et al., 2016).

`value_norm` > 0 keeps running estimates of the value targets' mean and standard
deviation (in the value head's units: of h(targets) under `--value-transform sqrt`),
moved that share of the way to each update's batch (but at least 1/(updates done + 1),
so the first update takes its batch's statistics), and normalises
the critic by them (`hm.train.network.popart_update` rescales the value head so that
its values are unchanged). The value loss is measured in the normalised units
(`hm.train.ppo.loss`). 0 turns it off.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from hm.train import ppo
from hm.train.checks import any_member_above_zero, check_float
from hm.train.features.base import Feature
from hm.train.network import popart_update

SWEEPABLE = ("value_norm",)


@dataclasses.dataclass(frozen=True)
class PopArtConfig:
    """PopArt's field of `TrainConfig` (see the module docstring)."""

    # step of the value statistics per update, in [0, 1]; 0: off
    value_norm: float = 0.0


def used(config) -> bool:
    return any_member_above_zero(config, "value_norm")


def validate(config, devices: int) -> None:
    del devices
    check_float(config, "value_norm", 0.0, 1.0)


def resolve(config, devices: int) -> tuple[dict, list[str]]:
    """No automatic fields."""
    del config, devices
    return {}, []


class PopArt(Feature):
    """Moves the value statistics before each member's epochs."""

    axis_name: str | None = eqx.field(static=True)

    def before_epochs(self, params, targets, hyper, update):
        """Move the statistics towards this batch's targets (`ppo.value_statistics`) at
        rate `max(value_norm, 1 / (update + 1))`, and rescale the value head so that its
        values are unchanged. A member with `value_norm` 0 is left as it is."""
        step = hyper["value_norm"]
        rate = jnp.maximum(step, 1.0 / (update.astype(jnp.float32) + 1.0))
        shift, scale = ppo.value_statistics(params.head_units(targets), params.value_shift, params.value_scale, rate, self.axis_name)
        updated = popart_update(params, shift, scale)
        return jax.tree.map(lambda new, old: jnp.where(step > 0, new, old), updated, params)

    def metrics(self, params, hyper):
        return {"value/shift": params.value_shift, "value/scale": params.value_scale}


def build(env, config, axis_name: str | None) -> PopArt | None:
    del env
    return PopArt(axis_name=axis_name) if used(config) else None
