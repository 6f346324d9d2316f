"""Gymnasium vector env throughput: `hm.gym`'s vector env driven from numpy, as a torch user would.

Every step the host draws a uniformly random legal action per game from the returned
`info["action_mask"]` (numpy), calls `envs.step(actions)` (one jitted, vmapped call of
all games, with its numpy conversions of observations and infos) and keeps the returned
arrays. Unlike `bench_env`, whose whole loop is one compiled `lax.scan`, this loop pays a
host round trip per step, so it shows what the Gymnasium interface costs.

    python -m bench.bench_gym [--num-envs 1 64 2048] [--num-steps 100] [--compare-scan] [--out FILE]

`--compare-scan` also times `bench_env_loop`'s compiled `lax.scan` over `jax.vmap(env.step)`
at each N, its calls interleaved with the Gymnasium rounds, and prints the ratio.
"""

import functools
import pathlib
import platform
import statistics
import time
from typing import Any

import gymnasium
import jax
import numpy as np
from tap import Tap

import hm.gym
from bench import bench_env_loop, common


class Args(Tap):
    num_envs: list[int] = [1, 64, 2048]  # batch sizes to measure, each a vector env of its own
    num_steps: int = 100  # steps per timed round (one `envs.step` call each)
    repeats: int = 5  # timed rounds after a warm-up round; the median is reported
    seed: int = 0  # seed of the games and of the random actions
    compare_scan: bool = False  # also time bench_env_loop's compiled scan at each N, interleaved
    out: pathlib.Path | None = None  # append each result as a JSON line to this file


def random_legal_actions(rng: np.random.Generator, masks: np.ndarray) -> np.ndarray:
    """One uniformly random legal action per game: the legal action with the highest random score."""
    return np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1)


def play(envs: gymnasium.vector.VectorEnv, rng: np.random.Generator, masks: np.ndarray,
         num_steps: int) -> np.ndarray:
    """`num_steps` random legal steps of every game; returns the last masks."""
    for _ in range(num_steps):
        _, _, _, _, info = envs.step(random_legal_actions(rng, masks))
        masks = info["action_mask"]
    return masks


def measure(num_envs: int, args: Args) -> list[dict[str, Any]]:
    """Time the Gymnasium loop at `num_envs` games (and the compiled scan, interleaved)."""
    envs = gymnasium.make_vec(hm.gym.ENV_ID, num_envs=num_envs)
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    _, info = envs.reset(seed=args.seed)
    masks = play(envs, rng, info["action_mask"], 1)       # compiles reset and step
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    masks = play(envs, rng, masks, args.num_steps)
    first_call_s = time.perf_counter() - start

    scan, loop = None, None
    if args.compare_scan:
        scan = jax.jit(functools.partial(bench_env_loop.play, num_steps=args.num_steps), donate_argnums=0)
        loop = jax.jit(bench_env_loop.new_loop)(jax.random.split(jax.random.key(args.seed), num_envs))
        scan_timing, loop = common.time_calls(scan, loop, 1)   # compiled and warm
    seconds, scan_seconds = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        masks = play(envs, rng, masks, args.num_steps)
        seconds.append(time.perf_counter() - start)
        if scan is not None:
            start = time.perf_counter()
            loop = jax.block_until_ready(scan(loop))
            scan_seconds.append(time.perf_counter() - start)
    envs.close()
    config = {"num_envs": num_envs, "num_steps": args.num_steps}
    steps = num_envs * args.num_steps
    timing = common.Timing(compile_s=compile_s, first_call_s=first_call_s,
                           median_s=statistics.median(seconds), peak_rss_mb=common.peak_rss_mb())
    results = [common.record("gym_vector", config, timing, steps, args.out)]
    if scan is not None:
        timing = common.Timing(compile_s=scan_timing.compile_s, first_call_s=scan_timing.first_call_s,
                               median_s=statistics.median(scan_seconds), peak_rss_mb=common.peak_rss_mb())
        results.append(common.record("gym_vector_scan", config, timing, steps, args.out))
        ratio = statistics.median(scan_seconds) / statistics.median(seconds)
        print(f"Gymnasium loop / compiled scan throughput at {num_envs} games: {ratio:.1%} (interleaved)")
    return results


def machine() -> str:
    """The CPU's model name where Linux tells it, else the architecture."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main(args: Args) -> list[dict[str, Any]]:
    """Run the benchmark at every `--num-envs`, print and record the results."""
    if not args.num_envs or min(args.num_envs) < 1:
        raise ValueError(f"--num-envs must list positive batch sizes, got {args.num_envs}")
    if args.num_steps < 1 or args.repeats < 1:
        raise ValueError(f"--num-steps and --repeats must be at least 1, got {args.num_steps}, {args.repeats}")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine()}, "
          f"{jax.default_backend()} ({jax.devices()[0].device_kind}), jax {jax.__version__}, "
          f"gymnasium {gymnasium.__version__}; 'compile' is the reset and first step, compile included")
    return [result for num_envs in args.num_envs for result in measure(num_envs, args)]


if __name__ == "__main__":
    common.disable_compilation_cache()
    main(Args(underscores_to_dashes=True).parse_args())
