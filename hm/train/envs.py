"""Environments as the learner sees them, and the batched stepping around them.

`AbstractEnv` is the protocol: the four functions of `hm.game` (reset, step,
legal_actions, observe) on a single unbatched game, with the observation already flat,
plus how to store an observation compactly and how to name action statistics.
`HackMatrixEnv` adapts the game (through `hm.env.HackMatrix`) to it; `NullEnv` does
(almost) nothing in the same shapes, to measure the learner on its own; tests add tiny
probe environments.

Episode handling is not written here: `vector_step` runs every env through
`hm.env.Environment.step` (the adapter `Episodes`), the same truncation, auto-reset and
episode counters a user of `hm.env` gets:

* truncation: an episode that reaches `max_episode_steps` without ending is cut; the
  learner bootstraps from the value of its last observation (it is not a death);
* auto-reset: a finished slot continues with a new game drawn from that step's key, by
  the env's `reset_where`, which for HackMatrix generates games only for the slots that
  finished (`hm.game.reset_where`), so no reset pool is needed;
* a new run's slots hold no game (`vector_unstarted`, episode length -1) and take their
  first game in the first rollout (`vector_start`, the same `reset_where`), so starting
  a run does not compile the game a second time outside the training program;
* a curriculum: each slot's new episodes start as its `curriculum_share` and
  `curriculum_max_stage` ask (`hm.env.EnvParams`; one value per slot, so the members of
  a population may differ), through the env's `start` and `reset_where`. Envs without
  stages ignore them.
"""

import abc
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int32, Key, PRNGKeyArray, PyTree, UInt8

from hm.env import Environment, EnvParams, EnvState, HackMatrix
from hm.game import constants as C
from hm.tools import greedy


class EnvInfo(eqx.Module):
    """What the learner reports about a step, beyond the reward."""

    reward_terms: Float[Array, " terms"]  # in the order of the env's `reward_terms`
    stage: Int32[Array, ""]               # stage reached after the step
    won: Bool[Array, ""]


class AbstractEnv(eqx.Module):
    """A single, unbatched environment (batching is `jax.vmap` by the caller)."""

    obs_size: eqx.AbstractVar[int]
    num_actions: eqx.AbstractVar[int]
    reward_terms: eqx.AbstractVar[tuple[str, ...]]
    # What the learner maximises unless `--reward-weights` says otherwise: each named
    # term's weight, the others 1 (`hm.train.learner.reward_weight_vector`); () is the
    # env's own reward.
    default_reward_weights: ClassVar[tuple[tuple[str, float], ...]] = ()
    # The name of the scripted teacher `teacher_actions` runs (`--teacher-coef`); None: none.
    teacher: ClassVar[str | None] = None
    # Its weight unless `--teacher-coef` says otherwise (`hm.train.run.Trainer` applies it).
    default_teacher_coef: ClassVar[float] = 0.0
    # Whether the teacher takes a value of owned programs (`--teacher-program-value`).
    teacher_values_programs: ClassVar[bool] = False
    # What `potential` measures, for reward shaping (`--shaping`); None: the env has none.
    potential_name: ClassVar[str | None] = None
    # Whether `programs_owned` counts the player's programs, for `--program-bonus`.
    counts_programs: ClassVar[bool] = False
    # The program bonus unless `--program-bonus` says otherwise (`hm.train.run.Trainer` applies it).
    default_program_bonus: ClassVar[float] = 0.0
    # The network kind (`hm.train.network.KINDS`) unless `--network` says otherwise.
    default_network: ClassVar[str] = "mlp"

    @abc.abstractmethod
    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, Float[Array, " obs"]]:
        """A new, ordinary episode: `(state, flat observation)`."""

    def start(self, key: PRNGKeyArray, params: EnvParams) -> tuple[PyTree, Float[Array, " obs"]]:
        """A new training episode as `params` asks (HackMatrix: a curriculum start at a
        later stage, sometimes). This default is `reset(key)`: an env without stages has
        no curriculum."""
        del params
        return self.reset(key)

    @abc.abstractmethod
    def step(
        self, state: PyTree, action: Int32[Array, ""], key: PRNGKeyArray
    ) -> tuple[PyTree, Float[Array, " obs"], Float[Array, ""], Bool[Array, ""], EnvInfo]:
        """`(state, obs, reward, done, info)`; `done` means terminal (no bootstrap)."""

    @abc.abstractmethod
    def legal_actions(self, state: PyTree) -> Bool[Array, " actions"]:
        """Which actions are legal in `state`."""

    @abc.abstractmethod
    def observe(self, state: PyTree) -> Float[Array, " obs"]:
        """The flat observation of `state`."""

    def reset_where(self, done: Bool[Array, ""], state: PyTree, obs: Float[Array, " obs"],
                    key: PRNGKeyArray, params: EnvParams) -> tuple[PyTree, Float[Array, " obs"]]:
        """`start(key, params)` where `done`, else `(state, obs)`. This default starts a
        game for every slot (under `vmap`, on every step); override it where a new
        episode is expensive."""
        fresh, fresh_obs = self.start(key, params)
        return (jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, state),
                jnp.where(done, fresh_obs, obs))

    def teacher_actions(self, states: PyTree, mask: Bool[Array, "n actions"], keys: Key[Array, " n"],
                        program_value: Float[Array, " n"]) -> Int32[Array, " n"]:
        """The scripted teacher's action in each of a batch of states (leading axis n),
        state i's randomness from `keys[i]` alone. `program_value[i]` is what the teacher
        of state i's member adds for each program owned (`--teacher-program-value`; always
        0 for an env whose teacher has no such value, `teacher_values_programs` False).
        Envs with a `teacher` override it."""
        raise NotImplementedError(f"{type(self).__name__} has no teacher")

    def teacher_seeks(self, states: PyTree, actions: Int32[Array, " n"], keys: Key[Array, " n"]) -> Bool[Array, " n"]:
        """Whether each of the teacher's labels (`actions`, chosen by `teacher_actions` with
        the same `keys`) moves towards owning a program, the labels whose weight
        `--teacher-program-floor` keeps up. Envs with `teacher_values_programs` override it."""
        raise NotImplementedError(f"{type(self).__name__}'s teacher does not value programs")

    def potential(self, state: PyTree) -> Float[Array, ""]:
        """Φ(state) of a state still running, for potential-based reward shaping
        (`--shaping`; `hm.train.learner`). Envs with a `potential_name` override it."""
        raise NotImplementedError(f"{type(self).__name__} has no potential")

    def programs_owned(self, state: PyTree) -> Float[Array, ""]:
        """How many programs the player owns in `state`, for the learner's program bonus
        (`--program-bonus`; `hm.train.learner`). Envs with `counts_programs` override it."""
        raise NotImplementedError(f"{type(self).__name__} has no programs to count")

    def encode_obs(self, obs: Float[Array, " obs"]) -> PyTree:
        """A compact form of `obs` for the rollout buffer; `decode_obs` inverts it exactly."""
        return obs

    def decode_obs(self, compact: PyTree) -> Float[Array, " obs"]:
        return compact

    def action_metrics(self, fractions: Float[Array, " actions"]) -> dict[str, Float[Array, ""]]:
        """Named statistics of the fraction of steps that took each action."""
        return {}


# --- compact observations --------------------------------------------------------------

# Every value the game puts in the programs vector and the grid is k/3, k/4 or k/9
# (docs/rules.md §15) for small k: a multiple of 1/36. The tail is stored as the uint8
# round(36 x) and decoded as `u / 36` by the same XLA division the game uses, which
# reproduces the game's float32 values bit for bit over their range (k/3 for k <= 3,
# k/4, k/9 for k <= 9; tested on real observations). XLA on CPU turns division by a
# constant into multiplication by the reciprocal, so neither side is always the
# correctly rounded quotient (17/36, 5/3 are 1 ulp off), but both sides agree.
# The player vector (row/5, credits/50, ...) is kept as float32.
OBS_QUANTUM = 36


class PackedObservation(eqx.Module):
    """A flat observation with its tail stored as uint8 multiples of 1/36."""

    head: Float[Array, " head"]
    tail: UInt8[Array, " tail"]


def pack_obs(obs: Float[Array, " obs"], head_size: int) -> PackedObservation:
    tail = jnp.clip(jnp.round(obs[head_size:] * OBS_QUANTUM), 0, 255).astype(jnp.uint8)
    return PackedObservation(head=obs[:head_size], tail=tail)


def unpack_obs(packed: PackedObservation) -> Float[Array, " obs"]:
    tail = packed.tail.astype(jnp.float32) / OBS_QUANTUM
    return jnp.concatenate([packed.head, tail], axis=-1)


def hackmatrix_action_metrics(fractions: Float[Array, " actions"]) -> dict[str, Float[Array, ""]]:
    """Fractions of steps per action kind and per program (fractions of all steps)."""
    out = {
        "actions/move_frac": jnp.sum(fractions[: C.ACTION_SIPHON]),
        "actions/siphon_frac": fractions[C.ACTION_SIPHON],
        "actions/program_frac": jnp.sum(fractions[C.PROGRAM_ACTION_OFFSET:]),
    }
    for program, name in enumerate(C.PROGRAM_NAMES):
        out[f"actions/program/{name}"] = fractions[C.PROGRAM_ACTION_OFFSET + program]
    return out


class _HackMatrixShaped(AbstractEnv):
    """What every env in HackMatrix's shapes shares: the packed observation and the
    action metrics."""

    def encode_obs(self, obs):
        return pack_obs(obs, C.PLAYER_FEATURES)

    def decode_obs(self, compact):
        return unpack_obs(compact)

    def action_metrics(self, fractions):
        return hackmatrix_action_metrics(fractions)


class HackMatrixEnv(_HackMatrixShaped):
    """`hm.game` behind the learner's protocol: the rules of `hm.env.HackMatrix`, with the
    reward terms as one vector."""

    obs_size: int = eqx.field(static=True, default=C.OBS_FLAT_SIZE)
    num_actions: int = eqx.field(static=True, default=C.NUM_ACTIONS)
    reward_terms: tuple[str, ...] = eqx.field(static=True, default=C.REWARD_TERMS)
    # Train without the exit-distance shaping, which pays for approaching the exit and
    # nothing for leaving it, so agents learned to pace beside it (docs/learning.md#reward-weights).
    default_reward_weights: ClassVar[tuple[tuple[str, float], ...]] = (("distance", 0.0),)
    # the greedy scripted player of `bin/evaluate --baseline greedy` (hm.tools.greedy); it
    # teaches by default: docs/learning.md#teacher
    teacher: ClassVar[str | None] = "greedy"
    default_teacher_coef: ClassVar[float] = 1.0
    # it may add a value for each program owned (docs/learning.md#program-teacher)
    teacher_values_programs: ClassVar[bool] = True
    potential_name: ClassVar[str | None] = "the greedy player's heuristic value"
    counts_programs: ClassVar[bool] = True
    # +3 for each program owned, so that the agent keeps taking and running programs
    # after the teacher has gone (docs/learning.md#bonus3-teacher16-20m, with the teacher
    # to 4/5 of the run; 4 before 2026-11-29's evening, then 5 until 2026-11-30)
    default_program_bonus: ClassVar[float] = 3.0
    # the MLP with the 5x5 cells around the player (docs/learning.md#local-view)
    default_network: ClassVar[str] = "local"

    def reset(self, key):
        return self.start(key, EnvParams())   # the default params: an ordinary game

    def start(self, key, params):
        obs, state = HackMatrix().reset_env(key, params)
        return state, obs

    def step(self, state, action, key):
        obs, state, reward, done, info = HackMatrix().step_env(key, state, action)
        terms = jnp.stack([info["reward_terms"][name] for name in self.reward_terms])
        return state, obs, reward, done, EnvInfo(reward_terms=terms, stage=info["stage"],
                                                 won=info["won"])

    def legal_actions(self, state):
        return HackMatrix().game_action_mask(state)

    def observe(self, state):
        return HackMatrix().game_observation(state)

    def reset_where(self, done, state, obs, key, params):
        obs, state = HackMatrix().reset_env_where(done, key, state, obs, params)
        return state, obs

    def teacher_actions(self, states, mask, keys, program_value):
        return greedy.choose_each(states, mask, keys, program_weight=program_value)

    def teacher_seeks(self, states, actions, keys):
        return greedy.seeks_program(states, actions, keys)

    def potential(self, state):
        # −0.01 × exit distance − 0.5 × enemies next to the player that can act next turn
        return greedy.value(state)

    def programs_owned(self, state):
        return greedy.programs_owned(state)


class NullState(eqx.Module):
    row: Int32[Array, ""]        # which canned observation is showing
    remaining: Int32[Array, ""]  # steps until the episode ends


class NullEnv(_HackMatrixShaped):
    """A do-nothing environment in HackMatrix's shapes, to time the learner alone.

    The state is two integers; observations, masks and rewards are rows of small
    canned random tables (observation values on the game's 1/36 grid, decoded as the
    learner decodes them, so they pack the same way), chosen by a cheap hash of the
    action. Episodes last 20-60 steps, so the
    auto-reset path is exercised as in the game.
    """

    obs_table: Float[Array, "rows obs"]
    mask_table: Bool[Array, "rows actions"]
    reward_table: Float[Array, " rows"]
    obs_size: int = eqx.field(static=True, default=C.OBS_FLAT_SIZE)
    num_actions: int = eqx.field(static=True, default=C.NUM_ACTIONS)
    reward_terms: tuple[str, ...] = eqx.field(static=True, default=C.REWARD_TERMS)

    def __init__(self, rows: int = 16, seed: int = 0):
        rng = np.random.default_rng(seed)
        tail = rng.integers(0, OBS_QUANTUM + 1, size=(rows, C.OBS_FLAT_SIZE - C.PLAYER_FEATURES))
        head = jnp.asarray(rng.random((rows, C.PLAYER_FEATURES)), jnp.float32)
        unpack = jax.vmap(lambda h, t: unpack_obs(PackedObservation(head=h, tail=t)))
        mask = rng.random((rows, C.NUM_ACTIONS)) < 0.5
        mask[:, 0] = True
        self.obs_table = unpack(head, jnp.asarray(tail, jnp.uint8))
        self.mask_table = jnp.asarray(mask)
        self.reward_table = jnp.asarray(rng.normal(size=rows), jnp.float32)

    def reset(self, key):
        row_key, length_key = jax.random.split(key)
        rows = self.obs_table.shape[0]
        state = NullState(row=jax.random.randint(row_key, (), 0, rows, jnp.int32),
                          remaining=jax.random.randint(length_key, (), 20, 61, jnp.int32))
        return state, self.obs_table[state.row]

    def step(self, state, action, key):
        rows = self.obs_table.shape[0]
        state = NullState(row=(state.row * 5 + action + 1) % rows, remaining=state.remaining - 1)
        reward = self.reward_table[state.row]
        terms = jnp.zeros((len(self.reward_terms),), jnp.float32).at[0].set(reward)
        info = EnvInfo(reward_terms=terms, stage=jnp.int32(1), won=jnp.bool_(False))
        return state, self.obs_table[state.row], reward, state.remaining <= 0, info

    def legal_actions(self, state):
        return self.mask_table[state.row]

    def observe(self, state):
        return self.obs_table[state.row]


# --- batches of environments, stepped through hm.env --------------------------------------


class Episodes(Environment):
    """Any `AbstractEnv` as an `hm.env.Environment`, whose `step` adds truncation,
    auto-reset and the episode counters. `step`'s `info` holds `EnvInfo`'s fields
    (`reward_terms` as the env's vector) besides the keys `Environment.step` adds, and,
    when `potentials` is set, the rules' `potential` of the state before the step
    (`potential`) and after it (`next_potential`, 0 when the episode ended there), and
    when `program_counts` is set, the rules' `programs_owned` before the step
    (`programs_owned`) and after it (`next_programs_owned`, of the game's last state
    where the episode ended there)."""

    rules: AbstractEnv
    potentials: bool = eqx.field(static=True, default=False)
    program_counts: bool = eqx.field(static=True, default=False)

    @property
    def num_actions(self) -> int:
        return self.rules.num_actions

    @property
    def observation_shape(self) -> tuple[int, ...]:
        return (self.rules.obs_size,)

    def reset_env(self, key, params):
        state, obs = self.rules.start(key, params)
        return obs, state

    def step_env(self, key, game_state, action):
        new_state, obs, reward, done, info = self.rules.step(game_state, action, key)
        done = jnp.asarray(done, bool)
        out = {"reward_terms": info.reward_terms, "stage": info.stage, "won": info.won}
        if self.potentials:
            out["potential"] = self.rules.potential(game_state)
            out["next_potential"] = jnp.where(done, 0.0, self.rules.potential(new_state))
        if self.program_counts:
            out["programs_owned"] = self.rules.programs_owned(game_state)
            out["next_programs_owned"] = self.rules.programs_owned(new_state)
        return obs, new_state, jnp.asarray(reward, jnp.float32), done, out

    def game_action_mask(self, game_state):
        return self.rules.legal_actions(game_state)

    def game_observation(self, game_state):
        return self.rules.observe(game_state)

    def reset_env_where(self, done, key, game_state, obs, params):
        state, obs = self.rules.reset_where(done, game_state, obs, key, params)
        return obs, state


class VecEnvState(eqx.Module):
    """A batch of `n` games and what the learner keeps about each (leading axis n)."""

    state: PyTree                      # the env's state, every leaf batched
    obs: Float[Array, "n obs"]         # current observation (network input)
    mask: Bool[Array, "n actions"]     # current legal actions
    episode_return: Float[Array, " n"]  # undiscounted return so far this episode
    episode_length: Int32[Array, " n"]  # steps so far this episode; -1: no game yet


class StepOutput(eqx.Module):
    """What one batched step produced, before finished games were replaced."""

    final_obs: Float[Array, "n obs"]   # observation after the step (for bootstrapping)
    reward: Float[Array, " n"]
    done: Bool[Array, " n"]            # terminal
    truncated: Bool[Array, " n"]       # hit the step limit without terminating
    info: EnvInfo                      # batched
    episode_return: Float[Array, " n"]  # return of the episode that just finished (if any)
    episode_length: Int32[Array, " n"]
    # with `vector_step(..., potentials=True)`: the env's potential before the step and
    # after it (0 where the episode ended; before any reset); otherwise None
    potential: Float[Array, " n"] | None = None
    next_potential: Float[Array, " n"] | None = None
    # with `vector_step(..., program_counts=True)`: the programs owned before the step and
    # after it (the ended game's, where the episode ended; before any reset); otherwise None
    programs_owned: Float[Array, " n"] | None = None
    next_programs_owned: Float[Array, " n"] | None = None


_RESET_SHAPES: dict[Any, PyTree] = {}


def reset_shapes(env: AbstractEnv) -> PyTree:
    """Shapes and dtypes of one game's state (`jax.ShapeDtypeStruct` leaves).

    Tracing a game's `reset` takes about a second, so the answer is remembered per
    env class, static fields and array shapes (all a state's shape can depend on).
    """
    arrays, static = eqx.partition(env, eqx.is_array)
    key = (jax.tree.structure(static), tuple(jax.tree.leaves(static)),
           tuple((a.shape, a.dtype) for a in jax.tree.leaves(arrays)))
    try:
        hash(key)
    except TypeError:
        return jax.eval_shape(env.reset, jax.random.key(0))[0]
    if key not in _RESET_SHAPES:
        _RESET_SHAPES[key] = jax.eval_shape(env.reset, jax.random.key(0))[0]
    return _RESET_SHAPES[key]


def vector_unstarted(env: AbstractEnv, n: int) -> VecEnvState:
    """`n` slots holding no game yet (zeros, episode length -1); see `vector_start`."""

    def zeros(shape):
        return jnp.zeros((n,) + shape.shape, shape.dtype)

    return VecEnvState(state=jax.tree.map(zeros, reset_shapes(env)),
                       obs=jnp.zeros((n, env.obs_size), jnp.float32),
                       mask=jnp.ones((n, env.num_actions), bool),
                       episode_return=jnp.zeros((n,), jnp.float32),
                       episode_length=jnp.full((n,), -1, jnp.int32))


def _per_slot(n: int, curriculum_share, curriculum_max_stage):
    """The curriculum settings as one value per slot ([n] each); `vector_start` and
    `vector_step` build each slot's `EnvParams` inside their `vmap`."""
    return (jnp.broadcast_to(jnp.asarray(curriculum_share, jnp.float32), (n,)),
            jnp.broadcast_to(jnp.asarray(curriculum_max_stage, jnp.int32), (n,)))


def vector_start(env: AbstractEnv, envs: VecEnvState, keys: Key[Array, " n"],
                 curriculum_share: Float[Array, " n"] | float = 0.0,
                 curriculum_max_stage: Int32[Array, " n"] | int = C.NUM_STAGES) -> VecEnvState:
    """Give every slot that holds no game yet a new game from its key (by the env's
    `reset_where`, the auto-reset's own path: no second program to compile), started as
    the slot's curriculum settings ask (one value per slot, or one for all)."""
    new = envs.episode_length < 0
    slots = _per_slot(new.shape[0], curriculum_share, curriculum_max_stage)

    def start(done, state, obs, key, share, max_stage):
        params = EnvParams(curriculum_share=share, curriculum_max_stage=max_stage)
        return env.reset_where(done, state, obs, key, params)

    state, obs = jax.vmap(start)(new, envs.state, envs.obs, keys, *slots)
    mask = jnp.where(new[:, None], jax.vmap(env.legal_actions)(state), envs.mask)
    return VecEnvState(state=state, obs=obs, mask=mask, episode_return=envs.episode_return,
                       episode_length=jnp.maximum(envs.episode_length, 0))


def vector_step(
    env: AbstractEnv,
    envs: VecEnvState,
    actions: Int32[Array, " n"],
    keys: Key[Array, " n"],
    max_episode_steps: int,
    curriculum_share: Float[Array, " n"] | float = 0.0,
    curriculum_max_stage: Int32[Array, " n"] | int = C.NUM_STAGES,
    potentials: bool = False,
    program_counts: bool = False,
) -> tuple[VecEnvState, StepOutput]:
    """Step every game with `hm.env`'s `step` (`Episodes(env)`): episodes are cut at
    `max_episode_steps`, and finished slots continue with a new game from their key,
    started as the slot's curriculum settings ask (one value per slot, or one for all).
    `potentials` also reports the env's `potential` before and after each step, and
    `program_counts` its `programs_owned`."""
    slots = _per_slot(actions.shape[0], curriculum_share, curriculum_max_stage)

    def step(key, game_state, episode_return, episode_length, action, share, max_stage):
        state = EnvState(game=game_state, episode_return=episode_return,
                         episode_length=episode_length)
        params = EnvParams(max_episode_steps=max_episode_steps, curriculum_share=share,
                           curriculum_max_stage=max_stage)
        episodes = Episodes(rules=env, potentials=potentials, program_counts=program_counts)
        obs, state, reward, _, info = episodes.step(key, state, action, params)
        env_info = EnvInfo(reward_terms=info["reward_terms"], stage=info["stage"], won=info["won"])
        return obs, state, reward, info, env_info

    obs, state, reward, info, env_info = jax.vmap(step)(
        keys, envs.state, envs.episode_return, envs.episode_length, actions, *slots)
    new = VecEnvState(state=state.game, obs=obs, mask=info["action_mask"],
                      episode_return=state.episode_return, episode_length=state.episode_length)
    out = StepOutput(final_obs=info["final_observation"], reward=reward,
                     done=info["terminated"], truncated=info["truncated"], info=env_info,
                     episode_return=info["episode_return"],
                     episode_length=info["episode_length"],
                     potential=info.get("potential"), next_potential=info.get("next_potential"),
                     programs_owned=info.get("programs_owned"),
                     next_programs_owned=info.get("next_programs_owned"))
    return new, out


def describe(env: AbstractEnv) -> dict[str, Any]:
    """Identity of an environment, for checkpoints (refuse mismatched restores)."""
    return {"env": type(env).__name__, "obs_size": env.obs_size, "num_actions": env.num_actions,
            "reward_terms": list(env.reward_terms)}
