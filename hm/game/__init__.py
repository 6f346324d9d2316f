"""HackMatrix rules in pure JAX. The rules themselves are written down in docs/rules.md.

Every function takes and returns a single, unbatched game; batch with `jax.vmap`.

    state, obs = reset(key)
    state, obs, reward, done, info = step(state, action, key)
    mask = legal_actions(state)
    count = programs_owned(state)                       # programs the player owns
    obs = observe(state)
    state = from_dict(d); d = to_dict(state)
    text = render(state)
    state = restart(done, state, fresh)                 # auto-reset to a new game

`reset`, `reset_where`, `step`, `legal_actions` and `observe` are `jax.jit` functions.
Called inside another program (under `jit`, `vmap`, `scan`) they are traced once per
argument shape and XLA inlines them, so a program's result is the same as without; called
eagerly, each compiles once instead of running op by op.
"""

from hm.game import constants
from hm.game.actions import legal_actions
from hm.game.core import reset, reset_where, restart, step
from hm.game.observation import Observation, observe
from hm.game.render import render
from hm.game.scenario import from_dict, to_dict
from hm.game.state import GameState, programs_owned

__all__ = ["GameState", "Observation", "constants", "from_dict", "legal_actions", "observe",
           "programs_owned", "render", "reset", "reset_where", "restart", "step", "to_dict"]
