"""Reading traced programs in tests: which primitives a jaxpr uses, sub-jaxprs included."""

import jax


def primitives(jaxpr, found: set[str] | None = None) -> set[str]:
    """The names of every primitive in `jaxpr` and in the jaxprs its equations hold
    (the bodies of `scan`, `cond`, `while`, `jit`, ...)."""
    found = set() if found is None else found
    for eqn in jaxpr.eqns:
        found.add(eqn.primitive.name)
        for param in eqn.params.values():
            for sub in (param if isinstance(param, (list, tuple)) else [param]):
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    primitives(sub.jaxpr, found)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    primitives(sub, found)
    return found
