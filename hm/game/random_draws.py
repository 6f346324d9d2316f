"""WARP's and POLY's random draws (docs/rules.md#randomness, §16), exactly as `jax.random`
makes them from the program's key.

WARP picks its target as `randint(key_warp, (), 0, max(n_targets, 1))` and POLY draws
its type offsets as `randint(key_poly, (36,), 0, 3)`, where
`key_warp, key_poly = jax.random.split(key)`. Programs run on gathered rows of games
(`programs.py`), so every function here takes raw key data, one key per row.

Why it is shaped so. JAX lowers its threefry hash to a rolled loop of small kernels on
CPU; written out unrolled (`_threefry2x32`), XLA fuses it into the code around it. For
JAX's default PRNG (`threefry2x32` with partitionable draws) `split` and `randint` are
therefore computed here with JAX's own arithmetic, which gives the same outcomes from the
same keys (tests/game/test_random_draws.py pins this). For any other PRNG implementation
(`key_parts` returns it) the draws call `jax.random` itself.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int32, Key, UInt32

from hm.game import constants as C

_U32 = jnp.uint32


def key_parts(key: Key[Array, ""]) -> tuple[UInt32[Array, "2"], object]:
    """Raw key data and, unless it is the default threefry with partitionable draws
    (then `None`: the draws are computed here), the PRNG implementation."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        data, impl = jax.random.key_data(key), jax.random.key_impl(key)
        name = str(impl)
    else:
        data, name = key, jax.config.jax_default_prng_impl
        impl = name
    fast = name == "threefry2x32" and bool(jax.config.jax_threefry_partitionable)
    return data.astype(_U32), (None if fast else impl)


def warp_pick(key: UInt32[Array, "R 2"], span: Int32[Array, " R"], impl) -> Int32[Array, " R"]:
    """WARP's target index per row: `randint(split(key)[0], (), 0, span)` (`span >= 1`)."""
    if impl is None:
        return _randint(_split2(key)[0], 1, span)[:, 0]
    return jax.vmap(lambda k, s: jax.random.randint(_split(k, impl)[0], (), 0, s))(key, span)


def poly_offsets(key: UInt32[Array, "R 2"], impl) -> Int32[Array, "R 36"]:
    """POLY's type offsets per row and slot: `randint(split(key)[1], (36,), 0, 3)`."""
    if impl is None:
        three = jnp.full(key.shape[0], 3, jnp.int32)
        return _randint(_split2(key)[1], C.MAX_ENEMIES, three)
    return jax.vmap(lambda k: jax.random.randint(_split(k, impl)[1], (C.MAX_ENEMIES,), 0, 3))(key)


def _split(data: UInt32[Array, "2"], impl):
    return jax.random.split(jax.random.wrap_key_data(data, impl=impl))


# --------------------------------------------------------------------------- threefry

def _rotl(x, d: int):
    return (x << _U32(d)) | (x >> _U32(32 - d))


def _threefry2x32(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds: the hash of JAX's default PRNG (`threefry2x32`),
    unrolled so that XLA fuses it."""
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    ks = (k1, k2, k1 ^ k2 ^ _U32(0x1BD11BDA))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for r in range(5):
        for d in rotations[r % 2]:
            x1 = x1 + x2
            x2 = _rotl(x2, d) ^ x1
        x1 = x1 + ks[(r + 1) % 3]
        x2 = x2 + ks[(r + 2) % 3] + _U32(r + 1)
    return x1, x2


def _split2(key: UInt32[Array, "R 2"]) -> tuple[UInt32[Array, "R 2"], UInt32[Array, "R 2"]]:
    """`jax.random.split(key)` (two keys) on raw threefry key data, one key per row."""
    k1, k2 = key[:, 0:1], key[:, 1:2]
    a, b = _threefry2x32(k1, k2, jnp.zeros((1, 2), _U32), jnp.arange(2, dtype=_U32)[None])
    return jnp.stack([a[:, 0], b[:, 0]], 1), jnp.stack([a[:, 1], b[:, 1]], 1)


def _randint(key: UInt32[Array, "R 2"], n: int, span: Int32[Array, " R"]) -> Int32[Array, "R n"]:
    """`jax.random.randint(key, (n,), 0, span)` per row (int32, `span >= 1`), as JAX
    computes it with partitionable threefry: two 32-bit draws per value, combined modulo
    `span`."""
    high_key, low_key = _split2(key)
    count = jnp.arange(n, dtype=_U32)[None]

    def bits(k):
        a, b = _threefry2x32(k[:, 0:1], k[:, 1:2], jnp.zeros((1, n), _U32), count)
        return a ^ b

    span = span.astype(_U32)[:, None]
    multiplier = (_U32(1 << 16) % span) * (_U32(1 << 16) % span) % span
    offset = ((bits(high_key) % span) * multiplier + bits(low_key) % span) % span
    return offset.astype(jnp.int32)
