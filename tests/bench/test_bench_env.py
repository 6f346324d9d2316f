"""`bench_env` and `bench_env_loop`, in one file: `bench_env_loop --compare-pool` times
`bench_env`'s own compiled call, so on 4 games and 3 steps the tests here share their
programs (the persistent compilation cache gives them to whichever test runs second)."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bench import bench_env, bench_env_loop


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


@pytest.mark.slow
def test_benchmark_runs_the_plain_loop_beside_the_pool(tmp_path):
    out = tmp_path / "env_loop.jsonl"
    flags = ["--num-envs", "4", "--num-steps", "3", "--repeats", "1", "--compare-pool",
             "--out", str(out)]

    results = bench_env_loop.main(bench_env_loop.Args(underscores_to_dashes=True).parse_args(flags))

    assert [json.loads(line) for line in out.read_text().splitlines()] == results
    assert [r["name"] for r in results] == ["env_loop", "env"]
    for result in results:
        assert result["config"] == {"num_envs": 4, "num_steps": 3, "devices": 1}
        assert result["metrics"]["steps_per_s"] > 0


def test_the_loop_steps_every_game():
    # jitted as `bench_env_loop.main` jits them (4 games, 3 steps): the programs of
    # test_benchmark_runs_the_plain_loop_beside_the_pool, which the persistent
    # compilation cache gives this test
    loop = jax.jit(bench_env_loop.new_loop)(jax.random.split(jax.random.key(0), 4))
    after = jax.jit(functools.partial(bench_env_loop.play, num_steps=3), donate_argnums=0)(loop)
    lengths = np.asarray(after.state.episode_length)
    # each game played 3 steps: its episode is 3 long, or a new one began on the way
    assert np.all((lengths <= 3) & (lengths >= 0)) and np.any(lengths > 0)
    assert np.all(np.asarray(after.checksum) != 0.0)
    assert after.mask.shape == (4, 28)
