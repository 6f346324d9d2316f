"""Invariants over many random legal steps of vmapped games, and compile-once checks.

One jitted program plays `GAMES` games for `STEPS` steps each (≥ 100,000 steps) with
uniformly random legal actions and auto-reset, checks per-step invariants inside the
program (counting violations), and keeps a sample of the states it visited; the host
then checks the scenario round trip and the observation of those states.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxprs import primitives

import hm.game as game
from hm.game import constants as C
from hm.game import scenario
from hm.train import distributions

GAMES = 256
STEPS = 400          # 102,400 steps
SAMPLE_EVERY = 40    # keep the states of every 40th step: 10 x 256 states


def _sample_actions(key, mask):
    """One uniformly random legal action per game."""
    return distributions.sample_legal(mask, jax.random.uniform(key, mask.shape[:1]))


# Outside a program: one compiled program instead of running it op by op.
_sample_legal = jax.jit(_sample_actions)
# The names `test_step_compiles_once` gives its counted wrappers: the same programs.
_step = jax.jit(jax.vmap(game.step))
_legal = jax.jit(jax.vmap(game.legal_actions))


def _violations(before, state, reward, done, info, mask, action):
    """Broken invariants of one game after one step (each entry 0 when all hold)."""
    e, t, p, b = state.enemies, state.transmissions, state.player, state.board
    ecell = e.row.astype(jnp.int32) * 6 + e.col.astype(jnp.int32)
    pcell = p.row * 6 + p.col
    max_hp = jnp.asarray(C.ENEMY_MAX_HP)[e.kind.astype(jnp.int32)]
    terms = sum(info["reward_terms"][k] for k in C.REWARD_TERMS)
    compact_e = jnp.all(e.alive[1:] <= e.alive[:-1])
    compact_t = jnp.all(t.alive[1:] <= t.alive[:-1])
    zero_dead_e = jnp.all(jnp.where(e.alive, True, (e.hp == 0) & (e.row == 0) & (e.col == 0)
                                    & (e.kind == 0) & ~e.stunned & ~e.from_siphon))
    zero_dead_t = jnp.all(jnp.where(t.alive, True, (t.timer == 0) & (t.row == 0) & (t.col == 0)))
    checks = {
        "illegal_sampled": info["illegal"] | ~mask[action],
        "enemy_on_player": jnp.any(e.alive & (ecell == pcell)) & ~done,
        "enemy_hp": jnp.any(e.alive & ((e.hp < 1) | (e.hp > max_hp))),
        "enemy_disabled": jnp.any(e.alive & ((e.disabled < 0) | (e.disabled > 1))),
        "enemy_position": jnp.any(e.alive & ((e.row < 0) | (e.row > 5) | (e.col < 0) | (e.col > 5))),
        "transmission_timer": jnp.any(t.alive & (t.timer < 1)),
        "player_hp": (p.hp < 0) | (p.hp > 3) | ((p.hp == 0) != info["died"]),
        "counters": (p.credits < 0) | (p.energy < 0) | (p.data_siphons < 0) | (p.attack < 1),
        "stage": (state.stage < 1) | (state.stage > 8) | (state.stage < before.stage),
        "interval": (state.interval < C.MIN_INTERVAL) | (state.interval > C.FIRST_INTERVAL),
        "one_exit": jnp.sum(b.content == C.EXIT) != 1,
        "blocks_off_corners": jnp.any((b.content == C.BLOCK)[np.array(C.CORNER_CELLS)]),
        "reward_is_sum": jnp.abs(reward - terms) > 1e-4 * jnp.maximum(1.0, jnp.abs(reward)),
        "done": done != (info["died"] | info["won"]),
        "compact": ~(compact_e & compact_t & zero_dead_e & zero_dead_t),
        "history": (state.history.depth < 0) | (state.history.depth > C.HISTORY_CAPACITY),
        "step_penalty": info["reward_terms"]["step"] != jnp.float32(C.STEP_PENALTY),
    }
    return {k: v.astype(jnp.int32) for k, v in checks.items()}


@pytest.fixture(scope="module")
def rollout():
    step = jax.vmap(game.step)
    legal = jax.vmap(game.legal_actions)
    reset = jax.vmap(game.reset)

    @jax.jit
    def run(key):
        key, pool_key = jax.random.split(key)
        fresh, _ = reset(jax.random.split(pool_key, GAMES))

        def body(carry, key):
            state, fresh = carry
            k_act, k_step, k_reset = jax.random.split(key, 3)
            mask = legal(state)
            action = _sample_actions(k_act, mask)
            new, obs, reward, done, info = step(state, action, jax.random.split(k_step, GAMES))
            bad = jax.vmap(_violations)(state, new, reward, done, info, mask, action)
            obs_ok = jnp.all(obs.flat() == jax.vmap(lambda s: game.observe(s).flat())(new), axis=1)
            bad["observe_matches_step"] = (~obs_ok).astype(jnp.int32)
            # Auto-reset from a pool; refresh the used pool entries.
            replace = lambda a, b: jnp.where(done.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)
            state = jax.tree.map(replace, fresh, new)
            refill, _ = reset(jax.random.split(k_reset, GAMES))
            fresh = jax.tree.map(replace, refill, fresh)
            out = (jax.tree.map(jnp.sum, bad), new, jnp.sum(done), jnp.max(new.stage))
            return (state, fresh), out

        first, _ = reset(jax.random.split(key, GAMES))
        _, (bad, states, dones, stages) = jax.lax.scan(
            body, (first, fresh), jax.random.split(key, STEPS))
        sample = jax.tree.map(lambda x: x[SAMPLE_EVERY - 1::SAMPLE_EVERY], states)
        return bad, sample, jnp.sum(dones), jnp.max(stages)

    return jax.device_get(run(jax.random.key(2024)))


def test_rollout_invariants(rollout):
    bad, _, episodes, _ = rollout
    totals = {k: int(np.sum(v)) for k, v in bad.items()}
    assert all(v == 0 for v in totals.values()), {k: v for k, v in totals.items() if v}
    assert episodes > 100   # the rollout really crossed many episode boundaries


def test_rollout_reaches_later_stages(rollout):
    _, _, _, highest = rollout
    assert highest >= 2


def _unstack(tree, i, j):
    return jax.tree.map(lambda x: x[i, j], tree)


def test_scenario_round_trip_and_observation(rollout):
    """from_dict(to_dict(s)) equals s (history aside), and observes the same, for
    every sampled state."""
    _, sample, _, _ = rollout
    observe = jax.jit(game.observe)
    n_steps, n_games = sample.stage.shape
    checked = 0
    for i in range(n_steps):
        for j in range(0, n_games, 4):
            state = _unstack(sample, i, j)
            if state.player.hp == 0:
                continue   # a dead player is no valid scenario (docs/scenarios.md: hp 1..3)
            d = game.to_dict(state)
            again = game.from_dict(d)
            assert scenario.states_equal(again, state), d
            np.testing.assert_array_equal(np.asarray(observe(again).flat()),
                                          np.asarray(observe(state).flat()))
            checked += 1
    assert checked >= 500


def test_step_compiles_once():
    """vmapped step, reset, observe and legal_actions trace once for a batch shape.

    The batch is `GAMES` wide and each wrapper keeps its function's name, so these are the
    programs `test_batched_step_equals_stepping_each_game_alone` runs (compiled once)."""
    traces = {"step": 0, "reset": 0, "observe": 0, "legal": 0}

    def counted(name, fn):
        @functools.wraps(fn)
        def wrapper(*args):
            traces[name] += 1
            return fn(*args)
        return wrapper

    step = jax.jit(jax.vmap(counted("step", game.step)))
    reset = jax.jit(jax.vmap(counted("reset", game.reset)))
    observe = jax.jit(jax.vmap(counted("observe", game.observe)))
    legal = jax.jit(jax.vmap(counted("legal", game.legal_actions)))
    key = jax.random.key(7)
    state, _ = reset(jax.random.split(key, GAMES))
    for i in range(4):
        mask = legal(state)
        action = _sample_legal(jax.random.fold_in(key, i), mask)
        state, obs, *_ = step(state, action, jax.random.split(jax.random.fold_in(key, 100 + i), GAMES))
        observe(state)
        reset(jax.random.split(jax.random.fold_in(key, 200 + i), GAMES))
    assert traces == {"step": 1, "reset": 1, "observe": 1, "legal": 1}


def test_no_while_loop_in_the_env():
    """No `while` anywhere in the vmapped env functions: every loop has a fixed count.
    Tracing needs only the shapes, so the games are never generated (`eval_shape`)."""
    keys = jax.random.split(jax.random.key(0), 4)
    state, _ = jax.eval_shape(jax.vmap(game.reset), keys)
    actions = jnp.zeros(4, jnp.int32)
    programs = {
        "step": jax.make_jaxpr(jax.vmap(game.step))(state, actions, keys),
        "reset": jax.make_jaxpr(jax.vmap(game.reset))(keys),
        "observe": jax.make_jaxpr(jax.vmap(game.observe))(state),
        "legal_actions": jax.make_jaxpr(jax.vmap(game.legal_actions))(state),
    }
    for name, closed in programs.items():
        assert "while" not in primitives(closed.jaxpr), name


def test_batched_step_equals_stepping_each_game_alone(rollout, jitted):
    """`vmap(step)` runs its own code under `vmap` (batch-wide skipping, games gathered
    into narrower lanes or chunks and scattered back); it must give, game by game, what
    `step` gives for that game alone, history included.

    Late states of the rollout, each taking a legal program when it has one (the sparse
    programs, removals to compact), else a random legal action, and a few an illegal
    action (the state is kept); the batch has enough games
    with three or more activations to need several chunks of the narrow activation lanes.
    """
    _, sample, _, _ = rollout
    states = jax.tree.map(lambda x: jnp.asarray(x[-1]), sample)
    e = states.enemies
    ready = jnp.sum(e.alive & (e.disabled == 0) & ~e.stunned, axis=1)
    assert int(jnp.sum(ready > 2)) > GAMES // 16        # more than one 16-lane chunk
    key = jax.random.key(99)
    mask = _legal(states)
    programs = mask.at[:, :C.PROGRAM_ACTION_OFFSET].set(False)
    any_program = jnp.any(programs, axis=1, keepdims=True)
    actions = _sample_legal(key, jnp.where(any_program, programs, mask))
    # A few games take an illegal action (the state must stay as it was).
    illegal = _sample_legal(jax.random.fold_in(key, 2), ~mask)
    some = (jnp.arange(GAMES) % 17 == 0) & jnp.any(~mask, axis=1)
    actions = jnp.where(some, illegal, actions)
    assert int(jnp.sum(some)) > 0
    keys = jax.random.split(jax.random.fold_in(key, 1), GAMES)
    batched = jax.device_get(_step(states, actions, keys))
    host_states, host_actions = jax.device_get((states, actions))
    for i in range(GAMES):
        alone = jitted.step(_unstack_one(host_states, i), host_actions[i], keys[i])
        for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(jax.device_get(alone)),
                                jax.tree.leaves(_unstack_one(batched, i))):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y),
                                          err_msg=f"game {i}, leaf {jax.tree_util.keystr(path)}")


def _unstack_one(tree, i):
    return jax.tree.map(lambda x: x[i], tree)
