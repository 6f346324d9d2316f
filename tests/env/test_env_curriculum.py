"""`hm.env`'s curriculum settings (`EnvParams.curriculum_share`, `curriculum_max_stage`).

With share 0 (the default) `reset` and `step` are the ordinary env's bit for bit, whatever
the highest stage; with share 1 every new episode, from `reset` and from the auto-reset,
starts at a stage in 2..max; the settings are checked, traced (no new program for new
values) and may differ per game under `vmap`.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hm.env import EnvParams, HackMatrix
from hm.game import generation, observe

env = HackMatrix()
N = 32
STEPS = 24


def keys(seed, n=N):
    return jax.random.split(jax.random.key(seed), n)


@jax.jit
def rollout(params):
    """`STEPS` steps of random legal play of `N` games under `params` (one per game,
    batched leaves), with an illegal action every 8th step so every game restarts."""
    obs, state = jax.vmap(env.reset)(keys(0), params)
    first_stage = state.game.stage

    def body(state, t):
        mask = jax.vmap(env.action_mask)(state)
        logits = jnp.where(mask, 0.0, -jnp.inf)
        action = jax.random.categorical(jax.random.fold_in(jax.random.key(1), t), logits).astype(jnp.int32)
        action = jnp.where(t % 8 == 7, -1, action)
        obs, state, reward, done, info = jax.vmap(env.step)(
            jax.random.split(jax.random.fold_in(jax.random.key(2), t), N), state, action, params)
        restarted = jnp.where(done, state.game.stage, 0)
        return state, (obs, reward, done, info["stage"], restarted)

    state, out = jax.lax.scan(body, state, jnp.arange(STEPS))
    return (obs, state), first_stage, out


def per_game(share, max_stage=8):
    return EnvParams(max_episode_steps=jnp.full(N, 1000, jnp.int32),
                     curriculum_share=jnp.full(N, share, jnp.float32),
                     curriculum_max_stage=jnp.full(N, max_stage, jnp.int32))


@pytest.fixture(scope="module")
def ordinary():
    return jax.device_get(rollout(per_game(0.0)))


def test_the_defaults_are_ordinary_games(ordinary):
    params = env.default_params
    assert float(params.curriculum_share) == 0.0 and int(params.curriculum_max_stage) == 8
    # compiled, not run op by op (which compiles every operation on its own, far slower)
    obs, state = jax.jit(env.reset)(keys(0)[0])
    fresh = jax.jit(generation.new_game)(keys(0)[0])
    for a, b in zip(jax.tree.leaves(state.game), jax.tree.leaves(fresh), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(obs, jax.jit(lambda g: observe(g).flat())(fresh))
    _, first_stage, (_, _, done, _, restarted) = ordinary
    assert np.all(first_stage == 1) and np.all(restarted[done] == 1) and done.sum() >= N * 3


def test_share_zero_is_the_ordinary_env_bit_for_bit_whatever_the_highest_stage(ordinary):
    for a, b in zip(jax.tree.leaves(jax.device_get(rollout(per_game(0.0, 3)))),
                    jax.tree.leaves(ordinary), strict=True):
        np.testing.assert_array_equal(a, b)


def test_share_one_starts_every_episode_at_a_later_stage():
    _, first_stage, (_, _, done, _, restarted) = jax.device_get(rollout(per_game(1.0, 5)))
    assert np.all((first_stage >= 2) & (first_stage <= 5))
    assert done.sum() >= N * 3
    assert np.all((restarted[done] >= 2) & (restarted[done] <= 5)), "auto-resets too"
    assert set(np.unique(restarted[done])) == {2, 3, 4, 5}


def test_each_game_follows_its_own_settings():
    half = jnp.arange(N) < N // 2
    params = EnvParams(max_episode_steps=jnp.full(N, 1000, jnp.int32),
                       curriculum_share=jnp.where(half, 0.0, 1.0).astype(jnp.float32),
                       curriculum_max_stage=jnp.where(half, 8, 2).astype(jnp.int32))
    _, first_stage, (_, _, done, _, restarted) = jax.device_get(rollout(params))
    assert np.all(first_stage[: N // 2] == 1) and np.all(first_stage[N // 2:] == 2)
    ends = np.where(done, restarted, -1)
    assert np.all(np.isin(ends[:, : N // 2], (-1, 1))) and np.all(np.isin(ends[:, N // 2:], (-1, 2)))


def test_settings_are_checked_and_traced():
    for bad in ({"curriculum_share": -0.5}, {"curriculum_share": 1.01},
                {"curriculum_max_stage": 1}, {"curriculum_max_stage": 9}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            EnvParams(**bad)
    traced = jax.jit(eqx.debug.assert_max_traces(env.reset, max_traces=1))
    stages = [int(traced(keys(3)[i], EnvParams(curriculum_share=share, curriculum_max_stage=top))[1].game.stage)
              for i, (share, top) in enumerate([(0.0, 8), (1.0, 2), (1.0, 4), (0.5, 6)])]
    assert stages[0] == 1 and stages[1] == 2 and 2 <= stages[2] <= 4
