"""The compile counter of `compiles.py` against a function whose compilations are known."""

import jax
import jax.numpy as jnp
from compiles import compilations


def test_compilations_counts_each_compilation_of_the_function_only():
    def double(x):
        return 2 * x

    double = jax.jit(double)
    other = jax.jit(lambda x: x + 1)
    with compilations(double) as compiled:
        double(jnp.zeros(3))
        double(jnp.ones(3))         # same shape: the compiled program is reused
        double(jnp.zeros(4))        # a new shape compiles again
        other(jnp.zeros(3))         # another function is not counted
    assert len(compiled) == 2, compiled
    with compilations(double) as compiled:
        double(jnp.zeros(4))
    assert compiled == []


def test_compilations_of_any_function():
    x = jnp.zeros(5)
    with compilations() as compiled:
        jax.jit(lambda x: x * 3)(x)
    assert len(compiled) == 1 and compiled[0].startswith("Compiling jit(<lambda>) "), compiled
