import json

from bench import compare

CONFIG = {"num_envs": 2048, "num_steps": 128, "devices": 1}


def write(path, *results):
    path.write_text("".join(json.dumps(result) + "\n" for result in results))
    return path


def result(steps_per_s=10_000.0, compile_s=40.0, peak_rss_mb=1000.0, config=CONFIG):
    metrics = {"steps_per_s": steps_per_s, "compile_s": compile_s, "peak_rss_mb": peak_rss_mb}
    return {"name": "env", "config": config, "metrics": metrics}


def run(tmp_path, base, head, *flags):
    base_file = write(tmp_path / "base.jsonl", *base)
    head_file = write(tmp_path / "head.jsonl", *head)
    args = compare.Args(underscores_to_dashes=True).parse_args([str(base_file), str(head_file), *flags])
    return compare.main(args)


def test_small_changes_pass(tmp_path, capsys):
    assert run(tmp_path, [result()], [result(steps_per_s=9_500.0, compile_s=48.0)]) == 0
    assert "REGRESSED" not in capsys.readouterr().out


def test_steps_per_second_drop_beyond_ten_percent_fails(tmp_path, capsys):
    assert run(tmp_path, [result()], [result(steps_per_s=8_900.0)]) == 1
    assert "steps/s -11.0%" in capsys.readouterr().out


def test_compile_time_growth_beyond_a_quarter_fails(tmp_path):
    assert run(tmp_path, [result()], [result(compile_s=51.0)]) == 1


def test_thresholds_are_flags(tmp_path):
    head = [result(steps_per_s=8_900.0, compile_s=51.0)]
    assert run(tmp_path, [result()], head, "--steps-threshold", "0.2", "--compile-threshold", "0.5") == 0


def test_memory_is_reported_but_gates_only_when_asked(tmp_path):
    assert run(tmp_path, [result()], [result(peak_rss_mb=2000.0)]) == 0
    assert run(tmp_path, [result()], [result(peak_rss_mb=2000.0)], "--rss-threshold", "0.5") == 1


def test_repeated_results_are_summarised_by_their_median(tmp_path):
    base = [result(steps_per_s=s) for s in (1_000.0, 10_000.0, 10_200.0)]
    assert run(tmp_path, base, [result(steps_per_s=9_500.0)]) == 0


def test_only_equal_configs_are_compared(tmp_path, capsys):
    other = dict(CONFIG, num_envs=256)
    assert run(tmp_path, [result(config=other)], [result(steps_per_s=1.0)]) == 0
    out = capsys.readouterr().out
    assert "only in base: env devices=1 num_envs=256 num_steps=128" in out
    assert "nothing compared" in out
