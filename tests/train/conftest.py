"""Shared fixtures for the learner tests: tiny configurations compiled once."""

import pytest

from hm.train.config import TrainConfig, resolve


def tiny_config(**overrides) -> TrainConfig:
    """8 envs x 16 steps, hidden 32: compiles in seconds."""
    fields = dict(num_envs=8, num_steps=16, total_timesteps=8 * 16 * 4, hidden_dim=32,
                  updates_per_call=2, precision="f32")
    fields.update(overrides)
    return TrainConfig(**fields)


@pytest.fixture(scope="session")
def tiny_resolved():
    return resolve(tiny_config(), "cpu", 1)
