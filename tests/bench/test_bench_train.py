"""bench_train: a run with a cost option trains with it and names it in its settings."""

import pytest

from bench import bench_train


@pytest.mark.parametrize("search_every", [0, 32])
def test_a_search_teacher_run_trains_with_the_search_and_names_it(search_every):
    args = bench_train.Args(underscores_to_dashes=True).parse_args(
        ["--num-envs", "64", "--num-steps", "4", "--env", "game", "--updates-per-call", "1"])
    run = bench_train.prepare(args, "game", "mlp", search_every=search_every)
    metrics = run["carry"][1]   # the fused call's metrics, as it returns them
    if search_every:
        assert run["settings"]["search_every"] == 32 and run["settings"]["search_simulations"] == 8
        assert "loss/search" in metrics and "search/coef" in metrics
    else:
        assert "search_every" not in run["settings"], "the default's results stay comparable with older ones"
        assert "loss/search" not in metrics
    assert "loss/teacher" not in metrics, "bench_train times the greedy teacher only when asked"


def test_a_value_transform_run_trains_its_critic_through_it_and_names_it():
    # on NullEnv: the transform is the learner's, whatever the env
    args = bench_train.Args(underscores_to_dashes=True).parse_args(
        ["--num-envs", "64", "--num-steps", "4", "--env", "null", "--updates-per-call", "1",
         "--value-transform", "none", "sqrt"])
    assert args.value_transform == ["none", "sqrt"]
    for transform in args.value_transform:
        run = bench_train.prepare(args, "null", "mlp", value_transform=transform)
        assert run["carry"][0].params.value_transform == transform
        if transform == "none":
            assert "value_transform" not in run["settings"], "the default's results stay comparable with older ones"
        else:
            assert run["settings"]["value_transform"] == "sqrt"
