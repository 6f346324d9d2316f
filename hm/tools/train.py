"""`bin/train`: the command line of the trainer (flags -> `TrainConfig` + `RunOptions`).

Only parsing lives here; the run is `hm.train.run`. Defaults come from `TrainConfig` and
`RunOptions`, so there is one place for each; `--config NAME` starts from one of
`hm.train.config.PRESETS` instead, and flags given beside it win. `--help` lists the
flags most runs need (`COMMON`); `--help-all` lists every flag (docs/config.md is the
reference). Bad input exits with code 2 and a message naming the flag and its allowed
range, never a traceback.
"""

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from hm.command import Command
from hm.train.checkpoint import CheckpointError
from hm.train.config import PRESETS, ConfigError, TrainConfig
from hm.train.run import DEFAULT_COMPILE_CACHE, RunOptions, Trainer, run
from hm.train.run_dir import RunError

_CONFIG = TrainConfig()
_OPTIONS = RunOptions()


# The flags `--help` shows; `--help-all` shows every flag.
COMMON = ("config", "total_timesteps", "num_envs", "seed", "num_seeds", "sweep", "lr", "ent_coef", "network",
          "precision", "devices", "runs_dir", "run_name", "resume", "save_interval_minutes", "no_progress",
          "help_all")


class TrainArgs(Command):  # no abbreviations: `explicit_fields` sees full flag names
    """Train a PPO agent on HackMatrix (the default config: PPO with the greedy teacher and a
    program bonus; --config plain: PPO alone). Everything of a run goes to RUNS_DIR/RUN_NAME/:
    config.json, TensorBoard events, checkpoints/, and the final policy.eqx + policy.json.
    Exit codes: 0 done, 1 stopped on NaN/inf (last good checkpoint kept), 2 bad input,
    128+N stopped by signal N (SIGTERM/SIGINT: a checkpoint is saved first). --help-all
    lists every flag; docs/config.md explains each setting."""

    # plain: no teacher, no program bonus, the game's own reward
    config: Literal["default", "plain"] = "default"  # The config to start from; flags given beside it win.

    num_envs: int = _CONFIG.num_envs  # Parallel games, over all devices together (>= 1, a multiple of the device count).
    num_steps: int = _CONFIG.num_steps  # Rollout length per update, in steps per game (>= 1).
    total_timesteps: int = _CONFIG.total_timesteps  # Env steps to train for (>= one batch: num_envs x num_steps).
    lr: float | None = _CONFIG.lr  # Adam learning rate in (0, 1]; default: 1e-3, or 2.5e-4 for batches of at most 256 x 128.
    gamma: float = _CONFIG.gamma  # Discount factor in [0, 1].
    gae_lambda: float = _CONFIG.gae_lambda  # GAE lambda in [0, 1].
    num_minibatches: int | None = _CONFIG.num_minibatches  # Minibatches per epoch (>= 1); default: batch / 2048 in [4, 64].
    update_epochs: int | None = _CONFIG.update_epochs  # Epochs per update (>= 1); default: auto-scaled with the batch.
    clip_eps: float = _CONFIG.clip_eps  # PPO clip range (> 0).
    vf_coef: float = _CONFIG.vf_coef  # Value-loss coefficient (>= 0).
    ent_coef: float = _CONFIG.ent_coef  # Entropy-bonus coefficient (>= 0).
    max_grad_norm: float = _CONFIG.max_grad_norm  # Global gradient-norm clip (> 0).
    hidden_dim: int = _CONFIG.hidden_dim  # Width of the trunk's hidden layers (>= 1).
    num_layers: int = _CONFIG.num_layers  # Hidden tanh layers of the trunk (>= 1).
    network: Literal["mlp", "conv", "local"] = _CONFIG.network  # local: the MLP plus the 5x5 cells at the player; conv: a 3x3 conv first.
    critic: Literal["shared", "separate"] = _CONFIG.critic  # shared: one trunk for both heads; separate: the value head has its own (twice the work).
    value_transform: Literal["none", "sqrt"] = _CONFIG.value_transform  # The value head predicts V (none) or h(V) = sign(V)(sqrt(|V|+1)-1) + V/1000.
    precision: Literal["auto", "f32", "bf16"] = _CONFIG.precision  # Compute precision; auto: bf16 on TPU/GPU, f32 on CPU.
    seed: int = _CONFIG.seed  # Random seed in [0, 2^32 - 1].
    max_episode_steps: int = _CONFIG.max_episode_steps  # Truncate (and bootstrap) episodes at this length (>= 1).
    curriculum: float = _CONFIG.curriculum  # Share of new training episodes that start at a later stage (0..1; 0: none).
    curriculum_max_stage: int = _CONFIG.curriculum_max_stage  # Curriculum starts are uniform over stages 2..K (K in 2..8).
    updates_per_call: int | None = _CONFIG.updates_per_call  # PPO updates fused into one compiled call (>= 1); default: auto.
    devices: int | None = _CONFIG.devices  # Use only the first N devices (1..available); default: all.
    num_seeds: int = _CONFIG.num_seeds  # Train a population of N members with seeds SEED, SEED+1, ... in one program (1..1024).
    reward_weights: list[str] = []  # Reward terms reweighted: TERM=WEIGHT ... (others 1), or none (the game's reward); default: distance=0.
    program_bonus: float = _CONFIG.program_bonus  # Learner: +B per program gained, not paid back (>= 0; 0: off).
    teacher_coef: float = _CONFIG.teacher_coef  # Weight of the greedy teacher's cross-entropy (>= 0; 0: no teacher).
    teacher_steps: int | None = _CONFIG.teacher_steps  # The teacher weight falls linearly to 0 at these env steps (>= 1; default: 2/5 of the run).
    teacher_every: int | None = _CONFIG.teacher_every  # The teacher labels one env slot in N (dividing each device's envs; default 8).
    value_norm: float = _CONFIG.value_norm  # Normalise value targets (PopArt): step of their running mean and std per update, in [0, 1]; 0: off.
    search_coef: float = _CONFIG.search_coef  # Weight of the search teacher's cross-entropy (expert iteration; >= 0; 0: off).
    search_simulations: int = _CONFIG.search_simulations  # Simulations of each of the search teacher's searches (1..1024).
    search_every: int | None = _CONFIG.search_every  # The search teacher labels one env slot in N (dividing each device's envs; default 8).
    search_steps: int | None = _CONFIG.search_steps  # Search teacher weight falls linearly to 0 at these env steps (>= 1; default: never).
    search_program_bonus: float | None = _CONFIG.search_program_bonus  # Program bonus the search teacher's search pays (>= 0; default: learner's).
    sweep: list[str] = []  # One member per combination, e.g. lr=1e-4,3e-4 ent-coef=0.01,0.05 x --num-seeds; keys: docs/training.md#what-can-be-swept.
    log_interval: int = _OPTIONS.log_interval  # Log metrics every N updates (>= 1; at call boundaries).
    save_interval_minutes: float | None = None  # Checkpoint every M minutes (> 0; default 10 unless --save-interval).
    save_interval: int | None = _OPTIONS.save_interval  # Checkpoint every N updates instead of by time (>= 1).
    keep_checkpoints: int = _OPTIONS.keep_checkpoints  # Checkpoints kept per run, the newest (>= 1).
    runs_dir: Path = _OPTIONS.runs_dir  # Directory that holds one sub-directory per run.
    run_name: str | None = _OPTIONS.run_name  # Name of the run's directory; default: the start time, e.g. 20261122-031500.
    run_suffix: str | None = _OPTIONS.run_suffix  # Appended to the run name as -SUFFIX.
    resume: Path | None = _OPTIONS.resume  # Continue a checkpoint file or a run directory's latest; its config applies except for flags given here.
    compile_cache: str = str(DEFAULT_COMPILE_CACHE)  # Persistent JAX compilation cache directory ('' turns it off).
    coordinator_address: str | None = _OPTIONS.coordinator_address  # Multi-host: host:port of process 0 (automatic on TPU pods).
    num_processes: int | None = _OPTIONS.num_processes  # Multi-host: number of processes (automatic on TPU pods).
    process_id: int | None = _OPTIONS.process_id  # Multi-host: this process's index in [0, num_processes).
    no_progress: bool = False  # Draw no progress bar (console lines are still printed).
    profile: Path | None = _OPTIONS.profile  # Write a jax.profiler trace of one call (the first after compiling) to this directory.
    help_all: bool = False  # Show every flag, not only the common ones, and exit.

    def configure(self) -> None:
        self.add_argument("--sweep", nargs="+", action="extend", default=[], metavar="KEY=V1,V2,...")
        self.add_argument("--reward-weights", nargs="+", action="extend", default=[], metavar="TERM=WEIGHT")
        self.add_argument("--help-all", action=_HelpAll, nargs=0)
        if not self._show_all:
            for name in self.class_variables:
                if name not in COMMON:
                    self.add_argument("--" + name.replace("_", "-"), help=argparse.SUPPRESS)

    def __init__(self, *args, show_all: bool = False, **kwargs):
        self._show_all = show_all
        super().__init__(*args, **kwargs)

    def process_args(self) -> None:
        try:
            self.parsed_sweep = parse_sweep(self.sweep)
            self.parsed_reward_weights = parse_reward_weights(self.reward_weights)
        except ConfigError as error:
            self.error(error.message)

    def train_config(self, explicit: frozenset[str] | None = None) -> TrainConfig:
        """The preset (`--config`) with the flags in `explicit` put in (`named_fields` of
        the command line; None: the flags whose values differ from the defaults)."""
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(TrainConfig)}
        fields["sweep"] = self.parsed_sweep
        fields["reward_weights"] = self.parsed_reward_weights
        if explicit is None:
            given = {name for name, value in fields.items() if value != getattr(_CONFIG, name)}
        else:
            given = set(explicit) & set(fields)
        if not self.reward_weights:  # not given: the preset's
            given.discard("reward_weights")
        return dataclasses.replace(PRESETS[self.config], **{name: fields[name] for name in given})

    def run_options(self) -> RunOptions:
        return RunOptions(
            runs_dir=self.runs_dir,
            run_name=self.run_name,
            run_suffix=self.run_suffix,
            resume=self.resume,
            log_interval=self.log_interval,
            save_interval_minutes=self.save_interval_minutes,
            save_interval=self.save_interval,
            keep_checkpoints=self.keep_checkpoints,
            compile_cache=Path(self.compile_cache) if self.compile_cache else None,
            coordinator_address=self.coordinator_address,
            num_processes=self.num_processes,
            process_id=self.process_id,
            progress=not self.no_progress,
            profile=self.profile,
        )


def parse_sweep(specs: Sequence[str]) -> tuple[tuple[str, tuple[float, ...]], ...]:
    """`["lr=1e-4,3e-4", "ent-coef=0.01"]` -> `(("lr", (1e-4, 3e-4)), ("ent_coef", (0.01,)))`.

    Only the form is checked here; `config.validate` checks the keys and ranges.

    Raises:
        ConfigError: a spec that is not KEY=V1,V2,... with numbers.
    """
    out = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not key:
            raise ConfigError("--sweep", f"--sweep takes KEY=V1,V2,... (e.g. lr=1e-4,3e-4); got {spec!r}")
        items = [v.strip() for v in values.split(",") if v.strip()]
        numbers = []
        for item in items:
            try:
                numbers.append(float(item))
            except ValueError:
                raise ConfigError("--sweep", f"--sweep {key}: {item!r} is not a number") from None
        out.append((key.strip().replace("-", "_"), tuple(numbers)))
    return tuple(out)


def parse_reward_weights(specs: Sequence[str]) -> tuple[tuple[str, float], ...]:
    """`["distance=0", "siphon-death=0.5"]` -> `(("distance", 0.0), ("siphon_death", 0.5))`;
    `["none"]` -> `()` (the game's own reward).

    Raises:
        ConfigError: a spec that is not TERM=NUMBER.
    """
    if list(specs) == ["none"]:
        return ()
    out = []
    for spec in specs:
        name, sep, weight = spec.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            raise ConfigError("--reward-weights", f"--reward-weights takes TERM=WEIGHT (e.g. distance=0); got {spec!r}")
        try:
            out.append((name, float(weight)))
        except ValueError:
            raise ConfigError("--reward-weights", f"--reward-weights {name}: {weight!r} is not a number") from None
    return tuple(out)


def named_fields(argv: Sequence[str]) -> frozenset[str]:
    """The fields whose flags `argv` names (`--num-envs 8` -> `num_envs`)."""
    return frozenset(
        token[2:].split("=", 1)[0].replace("-", "_") for token in argv if token.startswith("--") and len(token) > 2
    )


def explicit_fields(argv: Sequence[str]) -> frozenset[str]:
    """The config fields named on the command line (`--num-envs 8` -> `num_envs`), and
    with `--config NAME` every field in which that preset differs from the default.

    On `--resume` these override the checkpoint's config; the rest come from it.
    """
    named = set(named_fields(argv))
    for index, token in enumerate(argv):
        preset = token.split("=", 1)[1] if token.startswith("--config=") else (
            argv[index + 1] if token == "--config" and index + 1 < len(argv) else None)
        if preset in PRESETS:
            default, chosen = dataclasses.asdict(TrainConfig()), dataclasses.asdict(PRESETS[preset])
            named |= {name for name in default if default[name] != chosen[name]}
    return frozenset(named)


class _HelpAll(argparse.Action):
    """`--help-all`: print the help with every flag, then exit."""

    def __call__(self, parser, namespace, values, option_string=None):
        full = TrainArgs(prog=parser.prog, show_all=True)
        full.print_help()
        parser.exit()


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv`, set the run up and train; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = TrainArgs(prog="bin/train")
    args = parser.parse_args(argv)
    explicit = explicit_fields(argv)
    given = sorted(named_fields(argv) & {f.name for f in dataclasses.fields(TrainConfig)})
    print(f"config: {args.config!r} (docs/config.md)" + (f", with {', '.join(given)} given" if given else "")
          + ("; on resume the checkpoint's for the rest" if args.resume is not None else ""), flush=True)
    try:
        trainer = Trainer(
            args.train_config(named_fields(argv)),
            args.run_options(),
            explicit=explicit if args.resume is not None else None,
        )
    except ConfigError as error:
        parser.error(error.message)
    except (CheckpointError, RunError) as error:
        parser.error(str(error))
    return run(trainer)


if __name__ == "__main__":
    sys.exit(main())
