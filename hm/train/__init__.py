"""The PPO learner for HackMatrix: configuration, network, PPO pieces, fused program.

The run driver (`hm.train.run`, `bin/train`) uses this public API.
"""

from hm.train.config import ConfigError, Member, ResolvedConfig, TrainConfig, members, resolve, validate
from hm.train.envs import AbstractEnv, HackMatrixEnv, NullEnv
from hm.train.learner import (
    Hyper,
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
    "AbstractEnv", "ConfigError", "HackMatrixEnv", "Hyper", "Learner", "Member", "Network",
    "NullEnv", "ResolvedConfig", "TrainConfig", "TrainState", "abstract_train_state", "init",
    "make_hyper", "make_mesh", "make_train_fn", "maybe_initialize_distributed", "member_of",
    "members", "place_hyper", "reshard_for", "resolve",
    "to_global", "to_host", "total_env_steps", "train_state_shardings", "validate",
]
