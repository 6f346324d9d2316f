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
  shrink. At 2 epochs that is one gradient step per 1,024 samples.
  docs/results.md#default-lr has the evidence.

At or below the reference batch the reference values (4, 4, 2.5e-4) apply. An explicit
value always wins.

Curriculum. `curriculum` is the share of new training episodes that start at a later
stage, uniform over 2..`curriculum_max_stage`, with an inventory a player who got there
might hold (docs/rules.md#curriculum-starts); 0 trains on ordinary games only.
Evaluation always plays ordinary games from stage 1.

Training features. The teacher (`teacher_*`), the reward weights and program bonus
(`reward_weights`, `program_bonus`) and PopArt (`value_norm`) are modules of their own
(`hm.train.features`): each owns its fields (a dataclass mixin of `TrainConfig`), their
checks and its part of the program.

One set of defaults. `TrainConfig()` is the default config: `bin/train`, `make_train_fn`
and every tool run it unless told otherwise. `PRESETS` names whole configs a user may
start from (`bin/train --config plain`): `default`, and `plain`, PPO alone (no teacher,
no program bonus, the game's own reward).

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

from hm.train import features
from hm.train.checks import ConfigError, check_float, check_int, flag, is_int, is_number
from hm.train.network import CRITICS, VALUE_TRANSFORMS
from hm.train.network import KINDS as NETWORKS

REFERENCE_BATCH = 256 * 128
REFERENCE_MINIBATCHES = 4
REFERENCE_EPOCHS = 4
REFERENCE_LR = 2.5e-4
# The step size above the reference batch (docs/results.md).
LARGE_BATCH_LR = 1e-3
TARGET_MINIBATCH = 2048
MIN_MINIBATCHES, MAX_MINIBATCHES = 4, 64
# Auto `updates_per_call` fuses updates until one call covers about this many env
# steps, so the host's per-call work (logging, checkpoints) is amortised for small
# batches while large batches still report after every update.
TARGET_STEPS_PER_CALL = 1 << 18
# The per-call env-step count is reported as an int32.
MAX_STEPS_PER_CALL = (1 << 31) - 1
MAX_SEED = (1 << 32) - 1
# Hyper-parameters a population may sweep: scalars the program reads as traced values
# (PPO's, the curriculum's, and those of the training features).
SWEEPABLE = ("lr", "ent_coef", "vf_coef", "clip_eps", "gamma", "gae_lambda", "max_grad_norm",
             "curriculum", "curriculum_max_stage") + features.SWEEPABLE
# The sweepable settings that are integers (a sweep value must be a whole number).
INTEGER_SWEEPABLE = ("curriculum_max_stage",)
# Stages of the game (hm.game.constants.NUM_STAGES).
NUM_STAGES = 8
# Members of one population, at most (each holds its own envs, parameters and optimizer).
MAX_MEMBERS = 1024

PRECISIONS = ("auto", "f32", "bf16")


@dataclasses.dataclass(frozen=True)
class TrainConfig(*features.CONFIGS):
    """What the user chooses; the defaults are the project's one default config.
    `None` means auto (see the module docstring). The training features' fields come
    from their mixins (`hm.train.features`)."""

    num_envs: int = 2048
    num_steps: int = 32
    total_timesteps: int = 10_000_000
    lr: float | None = None
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int | None = None
    update_epochs: int | None = None
    clip_eps: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    hidden_dim: int = 256
    num_layers: int = 2
    # the network kind (hm.train.network, docs/networks.md): the MLP with the 5x5 cells
    # around the player
    network: str = "local"
    critic: str = "shared"
    # what the value head predicts (hm.train.network): V itself ("none") or h(V) ("sqrt")
    value_transform: str = "sqrt"
    precision: str = "auto"
    seed: int = 0
    max_episode_steps: int = 1000
    # share of new episodes that start at a later stage; 0: ordinary games only
    curriculum: float = 0.0
    curriculum_max_stage: int = NUM_STAGES
    updates_per_call: int | None = None
    devices: int | None = None
    num_seeds: int = 1
    # ((field, (value, ...)), ...): one member per combination (see `members`).
    sweep: tuple[tuple[str, tuple[float, ...]], ...] = ()


# Whole configs a run may start from (`bin/train --config NAME`); flags given beside it win.
PRESETS = {
    "default": TrainConfig(),
    # PPO alone: no teacher, no program bonus, the game's own reward, a critic of V itself
    "plain": TrainConfig(teacher_coef=0.0, program_bonus=0.0, reward_weights=(), value_transform="none"),
}


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
    search_every: int
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
            hyper = {name: float(settings.get(name, getattr(config, name))) for name in SWEEPABLE}
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
    feature_fields, feature_auto = features.resolve(config, devices)
    auto += feature_auto
    if config.devices is None:
        auto.append("devices")
    fields = dataclasses.asdict(config)
    fields.update(
        lr=float(lr), num_minibatches=minibatches, update_epochs=epochs, precision=precision,
        updates_per_call=k, devices=devices, backend=backend, auto=tuple(auto), **feature_fields,
    )
    for name in ("gamma", "gae_lambda", "clip_eps", "vf_coef", "ent_coef", "max_grad_norm", "value_norm",
                 "curriculum", "teacher_coef", "program_bonus"):
        fields[name] = float(fields[name])
    fields["sweep"] = tuple((name, tuple(float(v) for v in values)) for name, values in config.sweep)
    fields["reward_weights"] = tuple((name, float(weight)) for name, weight in config.reward_weights)
    return ResolvedConfig(**fields)


def validate(config: TrainConfig, num_devices: int) -> None:
    """Check every field; raise `ConfigError` naming the first bad flag and its range.

    Args:
        config: the user's choices.
        num_devices: devices available to the run (all processes together). The run
            uses `config.devices` of them when that is set.
    """
    check_int(config, "devices", 1, num_devices, optional=True)
    devices = effective_devices(config, num_devices)
    if not is_int(config.num_envs) or config.num_envs < 1 or config.num_envs % devices:
        raise ConfigError(
            "--num-envs",
            f"--num-envs must be a positive multiple of the device count ({devices}); "
            f"got {config.num_envs!r}")
    check_int(config, "num_steps", 1)
    batch = config.num_envs * config.num_steps
    if not is_int(config.total_timesteps) or config.total_timesteps < batch:
        raise ConfigError(
            "--total-timesteps",
            f"--total-timesteps must be at least one batch (--num-envs x --num-steps = "
            f"{batch}); got {config.total_timesteps!r}")
    check_float(config, "lr", 0.0, 1.0, low_open=True, optional=True)
    check_float(config, "gamma", 0.0, 1.0)
    check_float(config, "gae_lambda", 0.0, 1.0)
    check_int(config, "num_minibatches", 1, optional=True)
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
    check_int(config, "update_epochs", 1, optional=True)
    check_float(config, "clip_eps", 0.0, None, low_open=True)
    check_float(config, "vf_coef", 0.0, None)
    check_float(config, "ent_coef", 0.0, None)
    check_float(config, "max_grad_norm", 0.0, None, low_open=True)
    check_int(config, "hidden_dim", 1)
    check_int(config, "num_layers", 1)
    for name, allowed in (("network", NETWORKS), ("critic", CRITICS), ("value_transform", VALUE_TRANSFORMS)):
        if getattr(config, name) not in allowed:
            raise ConfigError(flag(name), f"{flag(name)} must be one of {', '.join(allowed)}; "
                                          f"got {getattr(config, name)!r}")
    if config.precision not in PRECISIONS:
        raise ConfigError(
            "--precision", f"--precision must be one of {', '.join(PRECISIONS)}; got {config.precision!r}")
    check_int(config, "seed", 0, MAX_SEED)
    check_int(config, "max_episode_steps", 1)
    check_float(config, "curriculum", 0.0, 1.0)
    check_int(config, "curriculum_max_stage", 2, NUM_STAGES)
    check_int(config, "updates_per_call", 1, optional=True)
    k = config.updates_per_call
    if k is None:
        k = _auto_updates_per_call(batch, config.total_timesteps // batch)
    if batch * k > MAX_STEPS_PER_CALL:
        raise ConfigError(
            "--updates-per-call",
            f"--updates-per-call x --num-envs x --num-steps must be below 2^31 env steps "
            f"per call; got {k} x {batch}")
    check_int(config, "num_seeds", 1, MAX_MEMBERS)
    if config.seed + config.num_seeds - 1 > MAX_SEED:
        raise ConfigError("--num-seeds", f"--seed + --num-seeds - 1 must be at most {MAX_SEED}; "
                                         f"got {config.seed} + {config.num_seeds} - 1")
    _check_sweep(config, num_devices)
    features.validate(config, devices)


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
            if name in INTEGER_SWEEPABLE and is_number(value):
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
