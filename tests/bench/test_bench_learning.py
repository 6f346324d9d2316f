"""bench_learning: evaluation points, alignment of fused calls with them, the summary and plot."""

import json

import pytest

from bench import bench_learning, common
from hm.train.config import TrainConfig


@pytest.mark.parametrize("total, batch, points, expected", [
    (12 * 1024, 1024, 3, [4096, 8192, 12288]),
    (12 * 1024 + 500, 1024, 3, [4096, 8192, 12288]),   # the budget rounds down to whole updates
    (2 * 1024, 1024, 5, [1024, 2048]),                 # more points than updates: no repeats
    (1024, 1024, 1, [1024]),
])
def test_eval_steps_are_whole_updates_ending_at_the_budget(total, batch, points, expected):
    assert bench_learning.eval_steps(total, batch, points) == expected


def test_aligned_calls_stop_exactly_at_every_evaluation_point():
    # 64 x 16 = 1024 steps a batch: auto fuses 64 updates a call, far past the points
    config = TrainConfig(num_envs=64, num_steps=16, total_timesteps=12 * 1024)
    aligned = bench_learning.aligned(config, 3)
    marks = bench_learning.eval_steps(config.total_timesteps, 1024, 3)
    assert all((mark // 1024) % aligned.updates_per_call == 0 for mark in marks)
    assert aligned.updates_per_call == 4


def _rows():
    return [{"seed": seed, "env_steps": steps, "return": float(seed + steps / 1000), "highest_stage": 1.5,
             "siphon_share": 0.5, "program_share": 0.25, "win_rate": 0.0, "train_seconds": steps * 0.06}
            for seed in (3, 4) for steps in (0, 1000, 2000)]


def test_summary_table_takes_each_seeds_last_evaluation_and_their_mean():
    baselines = {"greedy": {k: 1.0 for k in bench_learning.HEADLINE}}
    table = bench_learning.summary_table("cfg", _rows(), baselines).splitlines()
    assert table[2].startswith("| cfg seed 3 | 2,000 | 5.000 |")
    assert table[3].startswith("| cfg seed 4 | 2,000 | 6.000 |")
    assert table[4].startswith("| **cfg mean** | 2,000 | **5.500** |")
    assert table[5].startswith("| greedy baseline |")


def test_the_mean_curve_is_the_seeds_mean_against_env_steps_or_wall_clock():
    assert bench_learning.mean_curve(_rows(), "return") == ([0, 1000, 2000], [3.5, 4.5, 5.5])
    assert bench_learning.mean_curve(_rows(), "return", "train_seconds") == ([0.0, 60.0, 120.0], [3.5, 4.5, 5.5])


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "sub" / "plot.png"
    bench_learning.plot_comparison(path, {"cfg": _rows()}, {"random": {"return": 0.0, "highest_stage": 1.0}})
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_record_line_appends_one_json_line_per_result(tmp_path):
    out = tmp_path / "r.jsonl"
    common.record_line("learning", {"label": "a"}, {"seed": 0, "return": 1.5}, out)
    common.record_line("learning", {"label": "a"}, {"seed": 1, "return": 2.5}, out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["metrics"]["return"] for line in lines] == [1.5, 2.5]
    assert {"name", "config", "metrics", "backend", "commit", "time"} <= set(lines[0])


@pytest.mark.parametrize("flag, value", [("--num-seeds", "0"), ("--eval-points", "0"), ("--eval-episodes", "0")])
def test_bad_counts_are_refused_naming_the_flag(flag, value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_learning.main([flag, value])
    assert exit_info.value.code == 2
    assert flag in capsys.readouterr().err


def test_compare_plots_every_configuration_of_a_results_file(tmp_path):
    out, png = tmp_path / "r.jsonl", tmp_path / "c.png"
    baseline = {"baseline": "random", **{k: 0.5 for k in bench_learning.HEADLINE}}
    common.record_line("learning", {"label": "a"}, baseline, out)
    for label in ("a", "b"):
        for row in _rows():
            common.record_line("learning", {"label": label}, row, out)
    common.record_line("env", {}, {"steps_per_s": 1.0}, out)   # other benchmarks' lines are skipped
    rows, baselines = bench_learning.read_results(out)
    assert sorted(rows) == ["a", "b"] and len(rows["a"]) == 6 and list(baselines) == ["random"]
    assert len(bench_learning.main(["--compare", str(out), "--plot", str(png)])) == 12
    assert png.read_bytes()[:4] == b"\x89PNG"
    only_b = bench_learning.main(["--compare", str(out), "--plot", str(png), "--labels", "b"])
    assert len(only_b) == 6 and only_b == rows["b"]


def test_compare_refuses_a_label_the_file_does_not_have(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    for row in _rows():
        common.record_line("learning", {"label": "a"}, row, out)
    with pytest.raises(SystemExit) as exit_info:
        bench_learning.main(["--compare", str(out), "--plot", str(tmp_path / "c.png"), "--labels", "a", "z"])
    assert exit_info.value.code == 2
    assert "--labels: z not in" in capsys.readouterr().err


def test_a_stop_signal_saves_the_checkpoint_and_policy_of_where_it_stopped(tmp_path, monkeypatch):
    # SIGTERM during the first evaluation after training: the run stops there (the last
    # point is not trained to), and its checkpoint and policy are written, as bin/train's
    # are. (The evaluation itself is stubbed: what it measures is tested in tests/tools.)
    import os
    import signal

    from hm.train import checkpoint

    args = bench_learning.LearningArgs().parse_args(
        ["--config", "plain", "--num-envs", "8", "--num-steps", "8", "--total-timesteps", str(8 * 8 * 4),
         "--eval-points", "2", "--num-seeds", "1", "--eval-episodes", "2", "--max-episode-steps", "20",
         "--compile-cache", ""])  # the suite's compilation cache stays in force
    monkeypatch.setattr(bench_learning, "evaluate_params",
                        lambda *_: {k: 0.0 for k in bench_learning.HEADLINE + bench_learning.FUNNEL})
    marks = []

    def record(row):
        marks.append(row["env_steps"])
        if row["env_steps"] > 0:
            os.kill(os.getpid(), signal.SIGTERM)

    handler = signal.getsignal(signal.SIGTERM)
    rows, stopped = bench_learning.train_population(args, tmp_path, record)
    assert signal.getsignal(signal.SIGTERM) is handler
    assert stopped == signal.SIGTERM
    assert marks == [0, 8 * 8 * 2] and [row["env_steps"] for row in rows] == marks
    run_dir = tmp_path / "default"
    assert checkpoint.read_meta(checkpoint.find_checkpoint(run_dir)).env_steps == 8 * 8 * 2
    assert checkpoint.load_policy(run_dir).num_actions == 28
