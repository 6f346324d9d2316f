"""WARP's and POLY's random draws: the hand-written threefry in `random_draws.py` is `jax.random`.

`random_draws.py` computes `split` and `randint` itself (an unrolled threefry that XLA
fuses) when the key is JAX's default `threefry2x32` with partitionable draws, and calls
`jax.random` for any other key. These tests pin that the two agree draw for draw, and
that the gate (the implementation's name, `jax_threefry_partitionable`) still picks the
hand-written path for the keys the engine is given, so a JAX release that renames the
implementation or changes the default fails here rather than going unnoticed.
"""

import jax
import jax.numpy as jnp
import numpy as np

from hm.game import random_draws

ROWS = 512


def raw_keys(seed: int, rows: int = ROWS) -> jax.Array:
    return jax.random.key_data(jax.random.split(jax.random.key(seed), rows)).astype(jnp.uint32)


def test_default_keys_take_the_hand_written_path():
    assert str(jax.random.key_impl(jax.random.key(0))) == "threefry2x32"
    assert jax.config.jax_threefry_partitionable
    data, impl = random_draws.key_parts(jax.random.key(0))
    assert impl is None
    assert data.dtype == jnp.uint32 and data.shape == (2,)


def test_split_and_randint_equal_jax_random():
    keys = raw_keys(0)
    first, second = random_draws._split2(keys)
    want = jax.vmap(lambda k: jax.random.key_data(jax.random.split(jax.random.wrap_key_data(k))))(keys)
    np.testing.assert_array_equal(first, want[:, 0])
    np.testing.assert_array_equal(second, want[:, 1])
    # spans from 1 to far beyond the board, where the two-draw modulo arithmetic matters
    spans = jax.random.randint(jax.random.key(1), (ROWS,), 1, 1 << 30).at[:40].set(jnp.arange(1, 41))
    got = random_draws._randint(keys, 7, spans)
    want = jax.vmap(lambda k, s: jax.random.randint(jax.random.wrap_key_data(k), (7,), 0, s))(keys, spans)
    assert got.dtype == want.dtype == jnp.int32
    np.testing.assert_array_equal(got, want)


def test_warp_and_poly_draws_equal_jax_random():
    keys = raw_keys(2)
    n_targets = jax.random.randint(jax.random.key(3), (ROWS,), 0, 37)   # 0: no target
    impl = jax.random.key_impl(jax.random.key(0))
    span = jnp.maximum(n_targets, 1)
    fast_pick, pick = random_draws.warp_pick(keys, span, None), random_draws.warp_pick(keys, span, impl)
    fast_offsets, offsets = random_draws.poly_offsets(keys, None), random_draws.poly_offsets(keys, impl)
    np.testing.assert_array_equal(fast_pick, pick)
    np.testing.assert_array_equal(fast_offsets, offsets)
    # the draws cover their ranges, so equality above is not between constants
    assert set(np.asarray(offsets).ravel().tolist()) == {0, 1, 2}
    assert np.all((np.asarray(pick) >= 0) & (np.asarray(pick) < np.maximum(np.asarray(n_targets), 1)))
    assert len(set(np.asarray(pick).tolist())) > 20
