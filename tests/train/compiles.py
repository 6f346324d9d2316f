"""Counting the compilations of one jitted function, through JAX's public compile log.

`eqx.debug.assert_max_traces` must wrap a function before it is jitted, which the tests
cannot do for the training function `make_train_fn` builds and jits. Under
`jax.log_compiles(True)` JAX logs one record per compilation, "Compiling jit(NAME) with
global shapes and types ...", so the records that name a function count how often it
compiled. `test_compiles.py` pins that message form, so a JAX that words it differently
fails there instead of making every count here a silent zero.
"""

import contextlib
import logging
from collections.abc import Callable, Iterator

import jax


class _Collect(logging.Handler):
    def __init__(self, messages: list[str]):
        super().__init__(logging.WARNING)
        self.messages = messages

    def emit(self, record: logging.LogRecord):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def compilations(fn: Callable | None = None) -> Iterator[list[str]]:
    """Collects the compile-log messages of the jitted `fn` made inside the block.

    Yields a list, filled when the block ends: one entry per compilation of `fn`, or of
    any function when `fn` is None.
    """
    messages: list[str] = []
    ours: list[str] = []
    handler = _Collect(messages)
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            yield ours
    finally:
        logger.removeHandler(handler)
        prefix = "Compiling " if fn is None else f"Compiling jit({fn.__name__}) "
        ours.extend(m for m in messages if m.startswith(prefix))
