"""The suite-wide settings of tests/conftest.py and pyproject.toml are in force."""

import os
import pathlib

import jax
import jax.numpy as jnp
import pytest

import hm
from tests.conftest import free_compiled_programs

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_implicit_rank_promotion_raises():
    with pytest.raises(ValueError, match="jax_numpy_rank_promotion"):
        jnp.ones(3) + jnp.ones((2, 3))


def test_implicit_dtype_promotion_raises():
    with pytest.raises(jax.dtypes.TypePromotionError):
        jnp.ones(3, jnp.int32) + jnp.ones(3, jnp.float32)


def test_compilation_cache_is_repo_local_and_caches_everything():
    assert pathlib.Path(jax.config.jax_compilation_cache_dir) == REPO_ROOT / ".cache" / "jax"
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0


def test_hm_is_instrumented_by_jaxtyping():
    # Set by `--jaxtyping-packages=hm,...` in pyproject.toml's addopts; the loader
    # wraps every function of hm in a shape and dtype check.
    assert type(hm.__spec__.loader).__name__ == "_JaxtypingLoader"


def test_xla_compiles_without_llvm_optimisation_passes():
    # conftest sets it before JAX starts its backend, where XLA reads it
    assert "--xla_backend_optimization_level=0" in os.environ["XLA_FLAGS"].split()


def test_compiled_programs_are_dropped_between_modules():
    traces = []

    @jax.jit
    def double(x):
        traces.append(x.shape)   # runs only when JAX traces, not when it reuses a program
        return 2 * x

    double(jnp.ones(3))
    double(jnp.ones(3))
    assert len(traces) == 1, "a second call reuses the compiled program"
    free_compiled_programs()
    double(jnp.ones(3))
    assert len(traces) == 2, "after freeing, the program is traced again"
