import functools
import json

import jax
import numpy as np
import pytest

from bench import bench_env_loop


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
    # test_benchmark_runs_the_plain_loop_beside_the_pool, compiled once for both (the
    # persistent compilation cache gives them to whichever runs second)
    loop = jax.jit(bench_env_loop.new_loop)(jax.random.split(jax.random.key(0), 4))
    after = jax.jit(functools.partial(bench_env_loop.play, num_steps=3), donate_argnums=0)(loop)
    lengths = np.asarray(after.state.episode_length)
    # each game played 3 steps: its episode is 3 long, or a new one began on the way
    assert np.all((lengths <= 3) & (lengths >= 0)) and np.any(lengths > 0)
    assert np.all(np.asarray(after.checksum) != 0.0)
    assert after.mask.shape == (4, 28)
