"""The MLP's first layer, dense against computed from the non-zero entries.

The observation (1545 numbers) has about 60 non-zeros (mean 58, 99.9th percentile 89,
at most 120 in 400k observations of random play). So `x @ W` could be an embedding bag
over (index, value) pairs: `sum_k value_k * W[index_k]`. This times its pieces, each
against the dense product it would replace, at the PPO batch sizes (calls interleaved,
median of the repeats):

* forward: dense `x @ W` vs the bag over K slots (a scan over the slots, each a [B]-row
  gather of W, unrolled by 8: the un-unrolled scan and a one-shot [B, K, 256] gather
  were both slower than the dense product);
* finding the non-zeros: a prefix count of the non-zero flags (two triangular matmuls,
  `cumsum` is quadratic on CPU) and a scatter of every entry to its rank;
* weight gradient: dense `x.T @ dh` vs a scatter-add of `value * dh` rows (scan over slots).

    python -m bench.bench_first_layer                 # batch 8192 and 2048
    python -m bench.bench_first_layer --batch 8192 --slots 128

Observations are synthetic with the measured count of non-zeros (40-90 per row, values
on the game's 1/36 grid); only where they are matters for the timing, not what they say.
"""

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from tap import Tap

from bench import common

OBS, HIDDEN = 1545, 256


class Args(Tap):
    batch: list[int] = [8192, 2048]  # samples per call: a minibatch, a rollout step
    slots: int = 128  # K: non-zeros the bag holds per observation (>= the most seen, 120)
    repeats: int = 5  # timed calls of each piece; the median is reported


def observations(batch: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros((batch, OBS), np.float32)
    for row in x:
        count = rng.integers(40, 91)
        row[rng.choice(OBS, count, replace=False)] = rng.integers(1, 37, count) / 36
    return x


def pieces(batch: int, slots: int):
    """name -> (function, arguments) for each piece."""
    width = 40
    padded = math.ceil(OBS / width) * width
    within = jnp.asarray(np.triu(np.ones((width, width), np.float32)))
    across = jnp.asarray(np.triu(np.ones((padded // width,) * 2, np.float32), 1))

    def find_nonzeros(x):
        flags = jnp.pad((x != 0).astype(jnp.float32), ((0, 0), (0, padded - OBS))).reshape(batch, -1, width)
        inner = jnp.einsum("bnw,wv->bnv", flags, within, precision=lax.Precision.HIGHEST)
        before = jnp.einsum("bn,nm->bm", inner[:, :, -1], across, precision=lax.Precision.HIGHEST)
        rank = (inner + before[:, :, None]).reshape(batch, padded)[:, :OBS].astype(jnp.int32) - 1
        rank = jnp.where((x != 0) & (rank < slots), rank, slots)
        rows = jnp.broadcast_to(jnp.arange(batch, dtype=jnp.int32)[:, None], (batch, OBS))
        columns = jnp.broadcast_to(jnp.arange(OBS, dtype=jnp.int32), (batch, OBS))
        index = jnp.zeros((batch, slots), jnp.int32).at[rows, rank].set(columns, mode="drop")
        return index, jnp.take_along_axis(x, index, axis=1) * (jnp.arange(slots) < jnp.sum(x != 0, 1)[:, None])

    def bag(index, value, w):
        def add(h, slot):
            i, v = slot
            return h + v[:, None] * w[i], None
        return lax.scan(add, jnp.zeros((batch, HIDDEN), jnp.float32), (index.T, value.T), unroll=8)[0]

    def scatter_gradient(index, value, dh):
        def add(g, slot):
            i, v = slot
            return g.at[i].add(v[:, None] * dh), None
        return lax.scan(add, jnp.zeros((OBS, HIDDEN), jnp.float32), (index.T, value.T), unroll=8)[0]

    x = jnp.asarray(observations(batch))
    rng = np.random.default_rng(1)
    w = jnp.asarray(rng.normal(size=(OBS, HIDDEN)).astype(np.float32))
    dh = jnp.asarray(rng.normal(size=(batch, HIDDEN)).astype(np.float32))
    index, value = jax.jit(find_nonzeros)(x)
    np.testing.assert_allclose(jax.jit(bag)(index, value, w), x @ w, atol=1e-3)
    np.testing.assert_allclose(jax.jit(scatter_gradient)(index, value, dh), x.T @ dh, atol=1e-2)
    return {
        "dense forward x @ W": (lambda x, w: x @ w, (x, w)),
        "bag forward": (bag, (index, value, w)),
        "find non-zeros": (find_nonzeros, (x,)),
        "dense gradient x.T @ dh": (lambda x, dh: x.T @ dh, (x, dh)),
        "scatter-add gradient": (scatter_gradient, (index, value, dh)),
    }


def main(args: Args) -> None:
    common.disable_compilation_cache()
    for batch in args.batch:
        table = pieces(batch, args.slots)
        compiled = {name: jax.jit(f).lower(*a).compile() for name, (f, a) in table.items()}
        for name, (_, a) in table.items():
            jax.block_until_ready(compiled[name](*a))
        seconds = {name: [] for name in table}
        for _ in range(args.repeats):
            for name, (_, a) in table.items():
                start = time.perf_counter()
                jax.block_until_ready(compiled[name](*a))
                seconds[name].append(time.perf_counter() - start)
        dense = float(np.median(seconds["dense forward x @ W"]))
        print(f"batch {batch}, {args.slots} slots:")
        for name, times in seconds.items():
            median = float(np.median(times))
            print(f"  {name:26s} {1e3 * median:8.1f} ms  ({median / dense:.2f} x dense forward)")


if __name__ == "__main__":
    main(Args(underscores_to_dashes=True).parse_args())
