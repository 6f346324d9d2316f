"""Suite-wide JAX configuration, applied before any test module is imported.

Strict promotion makes silent broadcasting and dtype widening errors in tests, so a
rule written for one shape or dtype cannot quietly run on another. The persistent
compilation cache lets a rerun skip XLA compilation of every program it has seen.
Hypothesis gets no per-example deadline: an example that compiles a program takes
seconds the first time and milliseconds after, which a deadline reports as flaky.
"""

import pathlib

import hypothesis
import jax

_REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

jax.config.update("jax_compilation_cache_dir", str(_REPO_ROOT / ".cache" / "jax"))
# Cache every program, however quick to compile: a suite is many small programs.
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

hypothesis.settings.register_profile("hm", deadline=None)
hypothesis.settings.load_profile("hm")
