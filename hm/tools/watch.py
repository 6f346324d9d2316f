"""`bin/watch`: watch a trained agent play, one step at a time.

Each step shows the board, the action the agent took with its probability (and the
runners-up), the value the critic gave the state, and the reward with its nonzero
terms. On a terminal the screen is redrawn in place every `--delay` seconds; piped,
the steps follow one another as a log. The game is stepped by the same compiled
`step` as `bin/play`; the agent's choice is one more small compiled program.

`--search N` makes the agent plan each move with N simulations of Gumbel MuZero search
over the real game (`hm.search`, docs/search.md); each step then also shows, for the
actions the search tried, their visit counts and Q-values beside the policy's
probabilities, and the search's value beside the critic's.

`--html PATH` and `--gif PATH` also record what is shown, step by step, as a replay
(`hm.viz`): a self-contained page with the board drawn as a picture and, per step, the
action, the likeliest actions, the value and the reward terms; or an animated GIF.
"""

import io
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int32, Key

from hm import game, viz
from hm.command import Command, check_float, check_int, check_output_file, check_positive, check_seed, use_compile_cache
from hm.search import Search
from hm.tools.evaluate import DEFAULT_MAX_STEPS, search_player
from hm.tools.play import action_name, advance, new_game, nonzero_terms, outcome, reward_line
from hm.tools.players import SearchPlayer
from hm.tools.policy import PolicyError, act, load
from hm.train.network import Network

CLEAR_SCREEN = "\x1b[H\x1b[2J"
RUNNERS_UP = 3
REPLAY_CHOICES = 5          # likeliest actions a replay shows per step


@eqx.filter_jit
def choose(network: Network, state: game.GameState, key: Key[Array, ""], greedy: Bool[Array, ""]
           ) -> tuple[Int32[Array, ""], Float[Array, " actions"], Float[Array, ""]]:
    """The agent's action in `state`, every action's probability, and the state's value."""
    obs = game.observe(state).flat()[None]
    mask = game.legal_actions(state)[None]
    action, probs, value = act(network, obs, mask, jax.random.uniform(key, (1,)), greedy)
    return action[0], probs[0], value[0]


@eqx.filter_jit
def choose_by_search(player: SearchPlayer, state: game.GameState, key: Key[Array, ""], stage_moves: Int32[Array, ""]
                     ) -> tuple[Int32[Array, ""], Float[Array, " actions"], Float[Array, ""],
                                Int32[Array, " actions"], Float[Array, " actions"], Float[Array, ""]]:
    """The search's action in `state`, the policy's probabilities and the critic's value,
    then the search's visit counts, Q-values and value. `stage_moves`: the moves made on
    this stage (the search's patience clock)."""
    out = player.plan(jax.tree.map(lambda x: x[None], state), key, stage_moves[None])
    return out.action[0], out.prior[0], out.prior_value[0], out.visit_counts[0], out.qvalues[0], out.value[0]


def search_rows(visits: np.ndarray, qvalues: np.ndarray, probs: np.ndarray) -> tuple[tuple[str, int, float, float], ...]:
    """The actions the search visited, most visited first: (name, visits, Q, policy p)."""
    order = [int(a) for a in np.argsort(-visits, kind="stable") if visits[a] > 0]
    return tuple((action_name(a), int(visits[a]), float(qvalues[a]), float(probs[a])) for a in order)


def search_line(rows: tuple[tuple[str, int, float, float], ...], value: float) -> str:
    """`search: value +1.234 | right 20 Q +1.30 p 0.41, up 8 Q +0.90 p 0.33`."""
    cells = ", ".join(f"{name} {visits} Q {q:+.3f} p {p:.3f}" for name, visits, q, p in rows)
    return f"search: value {value:+.3f} | {cells}"


def ranked_actions(probs: np.ndarray) -> list[int]:
    """The actions with a nonzero probability, likeliest first (ties in action order)."""
    return [int(a) for a in np.argsort(-probs, kind="stable") if probs[a] > 0]


def choice_line(action: int, probs: np.ndarray, value: float) -> str:
    """`agent: right (p 0.412)  value +0.530  | up 0.300, siphon 0.120`."""
    others = [a for a in ranked_actions(probs) if a != action][:RUNNERS_UP]
    line = f"agent: {action_name(action)} (p {probs[action]:.3f})  value {value:+.3f}"
    if others:
        line += "  | " + ", ".join(f"{action_name(a)} {probs[a]:.3f}" for a in others)
    return line


def replay_choices(action: int, probs: np.ndarray) -> tuple[tuple[str, float], ...]:
    """The `REPLAY_CHOICES` likeliest actions with their probabilities, and the action
    taken after them if it was not among them (a sampled long shot)."""
    shown = ranked_actions(probs)[:REPLAY_CHOICES]
    if action not in shown:
        shown.append(action)
    return tuple((action_name(a), float(probs[a])) for a in shown)


def watch(network: Network, *, episodes: int, seed: int, greedy: bool, max_steps: int, delay: float,
          out: io.TextIOBase, redraw: bool, record: list[viz.Step] | None = None,
          searcher: SearchPlayer | None = None) -> list[float]:
    """Play and show `episodes` games; returns their returns.

    Args:
        redraw: clear the screen before each board (a terminal), instead of logging.
        record: if given, every step shown is appended to it (for `hm.viz` replays).
        searcher: if given, it chooses each move by search (`network` is then unused).
    """
    returns = []
    key = jax.random.key(seed)
    greedy_flag = jnp.asarray(greedy)
    for episode in range(1, episodes + 1):
        key, reset_key, play_key = jax.random.split(key, 3)
        state = new_game(reset_key)
        total, steps, done, info = 0.0, 0, False, None
        stage_moves = 0   # moves on this stage (UNDO rewinds the game's turn, not this)
        while not done and steps < max_steps:
            if redraw:
                print(CLEAR_SCREEN, end="", file=out)
            print(f"episode {episode}/{episodes}  step {steps}  stage {int(state.stage)}  return {total:+.3f}",
                  file=out)
            print(game.render(state, legend=episode == 1 and steps == 0), file=out)
            choose_key, step_key = jax.random.split(jax.random.fold_in(play_key, steps))
            rows: tuple[tuple[str, int, float, float], ...] = ()
            if searcher is None:
                action, probs, value = jax.device_get(choose(network, state, choose_key, greedy_flag))
            else:
                action, probs, value, visits, qvalues, searched = jax.device_get(
                    choose_by_search(searcher, state, choose_key, jnp.int32(stage_moves)))
                rows = search_rows(np.asarray(visits), np.asarray(qvalues), np.asarray(probs))
            action, probs, value = int(action), np.asarray(probs), float(value)
            print(choice_line(action, probs, value), file=out)
            if searcher is not None:
                print(search_line(rows, float(searched)), file=out)
            before = state
            state, _, reward, done, info = advance(state, action, step_key)
            stage_moves = 0 if int(state.stage) != int(before.stage) else stage_moves + 1
            total += reward
            print(reward_line(reward, info["reward_terms"]), file=out, flush=True)
            if record is not None:
                record.append(viz.Step(
                    state=jax.device_get(before), episode=episode, index=steps, action=action,
                    action_name=action_name(action), choices=replay_choices(action, probs), value=value,
                    reward=reward, reward_terms=nonzero_terms(info["reward_terms"]), search=rows,
                    search_value=float(searched) if searcher is not None else None))
            steps += 1
            if delay > 0:
                time.sleep(delay)
        if redraw:
            print(CLEAR_SCREEN, end="", file=out)
        print(game.render(state, legend=False), file=out)
        how = outcome(info, state) if done else f"truncated at --max-steps {max_steps}"
        print(f"episode {episode}/{episodes} over after {steps} steps, {how}: return {total:+.3f}",
              file=out, flush=True)
        if record is not None:
            record.append(viz.Step(state=jax.device_get(state), episode=episode, index=steps,
                                   note=f"over after {steps} steps, {how}: return {total:+.3f}"))
        returns.append(total)
    return returns


class WatchArgs(Command):
    """Watch a trained agent play HackMatrix: the board, the action taken with its
    probability, the value estimate and the reward at every step.
    Exit codes: 0 done, 2 bad input (a path that holds no usable policy, a flag out of range)."""

    policy: str  # Run directory, policy.eqx/policy.json, or checkpoint file.
    delay: float = 0.3  # Seconds to wait after each step (>= 0).
    episodes: int = 1  # Games to watch (>= 1).
    seed: int = 0  # Random seed in [0, 2^32 - 1] for the games and the agent's sampling.
    greedy: bool = False  # Take the likeliest action instead of sampling.
    max_steps: int = DEFAULT_MAX_STEPS  # Cut a game after this many steps (>= 1).
    html: Path | None = None  # Also write the games as a self-contained HTML replay (board pictures, controls, per-step panel).
    gif: Path | None = None  # Also write the games as an animated GIF.
    fps: float = 4.0  # Playback speed of --html and --gif, in steps per second (> 0).
    member: str | None = None  # A population's member, by index or name; default: the best by recent return.
    search: int = 0  # Plan each move with N simulations of search over the real game and show its visits and Q-values; 0: the policy alone.
    search_q_span: float = Search.q_span  # Search: the least span of Q-values the normalisation stretches to [0, 1] (> 0).

    def configure(self) -> None:
        self.add_argument("policy", metavar="RUN_OR_POLICY")
        self.add_argument("--html", metavar="PATH.html")
        self.add_argument("--gif", metavar="PATH.gif")

    def process_args(self) -> None:
        check_float(self, "--delay", self.delay, 0.0)
        check_int(self, "--episodes", self.episodes, 1)
        check_seed(self, self.seed)
        check_int(self, "--max-steps", self.max_steps, 1)
        check_positive(self, "--fps", self.fps)
        check_int(self, "--search", self.search, 0)
        check_positive(self, "--search-q-span", self.search_q_span)
        if self.search and self.greedy:
            self.error("give --search or --greedy, not both: the search chooses the move")
        for flag, path in (("--html", self.html), ("--gif", self.gif)):
            if path is not None:
                check_output_file(self, flag, path)


def main(argv: Sequence[str] | None = None, stdout: io.TextIOBase | None = None) -> int:
    """Parse `argv`, load the policy and show its games; returns the exit code."""
    out = sys.stdout if stdout is None else stdout
    parser = WatchArgs(prog="bin/watch")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        policy = load(args.policy, member=args.member)
    except PolicyError as error:
        parser.error(f"{'--member' if args.member is not None else 'RUN_OR_POLICY'}: {error}")
    use_compile_cache()
    how = " (greedy)" if args.greedy else f" (search, {args.search} simulations)" if args.search else ""
    print(f"policy: {policy.source}{how}", file=out, flush=True)
    record = [] if args.html is not None or args.gif is not None else None
    searcher = (search_player(policy, Search(num_simulations=args.search, q_span=args.search_q_span))
                if args.search else None)
    returns = watch(policy.network, episodes=args.episodes, seed=args.seed, greedy=args.greedy,
                    max_steps=args.max_steps, delay=args.delay, out=out, redraw=out.isatty(), record=record,
                    searcher=searcher)
    if len(returns) > 1:
        print(f"{len(returns)} episodes: mean return {np.mean(returns):+.3f}", file=out)
    if args.html is not None:
        title = f"bin/watch {policy.source}{how.replace(' (', ', ').rstrip(')')}, seed {args.seed}"
        viz.write_html(args.html, record, title=title, fps=args.fps)
        print(f"wrote {args.html} ({len(record)} frames)", file=out)
    if args.gif is not None:
        viz.write_gif(args.gif, record, fps=args.fps)
        print(f"wrote {args.gif} ({len(record)} frames)", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
