"""The PPO learner: configuration, network, PPO pieces, training features, fused program.

It trains on any `hm.env.Environment` (by default `hm.env.HackMatrix`). The run driver
(`hm.train.run`, `bin/train`) uses this public API; docs/design.md has the layout.
"""

from hm.train.config import PRESETS, ConfigError, Member, ResolvedConfig, TrainConfig, members, resolve, validate
from hm.train.features import Feature, Hyper
from hm.train.learner import (
    Learner,
    TrainState,
    abstract_train_state,
    init,
    make_hyper,
    make_train_fn,
    member_of,
    place_hyper,
    reshard_for,
    total_env_steps,
    train_state_shardings,
)
from hm.train.mesh import make_mesh, maybe_initialize_distributed, to_global, to_host
from hm.train.network import Network

__all__ = [
    "PRESETS", "ConfigError", "Feature", "Hyper", "Learner", "Member", "Network", "ResolvedConfig",
    "TrainConfig", "TrainState", "abstract_train_state", "init",
    "make_hyper", "make_mesh", "make_train_fn", "maybe_initialize_distributed", "member_of",
    "members", "place_hyper", "reshard_for", "resolve",
    "to_global", "to_host", "total_env_steps", "train_state_shardings", "validate",
]
