"""Tiny tabular environments with known answers (rejax / "probe" style).

`TabularEnv` is a small MDP given by tables; `probe_suite()` packs several classic
probe problems into one MDP (the start state picks the problem), so one compiled
training run checks them all:

* "constant": one action, reward +1, episode ends -> V = 1;
* "positive" / "negative": observation-dependent reward +1 / -1, ends -> V = +-1;
* "discount_first" -> "discount_second": reward 0 then +1 -> V = gamma, 1;
* "credit": two actions, +1 for action 1, -1 for action 0 -> pi(1) -> 1, V -> 1;
* "masked": action 2 would pay +10 but is illegal, action 1 pays +1 -> pi(2) == 0;
* "loop": reward +1 forever, cut at max_episode_steps -> V = 1/(1-gamma) only if
  truncation is bootstrapped (as death it would be about (1-gamma^k)/(1-gamma)).

`last_legal` is a scripted teacher (the highest-numbered legal action) for any MDP;
`taught_probe_suite()` is the probe suite with rewards that suit it.

`GridProbe` shows the same MDP in the game's observation layout, for networks that
read the board.

Each is an `hm.env.Environment`, as the learner takes it. `train_twice(config, env)`
trains a config on a probe for two compiled calls; `PLAIN` is the tiny plain-PPO config
the probes train with (the default config's teacher and program bonus need the game).
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int32

from hm.env import Environment
from hm.game import constants as C
from hm.train import PRESETS, TrainConfig, to_host
from hm.train.config import resolve
from hm.train.learner import init, make_train_fn
from hm.train.mesh import make_mesh

PROBE_STATES = ("constant", "positive", "negative", "discount_first", "discount_second",
                "credit", "masked", "loop")
STARTS = ("constant", "positive", "negative", "discount_first", "credit", "masked", "loop")


class TabularState(eqx.Module):
    state: Int32[Array, ""]


def plain(**fields) -> TrainConfig:
    """The plain-PPO preset with `fields` changed (the probes have no game to teach)."""
    return dataclasses.replace(PRESETS["plain"], **{"network": "mlp", **fields})


def info(reward):
    """What the learner reads of a step's info (`hm.train.vector`)."""
    return {"reward_terms": {"reward": reward}, "stage": jnp.int32(1), "won": jnp.bool_(False)}


class TabularEnv(Environment):
    """A finite MDP: one-hot observations of `num_states` states."""

    reward: Float[Array, "S A"]
    next_state: Int32[Array, "S A"]
    terminal: Bool[Array, "S A"]
    legal: Bool[Array, "S A"]
    start_logits: Float[Array, " S"]
    observation_shape: tuple[int, ...] = eqx.field(static=True)
    num_actions: int = eqx.field(static=True)

    def __init__(self, reward, next_state, terminal, legal, start_probs):
        self.reward = jnp.asarray(reward, jnp.float32)
        self.next_state = jnp.asarray(next_state, jnp.int32)
        self.terminal = jnp.asarray(terminal, bool)
        self.legal = jnp.asarray(legal, bool)
        with np.errstate(divide="ignore"):
            self.start_logits = jnp.asarray(np.log(np.asarray(start_probs, np.float64)), jnp.float32)
        states, self.num_actions = self.reward.shape
        self.observation_shape = (states,)

    def game_observation(self, game_state):
        return jax.nn.one_hot(game_state.state, self.observation_shape[0], dtype=jnp.float32)

    def reset_env(self, key, params):
        state = TabularState(state=jax.random.categorical(key, self.start_logits).astype(jnp.int32))
        return self.game_observation(state), state

    def step_env(self, key, game_state, action):
        s = game_state.state
        reward = self.reward[s, action]
        new = TabularState(state=self.next_state[s, action])
        return self.game_observation(new), new, reward, self.terminal[s, action], info(reward)

    def game_action_mask(self, game_state):
        return self.legal[game_state.state]


def probe_suite() -> TabularEnv:
    index = {name: i for i, name in enumerate(PROBE_STATES)}
    n, a = len(PROBE_STATES), 3
    reward = np.zeros((n, a))
    next_state = np.tile(np.arange(n)[:, None], (1, a))
    terminal = np.ones((n, a), bool)
    legal = np.zeros((n, a), bool)
    legal[:, 0] = True
    reward[index["constant"]] = 1.0
    reward[index["positive"]] = 1.0
    reward[index["negative"]] = -1.0
    terminal[index["discount_first"]] = False
    next_state[index["discount_first"]] = index["discount_second"]
    reward[index["discount_second"]] = 1.0
    legal[index["credit"], :2] = True
    reward[index["credit"]] = (-1.0, 1.0, 0.0)
    legal[index["masked"], :2] = True
    reward[index["masked"]] = (0.0, 1.0, 10.0)
    reward[index["loop"]] = 1.0
    terminal[index["loop"]] = False
    start = np.array([name in STARTS for name in PROBE_STATES], np.float64)
    return TabularEnv(reward, next_state, terminal, legal, start / start.sum())


def last_legal(states, mask, keys):
    """A teacher (`make_train_fn(..., teacher_policy=last_legal)`) that always says the
    highest-numbered legal action."""
    del states, keys
    return (mask.shape[1] - 1 - jnp.argmax(mask[:, ::-1], axis=1)).astype(jnp.int32)


def taught_probe_suite() -> TabularEnv:
    """The probe suite for the last-legal teacher; its rewards vary, so the advantages
    are well conditioned and runs can be compared to float rounding."""
    return probe_suite()


class GridProbe(Environment):
    """A tabular probe seen through the game's observation layout (for networks that
    read the board): state s is a pickup on cell s, the player stands on the last cell."""

    tabular: TabularEnv
    observation_shape: tuple[int, ...] = eqx.field(static=True, default=(C.OBS_FLAT_SIZE,))
    num_actions: int = eqx.field(static=True, default=0)

    def __init__(self, tabular: TabularEnv):
        assert tabular.observation_shape[0] <= C.NUM_CELLS
        self.tabular = tabular
        self.num_actions = tabular.num_actions

    def game_observation(self, state):
        head = C.PLAYER_FEATURES + C.NUM_PROGRAMS
        grid = jax.nn.one_hot(state.state, C.NUM_CELLS, dtype=jnp.float32)[:, None] * jax.nn.one_hot(
            C.CH_PICKUP, C.GRID_CHANNELS, dtype=jnp.float32)[None, :]
        player = jnp.zeros(head, jnp.float32).at[:2].set(1.0)  # row 5 / 5, col 5 / 5
        return jnp.concatenate([player, grid.reshape(-1)])

    def reset_env(self, key, params):
        _, state = self.tabular.reset_env(key, params)
        return self.game_observation(state), state

    def step_env(self, key, game_state, action):
        _, state, reward, done, step_info = self.tabular.step_env(key, game_state, action)
        return self.game_observation(state), state, reward, done, step_info

    def game_action_mask(self, game_state):
        return self.tabular.game_action_mask(game_state)


def train_twice(config: TrainConfig, env: Environment, **hooks):
    """Two calls of `config` on `env` (one device, CPU); the final state and the last
    call's metrics, on the host. `hooks`: `make_train_fn`'s `teacher_policy`, `program_count`."""
    resolved, mesh = resolve(config, "cpu", 1), make_mesh(1)
    step = make_train_fn(resolved, env, mesh, **hooks)
    state, _ = step(init(resolved, env=env, mesh=mesh))
    state, metrics = step(state)
    return to_host(state), to_host(metrics)
