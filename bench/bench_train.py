"""Training throughput: the fused PPO program end to end, on the game and on NullEnv.

One call of the learner's fused program (`hm.train.make_train_fn`) runs
`updates_per_call` whole PPO updates (rollout, GAE, epochs of minibatch steps); its
env steps per second is the trainer's speed. The same learner on `NullEnv`, a
do-nothing environment of the game's shapes, is the ceiling the learner itself allows;
the ratio game/null says what share of the learner's speed is left with the game's cost
added (100 %: the game costs nothing).

    python -m bench.bench_train                      # bin/train's batch (2048 envs x 32 steps), auto-scaled, game and null
    python -m bench.bench_train --env game --repeats 2 --out bench/results/train.jsonl
    python -m bench.bench_train --compile-cache /tmp/cache   # run twice: warm-cache start
    python -m bench.bench_train --env game --network mlp conv   # networks side by side
    python -m bench.bench_train --env game --num-seeds 1 4        # a population of 4 beside one run
    python -m bench.bench_train --env game --teacher-every 0 8 4  # the greedy teacher's cost (0: none)
    python -m bench.bench_train --env game --network local --program-bonus 3 --teacher-every 8 0 --search-every 0 32
        # the default config's teachers side by side: the greedy teacher, the search teacher, both, neither
    python -m bench.bench_train --env game --program-bonus 0 4    # the program bonus's cost (0: none)
    python -m bench.bench_train --env game --value-transform none sqrt   # the squashed value target's cost

A population (`--num-seeds N`, N members in one program, `num_envs` env slots each)
reports its steps per second summed over the members, so a population of N that is
as efficient as N runs one after another reports the single run's number.

With a teacher (`--teacher-every N`, the game only) the run trains with `--teacher-coef 1`
and a `--teacher-steps` far beyond the benchmark, so every timed call runs the greedy
teacher on one env slot in N: the cost of the first `--teacher-steps` of a run.

With a search teacher (`--search-every N`, the game only) the run trains with
`--search-coef 1` (its weight does not fall) and `--search-simulations` (8), so every
timed call runs the search on one env slot in N.

With `--value-transform sqrt` the critic predicts h(V) (the trainer's default since
2026-12-07); without the flag the benchmark times it predicting V, as it times the
learner without a teacher or a program bonus unless asked.

With a program bonus (`--program-bonus B`, the game only; the game's default is
`HackMatrixEnv.default_program_bonus`) every step also counts the programs the player
owns before and after it, to pay the learner B for each it gains. The config the
benchmark builds goes to `make_train_fn` directly, which takes the unset bonus as 0, so
without the flag it times the learner without one.

Each result also reports the network's floating-point operations per sample (forward,
and forward + parameter gradient, as XLA counts them) and per env step of PPO (one
forward in the rollout, then forward + backward once per epoch).

Compile time is measured with the persistent compilation cache off, unless
`--compile-cache DIR` is given: then a second run measures a restart with a warm cache.
"""

import dataclasses
import pathlib
import time
from typing import Any, Literal

import jax
from tap import Tap

from bench import common
from hm.train.config import TrainConfig


class Args(Tap):
    num_envs: int = 2048  # global env slots (split over the devices)
    num_steps: int = TrainConfig.num_steps  # rollout length per update (bin/train's default)
    updates_per_call: int | None = None  # updates fused per call (default: auto)
    precision: str = "auto"  # auto | f32 | bf16
    env: Literal["both", "game", "null"] = "both"  # which environment(s) to train on
    network: list[Literal["mlp", "conv", "local"]] = ["mlp"]  # network kind(s); several are timed interleaved
    critic: Literal["shared", "separate"] = "shared"  # the value head's trunk
    num_seeds: list[int] = [1]  # population size(s): N members of num_envs each; several are timed interleaved
    teacher_every: list[int] = [0]  # 0: no teacher; N: the greedy teacher labels one slot in N (game only); interleaved
    program_bonus: list[float] = [0.0]  # the learner's bonus per program owned (game only; 0: none); interleaved
    search_every: list[int] = [0]  # 0: no search teacher; N: it labels one slot in N (game only); interleaved
    value_transform: list[Literal["none", "sqrt"]] = ["none"]  # what the critic predicts; several are timed interleaved
    search_simulations: int = TrainConfig.search_simulations  # simulations of each of the search teacher's searches
    repeats: int = 3  # timed calls after the first; the median is reported
    devices: int = 1  # devices to shard over (on CPU: forced host devices)
    seed: int = 0  # PRNG seed
    compile_cache: pathlib.Path | None = None  # use this persistent compilation cache
    out: pathlib.Path | None = None  # append results as JSON lines to this file


def prepare(args: Args, env_name: str, network: str, num_seeds: int = 1, teacher_every: int = 0,
            program_bonus: float = 0.0, search_every: int = 0, value_transform: str = "none") -> dict[str, Any]:
    """The fused training call on `env_name` with `network` for a population of
    `num_seeds` (with the teacher on one slot in `teacher_every` and the search teacher on
    one in `search_every`, each if not 0, a program bonus of `program_bonus`, and the
    critic predicting its target through `value_transform`), its first carry and its
    settings."""
    from bench.null_env import NullEnv
    from hm.env import HackMatrix
    from hm.train import (
        init,
        make_mesh,
        make_train_fn,
        member_of,
        resolve,
        validate,
    )
    from hm.train.network import flops_per_sample

    # The default config's reward (the game's terms without `distance`; NullEnv's own
    # reward) with the teacher and the program bonus as asked.
    config = TrainConfig(num_envs=args.num_envs, num_steps=args.num_steps,
                         total_timesteps=args.num_envs * args.num_steps * 1000,
                         updates_per_call=args.updates_per_call, precision=args.precision,
                         seed=args.seed, devices=args.devices, network=network, critic=args.critic,
                         num_seeds=num_seeds, program_bonus=program_bonus, teacher_coef=0.0, search_coef=0.0,
                         value_transform=value_transform,
                         **({} if env_name == "game" else {"reward_weights": ()}))
    if teacher_every:
        config = dataclasses.replace(config, teacher_coef=1.0, teacher_every=teacher_every,
                                     teacher_steps=config.total_timesteps)
    if search_every:
        config = dataclasses.replace(config, search_coef=1.0, search_every=search_every,
                                     search_simulations=args.search_simulations)
    validate(config, jax.device_count())
    resolved = resolve(config, jax.default_backend(), jax.device_count())
    env = HackMatrix() if env_name == "game" else NullEnv()
    mesh = make_mesh(resolved.devices)

    start = time.perf_counter()
    state = jax.block_until_ready(init(resolved, env=env, mesh=mesh))
    print(f"  init on {env_name} with {network}, {num_seeds} member(s) (first games, parameters) "
          f"{time.perf_counter() - start:.1f} s")
    train = make_train_fn(resolved, env, mesh)
    # time_calls feeds each call's output to the next: carry the metrics along
    metrics = jax.tree.map(lambda s: jax.numpy.zeros(s.shape, s.dtype), jax.eval_shape(train, state)[1])
    settings = {"num_envs": args.num_envs, "num_steps": args.num_steps, "devices": resolved.devices,
                "env": env_name, "precision": resolved.precision,
                "updates_per_call": resolved.updates_per_call,
                "minibatches": resolved.num_minibatches, "epochs": resolved.update_epochs}
    # Only a non-default network is named, so the default's results stay comparable
    # (bench/compare.py) with those of commits from before there was a choice.
    if (network, args.critic) != ("mlp", "shared"):
        settings.update(network=network, critic=args.critic)
    if num_seeds != 1:
        settings.update(num_seeds=num_seeds)
    if teacher_every:
        settings.update(teacher_every=teacher_every)
    if program_bonus:
        settings.update(program_bonus=program_bonus)
    if search_every:
        settings.update(search_every=search_every, search_simulations=args.search_simulations)
    if value_transform != "none":
        settings.update(value_transform=value_transform)
    flops = flops_per_sample(jax.device_get(member_of(state.params, 0)))
    flops["ppo_per_env_step"] = flops["forward"] + resolved.update_epochs * flops["forward_backward"]
    return {"step": jax.jit(lambda carry: train(carry[0]), donate_argnums=0),
            "carry": (state, metrics), "settings": settings, "flops": flops,
            "steps_per_call": resolved.steps_per_call * num_seeds, "num_seeds": num_seeds}


def main(args: Args) -> list[dict[str, Any]]:
    common.request_devices(args.devices)
    if args.compile_cache is None:
        common.disable_compilation_cache()
    else:
        jax.config.update("jax_compilation_cache_dir", str(args.compile_cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    envs = ["game", "null"] if args.env == "both" else [args.env]
    if any(args.teacher_every) and "null" in envs:
        raise SystemExit("--teacher-every: NullEnv has no teacher; use --env game")
    if any(args.search_every) and "null" in envs:
        raise SystemExit("--search-every: the search plans over the game's states; use --env game")
    if any(args.program_bonus) and "null" in envs:
        raise SystemExit("--program-bonus: NullEnv has no programs to count; use --env game")
    runs = [prepare(args, name, network, seeds, every, bonus, search_every, transform) for name in envs
            for network in args.network for seeds in args.num_seeds for every in args.teacher_every
            for bonus in args.program_bonus for search_every in args.search_every
            for transform in args.value_transform]
    # Timed calls alternate between the runs: this VM's speed drifts by tens of percent
    # over minutes, and the game/null (or network/network) ratio is only meaningful
    # measured together.
    timed = common.time_calls_interleaved([r["step"] for r in runs], [r["carry"] for r in runs],
                                          args.repeats)
    results = []
    for r, (timing, _) in zip(runs, timed):
        result = common.record("train", r["settings"], timing, r["steps_per_call"], None)
        flops = {f"flops_{name}": value for name, value in r["flops"].items()}
        print("  FLOPs per sample: forward {flops_forward:,.0f}, forward+backward {flops_forward_backward:,.0f}; "
              "per PPO env step {flops_ppo_per_env_step:,.0f}".format(**flops))
        results.append(common.record_line("train", r["settings"], {**result["metrics"], **flops}, args.out))
    def same(r, **changes):
        """The settings that identify a comparable run, with `changes` applied."""
        settings = {**r["settings"], **changes}
        return tuple(settings.get(k) for k in ("env", "network", "num_seeds", "teacher_every", "program_bonus",
                                               "search_every", "value_transform"))

    by_settings = {same(r): result for r, result in zip(runs, results)}
    # a run with a cost option against the same run without it
    for option, describe in (("teacher_every", "teacher on one slot in {} / no teacher"),
                             ("search_every", "search teacher on one slot in {} / none"),
                             ("program_bonus", "program bonus {:g} / none"),
                             ("value_transform", "value transform {} / none")):
        for r, result in zip(runs, results):
            without = by_settings.get(same(r, **{option: None}))
            if option in r["settings"] and without is not None:
                ratio = result["metrics"]["steps_per_s"] / without["metrics"]["steps_per_s"]
                print(f"{describe.format(r['settings'][option])}: {ratio:.1%} (timed calls interleaved)")
    for r, result in zip(runs, results):
        single = by_settings.get(same(r, num_seeds=None))
        if r["num_seeds"] != 1 and single is not None:
            ratio = result["metrics"]["steps_per_s"] / single["metrics"]["steps_per_s"]
            # The same ratio per CPU second this process used, which other processes on
            # the cores do not inflate.
            cpu_ratio = result["metrics"]["steps_per_cpu_s"] / single["metrics"]["steps_per_cpu_s"]
            print(f"{r['settings']['env']}: population of {r['num_seeds']} / single run, steps/s summed "
                  f"over members: {ratio:.1%}; per CPU second: {cpu_ratio:.1%} (timed calls interleaved)")
    if args.env == "both" and len(args.network) == 1 and len(args.num_seeds) == 1:
        ratio = results[0]["metrics"]["steps_per_s"] / results[1]["metrics"]["steps_per_s"]
        print(f"game / null throughput: {ratio:.1%} (timed calls interleaved)")
    return results


if __name__ == "__main__":
    main(Args(underscores_to_dashes=True).parse_args())
