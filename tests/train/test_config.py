"""Auto-scaling table, validation messages, and saving of the training configuration."""

import dataclasses
import json

import pytest

from hm.train.config import (
    PRESETS,
    ConfigError,
    ResolvedConfig,
    TrainConfig,
    from_dict,
    members,
    resolve,
    to_dict,
    validate,
)


@pytest.mark.parametrize(
    "num_envs, num_steps, minibatches, epochs, lr",
    [
        (8, 16, 4, 4, 2.5e-4),          # tiny: reference values
        (256, 128, 4, 4, 2.5e-4),       # the reference batch itself
        (512, 128, 32, 2, 1e-3),        # scale 2: 65536/2048 = 32, 4//2 = 2
        (1024, 128, 64, 2, 1e-3),       # scale 4
        (2048, 32, 32, 2, 1e-3),        # the default: scale 2
        (2048, 128, 64, 2, 1e-3),       # scale 8: minibatches clamp at 64 (of 4,096)
        (8192, 128, 64, 2, 1e-3),       # scale 32: 64 of 16,384
        (384, 128, 24, 2, 1e-3),        # scale 1.5: 49152/2048 = 24, 4//1.5 = 2
    ],
)
def test_auto_scaling_table(num_envs, num_steps, minibatches, epochs, lr):
    resolved = resolve(TrainConfig(num_envs=num_envs, num_steps=num_steps), "cpu", 1)
    assert (resolved.num_minibatches, resolved.update_epochs) == (minibatches, epochs)
    assert resolved.lr == pytest.approx(lr, rel=1e-12)
    assert {"num_minibatches", "update_epochs", "lr"} <= set(resolved.auto)


def test_default_config_resolves_as_the_issue_says():
    resolved = resolve(TrainConfig(), "cpu", 1)
    # 2048 envs x 32 steps: 32 minibatches of 2,048 x 2 epochs (docs/results.md),
    # 4 updates (2^18 steps) per call
    assert resolved.batch_size == 65536 and resolved.minibatch_size == 2048
    assert (resolved.num_minibatches, resolved.update_epochs) == (32, 2)
    assert resolved.lr == 1e-3 and resolved.ent_coef == 0.01
    assert resolved.precision == "f32" and resolved.updates_per_call == 4


def test_explicit_values_win():
    config = TrainConfig(num_envs=2048, num_minibatches=16, update_epochs=3, lr=1e-3,
                         precision="bf16", updates_per_call=5, teacher_every=4, teacher_steps=1000, search_every=2)
    resolved = resolve(config, "cpu", 1)
    assert (resolved.num_minibatches, resolved.update_epochs, resolved.lr) == (16, 3, 1e-3)
    assert (resolved.precision, resolved.updates_per_call, resolved.teacher_every) == ("bf16", 5, 4)
    assert resolved.teacher_steps == 1000
    assert resolved.auto == ("devices",)


@pytest.mark.parametrize(("num_envs", "devices", "every"), [(2048, 1, 8), (2048, 4, 8), (12, 1, 4), (12, 2, 2),
                                                            (7, 1, 1)])
def test_auto_teacher_every_is_8_or_the_largest_divisor_of_8_that_splits_each_devices_envs(num_envs, devices,
                                                                                           every):
    resolved = resolve(TrainConfig(num_envs=num_envs, teacher_coef=1.0), "cpu", devices)
    assert resolved.teacher_every == every and "teacher_every" in resolved.auto
    validate(TrainConfig(num_envs=num_envs, teacher_coef=1.0), devices)   # auto never fails the check


def test_auto_teacher_steps_is_two_fifths_of_the_run():
    # the teacher's weight falls to 0 at 2/5 of the run (docs/results.md)
    resolved = resolve(TrainConfig(total_timesteps=12_345_678, teacher_coef=1.0), "cpu", 1)
    assert resolved.teacher_steps == 4_938_271 and "teacher_steps" in resolved.auto
    assert resolve(TrainConfig(total_timesteps=20_000_000), "cpu", 1).teacher_steps == 8_000_000
    assert resolve(TrainConfig(total_timesteps=1), "cpu", 1).teacher_steps == 1


def test_auto_lr_does_not_shrink_with_explicit_minibatches_or_epochs():
    # the old rule divided lr by minibatches x epochs; the step size is now per batch regime only
    for minibatches, epochs in ((16, 2), (64, 4)):
        config = TrainConfig(num_envs=2048, num_minibatches=minibatches, update_epochs=epochs)
        assert resolve(config, "cpu", 1).lr == 1e-3


@pytest.mark.parametrize("backend, precision", [("cpu", "f32"), ("tpu", "bf16"), ("gpu", "bf16")])
def test_auto_precision_per_backend(backend, precision):
    assert resolve(TrainConfig(), backend, 1).precision == precision


def test_auto_minibatches_split_over_devices():
    # 1000 x 48 = 48000: 48000/2048 = 23.4, but 23 does not divide it; 24 does (2,000 per minibatch)
    resolved = resolve(TrainConfig(num_envs=1000, num_steps=48), "cpu", 1)
    assert resolved.num_minibatches == 24 and resolved.batch_size % 24 == 0
    resolved = resolve(TrainConfig(num_envs=1000, num_steps=48, devices=8), "cpu", 8)
    assert resolved.batch_size % (resolved.num_minibatches * 8) == 0


def test_updates_per_call_auto():
    assert resolve(TrainConfig(num_envs=256, num_steps=128), "cpu", 1).updates_per_call == 8
    small = TrainConfig(num_envs=8, num_steps=16, total_timesteps=8 * 16 * 3)
    assert resolve(small, "cpu", 1).updates_per_call == 3  # never more than the run has
    resolved = resolve(TrainConfig(num_envs=256, num_steps=128, total_timesteps=256 * 128 * 10), "cpu", 1)
    assert resolved.num_updates == 10 and resolved.num_calls == 2


def test_devices():
    resolved = resolve(TrainConfig(num_envs=64), "cpu", 4)
    assert resolved.devices == 4 and resolved.envs_per_device == 16
    assert resolve(TrainConfig(num_envs=64, devices=2), "cpu", 4).devices == 2


BAD = [
    ({"num_envs": 6}, 4, "--num-envs", "--num-envs must be a positive multiple of the device count (4); got 6"),
    ({"num_envs": 0}, 1, "--num-envs", "positive multiple"),
    ({"num_envs": 2.0}, 1, "--num-envs", "positive multiple"),
    ({"num_steps": 0}, 1, "--num-steps", "--num-steps must be an integer >= 1; got 0"),
    ({"num_steps": True}, 1, "--num-steps", "integer >= 1"),
    ({"total_timesteps": 100}, 1, "--total-timesteps", "at least one batch"),
    ({"lr": 0.0}, 1, "--lr", "--lr must be a number in (0, 1]; got 0.0"),
    ({"lr": float("nan")}, 1, "--lr", "(0, 1]"),
    ({"gamma": 1.5}, 1, "--gamma", "--gamma must be a number in [0, 1]; got 1.5"),
    ({"gae_lambda": -0.1}, 1, "--gae-lambda", "[0, 1]"),
    ({"num_minibatches": 0}, 1, "--num-minibatches", "integer >= 1"),
    ({"num_minibatches": 3}, 1, "--num-minibatches", "must split the batch"),
    ({"num_envs": 8, "num_steps": 1, "num_minibatches": 4}, 4, "--num-minibatches", "over the 4 device(s)"),
    ({"num_envs": 2, "num_steps": 1, "total_timesteps": 2}, 1, "--num-minibatches", "chosen automatically: 4"),
    ({"update_epochs": 0}, 1, "--update-epochs", "integer >= 1"),
    ({"clip_eps": 0.0}, 1, "--clip-eps", "--clip-eps must be a number > 0; got 0.0"),
    ({"vf_coef": -1.0}, 1, "--vf-coef", "--vf-coef must be a number >= 0"),
    ({"ent_coef": -0.1}, 1, "--ent-coef", ">= 0"),
    ({"max_grad_norm": 0.0}, 1, "--max-grad-norm", "> 0"),
    ({"value_norm": 1.5}, 1, "--value-norm", "--value-norm must be a number in [0, 1]; got 1.5"),
    ({"value_norm": -0.1}, 1, "--value-norm", "[0, 1]"),
    ({"hidden_dim": 0}, 1, "--hidden-dim", "integer >= 1"),
    ({"num_layers": 0}, 1, "--num-layers", "integer >= 1"),
    ({"network": "transformer"}, 1, "--network", "--network must be one of mlp, conv, local; got 'transformer'"),
    ({"critic": "twin"}, 1, "--critic", "--critic must be one of shared, separate; got 'twin'"),
    ({"value_transform": "log"}, 1, "--value-transform", "--value-transform must be one of none, sqrt; got 'log'"),
    ({"precision": "fp16"}, 1, "--precision", "--precision must be one of auto, f32, bf16; got 'fp16'"),
    ({"seed": -1}, 1, "--seed", "--seed must be an integer in [0, 4294967295]; got -1"),
    ({"max_episode_steps": 0}, 1, "--max-episode-steps", "integer >= 1"),
    ({"updates_per_call": 0}, 1, "--updates-per-call", "integer >= 1"),
    ({"updates_per_call": 100_000}, 1, "--updates-per-call", "below 2^31"),
    ({"devices": 0}, 4, "--devices", "--devices must be an integer in [1, 4]; got 0"),
    ({"devices": 8}, 4, "--devices", "[1, 4]"),
]


@pytest.mark.parametrize("overrides, devices, flag, message", BAD, ids=[b[2] + str(i) for i, b in enumerate(BAD)])
def test_validation_names_the_flag_and_range(overrides, devices, flag, message):
    config = TrainConfig()
    for name, value in overrides.items():
        # bypass the dataclass (type-checked under jaxtyping in tests): the CLI may not be
        object.__setattr__(config, name, value)
    with pytest.raises(ConfigError) as error:
        validate(config, devices)
    assert error.value.flag == flag
    assert message in str(error.value)


def test_defaults_are_valid():
    validate(TrainConfig(), 1)
    validate(TrainConfig(), 4)
    validate(TrainConfig(num_envs=8, num_steps=16, total_timesteps=128), 1)


def test_every_field_is_a_cli_flag_and_resolved_adds_only_the_machine():
    from hm.tools.train import TrainArgs

    names = [f.name for f in dataclasses.fields(TrainConfig)]
    assert set(names) <= set(TrainArgs.__annotations__), "bin/train has a flag per field"
    resolved = [f.name for f in dataclasses.fields(ResolvedConfig)]
    assert resolved == names + ["backend", "auto"], "ResolvedConfig is TrainConfig, made concrete"


def test_dict_round_trip():
    config = TrainConfig(num_envs=64, lr=1e-3, num_seeds=2, sweep=(("ent_coef", (0.01, 0.05)),),
                         reward_weights=(("distance", 0.0), ("siphon_death", 0.5)))
    assert from_dict(json.loads(json.dumps(to_dict(config)))) == config, "through JSON, as config.json"
    assert from_dict(to_dict(config)) == config
    resolved = resolve(config, "tpu", 4)
    data = to_dict(resolved)
    assert isinstance(data["auto"], list)
    assert from_dict(data) == resolved and isinstance(from_dict(data), ResolvedConfig)
    with pytest.raises(ValueError, match="unknown"):
        from_dict({**to_dict(config), "bogus": 1})


# Populations.


def test_members_are_combinations_times_seeds():
    config = TrainConfig(seed=5, num_seeds=2, sweep=(("lr", (1e-4, 3e-4)), ("ent_coef", (0.01, 0.05))))
    validate(config, 1)
    resolved = resolve(config, "cpu", 1)
    found = members(resolved)
    assert resolved.num_members == len(found) == 8
    assert [m.name for m in found[:3]] == ["lr=0.0001,ent-coef=0.01,seed=5", "lr=0.0001,ent-coef=0.01,seed=6",
                                           "lr=0.0001,ent-coef=0.05,seed=5"]
    assert [m.index for m in found] == list(range(8))
    last = found[-1]
    assert (last.seed, last.hyper["lr"], last.hyper["ent_coef"]) == (6, 3e-4, 0.05)
    # what is not swept is the config's own (resolved) value
    assert {m.hyper["gamma"] for m in found} == {resolved.gamma}


def test_a_single_run_is_one_member():
    (member,) = members(resolve(TrainConfig(seed=3), "cpu", 1))
    assert member.name == "seed=3" and member.seed == 3 and member.hyper["lr"] == 1e-3


@pytest.mark.parametrize("sweep, num_seeds, message", [
    ((("bogus", (1.0,)),), 1, "--sweep cannot sweep 'bogus': there is no such setting"),
    ((("num_envs", (8.0, 16.0)),), 1, "--sweep cannot sweep 'num-envs': num-envs changes the program's array shapes"),
    ((("hidden_dim", (8.0,)),), 1, "cannot sweep 'hidden-dim'"),
    ((("seed", (1.0, 2.0)),), 1, "use --num-seeds N"),
    ((("lr", ()),), 1, "--sweep lr= has no values"),
    ((("lr", (1e-3, 2.0)),), 1, "--sweep lr=2.0: --lr must be a number in (0, 1]"),
    ((("gamma", (1.5,)),), 1, "--sweep gamma=1.5: --gamma must be a number in [0, 1]"),
    ((("ent_coef", (-1.0,)),), 1, "--sweep ent-coef=-1.0: --ent-coef must be a number >= 0"),
    ((("lr", (1e-3,)), ("lr", (2e-3,))), 1, "--sweep gives lr twice"),
    ((("lr", (1e-3, 1e-3)),), 1, "--sweep lr lists a value twice"),
    ((("lr", tuple(i / 1e4 for i in range(1, 41))),), 30, "gives 1200 members; at most 1024"),
    ((), 0, "--num-seeds must be an integer in [1, 1024]; got 0"),
])
def test_bad_populations_name_the_flag(sweep, num_seeds, message):
    with pytest.raises(ConfigError) as error:
        validate(TrainConfig(sweep=sweep, num_seeds=num_seeds), 1)
    assert error.value.flag == ("--num-seeds" if num_seeds == 0 else "--sweep")
    assert message in str(error.value)


def test_one_set_of_defaults_and_the_plain_preset():
    """`TrainConfig()` is the default config (`bin/train`, `make_train_fn`, the tools):
    kickstarted PPO with the program bonus on the local network, its critic predicting
    h(V); `plain` is PPO alone, and differs from it in nothing else."""
    default, plain = TrainConfig(), PRESETS["plain"]
    assert PRESETS["default"] == default
    assert (default.network, default.teacher_coef, default.program_bonus, default.reward_weights,
            default.value_transform) == ("local", 1.0, 3.0, (("distance", 0.0),), "sqrt")
    assert (plain.teacher_coef, plain.program_bonus, plain.reward_weights, plain.value_transform) == (0.0, 0.0, (), "none")
    assert dataclasses.replace(plain, teacher_coef=1.0, program_bonus=3.0, reward_weights=(("distance", 0.0),),
                               value_transform="sqrt") == default
