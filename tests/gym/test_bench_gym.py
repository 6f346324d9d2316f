"""bench_gym runs and reports one result per batch size (tiny sizes: the tests' own programs)."""

from bench import bench_gym


def test_bench_gym_reports_steps_per_second(capsys):
    args = bench_gym.Args(underscores_to_dashes=True).parse_args(
        ["--num-envs", "4", "--num-steps", "2", "--repeats", "1"])
    (result,) = bench_gym.main(args)
    assert result["name"] == "gym_vector" and result["config"] == {"num_envs": 4, "num_steps": 2}
    assert result["metrics"]["steps_per_s"] > 0
    assert "gym_vector [num_envs=4 num_steps=2]" in capsys.readouterr().out
