import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bench import bench_env


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
