"""Shared by the run-level tests: a tiny run and the compilation cache they share."""

import dataclasses
from pathlib import Path

import jax
import pytest

from hm.train import PRESETS

# Plain PPO on NullEnv (no game to teach or to count programs in); 2 updates per call,
# 4 updates per run: two calls.
TINY = dataclasses.replace(
    PRESETS["plain"],
    network="mlp",
    num_envs=8,
    num_steps=8,
    total_timesteps=8 * 8 * 4,
    hidden_dim=16,
    num_layers=1,
    num_minibatches=2,
    update_epochs=1,
    updates_per_call=2,
    seed=3,
)


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory) -> Path:
    """The suite's persistent cache (tests/conftest.py) if set, else one for this session."""
    configured = jax.config.jax_compilation_cache_dir
    return Path(configured) if configured else tmp_path_factory.mktemp("jax-cache")
