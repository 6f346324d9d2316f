"""Entity-list compaction and appending against a plain-Python statement of §17.1/§17.2."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hm.game import entities
from hm.game.state import Enemies

CAP = 36


def _random_enemies(rng, batch, p_alive):
    ints = lambda: jnp.asarray(rng.integers(-5, 6, (batch, CAP)).astype(np.int8))
    flags = lambda: jnp.asarray(rng.random((batch, CAP)) < 0.5)
    fields = (jnp.asarray(rng.random((batch, CAP)) < p_alive), ints(), ints(), ints(), ints(),
              ints(), flags(), flags(), flags())
    return jax.vmap(Enemies)(*fields)      # built per list: the annotations are unbatched


def _rows(lst, i):
    """The live entries of list `i` of a batch, in slot order, as tuples of field values."""
    leaves = [np.asarray(x[i]) for x in jax.tree.leaves(lst)]
    alive = np.asarray(lst.alive[i])
    return [tuple(int(x[s]) for x in leaves) for s in range(CAP) if alive[s]]


def _is_compact(lst, i, expected_rows):
    leaves = [np.asarray(x[i]) for x in jax.tree.leaves(lst)]
    n = len(expected_rows)
    assert [tuple(int(x[s]) for x in leaves) for s in range(n)] == expected_rows
    assert all(not x[n:].any() for x in leaves), "dead slots must be all zeros"


@pytest.mark.parametrize("p_alive", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_compact_keeps_list_order_and_zeroes_the_rest(p_alive):
    rng = np.random.default_rng(int(p_alive * 10))
    lists = _random_enemies(rng, 64, p_alive)
    out = jax.jit(jax.vmap(entities.compact))(lists)
    for i in range(64):
        _is_compact(out, i, _rows(lists, i))


@pytest.mark.parametrize("p_old,p_new", [(0.2, 0.3), (0.9, 0.9), (0.0, 1.0), (1.0, 0.5)])
def test_append_puts_new_entries_after_the_old_and_drops_overflow(p_old, p_new):
    rng = np.random.default_rng(7)
    old = jax.vmap(entities.compact)(_random_enemies(rng, 64, p_old))
    new = _random_enemies(rng, 64, p_new)
    out = jax.jit(jax.vmap(entities.append))(old, new)
    for i in range(64):
        expected = (_rows(old, i) + _rows(new, i))[:CAP]
        _is_compact(out, i, expected)
