"""What the learner maximises: the env's reward terms reweighted, and a program bonus.

Reward weights. `reward_weights` trains on a weighted sum of the env's reward terms
(`info["reward_terms"]`) instead of its reward: each named term gets its weight, every
other term weight 1; `()` is the env's own reward. The default drops the game's
exit-distance term (`distance=0`), which pays for approaching the exit and nothing for
leaving it, so agents learned to pace beside it. The game and its reward are unchanged:
evaluation and the episode returns in the logs are the game's. The weights are part of
the program, not swept.

A program bonus. `program_bonus` B > 0 adds to the learner's reward B times the change
in the number of programs the player owns on every step (the game's `programs_owned`,
before and after the step): +B for each program it comes to own, −B for each an UNDO
takes back. It is not paid back when the game ends, so it changes what the learner
maximises: the game's return plus B for each program owned at the end of the game, an
achievement-style bonus that keeps the agent taking and running programs after the
teacher has gone. 0 turns it off.

docs/results.md has the evidence for both defaults.
"""

import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from hm import game
from hm.train.checks import ConfigError, any_member_above_zero, check_float, is_number
from hm.train.features.base import Feature, Hyper

SWEEPABLE = ("program_bonus",)


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """The reward's fields of `TrainConfig` (see the module docstring)."""

    # ((term, weight), ...): the training reward's weight of each named reward term (the
    # others weigh 1); (): the env's own reward
    reward_weights: tuple[tuple[str, float], ...] = (("distance", 0.0),)
    # the learner's reward gains this times the change in the programs owned on each step; 0: off
    program_bonus: float = 3.0


def bonus_used(config) -> bool:
    """Whether any member's reward has a program bonus (`program_bonus` > 0, or swept)."""
    return any_member_above_zero(config, "program_bonus")


def validate(config, devices: int) -> None:
    del devices
    check_float(config, "program_bonus", 0.0, None)
    seen = set()
    for entry in config.reward_weights:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str) and entry[0]):
            raise ConfigError("--reward-weights", f"--reward-weights entries are TERM=WEIGHT; got {entry!r}")
        name, weight = entry
        if not is_number(weight):
            raise ConfigError("--reward-weights", f"--reward-weights {name}: the weight must be a finite "
                                                  f"number; got {weight!r}")
        if name in seen:
            raise ConfigError("--reward-weights", f"--reward-weights gives {name} twice")
        seen.add(name)


def resolve(config, devices: int) -> tuple[dict, list[str]]:
    """No automatic fields."""
    del config, devices
    return {}, []


def weight_vector(terms: tuple[str, ...], weights: tuple[tuple[str, float], ...]) -> np.ndarray | None:
    """The training reward's weight of each of the env's reward `terms`, in their order;
    None when every weight is 1 (the learner then uses the env's reward itself, exactly).

    Raises:
        ConfigError: a name that is not one of the terms (names `--reward-weights`).
    """
    vector = np.ones(len(terms), np.float32)
    for name, weight in weights:
        if name not in terms:
            raise ConfigError(
                "--reward-weights", f"--reward-weights {name}: not a reward term of this environment; its "
                                    f"terms are {', '.join(terms) or 'none'}")
        vector[terms.index(name)] = weight
    return None if np.all(vector == 1.0) else vector


class Reward(Feature):
    """The reward weights (None: the env's reward) and the program bonus (on or off).
    `count(game_state)` counts the programs owned before a step; the count after it is
    the step's `info["programs_owned"]` (of the game before any reset)."""

    weights: tuple[float, ...] | None = eqx.field(static=True)
    bonus: bool = eqx.field(static=True)
    count: Callable = eqx.field(static=True, default=game.programs_owned)

    def reward(self, reward, before, out, hyper: Hyper):
        if self.weights is not None:
            reward = out.reward_terms @ np.asarray(self.weights, np.float32)
        if self.bonus:
            owned_before = jax.vmap(jax.vmap(self.count))(before.state)
            gained = (out.info["programs_owned"] - owned_before).astype(jnp.float32)
            reward = reward + hyper["program_bonus"][:, None] * gained
        return reward


def build(env, config, axis_name: str | None, program_count: Callable | None = None) -> Reward | None:
    """The reward feature, or None when the learner maximises the env's own reward.
    `program_count(game_state)` replaces `hm.game.programs_owned` (tests count others).

    Raises:
        ConfigError: a reward term the env lacks (`--reward-weights`), or a program bonus
            for an env that does not report `programs_owned` (`--program-bonus`).
    """
    from hm.train.vector import game_shapes, info_keys, reward_terms

    del axis_name
    vector = weight_vector(reward_terms(env), config.reward_weights)
    bonus = bonus_used(config)
    knows_count = program_count is not None or isinstance(game_shapes(env), game.GameState)
    if bonus and not ("programs_owned" in info_keys(env) and knows_count):
        raise ConfigError("--program-bonus", f"--program-bonus: {type(env).__name__} has no programs to count; "
                                             "use --program-bonus 0 (or --config plain)")
    if vector is None and not bonus:
        return None
    return Reward(weights=None if vector is None else tuple(float(w) for w in vector), bonus=bonus,
                  count=program_count or game.programs_owned)
