import json

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

from bench import bench_env

NUM_ACTIONS = 28
sample = jax.jit(bench_env.sample_legal_action)
masks = st.lists(st.booleans(), min_size=NUM_ACTIONS, max_size=NUM_ACTIONS).filter(any)


@given(mask=masks, u=st.floats(0.0, 1.0, exclude_max=True, width=32))
def test_sampled_action_is_legal(mask, u):
    action = sample(jnp.array(mask), jnp.float32(u))
    assert action.dtype == jnp.int32 and action.shape == ()
    assert mask[int(action)]


@given(mask=masks)
def test_each_legal_action_owns_an_equal_share_of_the_unit_interval(mask):
    # Inverse CDF: the k-th legal action for u in [k/n, (k+1)/n), so the draw is uniform.
    legal = np.flatnonzero(mask)
    n = len(legal)
    u = jnp.array([(k + 0.5) / n for k in range(n)] + [0.0, np.nextafter(1.0, 0.0)], jnp.float32)
    actions = jax.vmap(sample, in_axes=(None, 0))(jnp.array(mask), u)
    np.testing.assert_array_equal(actions, np.concatenate([legal, legal[[0, -1]]]))


def test_no_legal_action_gives_action_zero():
    assert int(sample(jnp.zeros(NUM_ACTIONS, bool), jnp.float32(0.7))) == 0


def test_replace_finished_swaps_only_finished_games():
    done = jnp.array([True, False, True])
    stepped = {"hp": jnp.array([1, 2, 3], jnp.int32), "cells": jnp.zeros((3, 36), jnp.int8)}
    fresh = {"hp": jnp.array([7, 8, 9], jnp.int32), "cells": jnp.ones((3, 36), jnp.int8)}

    games = jax.vmap(bench_env.replace_finished)(done, stepped, fresh)

    np.testing.assert_array_equal(games["hp"], [7, 2, 9])
    np.testing.assert_array_equal(games["cells"][:, 0], [1, 0, 1])
    assert games["cells"].dtype == jnp.int8


@pytest.mark.slow
def test_benchmark_runs_on_the_engine(tmp_path):
    out = tmp_path / "env.jsonl"
    flags = ["--num-envs", "4", "--num-steps", "3", "--repeats", "1", "--out", str(out)]

    result = bench_env.main(bench_env.Args(underscores_to_dashes=True).parse_args(flags))

    assert json.loads(out.read_text()) == result
    assert result["config"] == {"num_envs": 4, "num_steps": 3, "devices": 1}
    assert result["metrics"]["steps_per_s"] > 0
