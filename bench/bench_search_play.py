"""How well a policy plays with search: the same games, with and without planning.

Each variant is a `hm.search.Search` setting (or none: the policy alone), played on the
same `--episodes` games of `--seed` by `hm.tools.evaluate.run_episodes`, as `bin/evaluate
RUN --search N ...` plays them. One line per variant: mean highest stage, share reaching
stage 5, return, win rate with its 95 % Wilson interval, games cut at the step limit (and
how many of those the policy alone was not cut in: the wandering a search must not add),
and seconds.

    python -m bench.bench_search_play RUN --variants 0 8 32 --episodes 1024
    python -m bench.bench_search_play RUN --variants 8:q=1e-8 8:q=1:g=0 4:r=2 --episodes 128

A variant is `N[:q=SPAN][:g=GUMBEL][:r=ROOTS][:v=SCALE][:x=DISTANCE][:s=SAMPLES][:p=PATIENCE][:m=TOPK][:u=0]`:
N simulations (0: the policy alone), then `Search.q_span`, `gumbel_scale`,
`root_searches`, `value_scale`, `distance_weight`, `chance_samples`, `patience` and
`max_num_considered_actions` (Gumbel's top-k at the root; unnamed: `Search`'s defaults);
`u=0` turns off `SearchReward.charge_undo`. List the policy alone first: the other
variants count their cut games against its.
`--baseline` plays the planning baseline (uniform prior, the greedy heuristic's value) instead of the policy.
`--slots` plays a search's games as a work queue of that many at a time (default
`hm.tools.evaluate.SEARCH_SLOTS`): fewer slots than games keep one long game from holding
every slot (128 simulations).
"""

import json
import math
import pathlib
import time
from typing import Any

import equinox as eqx
import jax
import numpy as np
from tap import Tap

from bench import common
from hm.game import constants as C
from hm.search import Search, SearchReward
from hm.tools import evaluate
from hm.tools.players import SearchPlayer
from hm.tools.policy import load


class Args(Tap):
    policy: str  # run directory, policy.eqx or checkpoint
    variants: list[str] = ["0", "8", "32"]  # N[:q=..][:g=..][:r=..][:v=..][:x=..][:s=..][:p=..][:m=..][:u=0] (module doc); 0: the policy alone
    episodes: int = 256  # games per variant
    seed: int = 1  # evaluation seed (the same games for every variant)
    max_steps: int = evaluate.DEFAULT_MAX_STEPS
    baseline: bool = False  # plan with the uniform prior and the greedy value instead of the policy
    slots: int | None = None  # a search's games at a time (default: evaluate.SEARCH_SLOTS)
    out: pathlib.Path | None = None  # append the results as JSON lines to this file

    def configure(self) -> None:
        self.add_argument("policy")


def parse_variant(text: str) -> tuple[Search | None, bool]:
    """`N[:q=SPAN][:g=GUMBEL][:r=ROOTS][:v=SCALE][:x=DISTANCE][:s=SAMPLES][:p=PATIENCE][:m=TOPK][:u=0]` as a
    `Search` (None for N = 0) and whether the search reward charges UNDO (`SearchReward.charge_undo`)."""
    head, *options = text.split(":")
    simulations = int(head)
    fields = {"q": ("q_span", float), "g": ("gumbel_scale", float), "r": ("root_searches", int),
              "v": ("value_scale", float), "x": ("distance_weight", float), "s": ("chance_samples", int),
              "p": ("patience", float), "m": ("max_num_considered_actions", int)}
    settings, charge_undo = {}, True
    for option in options:
        name, _, value = option.partition("=")
        if name == "u":
            charge_undo = bool(int(value))
            continue
        if name not in fields:
            known = ", ".join(f"{letter}=" for letter in (*fields, "u"))
            raise SystemExit(f"--variants {text}: unknown option {name!r}; options are {known}")
        field, kind = fields[name]
        settings[field] = kind(value)
    if simulations == 0:
        return None, charge_undo
    return Search(num_simulations=simulations, **settings), charge_undo


def with_undo_charge(player: SearchPlayer, charge: bool) -> SearchPlayer:
    """`player` whose search reward charges UNDO or not (`SearchReward.charge_undo`)."""
    reward = player.reward
    weights = dict(zip(C.REWARD_TERMS, np.asarray(reward.term_weights).tolist()))
    new = SearchReward(weights, reward.program_bonus, charge_undo=charge)
    return eqx.tree_at(lambda p: p.reward, player, new)


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a rate."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main(args: Args) -> list[dict[str, Any]]:
    policy = load(args.policy)
    alone_truncated = None
    results = []
    for text in args.variants:
        settings, charge_undo = parse_variant(text)
        if settings is None:
            player = evaluate.make_player(policy.network)
        else:
            if args.baseline:
                player = evaluate.make_player("search", search=settings)
            else:
                player = evaluate.search_player(policy, settings)
            player = with_undo_charge(player, charge_undo)
        began = time.perf_counter()
        played = evaluate.run_episodes(player, args.episodes, args.max_steps, args.seed,
                                       slots=args.slots if settings is not None else None)
        seconds = time.perf_counter() - began
        figures = evaluate.summarise(played)
        wins = int(played.won.sum())
        low, high = wilson(wins, args.episodes)
        if settings is None and not args.baseline:
            alone_truncated = played.truncated
        added = (int(np.sum(played.truncated & ~alone_truncated)) if alone_truncated is not None else None)
        metrics = {
            "highest_stage_mean": figures["highest_stage_mean"],
            "stage5_share": float(np.mean(played.stage >= 5)),
            "return_mean": figures["return_mean"],
            "win_rate": figures["win_rate"], "win_rate_95": [low, high],
            "truncated": int(played.truncated.sum()), "truncated_not_alone": added,
            "program_episode_rate": figures["program_episode_rate"],
            "length_mean": figures["length_mean"], "steps": figures["steps"], "seconds": seconds,
        }
        config = {"policy": str(args.policy), "variant": text, "episodes": args.episodes, "seed": args.seed,
                  "baseline": args.baseline, "search": evaluate.search_settings(player),
                  "slots": (args.slots or evaluate.SEARCH_SLOTS) if settings else None}
        print(f"{text:>16}: stage {metrics['highest_stage_mean']:.2f}, stage 5+ {metrics['stage5_share']:.1%}, "
              f"return {metrics['return_mean']:+.1f}, wins {wins}/{args.episodes} "
              f"(95 % {low:.1%}-{high:.1%}), cut {metrics['truncated']}"
              + (f" ({added} not cut alone)" if added is not None else "")
              + f", {seconds:.0f} s", flush=True)
        results.append(common.record_line("search_play", config, metrics, args.out))
    return results


if __name__ == "__main__":
    arguments = Args(underscores_to_dashes=True).parse_args()
    print(json.dumps({"policy": arguments.policy, "backend": jax.default_backend()}))
    main(arguments)
