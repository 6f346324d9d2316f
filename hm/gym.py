"""Gymnasium front ends for HackMatrix: one game, and a batch of games in one compiled call.

`import hm.gym` registers ``hm/HackMatrix-v0``:

    env = gymnasium.make("hm/HackMatrix-v0")                 # HackMatrixEnv: one game
    envs = gymnasium.make_vec("hm/HackMatrix-v0", num_envs=2048)   # HackMatrixVectorEnv

Both are thin host-side shells around `hm.env` (the functional JAX environment): the
rules, the truncation and the auto-reset live there once, and these classes only move
arrays between numpy and JAX and follow Gymnasium's conventions.

* The action space is `Discrete(28)` (docs/rules.md §3). An illegal action follows the
  game's rule (§5): reward 0, the episode ends (`terminated`), and `info["illegal"]` says so.
  An action outside 0..27 is not a move at all and raises `ValueError`.
* The observation (§15) is the flat float32[1545] vector (`observation_mode="flat"`, the
  default) or, with `observation_mode="dict"`, a `Dict` of `player` float32[10],
  `programs` int8[23] (`MultiBinary`) and `grid` float32[6, 6, 42] ([row][col][channel]).
* Legal actions: `info["action_mask"]` and `action_masks()` (sb3-contrib MaskablePPO's
  convention).
* The vector env steps all games with one jitted `vmap` of `hm.env`'s step per call, and
  resets finished games within the same step (`AutoresetMode.SAME_STEP`): the final
  observation and info of a finished episode are in `info["final_obs"]` and
  `info["final_info"]`, each with its `_key` mask, as Gymnasium's own vector envs do.

Episode length: the registration caps episodes at 1000 steps, as Gymnasium's own
registrations do (CartPole's 500): `gymnasium.make` wraps the single env in `TimeLimit`,
and `gymnasium.make_vec` passes `max_episode_steps` to the vector env, which hands it to
`hm.env`'s truncation. The single env itself never truncates, so `TimeLimit` (with
`make(..., max_episode_steps=N)`) is the one limit it has.
"""

import functools
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from jaxtyping import Array, Bool, Int32, PRNGKeyArray

from hm.env import EnvParams, EnvState, HackMatrix
from hm.game import GameState
from hm.game import constants as C

ENV_ID = "hm/HackMatrix-v0"
MAX_EPISODE_STEPS = 1000          # the registered cap (docs/rules.md §13: a wrapper's choice)
OBSERVATION_MODES = ("flat", "dict")
RENDER_MODES = ("ansi", "rgb_array")
RENDER_FPS = 4
# Episodes of the single env end by TimeLimit; hm.env's own cap is set past any length an
# int32 step counter reaches, so it never fires first.
_NO_CAP = np.iinfo(np.int32).max


# --- observation spaces ------------------------------------------------------------------

_HEAD = C.PLAYER_FEATURES + C.NUM_PROGRAMS     # player vector, then programs; the grid after

def _observation_high() -> np.ndarray:
    """The largest value each feature of the flat observation can take (§15).

    Most features are clamped, one-hot or at most 1 by the rules. Three are not clamped
    (§15.1, §15.3): data siphons / 10 and (attack − 1) / 2 grow without a rule-given
    bound (SIPH+, ATK+ every stage), and a cell's credits / energy / 3. For those the
    bound is the largest value the game's state can hold (int32 player counters, int8
    cell resources), so no observation the engine produces lies outside the space.
    """
    player = np.ones(C.PLAYER_FEATURES, np.float64)
    int32_max = float(np.iinfo(np.int32).max)
    player[6] = int32_max / 10                  # data siphons / 10
    player[7] = (int32_max - 1) / 2             # (attack − 1) / 2
    grid = np.ones((C.ROWS, C.COLS, C.GRID_CHANNELS), np.float64)
    grid[..., C.CH_CREDITS] = grid[..., C.CH_ENERGY] = float(np.iinfo(np.int8).max) / 3
    flat = np.concatenate([player, np.ones(C.NUM_PROGRAMS), grid.reshape(-1)])
    # Rounding to float32 is monotonic, so an observation (itself a rounded quotient)
    # never exceeds the rounded bound.
    return flat.astype(np.float32)


_HIGH = _observation_high()
assert _HIGH.shape == (C.OBS_FLAT_SIZE,)


def observation_space(observation_mode: str = "flat") -> spaces.Space:
    """The observation space of one game in `observation_mode` ("flat" or "dict")."""
    _check_observation_mode(observation_mode)
    if observation_mode == "flat":
        return spaces.Box(0.0, _HIGH, dtype=np.float32)
    return spaces.Dict({
        "player": spaces.Box(0.0, _HIGH[:C.PLAYER_FEATURES], dtype=np.float32),
        "programs": spaces.MultiBinary(C.NUM_PROGRAMS),
        "grid": spaces.Box(0.0, _HIGH[_HEAD:].reshape(C.ROWS, C.COLS, C.GRID_CHANNELS), dtype=np.float32),
    })


def _check_observation_mode(observation_mode: str) -> None:
    if observation_mode not in OBSERVATION_MODES:
        raise ValueError(f"observation_mode must be one of {OBSERVATION_MODES}, got {observation_mode!r}")


def _check_render_mode(render_mode: str | None) -> None:
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode must be None or one of {RENDER_MODES}, got {render_mode!r}")


def _shaped(flat: np.ndarray, observation_mode: str) -> np.ndarray | dict[str, np.ndarray]:
    """The flat observation(s) `[..., 1545]` as the space wants them.

    On the host, so that both modes share one compiled program. The split is the one of
    `hm.game.Observation` (player, programs, grid); tests check the two agree. The arrays
    returned are new (the caller's to keep and write), never views of `flat`.
    """
    if observation_mode == "flat":
        return np.array(flat)
    batch = flat.shape[:-1]
    return {"player": flat[..., :C.PLAYER_FEATURES].copy(),
            "programs": flat[..., C.PLAYER_FEATURES:_HEAD].astype(np.int8),
            "grid": flat[..., _HEAD:].reshape(batch + (C.ROWS, C.COLS, C.GRID_CHANNELS)).copy()}


# --- the compiled calls --------------------------------------------------------------------
# Module-level and jitted with the env as a static argument (it has no arrays), so every
# instance of a class shares one compiled program per shape instead of compiling its own.
# The vector env's calls donate the games they replace, so a step updates them in place.

def _random_key(rng: np.random.Generator) -> PRNGKeyArray:
    """A JAX key drawn from a numpy generator: 64 bits of it, whatever the key type."""
    high, low = (int(x) for x in rng.integers(0, 2**32, size=2, dtype=np.uint64))
    return jax.random.fold_in(jax.random.key(high), low)


class _WaitForReset(HackMatrix):
    """HackMatrix without the auto-reset: a finished game stays as it ended.

    A Gymnasium env is reset by its user, so the single env keeps the final game (its
    `render()` shows the board the episode ended on, as a video recorder expects) and
    generates no new game that `reset()` would throw away. Everything else is
    `Environment.step`'s.
    """

    def reset_env_where(self, done, key, game_state, obs, params):
        del done, key, params
        return obs, game_state


@functools.partial(jax.jit, static_argnums=0)
def _reset_one(env: HackMatrix, params: EnvParams, key: PRNGKeyArray):
    obs, state = env.reset(key, params)
    return obs, state, env.action_mask(state)


@functools.partial(jax.jit, static_argnums=0)
def _step_one(env: HackMatrix, params: EnvParams, key: PRNGKeyArray, state: EnvState,
              action: Int32[Array, ""]):
    key, step_key = jax.random.split(key)
    obs, state, reward, done, info = env.step(step_key, state, action, params)
    return key, obs, state, reward, done, info


@functools.partial(jax.jit, static_argnums=(0, 3))
def _reset_many(env: HackMatrix, params: EnvParams, key: PRNGKeyArray, num_envs: int):
    obs, states = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)
    return obs, states, jax.vmap(env.action_mask)(states)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=2)
def _reset_some(env: HackMatrix, params: EnvParams, states: EnvState, key: PRNGKeyArray,
                reset_mask: Bool[Array, " n"]):
    """Fresh games where `reset_mask`, the others kept (`reset(options={"reset_mask": ...})`)."""
    num_envs = reset_mask.shape[0]
    fresh_obs, fresh = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)

    def select(new, old):
        return jnp.where(reset_mask.reshape((num_envs,) + (1,) * (new.ndim - 1)), new, old)

    states = jax.tree.map(select, fresh, states)
    obs = select(fresh_obs, jax.vmap(env.observation)(states))
    return obs, states, jax.vmap(env.action_mask)(states)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=2)
def _step_many(env: HackMatrix, params: EnvParams, states: EnvState, key: PRNGKeyArray,
               actions: Int32[Array, " n"]):
    """One step of every game: the whole batch in one compiled call."""
    keys = jax.random.split(key, actions.shape[0] + 1)
    obs, states, reward, done, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        keys[1:], states, actions, params)
    return states, keys[0], obs, reward, done, info


def _check_actions(actions: Any, shape: tuple[int, ...]) -> np.ndarray:
    """`actions` as int32 of `shape`, refusing what is not an action index 0..27."""
    actions = np.asarray(actions)
    if actions.shape != shape:
        raise ValueError(f"action must have shape {shape}, got {actions.shape}")
    if not np.issubdtype(actions.dtype, np.integer):
        raise ValueError(f"action must be an integer in 0..{C.NUM_ACTIONS - 1}, got dtype {actions.dtype}")
    if actions.size and (actions.min() < 0 or actions.max() >= C.NUM_ACTIONS):
        raise ValueError(f"action must be in 0..{C.NUM_ACTIONS - 1} (Discrete({C.NUM_ACTIONS})), got {actions}")
    return actions.astype(np.int32)


def _to_numpy(tree: Any) -> Any:
    """Host copies (writable, owned by the caller) of a pytree of arrays, in one transfer."""
    return jax.tree.map(np.array, jax.device_get(tree))


def _render(game_state: Any, render_mode: str | None) -> str | np.ndarray | None:
    if render_mode is None:
        gymnasium.logger.warn("render() was called without a render_mode: make the env with "
                              f"render_mode= one of {RENDER_MODES}.")
        return None
    if render_mode == "ansi":
        from hm.game import render
        return render(game_state)
    from hm.viz import draw_frame  # imported on first use: the picture renderer needs Pillow
    return draw_frame(game_state)


# --- one game ------------------------------------------------------------------------------

class HackMatrixEnv(gymnasium.Env):
    """One HackMatrix game as a `gymnasium.Env`.

    `reset(seed=s)` is reproducible: the game and every later step's randomness come from
    the env's `np_random`, which `seed` sets. An episode ends (`terminated`) on death,
    victory or an illegal action; the env does not truncate (see the module docstring).

    Args:
        render_mode: None, "ansi" (the text board of `hm.game.render`, a str) or
            "rgb_array" (a picture of the board, uint8 [H, W, 3], from `hm.viz`).
        observation_mode: "flat" (float32[1545]) or "dict" (player, programs, grid).
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}

    def __init__(self, render_mode: str | None = None, observation_mode: str = "flat"):
        _check_render_mode(render_mode)
        _check_observation_mode(observation_mode)
        self.render_mode = render_mode
        self.observation_mode = observation_mode
        self.observation_space = observation_space(observation_mode)
        self.action_space = spaces.Discrete(C.NUM_ACTIONS)
        self._env = _WaitForReset()
        self._params = EnvParams(max_episode_steps=_NO_CAP)
        self._key: PRNGKeyArray | None = None
        self._state: EnvState | None = None
        self._mask = np.zeros(C.NUM_ACTIONS, bool)
        self._ended = True   # no game until reset

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        reset_key, self._key = jax.random.split(_random_key(self.np_random))
        obs, self._state, mask = _reset_one(self._env, self._params, reset_key)
        obs, self._mask = _to_numpy((obs, mask))
        self._ended = False
        return _shaped(obs, self.observation_mode), {"action_mask": self._mask.copy()}

    def step(self, action):
        if self._ended:
            raise RuntimeError("step() called with no game running: call reset() first "
                               "(after the episode ended, or before the first step).")
        action = _check_actions(action, ())
        self._key, obs, self._state, reward, done, info = _step_one(
            self._env, self._params, self._key, self._state, jnp.asarray(action))
        obs, reward, done, info = _to_numpy((obs, reward, done, info))
        obs = _shaped(obs, self.observation_mode)
        del info["final_observation"]    # the same as obs: no auto-reset here
        terminated, truncated = bool(info.pop("terminated")), bool(info.pop("truncated"))
        self._ended = bool(done)
        # Once the episode has ended no action is legal until reset().
        self._mask = np.zeros(C.NUM_ACTIONS, bool) if self._ended else info["action_mask"]
        info["action_mask"] = self._mask.copy()
        return obs, float(reward), terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """Legal actions of the current game, bool[28] (sb3-contrib MaskablePPO's hook)."""
        return self._mask.copy()

    @property
    def game_state(self) -> GameState:
        """The current game (e.g. for `hm.game.to_dict`); after an episode's end, the final one."""
        if self._state is None:
            raise RuntimeError("no game before reset()")
        return self._state.game

    def render(self):
        return _render(self.game_state, self.render_mode)


# --- a batch of games ----------------------------------------------------------------------

class HackMatrixVectorEnv(gymnasium.vector.VectorEnv):
    """`num_envs` HackMatrix games stepped together by one jitted, vmapped call per `step`.

    numpy in and out. Finished games restart within the same step
    (`metadata["autoreset_mode"] == AutoresetMode.SAME_STEP`): for a game that ended, the
    returned observation is its new game's first, the ended episode's last observation is
    row i of `info["final_obs"]` and its info is `info["final_info"]` (each key with a
    `_key` mask, true where the episode ended; `info["_final_obs"]` likewise). The step's own
    info keys (`won`, `died`, `illegal`, `stage`, `programs_owned`, `reward_terms`, `episode_return`,
    `episode_length`) are masked false at ended games in the top-level info, where the new
    game has no such values yet; `action_mask` is for the returned observation, every game.

    Args:
        num_envs: how many games.
        max_episode_steps: truncate episodes at this many steps (hm.env's cap).
        render_mode: as for `HackMatrixEnv`; `render()` returns one frame per game.
        observation_mode: "flat" or "dict", as for `HackMatrixEnv`.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": list(RENDER_MODES),
                "render_fps": RENDER_FPS}

    def __init__(self, num_envs: int = 1, max_episode_steps: int = MAX_EPISODE_STEPS,
                 render_mode: str | None = None, observation_mode: str = "flat"):
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if not isinstance(max_episode_steps, (int, np.integer)) or not 1 <= max_episode_steps <= _NO_CAP:
            raise ValueError(f"max_episode_steps must be an integer in 1..{_NO_CAP}, got {max_episode_steps!r}")
        _check_render_mode(render_mode)
        _check_observation_mode(observation_mode)
        self.num_envs = int(num_envs)
        self.render_mode = render_mode
        self.observation_mode = observation_mode
        self.single_observation_space = observation_space(observation_mode)
        self.single_action_space = spaces.Discrete(C.NUM_ACTIONS)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._env = HackMatrix()
        self.max_episode_steps = int(max_episode_steps)
        self._params = EnvParams(max_episode_steps=self.max_episode_steps)
        self._key: PRNGKeyArray | None = None
        self._states: EnvState | None = None
        self._masks = np.zeros((self.num_envs, C.NUM_ACTIONS), bool)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start new games: all of them, or those of `options["reset_mask"]` (bool[num_envs]).

        `seed` (an int) makes the games and every later step reproducible.
        """
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be None or an int (one seed for the whole batch), got {seed!r}")
        super().reset(seed=seed)
        reset_mask = (options or {}).get("reset_mask")
        if reset_mask is not None and self._states is None:
            raise ValueError("options['reset_mask'] needs running games: reset() without it first")
        reset_key, self._key = jax.random.split(_random_key(self.np_random))
        if reset_mask is None:
            obs, self._states, masks = _reset_many(self._env, self._params, reset_key, self.num_envs)
        else:
            reset_mask = np.asarray(reset_mask)
            if reset_mask.shape != (self.num_envs,) or reset_mask.dtype != np.bool_:
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({self.num_envs},), "
                                 f"got {reset_mask.dtype} {reset_mask.shape}")
            obs, self._states, masks = _reset_some(self._env, self._params, self._states, reset_key,
                                                   jnp.asarray(reset_mask))
        obs, self._masks = _to_numpy((obs, masks))
        return _shaped(obs, self.observation_mode), {"action_mask": self._masks.copy(), "_action_mask": np.ones(self.num_envs, bool)}

    def step(self, actions):
        if self._states is None:
            raise RuntimeError("step() called before reset()")
        actions = _check_actions(actions, (self.num_envs,))
        self._states, self._key, obs, reward, done, info = _step_many(
            self._env, self._params, self._states, self._key, jnp.asarray(actions))
        # On CPU these are views of JAX's buffers; what is returned is copied from them
        # below, and of the final observations only the rows of finished games.
        obs, reward, done, info = jax.device_get((obs, reward, done, info))
        final = info.pop("final_observation")
        terminated, truncated = np.array(info.pop("terminated")), np.array(info.pop("truncated"))
        self._masks = np.array(info.pop("action_mask"))
        out = {"action_mask": self._masks.copy(), "_action_mask": np.ones(self.num_envs, bool)}
        _add_masked(out, info, ~done)
        if done.any():
            final_obs = np.zeros(final.shape, final.dtype)   # untouched rows cost no memory traffic
            final_obs[done] = final[done]
            if self.observation_mode != "flat":
                final_obs = _shaped(final_obs, self.observation_mode)
            out["final_obs"], out["_final_obs"] = final_obs, done.copy()
            out["final_info"] = _add_masked({}, info, done)
            out["_final_info"] = done.copy()
        return _shaped(obs, self.observation_mode), np.array(reward, np.float64), terminated, truncated, out

    def action_masks(self) -> np.ndarray:
        """Legal actions of every game's current state, bool[num_envs, 28]."""
        return self._masks.copy()

    @property
    def game_state(self) -> GameState:
        """The current games, batched (leading axis `num_envs`)."""
        if self._states is None:
            raise RuntimeError("no games before reset()")
        return self._states.game

    def render(self) -> tuple[Any, ...] | None:
        """One frame per game (a str for "ansi", a uint8 picture for "rgb_array")."""
        if self.render_mode is None:
            return _render(None, None)
        games = jax.device_get(self.game_state)
        return tuple(_render(jax.tree.map(lambda a, i=i: a[i], games), self.render_mode)
                     for i in range(self.num_envs))


def _add_masked(out: dict[str, Any], info: dict[str, Any], mask: np.ndarray) -> dict[str, Any]:
    """`info`'s arrays into `out`, each key `k` with Gymnasium's mask `_k` (a copy of `mask`)."""
    for key, value in info.items():
        out[key] = _add_masked({}, value, mask) if isinstance(value, dict) else value.copy()
        out["_" + key] = mask.copy()
    return out


if ENV_ID not in gymnasium.registry:   # importing twice (a reload) must not re-register
    gymnasium.register(
        id=ENV_ID,
        entry_point="hm.gym:HackMatrixEnv",
        vector_entry_point="hm.gym:HackMatrixVectorEnv",
        max_episode_steps=MAX_EPISODE_STEPS,
    )
