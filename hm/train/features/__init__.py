"""Optional parts of training, one module each (`base.Feature` says what a feature is).

* `teacher`: kickstarting from the greedy scripted player (on by default);
* `reward`: the reward terms reweighted and the program bonus (on by default);
* `popart`: value normalisation (off by default);
* `search_teacher`: expert iteration, Gumbel MuZero over the real game (off by default).

`build(env, config, axis_name)` makes the active ones, in this order, refusing (with a
`ConfigError` naming the flag) what the env cannot serve.
"""

from hm.train.features import popart, reward, search_teacher, teacher
from hm.train.features.base import Feature, Hyper

MODULES = (teacher, reward, popart, search_teacher)
# The config field mixins, in the order of `MODULES`.
CONFIGS = (teacher.TeacherConfig, reward.RewardConfig, popart.PopArtConfig, search_teacher.SearchTeacherConfig)
SWEEPABLE = tuple(name for module in MODULES for name in module.SWEEPABLE)


def build(env, config, axis_name: str | None = None, teacher_policy=None, program_count=None) -> tuple[Feature, ...]:
    """The active features of `config` on `env`. `teacher_policy(states, mask, keys)`
    replaces the greedy teacher and `program_count(game_state)` the game's count of
    programs owned (tests use probe environments)."""
    hooks = {teacher: (teacher_policy,), reward: (program_count,)}
    built = (module.build(env, config, axis_name, *hooks.get(module, ())) for module in MODULES)
    return tuple(feature for feature in built if feature is not None)


def resolve(config, devices: int) -> tuple[dict, list[str]]:
    """Each feature's automatic fields made concrete, and their names."""
    fields, auto = {}, []
    for module in MODULES:
        more, names = module.resolve(config, devices)
        fields.update(more)
        auto += names
    return fields, auto


def validate(config, devices: int) -> None:
    """Each feature's fields in range (`ConfigError` naming the flag)."""
    for module in MODULES:
        module.validate(config, devices)


__all__ = ["CONFIGS", "Feature", "Hyper", "MODULES", "SWEEPABLE", "build", "resolve", "validate"]
