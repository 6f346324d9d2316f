"""Training configuration: the user's choices, their validation, and auto-scaling.

`TrainConfig` holds exactly what the user may set (the command line maps `--kebab-case`
flags onto these fields; `None` means "choose for me"). `resolve` turns it into a
`ResolvedConfig` in which every value is concrete, applying the auto-scaling rules
below, and `validate` checks every field up front, raising `ConfigError` with a
message that names the flag and its allowed range.

Auto-scaling (when the user leaves a value unset). The reference batch is
256 envs x 128 steps = 32,768 samples with 4 minibatches x 4 epochs at lr 2.5e-4.
For a larger batch, `scale = batch / 32768`:

* `num_minibatches ~= batch / 2048` (minibatches stay near 2,048 samples), clamped to
  [4, 64] and rounded to a count that splits the batch evenly over the devices;
* `update_epochs = max(2, 4 // scale)`;
* `lr = 1e-3`. With minibatches held near 2,048 samples, a larger batch takes more
  gradient steps per update but the same number per sample, so the step size need not
  shrink. (An earlier rule, `2.5e-4 * 16 / (num_minibatches * update_epochs)`, shrank it
  to 6.25e-5 at 2048 envs, and the policy stopped moving: docs/learning.md has the
  curves that chose 1e-3.) At 2 epochs that is one gradient step per 1,024 samples;
  minibatches of 8,192 (one step per 4,096) learned more slowly at the same cost (behind
  from 4M to 16M env steps, level at 20M: docs/learning.md#gradient-steps).

At or below the reference batch the reference values (4, 4, 2.5e-4) apply. An explicit
value always wins.

Value normalisation. `value_norm` > 0 keeps running estimates of the value targets' mean
and standard deviation, moved that share of the way to each update's batch (but at
least 1/(updates done + 1), so the first update takes its batch's statistics), and
normalises the critic by them (PopArt, `hm.train.network.popart_update`); 0 turns it
off.

Reward weights. `reward_weights` trains on a weighted sum of the env's reward terms
(`info["reward_terms"]`) instead of its reward: each named term gets its weight, every
other term weight 1; `()` is the env's own reward, and `None` (the default) the env's
`default_reward_weights`, which for the game drop the exit-distance shaping. The game
and its reward are unchanged (evaluation and the episode returns in the logs are the
game's); only what the learner maximises changes. The names are checked against the
env's terms when a run is built (`hm.train.learner.reward_weight_vector`). They are part
of the program, not swept.

Curriculum. `curriculum` is the share of new training episodes that start at a later
stage, uniform over 2..`curriculum_max_stage`, with an inventory a player who got there
might hold (docs/learning.md#curriculum); 0 trains on ordinary games only. Evaluation
always plays ordinary games from stage 1.

Teacher (kickstarting). `teacher_coef` > 0 adds to the loss that coefficient times the
cross-entropy between the policy and a scripted teacher's action (the env's
`teacher_actions`; for the game, the greedy player of `bin/evaluate --baseline greedy`),
on the states the agent itself visits (Schmitt et al., "Kickstarting Deep Reinforcement
Learning", 2018). The coefficient falls linearly to 0 at `teacher_steps` env steps (by
default, `None`, 4/5 of the run's `total_timesteps`, `TEACHER_SHARE`: the teacher weighs
in, less and less, for most of the run, and the learner has the last fifth to itself;
docs/learning.md#bonus3-teacher16-20m), after which the teacher is no longer run and
training is plain PPO. The teacher labels one env slot in every `teacher_every` (default
8, or the largest divisor of 8 that divides each device's env slots; it simulates every
legal action, so a label costs about 28 env steps); the agent always acts by its own
policy. 0 turns it off and leaves the program as it was; `None` (the default) is the
env's `default_teacher_coef` (for the game, 1: docs/learning.md#teacher has the curves
that chose it). Like `reward_weights`, the trainer (`hm.train.run`) makes it concrete for its
env; a config resolved and trained without it (`make_train_fn` directly) takes None as 0.
`teacher_program_value` > 0 makes the game's teacher add that much to its value of a
state for each program the player owns, so it siphons program blocks it would
otherwise pass by (docs/learning.md#program-teacher); 0, the default, teaches with the
evaluation's greedy player. `teacher_program_floor` F > 0 keeps the weight of the labels
that move towards owning a program (the env's `teacher_seeks`) at F or more while the
rest of the teacher's weight falls (docs/learning.md#program-floor): the loss adds
max(F − the annealed `teacher_coef`, 0) times their share of the labelled samples'
cross-entropy, and the teacher keeps labelling after `teacher_steps`.

Reward shaping. `shaping` > 0 adds to the learner's reward, on every step, that
coefficient times γΦ(s') − Φ(s), where Φ is the env's `potential` (for the game, the
greedy player's heuristic value: −0.01 × the exit distance − 0.5 × the enemies next to
the player that can act next turn) and Φ(s') = 0 when the game ended on the step
(potential-based shaping: Ng, Harada and Russell, 1999, which leaves the best policy
unchanged). Unlike the game's own distance term it cannot be farmed: a step away undoes
a step closer. 0 (the default) leaves the program as it was; docs/learning.md#shaping.

A program bonus. `program_bonus` B > 0 adds to the learner's reward B times the change
in the number of programs the player owns (the env's `programs_owned`) on every step: +B
for each program it comes to own, −B for each an UNDO takes back. It is not paid back
when the game ends (unlike `shaping`), so it changes what the learner maximises: the
game's return plus B for each program owned at the end of the game, an
achievement-style bonus. The game, its return and evaluation are unchanged;
docs/learning.md#program-bonus. 0 leaves the program as it was; `None` (the default) is
the env's `default_program_bonus` (for the game, 3:
docs/learning.md#bonus3-teacher16-20m has the curves that chose it, with the teacher to
4/5 of the run). Like `teacher_coef`, the trainer makes it concrete for its env, and a
config trained without it (`make_train_fn` directly) takes None as 0.

Populations. `num_seeds` and `sweep` make one run train several members in one program
(`hm.train.learner`): one member per combination of the swept values, times each seed
`seed, seed + 1, ...`. Only the hyper-parameters in `SWEEPABLE` can be swept: they are
traced values of the program, so members differ in them without changing any array's
shape. `members(resolved)` lists the members in their fixed order.
"""

import dataclasses
import itertools
import math
from typing import Any, Literal

REFERENCE_BATCH = 256 * 128
REFERENCE_MINIBATCHES = 4
REFERENCE_EPOCHS = 4
REFERENCE_LR = 2.5e-4
# The step size above the reference batch (docs/learning.md: 3 seeds at 2048 envs).
LARGE_BATCH_LR = 1e-3
TARGET_MINIBATCH = 2048  # docs/learning.md#gradient-steps
MIN_MINIBATCHES, MAX_MINIBATCHES = 4, 64
# Auto `updates_per_call` fuses updates until one call covers about this many env
# steps, so the host's per-call work (logging, checkpoints) is amortised for small
# batches while large batches still report after every update.
TARGET_STEPS_PER_CALL = 1 << 18
# The per-call env-step count is reported as an int32.
MAX_STEPS_PER_CALL = (1 << 31) - 1
MAX_SEED = (1 << 32) - 1
# Hyper-parameters a population may sweep: scalars the program reads as traced values.
SWEEPABLE = ("lr", "ent_coef", "vf_coef", "clip_eps", "gamma", "gae_lambda", "max_grad_norm",
             "value_norm", "curriculum", "curriculum_max_stage", "teacher_coef", "teacher_program_value",
             "teacher_program_floor", "shaping", "program_bonus")
# The sweepable settings that are integers (a sweep value must be a whole number).
INTEGER_SWEEPABLE = ("curriculum_max_stage",)
# Stages of the game (hm.game.constants.NUM_STAGES; here so the config imports no JAX).
NUM_STAGES = 8
# The teacher labels one env slot in this many unless `teacher_every` says otherwise
# (docs/learning.md#teacher: the 20M-step curves ran with it).
TEACHER_EVERY = 8
# By default the teacher's weight reaches 0 at this share of the run's env steps
# (docs/learning.md#bonus3-teacher16-20m: 4/5 of 20M with the game's bonus of 3).
TEACHER_SHARE = 0.8
# Members of one population, at most (each holds its own envs, parameters and optimizer).
MAX_MEMBERS = 1024

PRECISIONS = ("auto", "f32", "bf16")
# Network kinds and critic options (`hm.train.network`); here so the config imports no JAX.
NETWORKS = ("mlp", "conv", "local")
CRITICS = ("shared", "separate")


class ConfigError(ValueError):
    """A configuration value is out of range. `flag` names the command-line flag."""

    def __init__(self, flag: str, message: str):
        super().__init__(message)
        self.flag = flag
        self.message = message


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """What the user chooses. `None` means auto (see the module docstring)."""

    num_envs: int = 2048
    num_steps: int = 32  # docs/learning.md#budget-20m: 128 (the original's) took 4-5x the env steps to the same stage
    total_timesteps: int = 10_000_000
    lr: float | None = None
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int | None = None
    update_epochs: int | None = None
    clip_eps: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01  # docs/learning.md: 0.15 (the original's) with the old lr never moved
    max_grad_norm: float = 0.5
    # docs/learning.md#value-normalisation: step of PopArt's value statistics per update; 0 off
    value_norm: float = 0.0
    hidden_dim: int = 256
    num_layers: int = 2
    # None: the env's default_network (for the game: local, docs/learning.md#local-view),
    # made concrete by the trainer before the config is saved
    network: str | None = None
    critic: str = "shared"
    precision: str = "auto"
    seed: int = 0
    max_episode_steps: int = 1000
    # docs/learning.md#curriculum: share of new episodes that start at a later stage
    curriculum: float = 0.0
    curriculum_max_stage: int = NUM_STAGES
    updates_per_call: int | None = None
    devices: int | None = None
    num_seeds: int = 1
    # ((term, weight), ...): the training reward's weight of each named reward term (the
    # others weigh 1); () the env's own reward; None the env's default_reward_weights
    # (for the game: distance=0, docs/learning.md#reward-weights)
    reward_weights: tuple[tuple[str, float], ...] | None = None
    # docs/learning.md#teacher: weight of the cross-entropy to the env's scripted teacher,
    # falling linearly to 0 at teacher_steps env steps; 0 off; None the env's
    # default_teacher_coef (for the game: 1), which the trainer (hm.train.run) applies
    teacher_coef: float | None = None
    # docs/learning.md#program-teacher: what the teacher's value of a state adds for each
    # program the player owns (the game's greedy teacher); 0: the evaluation's greedy player
    teacher_program_value: float = 0.0
    # docs/learning.md#program-floor: the least weight of the teacher's labels that move
    # towards owning a program (its other labels fall to 0 at teacher_steps); 0: none
    teacher_program_floor: float = 0.0
    # docs/learning.md#shaping: weight of potential-based shaping from the env's potential; 0 off
    shaping: float = 0.0
    # docs/learning.md#program-bonus: the learner's reward gains this times the change in
    # the number of programs owned on each step (not paid back at the end); 0 off; None
    # the env's default_program_bonus, which the trainer (hm.train.run) applies
    program_bonus: float | None = None
    # None: 4/5 of total_timesteps (`auto_teacher_steps`, docs/learning.md#bonus3-teacher16-20m),
    # made concrete by the trainer before the config is saved, so a resume keeps the run's schedule
    teacher_steps: int | None = None
    # the teacher labels env slots 0, k, 2k, ... (global index); None: 8, or the largest
    # divisor of 8 that divides each device's env slots
    teacher_every: int | None = None
    # ((field, (value, ...)), ...): one member per combination (see `members`).
    sweep: tuple[tuple[str, tuple[float, ...]], ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResolvedConfig(TrainConfig):
    """Every value concrete: what the learner runs with, saved with the run.

    The fields of `TrainConfig`; those it may leave to auto-scaling (`None`) are
    redeclared here with their concrete types. `devices` is the number of devices used;
    `backend` the JAX platform it was resolved for; `auto` names the fields whose values
    were chosen automatically.
    """

    lr: float
    num_minibatches: int
    update_epochs: int
    precision: Literal["f32", "bf16"]
    teacher_steps: int
    teacher_every: int
    updates_per_call: int
    devices: int
    backend: str
    auto: tuple[str, ...] = ()

    @property
    def batch_size(self) -> int:
        """Samples per update: `num_envs * num_steps`."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def envs_per_device(self) -> int:
        return self.num_envs // self.devices

    @property
    def num_updates(self) -> int:
        """PPO updates in the run: `total_timesteps // batch_size`."""
        return self.total_timesteps // self.batch_size

    @property
    def num_calls(self) -> int:
        """Calls of the fused program, each `updates_per_call` updates (rounded up)."""
        return -(-self.num_updates // self.updates_per_call)

    @property
    def steps_per_call(self) -> int:
        """Env steps of one call, per member."""
        return self.batch_size * self.updates_per_call

    @property
    def num_members(self) -> int:
        return self.num_seeds * math.prod(len(values) for _, values in self.sweep)


@dataclasses.dataclass(frozen=True)
class Member:
    """One member of a population: its seed and hyper-parameters, and its name.

    `name` is what the member is known by in TensorBoard and the tools: the swept
    settings and the seed, e.g. `lr=0.0001,ent-coef=0.01,seed=1`.
    """

    index: int
    name: str
    seed: int
    hyper: dict[str, float]   # every field of SWEEPABLE, swept or not (integers as floats)


def members(config: "ResolvedConfig") -> list[Member]:
    """The population's members: each combination of the swept values (in the order the
    flags gave them, the last key varying fastest), then each seed within it."""
    names = [name for name, _ in config.sweep]
    out = []
    for combination in itertools.product(*(values for _, values in config.sweep)):
        for offset in range(config.num_seeds):
            settings = dict(zip(names, combination))
            # (a teacher weight left to the env, None, counts as 0 here: `hm.train.run`
            # makes it concrete before a run is resolved)
            hyper = {name: float(settings.get(name, getattr(config, name)) or 0.0) for name in SWEEPABLE}
            seed = config.seed + offset
            label = [f"{name.replace('_', '-')}={value:g}" for name, value in settings.items()]
            out.append(Member(index=len(out), name=",".join(label + [f"seed={seed}"]), seed=seed,
                              hyper=hyper))
    return out


def effective_devices(config: TrainConfig, available: int) -> int:
    """The device count a run uses: `config.devices` if set, else all available."""
    return available if config.devices is None else config.devices


def _auto_minibatches(batch: int, devices: int) -> int:
    """Minibatch count in [4, 64] nearest to batch/2048 that splits evenly over devices.

    The minibatch is near 2,048 samples; among the counts that divide the batch into
    equal per-device shares, the one whose minibatch size is closest to 2,048 wins
    (the larger count on a tie). If none does, `batch // 2048` clamped is returned
    and `validate` reports it.
    """
    if batch <= REFERENCE_BATCH:
        return REFERENCE_MINIBATCHES
    fits = [m for m in range(MIN_MINIBATCHES, MAX_MINIBATCHES + 1) if batch % (m * devices) == 0]
    if not fits:
        return min(MAX_MINIBATCHES, max(MIN_MINIBATCHES, batch // TARGET_MINIBATCH))
    return min(fits, key=lambda m: (abs(batch / m - TARGET_MINIBATCH), -m))


def _auto_epochs(batch: int) -> int:
    if batch <= REFERENCE_BATCH:
        return REFERENCE_EPOCHS
    return max(2, int(REFERENCE_EPOCHS // (batch / REFERENCE_BATCH)))


def auto_teacher_steps(total_timesteps: int) -> int:
    """The env steps at which the teacher's weight reaches 0 unless `teacher_steps` says:
    `TEACHER_SHARE` of the run, at least 1."""
    return max(1, round(TEACHER_SHARE * total_timesteps))


def _auto_lr(batch: int) -> float:
    return REFERENCE_LR if batch <= REFERENCE_BATCH else LARGE_BATCH_LR


def _auto_updates_per_call(batch: int, num_updates: int) -> int:
    target = max(1, TARGET_STEPS_PER_CALL // batch)
    k = 1 << (target.bit_length() - 1)  # largest power of two <= target
    return max(1, min(k, num_updates))


def resolve(config: TrainConfig, backend: str, num_devices: int) -> ResolvedConfig:
    """Fill every auto value. `num_devices` is the number available (see `validate`).

    Args:
        config: the user's choices.
        backend: JAX platform name ("cpu", "gpu", "tpu"); decides `precision="auto"`.
        num_devices: devices available; the run uses `config.devices` of them if set.

    Returns:
        The concrete configuration. Call `validate` first: `resolve` does not check.
    """
    devices = effective_devices(config, num_devices)
    batch = config.num_envs * config.num_steps
    auto = []
    minibatches = config.num_minibatches
    if minibatches is None:
        minibatches = _auto_minibatches(batch, devices)
        auto.append("num_minibatches")
    epochs = config.update_epochs
    if epochs is None:
        epochs = _auto_epochs(batch)
        auto.append("update_epochs")
    lr = config.lr
    if lr is None:
        lr = _auto_lr(batch)
        auto.append("lr")
    precision = config.precision
    if precision == "auto":
        precision = "bf16" if backend in ("tpu", "gpu", "cuda", "rocm") else "f32"
        auto.append("precision")
    k = config.updates_per_call
    if k is None:
        k = _auto_updates_per_call(batch, max(1, config.total_timesteps // batch))
        auto.append("updates_per_call")
    teacher_steps = config.teacher_steps
    if teacher_steps is None:
        teacher_steps = auto_teacher_steps(config.total_timesteps)
        auto.append("teacher_steps")
    teacher_every = config.teacher_every
    if teacher_every is None:
        teacher_every = math.gcd(config.num_envs // devices, TEACHER_EVERY)
        auto.append("teacher_every")
    if config.devices is None:
        auto.append("devices")
    fields = dataclasses.asdict(config)
    fields.update(
        lr=float(lr), num_minibatches=minibatches, update_epochs=epochs, precision=precision,
        updates_per_call=k, devices=devices, backend=backend, auto=tuple(auto), teacher_every=teacher_every,
        teacher_steps=teacher_steps,
    )
    for name in ("gamma", "gae_lambda", "clip_eps", "vf_coef", "ent_coef", "max_grad_norm", "value_norm",
                 "curriculum", "shaping"):
        fields[name] = float(fields[name])
    for name in ("teacher_coef", "program_bonus"):  # None: the env's default
        if getattr(config, name) is not None:
            fields[name] = float(getattr(config, name))
    fields["sweep"] = tuple((name, tuple(float(v) for v in values)) for name, values in config.sweep)
    if config.reward_weights is not None:
        fields["reward_weights"] = tuple((name, float(weight)) for name, weight in config.reward_weights)
    return ResolvedConfig(**fields)


def flag(name: str) -> str:
    """The command-line flag of a config field: `num_envs` -> `--num-envs`."""
    return "--" + name.replace("_", "-")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _check_int(config: TrainConfig, name: str, low: int, high: int | None = None, optional: bool = False):
    value = getattr(config, name)
    if optional and value is None:
        return
    span = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    if not _is_int(value) or value < low or (high is not None and value > high):
        raise ConfigError(flag(name), f"{flag(name)} must be {span}; got {value!r}")


def _check_float(config: TrainConfig, name: str, low: float, high: float | None, *,
                 low_open: bool = False, optional: bool = False):
    """Check `low <= value <= high` (`low < value` if `low_open`; no upper bound if None)."""
    value = getattr(config, name)
    if optional and value is None:
        return
    if high is None:
        span = f"a number {'>' if low_open else '>='} {low:g}"
    else:
        span = f"a number in {'(' if low_open else '['}{low:g}, {high:g}]"
    ok = _is_number(value) and (value > low if low_open else value >= low)
    ok = ok and (high is None or value <= high)
    if not ok:
        raise ConfigError(flag(name), f"{flag(name)} must be {span}; got {value!r}")


def validate(config: TrainConfig, num_devices: int) -> None:
    """Check every field; raise `ConfigError` naming the first bad flag and its range.

    Args:
        config: the user's choices.
        num_devices: devices available to the run (all processes together). The run
            uses `config.devices` of them when that is set.
    """
    _check_int(config, "devices", 1, num_devices, optional=True)
    devices = effective_devices(config, num_devices)
    if not _is_int(config.num_envs) or config.num_envs < 1 or config.num_envs % devices:
        raise ConfigError(
            "--num-envs",
            f"--num-envs must be a positive multiple of the device count ({devices}); "
            f"got {config.num_envs!r}")
    _check_int(config, "num_steps", 1)
    batch = config.num_envs * config.num_steps
    if not _is_int(config.total_timesteps) or config.total_timesteps < batch:
        raise ConfigError(
            "--total-timesteps",
            f"--total-timesteps must be at least one batch (--num-envs x --num-steps = "
            f"{batch}); got {config.total_timesteps!r}")
    _check_float(config, "lr", 0.0, 1.0, low_open=True, optional=True)
    _check_float(config, "gamma", 0.0, 1.0)
    _check_float(config, "gae_lambda", 0.0, 1.0)
    _check_int(config, "num_minibatches", 1, optional=True)
    minibatches = config.num_minibatches
    if minibatches is None:
        minibatches = _auto_minibatches(batch, devices)
    if batch % (minibatches * devices):
        how = "" if config.num_minibatches is not None else f" (chosen automatically: {minibatches})"
        raise ConfigError(
            "--num-minibatches",
            f"--num-minibatches{how} must split the batch (--num-envs x --num-steps = {batch}) "
            f"into minibatches whose size divides evenly over the {devices} device(s); "
            f"pick a count m with {batch} % (m x {devices}) == 0")
    _check_int(config, "update_epochs", 1, optional=True)
    _check_float(config, "clip_eps", 0.0, None, low_open=True)
    _check_float(config, "vf_coef", 0.0, None)
    _check_float(config, "ent_coef", 0.0, None)
    _check_float(config, "max_grad_norm", 0.0, None, low_open=True)
    _check_float(config, "value_norm", 0.0, 1.0)
    _check_int(config, "hidden_dim", 1)
    _check_int(config, "num_layers", 1)
    for name, allowed in (("network", NETWORKS), ("critic", CRITICS)):
        if name == "network" and config.network is None:
            continue
        if getattr(config, name) not in allowed:
            raise ConfigError(flag(name), f"{flag(name)} must be one of {', '.join(allowed)}; "
                                          f"got {getattr(config, name)!r}")
    if config.precision not in PRECISIONS:
        raise ConfigError(
            "--precision", f"--precision must be one of {', '.join(PRECISIONS)}; got {config.precision!r}")
    _check_int(config, "seed", 0, MAX_SEED)
    _check_int(config, "max_episode_steps", 1)
    _check_float(config, "curriculum", 0.0, 1.0)
    _check_int(config, "curriculum_max_stage", 2, NUM_STAGES)
    _check_int(config, "updates_per_call", 1, optional=True)
    k = config.updates_per_call
    if k is None:
        k = _auto_updates_per_call(batch, config.total_timesteps // batch)
    if batch * k > MAX_STEPS_PER_CALL:
        raise ConfigError(
            "--updates-per-call",
            f"--updates-per-call x --num-envs x --num-steps must be below 2^31 env steps "
            f"per call; got {k} x {batch}")
    _check_int(config, "num_seeds", 1, MAX_MEMBERS)
    if config.seed + config.num_seeds - 1 > MAX_SEED:
        raise ConfigError("--num-seeds", f"--seed + --num-seeds - 1 must be at most {MAX_SEED}; "
                                         f"got {config.seed} + {config.num_seeds} - 1")
    _check_float(config, "teacher_coef", 0.0, None, optional=True)
    _check_float(config, "teacher_program_value", 0.0, None)
    _check_float(config, "teacher_program_floor", 0.0, None)
    _check_int(config, "teacher_steps", 1, optional=True)
    _check_int(config, "teacher_every", 1, optional=True)
    _check_float(config, "shaping", 0.0, None)
    _check_float(config, "program_bonus", 0.0, None, optional=True)
    _check_sweep(config, num_devices)
    _check_reward_weights(config)
    explicit_every = config.teacher_every is not None
    if explicit_every and uses_teacher(config) and config.num_envs % (config.teacher_every * devices):
        raise ConfigError(
            "--teacher-every",
            f"--teacher-every must divide each device's share of --num-envs ({config.num_envs} / "
            f"{devices} device(s)); got {config.teacher_every!r}")


def _any_member_above_zero(config: TrainConfig, name: str) -> bool:
    """Whether setting `name` is above 0 for any member: its value (None counts as 0)
    or one of its swept values."""
    swept = [values for key, values in config.sweep if key == name]
    return (getattr(config, name) or 0.0) > 0 or any(_is_number(v) and v > 0 for values in swept for v in values)


def uses_teacher(config: TrainConfig) -> bool:
    """Whether any member trains with a teacher (`teacher_coef` > 0, or swept)."""
    return _any_member_above_zero(config, "teacher_coef")


def uses_teacher_program_value(config: TrainConfig) -> bool:
    """Whether any member's teacher values owned programs (`teacher_program_value` > 0, or swept)."""
    return _any_member_above_zero(config, "teacher_program_value")


def uses_teacher_program_floor(config: TrainConfig) -> bool:
    """Whether any member keeps a floor under its teacher's program labels
    (`teacher_program_floor` > 0, or swept)."""
    return _any_member_above_zero(config, "teacher_program_floor")


def uses_shaping(config: TrainConfig) -> bool:
    """Whether any member's reward is shaped (`shaping` > 0, or swept)."""
    return _any_member_above_zero(config, "shaping")


def uses_program_bonus(config: TrainConfig) -> bool:
    """Whether any member's reward has a program bonus (`program_bonus` > 0, or swept)."""
    return _any_member_above_zero(config, "program_bonus")


def _check_reward_weights(config: TrainConfig) -> None:
    """Each entry a (term name, finite number) pair, each name once. Whether the env has
    such terms is checked when the run is built (`hm.train.learner.reward_weight_vector`)."""
    if config.reward_weights is None:
        return
    seen = set()
    for entry in config.reward_weights:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str) and entry[0]):
            raise ConfigError("--reward-weights", f"--reward-weights entries are TERM=WEIGHT; got {entry!r}")
        name, weight = entry
        if not _is_number(weight):
            raise ConfigError("--reward-weights", f"--reward-weights {name}: the weight must be a finite "
                                                  f"number; got {weight!r}")
        if name in seen:
            raise ConfigError("--reward-weights", f"--reward-weights gives {name} twice")
        seen.add(name)


def _check_sweep(config: TrainConfig, num_devices: int) -> None:
    """Each swept key sweepable and given once, each value in its flag's range."""
    seen = set()
    count = config.num_seeds
    for entry in config.sweep:
        if not (isinstance(entry, tuple) and len(entry) == 2):
            raise ConfigError("--sweep", f"--sweep entries are KEY=V1,V2,...; got {entry!r}")
        name, values = entry
        key = str(name).replace("_", "-")
        if name not in SWEEPABLE:
            if name in ("seed", "num_seeds"):
                why = "use --num-seeds N to train seeds --seed, --seed + 1, ..."
            elif name in {f.name for f in dataclasses.fields(TrainConfig)}:
                why = (f"{key} changes the program's array shapes or structure, so its members "
                       "could not share one program; train separate runs instead")
            else:
                why = "there is no such setting"
            raise ConfigError("--sweep", f"--sweep cannot sweep {key!r}: {why}. Sweepable: "
                                         + ", ".join(n.replace("_", "-") for n in SWEEPABLE))
        if name in seen:
            raise ConfigError("--sweep", f"--sweep gives {key} twice; list all its values once: "
                                         f"{key}=V1,V2,...")
        seen.add(name)
        if not values:
            raise ConfigError("--sweep", f"--sweep {key}= has no values; give {key}=V1,V2,...")
        for value in values:
            if name in INTEGER_SWEEPABLE and _is_number(value):
                # the command line reads every sweep value as a float
                if not float(value).is_integer():
                    raise ConfigError("--sweep", f"--sweep {key}={value!r}: {flag(name)} takes whole "
                                                 "numbers")
                value = int(value)
            try:
                validate_value(config, name, value, num_devices)
            except ConfigError as error:
                raise ConfigError("--sweep", f"--sweep {key}={value!r}: {error.message}") from None
        if len(set(values)) != len(values):
            raise ConfigError("--sweep", f"--sweep {key} lists a value twice: {list(values)}")
        count *= len(values)
    if count > MAX_MEMBERS:
        raise ConfigError("--sweep", f"--sweep x --num-seeds gives {count} members; at most "
                                     f"{MAX_MEMBERS} fit one run")


def validate_value(config: TrainConfig, name: str, value: Any, num_devices: int) -> None:
    """Check `value` for field `name` by the field's own rule (`ConfigError` if out of range)."""
    validate(dataclasses.replace(config, **{name: value}, sweep=()), num_devices)


def to_dict(config: TrainConfig | ResolvedConfig) -> dict[str, Any]:
    """Plain JSON-able dict of a config (tuples become lists)."""
    out = dataclasses.asdict(config)
    if "auto" in out:
        out["auto"] = list(out["auto"])
    return out


def from_dict(data: dict[str, Any]) -> TrainConfig | ResolvedConfig:
    """Inverse of `to_dict`: a `ResolvedConfig` if `data` has `backend`, else a `TrainConfig`.

    Raises:
        ValueError: on unknown or missing keys (a file from another version).
    """
    cls = ResolvedConfig if "backend" in data else TrainConfig
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys: {sorted(unknown)}")
    data = dict(data)
    if "auto" in data:
        data["auto"] = tuple(data["auto"])
    if "sweep" in data:
        data["sweep"] = tuple((name, tuple(values)) for name, values in data["sweep"])
    if data.get("reward_weights") is not None:
        data["reward_weights"] = tuple((name, weight) for name, weight in data["reward_weights"])
    try:
        return cls(**data)
    except TypeError as error:
        raise ValueError(f"bad {cls.__name__}: {error}") from None
