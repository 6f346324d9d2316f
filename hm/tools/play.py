"""`bin/play`: play HackMatrix in a terminal, one command per line.

The session reads standard input line by line, so it works the same typed or piped
(`printf 'w\\nd\\nq\\n' | bin/play --seed 3`), which is how it is tested. Every step shows
the reward with its nonzero terms (docs/rules.md §14.1) and the new board. Input that
names an illegal action is refused with the reason and asks again, without stepping:
an illegal action ends the game (§5), which a typo should not do (`--allow-illegal`
submits it anyway, to see the rule). `--html FILE` records the game as a replay page
(`hm.viz`): the board as a picture at every step, with the action and reward.

The single-game helpers here (compiled `reset`, `step`, `legal_actions`, action names,
reward lines) serve `bin/watch` too, so both tools share one compiled `step`. The flag
checks every tool shares are in `hm.command`.
"""

import dataclasses
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from tap import Tap

from hm import game, viz
from hm.command import Command, check_output_file, check_seed, use_compile_cache
from hm.game import constants as C
from hm.game.program_table import PROGRAMS
from hm.game.render import LEGEND
from hm.game.scenario import PROGRAM_IDS, program_name
from hm.train.config import MAX_SEED

# Compiled once per process; every game has the same shapes.
_reset = jax.jit(game.reset)
_step = jax.jit(game.step)
_legal = jax.jit(game.legal_actions)

MOVE_KEYS = {"w": 0, "s": 1, "a": 2, "d": 3}   # action 0 is up (row + 1), drawn upwards
SIPHON_KEY = "x"
UNDO_KEY = "u"
UNDO_ACTION = C.PROGRAM_ACTION_OFFSET + C.UNDO
_KEY_OF = {action: key for key, action in MOVE_KEYS.items()} | {C.ACTION_SIPHON: SIPHON_KEY}

HELP = f"""\
commands (one per line; case does not matter):
  w a s d         move or attack up (row + 1) / left / down / right; up is up on the board
  up down left right   the same, spelled out
  {SIPHON_KEY} or siphon     siphon
  N               action number N (0-{C.NUM_ACTIONS - 1}): 0-3 moves, 4 siphon, 5 + program id
  p NAME or NAME  run a program by name, e.g. `p crash` or `crash`
  {UNDO_KEY}               UNDO (if you own it)
  l               list the legal actions again
  ?               this help and the board legend
  q               quit (and write --save FILE, if given)
"""


# --- shared by the tools -----------------------------------------------------------------


def action_name(action: int) -> str:
    """`up`, `siphon`, `crash`, ...: the name a person types (and `bin/watch` shows)."""
    if 0 <= action < C.ACTION_SIPHON:
        return C.DIRECTION_NAMES[action]
    if action == C.ACTION_SIPHON:
        return "siphon"
    if C.PROGRAM_ACTION_OFFSET <= action < C.NUM_ACTIONS:
        return program_name(action - C.PROGRAM_ACTION_OFFSET)
    return f"action {action}"


def action_label(action: int) -> str:
    """How to type `action` at the prompt, with its name: `w up`, `7 crash`, `14 undo (u)`."""
    if action in _KEY_OF:
        return f"{_KEY_OF[action]} {action_name(action)}"
    label = f"{action} {action_name(action)}"
    return f"{label} ({UNDO_KEY})" if action == UNDO_ACTION else label


def nonzero_terms(terms: dict[str, Any]) -> dict[str, float]:
    """A step's reward terms that are not zero, in the table order of docs/rules.md#reward-terms."""
    return {name: float(terms[name]) for name in C.REWARD_TERMS if float(terms[name]) != 0.0}


def reward_line(reward: float, terms: dict[str, Any]) -> str:
    """`reward +0.040 (distance +0.050, step -0.010)`: the total and its nonzero terms."""
    parts = [f"{name} {value:+.3f}" for name, value in nonzero_terms(terms).items()]
    return f"reward {reward:+.3f}" + (f" ({', '.join(parts)})" if parts else "")


def outcome(info: dict[str, Any], state: game.GameState) -> str:
    """Why an episode ended, in words."""
    if bool(info["illegal"]):
        return "illegal action: the game ends (docs/rules.md §5)"
    if bool(info["won"]):
        return "won: all stages completed"
    if bool(info["died"]):
        return f"died on stage {int(state.stage)}"
    return "not over"


def new_game(key: jax.Array) -> game.GameState:
    return _reset(key)[0]


def legal_mask(state: game.GameState) -> np.ndarray:
    return np.asarray(_legal(state))


def advance(state: game.GameState, action: int, key: jax.Array):
    """One step on the host: `(state, obs, reward, done, info)` with Python scalars."""
    state, obs, reward, done, info = _step(state, jnp.int32(action), key)
    return state, obs, float(reward), bool(done), jax.device_get(info)


def random_seed() -> int:
    return int(np.random.default_rng().integers(0, MAX_SEED, endpoint=True))


# --- the player's commands ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PlayerInput:
    """One line of input, understood: an action to take, or something for the session."""

    kind: Literal["action", "quit", "help", "list", "invalid"]
    action: int = -1
    message: str = ""


_WORDS = {name: action for action, name in enumerate(C.DIRECTION_NAMES)} | {"siphon": C.ACTION_SIPHON}


def parse_command(line: str, owned: np.ndarray) -> PlayerInput:
    """What `line` asks for; `owned` (bool per program id) makes `u` mean UNDO only if owned.

    Legality is not checked here (that needs the state); unknown input is `invalid`.
    """
    text = " ".join(line.lower().split())
    if text in ("", "l", "legal"):
        return PlayerInput("list")
    if text in ("q", "quit", "exit"):
        return PlayerInput("quit")
    if text in ("?", "h", "help"):
        return PlayerInput("help")
    if text in MOVE_KEYS:
        return PlayerInput("action", MOVE_KEYS[text])
    if text in _WORDS:
        return PlayerInput("action", _WORDS[text])
    if text == SIPHON_KEY:
        return PlayerInput("action", C.ACTION_SIPHON)
    if text == UNDO_KEY:
        if not owned[C.UNDO]:
            return PlayerInput("invalid", message="`u` is UNDO, and you do not own UNDO")
        return PlayerInput("action", UNDO_ACTION)
    if text.isdigit():
        action = int(text)
        if action >= C.NUM_ACTIONS:
            return PlayerInput("invalid", message=f"no action {action}: actions are 0-{C.NUM_ACTIONS - 1}")
        return PlayerInput("action", action)
    name = text.removeprefix("p ")
    if name in PROGRAM_IDS:
        return PlayerInput("action", C.PROGRAM_ACTION_OFFSET + PROGRAM_IDS[name])
    if text.startswith("p "):
        return PlayerInput("invalid", message=f"no program {name!r}; programs: "
                       + " ".join(program_name(i) for i in range(C.NUM_PROGRAMS)))
    return PlayerInput("invalid", message=f"unknown command {line.strip()!r}; type ? for help")


def why_illegal(state: game.GameState, action: int) -> str:
    """A short reason a legal-action mask refuses `action` (docs/rules.md §5)."""
    p = jax.device_get(state.player)
    if action < C.ACTION_SIPHON:
        row, col = np.asarray([int(p.row), int(p.col)]) + C.DIRECTION_DELTAS[action]
        if not (0 <= row < C.ROWS and 0 <= col < C.COLS):
            return "that is off the board"
        return "a block is in the way"
    if action == C.ACTION_SIPHON:
        return "you have no data siphons"
    program = action - C.PROGRAM_ACTION_OFFSET
    name = C.PROGRAM_NAMES[program]
    credits, energy = PROGRAMS[program].credits, PROGRAMS[program].energy
    if not bool(p.owned[program]):
        return f"you do not own {name}"
    if int(p.credits) < credits or int(p.energy) < energy:
        return (f"{name} costs {credits} credits and {energy} energy; you have "
                f"{int(p.credits)} and {int(p.energy)}")
    return f"{name}'s condition does not hold now (docs/rules.md §4)"


# --- the session ------------------------------------------------------------------------


class PlayArgs(Command):
    """Play HackMatrix in the terminal: one command per line (type ? for the list).
    Reads standard input, so a script can be piped in. Exit codes: 0 done, 2 bad input."""

    seed: int | None = None  # Random seed in [0, 2^32 - 1] for the stage layout and the game's randomness; default: a fresh one (printed).
    scenario: Path | None = None  # Start from this scenario JSON file (docs/scenarios.md) instead of a new game.
    save: Path | None = None  # On quit or game over, write the final state to this file as scenario JSON.
    allow_illegal: bool = False  # Submit illegal actions (the game then ends, docs/rules.md §5) instead of asking again.
    html: Path | None = None  # When the session ends, write the game as a self-contained HTML replay (board pictures, controls).

    def configure(self) -> None:
        self.add_argument("--scenario", metavar="FILE.json")
        self.add_argument("--save", metavar="FILE.json")
        self.add_argument("--html", metavar="PATH.html")

    def process_args(self) -> None:
        check_seed(self, self.seed)
        if self.save is not None:
            check_output_file(self, "--save", self.save)
        if self.html is not None:
            check_output_file(self, "--html", self.html)


def read_scenario(parser: Tap, path: Path) -> game.GameState:
    """The state a `--scenario` file describes, or exit 2 with the reason."""
    try:
        data = json.loads(path.read_text())
    except OSError as error:
        parser.error(f"--scenario {path}: cannot read it ({error.strerror or error})")
    except (UnicodeDecodeError, ValueError) as error:
        parser.error(f"--scenario {path}: not JSON ({error})")
    try:
        return game.from_dict(data)
    except ValueError as error:
        parser.error(f"--scenario {path}: not a valid scenario: {error}")


def legal_line(mask: np.ndarray) -> str:
    return "legal: " + ", ".join(action_label(int(a)) for a in np.flatnonzero(mask))


def play(state: game.GameState, key: jax.Array, stdin: io.TextIOBase, out: io.TextIOBase, *,
         allow_illegal: bool = False, echo: bool = False, record: list[viz.Step] | None = None) -> game.GameState:
    """Run one interactive game from `state` until it ends or the player quits.

    Args:
        state: where the game starts.
        key: the game's randomness (split once per step).
        stdin: read line by line; end of input quits.
        out: where the board, prompts and rewards go.
        allow_illegal: submit actions the legal mask refuses.
        echo: repeat each input line after the prompt (input that is not typed, e.g. a
            pipe, is otherwise missing from the transcript).
        record: if given, each step taken is appended to it, and the final state with how
            the session ended (for `--html`).

    Returns:
        The state at the end (for `--save`).
    """
    total, steps = 0.0, 0

    def ended(message: str) -> game.GameState:
        print(message, file=out)
        if record is not None:
            record.append(viz.Step(state=jax.device_get(state), index=steps, note=message))
        return state

    print(game.render(state, legend=True), file=out)
    mask = legal_mask(state)
    if bool(state.won) or int(state.player.hp) == 0:
        return ended("this game is already over")
    print(legal_line(mask), file=out)
    while True:
        print("> ", end="", file=out, flush=True)
        line = stdin.readline()
        if echo:
            print(line.rstrip("\n"), file=out)
        if not line:
            return ended("(end of input)")
        command = parse_command(line, np.asarray(state.player.owned))
        if command.kind == "quit":
            return ended(f"quit after {steps} steps: return {total:+.3f}")
        if command.kind == "help":
            print(HELP + "board legend:\n" + "\n".join(LEGEND), file=out)
            print(legal_line(mask), file=out)
            continue
        if command.kind == "list":
            print(legal_line(mask), file=out)
            continue
        if command.kind == "invalid":
            print(command.message, file=out)
            continue
        action = command.action
        if not mask[action]:
            reason = why_illegal(state, action)
            if not allow_illegal:
                print(f"{action_name(action)} is not legal now: {reason}; {legal_line(mask)}", file=out)
                continue
            print(f"{action_name(action)} is not legal now ({reason}); submitting it (--allow-illegal)", file=out)
        key, step_key = jax.random.split(key)
        before = state
        state, _, reward, done, info = advance(state, action, step_key)
        if record is not None:
            record.append(viz.Step(state=jax.device_get(before), index=steps, action=action, action_name=action_name(action),
                                   reward=reward, reward_terms=nonzero_terms(info["reward_terms"])))
        total += reward
        steps += 1
        print(f"{action_name(action)}: {reward_line(reward, info['reward_terms'])}", file=out)
        print(game.render(state, legend=False), file=out)
        if done:
            return ended(f"game over after {steps} steps, {outcome(info, state)}: return {total:+.3f}")
        mask = legal_mask(state)
        print(f"step {steps}  return {total:+.3f}  {legal_line(mask)}", file=out)


def main(argv: Sequence[str] | None = None, stdin: io.TextIOBase | None = None, stdout: io.TextIOBase | None = None) -> int:
    """Parse `argv`, play one game on `stdin`/`stdout`, write `--save`; returns the exit code."""
    stdin = sys.stdin if stdin is None else stdin
    out = sys.stdout if stdout is None else stdout
    parser = PlayArgs(prog="bin/play")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    state = read_scenario(parser, args.scenario) if args.scenario is not None else None
    use_compile_cache()
    seed = random_seed() if args.seed is None else args.seed
    start_key, play_key = jax.random.split(jax.random.key(seed))
    where = f"scenario {args.scenario}" if state is not None else "a new game"
    print(f"hm play: {where}, seed {seed}; type ? for help, q to quit", file=out)
    if state is None:
        state = new_game(start_key)
    record = [] if args.html is not None else None
    state = play(state, play_key, stdin, out, allow_illegal=args.allow_illegal, echo=not stdin.isatty(), record=record)
    if args.save is not None:
        args.save.write_text(json.dumps(game.to_dict(state), indent=1) + "\n")
        print(f"saved the state to {args.save}", file=out)
    if args.html is not None:
        viz.write_html(args.html, record, title=f"bin/play: {where}, seed {seed}")
        print(f"wrote {args.html} ({len(record)} frames)", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
