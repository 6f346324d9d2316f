"""Do programs pay? A paired test of a player with and without its programs.

The player plays the same games three ways (`hm.tools.evaluate.run_episodes`, one seed):

* **as is**: its own choices;
* **ban**: its program actions masked out, so it never runs one;
* **eager**: whenever a program is legal it must run one (it picks which).

Until a program first becomes legal in a game the three arms see the same mask and draw
the same keys, so they play that game identically up to there (`ProgramRule`); the games
in which no program is ever legal end identically, and `ablate` checks that. The games
in which a program was ever legal are then compared in pairs: the mean difference of each
arm from "as is" in highest stage and return, with its standard error.
docs/evaluation.md#program-ablation has the measurement this was written for.

    python -m hm.tools.program_ablation RUN_DIR --all-members --episodes 2048 --json out.json
    python -m hm.tools.program_ablation --baseline greedy --episodes 256
"""

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hm.command import Command, check_int, check_output_file, check_seed, use_compile_cache
from hm.tools.evaluate import DEFAULT_MAX_STEPS, Results, make_player, run_episodes
from hm.tools.players import PROGRAM_RULES, AbstractPlayer, ProgramRule
from hm.tools.policy import PolicyError, load, members_of

ARMS = ("as-is",) + PROGRAM_RULES


class ProgramAblationError(RuntimeError):
    """The arms played a game differently before any program was legal (a bug)."""


def _mean(values: np.ndarray) -> float:
    """The mean, or nan for no values (a run in which no program was ever legal)."""
    return float(values.mean()) if values.size else float("nan")


def _arm_figures(results: Results, paired: np.ndarray) -> dict[str, float]:
    runs = results.program_runs.sum(axis=-1)
    return {"stage": _mean(results.stage[paired]), "return": _mean(results.episode_return[paired]),
            "ran_share": _mean(runs[paired] > 0), "runs_per_game": _mean(runs[paired]),
            "stage_all": _mean(results.stage), "return_all": _mean(results.episode_return)}


def _paired(diff: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of paired differences (nan where there are too few)."""
    se = float(diff.std(ddof=1) / np.sqrt(diff.size)) if diff.size >= 2 else float("nan")
    return _mean(diff), se


def ablate(player: AbstractPlayer, num_episodes: int, max_steps: int = DEFAULT_MAX_STEPS,
           seed: int = 0) -> dict[str, Any]:
    """The three arms of `player` on `num_episodes` games of `seed` (see the module docstring).

    Returns a dict: `games`, `paired_games` (a program was legal at some point), and per arm
    its figures on the paired games (`stage`, `return`, `ran_share`, `runs_per_game`) and on
    all games (`stage_all`, `return_all`); "ban" and "eager" also get `d_stage`,
    `d_stage_se`, `d_return`, `d_return_se` against "as-is".

    Raises:
        ProgramAblationError: the arms differ on a game in which no program was legal.
    """
    # Every arm is a `ProgramRule` of `player` ("as-is" included), so one program plays all three.
    results = {arm: run_episodes(ProgramRule(inner=player, rule=arm), num_episodes, max_steps, seed) for arm in ARMS}
    base = results["as-is"]
    paired = base.program_legal
    untouched = ~paired
    for arm in PROGRAM_RULES:
        other = results[arm]
        if not (np.array_equal(other.program_legal, paired)
                and np.array_equal(other.episode_return[untouched], base.episode_return[untouched])
                and np.array_equal(other.length[untouched], base.length[untouched])):
            raise ProgramAblationError(f"the {arm!r} arm played a game differently before any program was legal")
    report: dict[str, Any] = {"games": num_episodes, "paired_games": int(paired.sum()), "seed": seed,
                              "max_steps": max_steps}
    for arm in ARMS:
        report[arm] = _arm_figures(results[arm], paired)
    for arm in PROGRAM_RULES:
        d_stage = results[arm].stage[paired].astype(np.float64) - base.stage[paired]
        d_return = results[arm].episode_return[paired].astype(np.float64) - base.episode_return[paired]
        report[arm]["d_stage"], report[arm]["d_stage_se"] = _paired(d_stage)
        report[arm]["d_return"], report[arm]["d_return_se"] = _paired(d_return)
    return report


def format_report(name: str, report: dict[str, Any]) -> str:
    """A few lines for the terminal."""
    lines = [f"{name}: {report['paired_games']} of {report['games']} games had a legal program"]
    for arm in ARMS:
        r = report[arm]
        line = (f"  {arm:6s} stage {r['stage']:.2f}  return {r['return']:+.2f}  ran {r['ran_share']:.0%}  "
                f"runs/game {r['runs_per_game']:.1f}")
        if arm != "as-is":
            line += (f"  | vs as-is: stage {r['d_stage']:+.2f} ± {r['d_stage_se']:.2f}, "
                     f"return {r['d_return']:+.2f} ± {r['d_return_se']:.2f}")
        lines.append(line)
    return "\n".join(lines)


class ProgramAblationArgs(Command):
    """Do programs pay? Play a policy (or the greedy baseline) on the same games as is, with
    programs banned, and running one whenever it can; compare the games in which a program
    was ever legal, in pairs. Exit codes: 0 done, 2 bad input."""

    policy: str | None = None  # Run directory, policy.eqx/policy.json, or checkpoint file.
    episodes: int = 1024  # Games per arm (>= 1); about 6 % of a trained agent's have a legal program.
    max_steps: int = DEFAULT_MAX_STEPS  # Steps per game (>= 1).
    seed: int = 0  # Random seed in [0, 2^32 - 1]: the evaluation games of bin/evaluate --seed.
    baseline: list[Literal["greedy"]] = []  # Also (or only) test the greedy baseline (slow: 28 game steps per choice).
    all_members: bool = False  # Test every member of a population.
    json: Path | None = None  # Write the reports to this file as JSON.

    def configure(self) -> None:
        self.add_argument("policy", nargs="?", metavar="RUN_OR_POLICY")
        self.add_argument("--json", metavar="OUT.json")

    def process_args(self) -> None:
        if self.policy is None and not self.baseline:
            self.error("give RUN_OR_POLICY, --baseline greedy, or both")
        if self.all_members and self.policy is None:
            self.error("--all-members needs RUN_OR_POLICY")
        check_int(self, "--episodes", self.episodes, 1)
        check_int(self, "--max-steps", self.max_steps, 1)
        check_seed(self, self.seed)
        if self.json is not None:
            check_output_file(self, "--json", self.json)


def main(argv: Sequence[str] | None = None, stdout=None) -> int:
    """Parse `argv`, run the arms, print (and write `--json`); returns the exit code."""
    out = sys.stdout if stdout is None else stdout
    parser = ProgramAblationArgs(prog="python -m hm.tools.program_ablation")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    players: dict[str, AbstractPlayer] = {}
    if args.policy is not None:
        try:
            members = [row["index"] for row in members_of(args.policy)] if args.all_members else [None]
            for member in members:
                policy = load(args.policy, member=member)
                players[policy.source] = make_player(policy.network)
        except PolicyError as error:
            parser.error(f"{'--all-members' if args.all_members else 'RUN_OR_POLICY'}: {error}")
    for name in dict.fromkeys(args.baseline):
        players[name] = make_player(name)
    use_compile_cache()
    reports = {}
    for name, player in players.items():
        reports[name] = ablate(player, args.episodes, args.max_steps, args.seed)
        print(format_report(name, reports[name]), file=out, flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(reports, indent=1) + "\n")
        print(f"wrote {args.json}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
