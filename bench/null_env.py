"""A do-nothing `hm.env.Environment` in HackMatrix's shapes, to time the learner alone.

The game state is two integers; observations, masks and rewards are rows of small
canned random tables (observation values on the game's 1/36 grid, so they are stored
compactly as the game's are), chosen by a cheap hash of the action. Episodes last 20-60
steps, so the auto-reset path is exercised as in the game. It has one reward term and
no programs or teacher: train it with `--config plain` (`PRESETS["plain"]`).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int32

from hm.env import Environment, HackMatrix
from hm.game import constants as C
from hm.game import observation


class NullState(eqx.Module):
    row: Int32[Array, ""]        # which canned observation is showing
    remaining: Int32[Array, ""]  # steps until the episode ends


class NullEnv(Environment):
    """See the module docstring."""

    obs_table: Float[Array, "rows obs"]
    mask_table: Bool[Array, "rows actions"]
    reward_table: Float[Array, " rows"]
    num_actions: int = eqx.field(static=True, default=C.NUM_ACTIONS)
    observation_shape: tuple[int, ...] = eqx.field(static=True, default=(C.OBS_FLAT_SIZE,))

    def __init__(self, rows: int = 16, seed: int = 0):
        rng = np.random.default_rng(seed)
        tail = rng.integers(0, observation.QUANTUM + 1, size=(rows, C.OBS_FLAT_SIZE - C.PLAYER_FEATURES))
        head = jnp.asarray(rng.random((rows, C.PLAYER_FEATURES)), jnp.float32)
        unpack = jax.vmap(lambda h, t: observation.unpack(observation.PackedObservation(head=h, tail=t)))
        mask = rng.random((rows, C.NUM_ACTIONS)) < 0.5
        mask[:, 0] = True
        self.obs_table = unpack(head, jnp.asarray(tail, jnp.uint8))
        self.mask_table = jnp.asarray(mask)
        self.reward_table = jnp.asarray(rng.normal(size=rows), jnp.float32)

    def reset_env(self, key, params):
        del params
        row_key, length_key = jax.random.split(key)
        rows = self.obs_table.shape[0]
        state = NullState(row=jax.random.randint(row_key, (), 0, rows, jnp.int32),
                          remaining=jax.random.randint(length_key, (), 20, 61, jnp.int32))
        return self.obs_table[state.row], state

    def step_env(self, key, game_state, action):
        del key
        rows = self.obs_table.shape[0]
        state = NullState(row=(game_state.row * 5 + action + 1) % rows, remaining=game_state.remaining - 1)
        reward = self.reward_table[state.row]
        info = {"reward_terms": {"reward": reward}, "stage": jnp.int32(1), "won": jnp.bool_(False)}
        return self.obs_table[state.row], state, reward, state.remaining <= 0, info

    def game_action_mask(self, game_state):
        return self.mask_table[game_state.row]

    def game_observation(self, game_state):
        return self.obs_table[game_state.row]

    def compact_observation(self, obs):
        return HackMatrix.compact_observation(self, obs)

    def expand_observation(self, compact):
        return HackMatrix.expand_observation(self, compact)

    def action_metrics(self, fractions):
        return HackMatrix.action_metrics(self, fractions)
