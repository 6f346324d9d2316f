"""`bin/evaluate`: how well a policy plays, over many games at once.

N episodes run side by side (`jax.vmap` over games) in one compiled `lax.scan` over
steps; an episode that ends stops changing (its tally is frozen with `jnp.where`), and
one still running after `--max-steps` is *truncated*, counted apart from deaths and
wins. The scan covers `CHUNK` steps per call and the host calls it again until every
episode has ended or the step limit is reached: the same single compiled program, but
a batch of short episodes (a random agent dies within a few hundred steps) does not pay
for a thousand steps.

The uniform-random-legal baseline (`--baseline random`) is a network with all weights
zero (`hm.tools.policy.uniform_network`): it runs through the same compiled program as
the policy it is compared with, and both see the same games (the same seed gives the
same stages and randomness streams).
"""

import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int32, Key, PRNGKeyArray

from hm import game
from hm.command import Command, check_int, check_output_file, check_seed, use_compile_cache
from hm.game import constants as C
from hm.tools.policy import PolicyError, act, load, uniform_network
from hm.train.config import TrainConfig
from hm.train.network import Network

CHUNK = 128                 # steps per compiled call; the host checks for the end between calls
DEFAULT_EPISODES = 256
DEFAULT_MAX_STEPS = TrainConfig.max_episode_steps   # where training truncates, too


class Episode(eqx.Module):
    """One game being evaluated and its running tally (batched: a leading episode axis)."""

    state: game.GameState
    obs: Float[Array, " obs"]
    ended: Bool[Array, ""]                  # won, died or (never, with masked play) illegal
    episode_return: Float[Array, ""]
    length: Int32[Array, ""]
    reward_terms: Float[Array, " terms"]    # summed over the episode, in C.REWARD_TERMS order
    won: Bool[Array, ""]
    died: Bool[Array, ""]


def start(key: Key[Array, ""]) -> Episode:
    """A new game with an empty tally."""
    state, obs = game.reset(key)
    false = jnp.asarray(False)
    return Episode(state=state, obs=obs.flat(), ended=false, episode_return=jnp.float32(0.0),
                   length=jnp.int32(0), reward_terms=jnp.zeros((len(C.REWARD_TERMS),), jnp.float32),
                   won=false, died=false)


def advance(episode: Episode, action: Int32[Array, ""], key: Key[Array, ""], live: Bool[Array, ""]) -> Episode:
    """`episode` after `action` if `live`, else unchanged."""
    state, obs, reward, done, info = game.step(episode.state, action, key)
    terms = jnp.stack([info["reward_terms"][name] for name in C.REWARD_TERMS])
    stepped = Episode(state=state, obs=obs.flat(), ended=done, episode_return=episode.episode_return + reward,
                      length=episode.length + 1, reward_terms=episode.reward_terms + terms,
                      won=info["won"], died=info["died"])
    return jax.tree.map(lambda new, old: jnp.where(live, new, old), stepped, episode)


@eqx.filter_jit
def _start_all(keys: Key[Array, " n"]) -> Episode:
    return jax.vmap(start)(keys)


@eqx.filter_jit
def _play_chunk(network: Network, episodes: Episode, key: PRNGKeyArray, first_step: Int32[Array, ""],
                max_steps: Int32[Array, ""], greedy: Bool[Array, ""]) -> Episode:
    """`CHUNK` steps of every episode; step `t` draws from `fold_in(key, t)`."""
    n = episodes.ended.shape[0]

    def step(episodes: Episode, t: Int32[Array, ""]) -> tuple[Episode, None]:
        action_key, env_key = jax.random.split(jax.random.fold_in(key, t))
        mask = jax.vmap(game.legal_actions)(episodes.state)
        action, _, _ = act(network, episodes.obs, mask, jax.random.uniform(action_key, (n,)), greedy)
        live = ~episodes.ended & (t < max_steps)
        episodes = jax.vmap(advance)(episodes, action, jax.random.split(env_key, n), live)
        return episodes, None

    steps = first_step + jnp.arange(CHUNK, dtype=jnp.int32)
    return jax.lax.scan(step, episodes, steps)[0]


@dataclasses.dataclass(frozen=True)
class Results:
    """Per-episode outcomes on the host, one row per episode."""

    episode_return: np.ndarray     # float32 [n]
    length: np.ndarray             # int32 [n]
    won: np.ndarray                # bool [n]
    died: np.ndarray               # bool [n]
    truncated: np.ndarray          # bool [n]: still running at the step limit
    stage: np.ndarray              # int32 [n]: the highest stage reached (the last one)
    reward_terms: np.ndarray       # float32 [n, terms]
    seconds: float


def run_episodes(network: Network, num_episodes: int, max_steps: int, seed: int, greedy: bool = False) -> Results:
    """Play `num_episodes` games with `network` for at most `max_steps` steps each.

    Args:
        network: the policy (`uniform_network()` for the random baseline).
        num_episodes: games, played side by side.
        max_steps: the step limit; a game still running then is truncated.
        seed: decides the games and every random draw (the same for every network).
        greedy: take each state's likeliest action instead of sampling.
    """
    began = time.perf_counter()
    reset_key, play_key = jax.random.split(jax.random.key(seed))
    episodes = _start_all(jax.random.split(reset_key, num_episodes))
    for first_step in range(0, max_steps, CHUNK):
        episodes = _play_chunk(network, episodes, play_key, jnp.int32(first_step), jnp.int32(max_steps),
                               jnp.asarray(greedy))
        if bool(jnp.all(episodes.ended)):
            break
    host = jax.device_get(episodes)
    return Results(
        episode_return=np.asarray(host.episode_return), length=np.asarray(host.length),
        won=np.asarray(host.won), died=np.asarray(host.died), truncated=~np.asarray(host.ended),
        stage=np.asarray(host.state.stage), reward_terms=np.asarray(host.reward_terms),
        seconds=time.perf_counter() - began)


def summarise(results: Results) -> dict[str, Any]:
    """The report of one agent: JSON-able numbers (rates in [0, 1], std with ddof 0)."""
    returns = results.episode_return.astype(np.float64)
    n = len(returns)
    stage_counts = np.bincount(results.stage, minlength=C.NUM_STAGES + 1)[1:]
    return {
        "episodes": n,
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "return_median": float(np.median(returns)),
        "return_min": float(returns.min()),
        "return_max": float(returns.max()),
        "length_mean": float(results.length.mean()),
        "win_rate": float(results.won.mean()),
        "death_rate": float(results.died.mean()),
        "truncation_rate": float(results.truncated.mean()),
        "highest_stage": {str(stage): int(count) for stage, count in enumerate(stage_counts.tolist(), 1)},
        "reward_terms_mean": {name: float(results.reward_terms[:, i].astype(np.float64).mean())
                              for i, name in enumerate(C.REWARD_TERMS)},
        "steps": int(results.length.sum()),
        "seconds": round(results.seconds, 3),   # wall time, compilation included
    }


def format_reports(reports: dict[str, dict[str, Any]]) -> str:
    """A table with one column per agent, for the terminal."""
    names = list(reports)
    width = max(12, *(len(name) + 2 for name in names))
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, cell) -> None:
        rows.append((label, [cell(reports[name]) for name in names]))

    row("return mean", lambda r: f"{r['return_mean']:+.3f}")
    row("return std", lambda r: f"{r['return_std']:.3f}")
    row("return median", lambda r: f"{r['return_median']:+.3f}")
    row("return min/max", lambda r: f"{r['return_min']:+.1f}/{r['return_max']:+.1f}")
    row("length mean", lambda r: f"{r['length_mean']:.1f}")
    row("win rate", lambda r: f"{r['win_rate']:.3f}")
    row("death rate", lambda r: f"{r['death_rate']:.3f}")
    row("truncation rate", lambda r: f"{r['truncation_rate']:.3f}")
    for stage in range(1, C.NUM_STAGES + 1):
        if any(reports[name]["highest_stage"][str(stage)] for name in names):
            row(f"highest stage {stage}",
                lambda r, s=str(stage): f"{r['highest_stage'][s] / r['episodes']:.3f}")
    for term in C.REWARD_TERMS:
        row(f"term {term}", lambda r, t=term: f"{r['reward_terms_mean'][t]:+.3f}")
    label_width = max(len(label) for label, _ in rows) + 2
    lines = ["".ljust(label_width) + "".join(name.rjust(width) for name in names)]
    lines += [label.ljust(label_width) + "".join(cell.rjust(width) for cell in cells) for label, cells in rows]
    return "\n".join(lines)


class EvaluateArgs(Command):
    """Evaluate a trained policy over many games (vectorised), and/or a uniform-random
    baseline: return, length, win/death/truncation rates, highest stage, reward terms.
    Exit codes: 0 done, 2 bad input (a path that holds no usable policy, a flag out of range)."""

    policy: str | None = None  # Run directory, policy.eqx/policy.json, or checkpoint file.
    episodes: int = DEFAULT_EPISODES  # Games to play (>= 1), all at once.
    max_steps: int = DEFAULT_MAX_STEPS  # Steps per game (>= 1); a game still running then counts as truncated.
    seed: int = 0  # Random seed in [0, 2^32 - 1]; the same seed gives every agent the same games.
    greedy: bool = False  # Play the policy's likeliest action instead of sampling (the baseline always samples).
    baseline: Literal["random"] | None = None  # Also (or only) evaluate a uniform-random-legal player.
    json: Path | None = None  # Write the report to this file as JSON.

    def configure(self) -> None:
        self.add_argument("policy", nargs="?", metavar="RUN_OR_POLICY")
        self.add_argument("--json", metavar="OUT.json")

    def process_args(self) -> None:
        if self.policy is None and self.baseline is None:
            self.error("give RUN_OR_POLICY (a run directory, policy.eqx or checkpoint), "
                       "--baseline random, or both")
        check_int(self, "--episodes", self.episodes, 1)
        check_int(self, "--max-steps", self.max_steps, 1)
        check_seed(self, self.seed)
        if self.greedy and self.policy is None:
            self.error("--greedy needs RUN_OR_POLICY: the random baseline always samples")
        if self.json is not None:
            check_output_file(self, "--json", self.json)


def main(argv: Sequence[str] | None = None, stdout=None) -> int:
    """Parse `argv`, evaluate, print (and write `--json`); returns the exit code."""
    out = sys.stdout if stdout is None else stdout
    parser = EvaluateArgs(prog="bin/evaluate")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    policy = None
    if args.policy is not None:
        try:
            policy = load(args.policy)
        except PolicyError as error:
            parser.error(f"RUN_OR_POLICY: {error}")
    use_compile_cache()

    agents: dict[str, tuple[Network, bool]] = {}
    if policy is not None:
        agents["policy"] = (policy.network, args.greedy)
        print(f"policy: {policy.source}{' (greedy)' if args.greedy else ''}", file=out)
    if args.baseline == "random":
        agents["random"] = (uniform_network(policy.network if policy else None), False)
    print(f"{args.episodes} episodes of at most {args.max_steps} steps, seed {args.seed}", file=out, flush=True)

    reports = {}
    for name, (network, greedy) in agents.items():
        reports[name] = summarise(run_episodes(network, args.episodes, args.max_steps, args.seed, greedy))
    print(format_reports(reports), file=out)
    if args.json is not None:
        document = {
            "policy": policy.source if policy else None,
            "episodes": args.episodes, "max_steps": args.max_steps, "seed": args.seed,
            "greedy": args.greedy, "game_version": C.GAME_VERSION,
            "agents": reports,
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {args.json}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
