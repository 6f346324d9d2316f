"""`bin/evaluate`: how well a policy plays, over many games at once, beside baselines.

N episodes run side by side (`jax.vmap` over games) in one compiled `lax.scan` over
steps; an episode that ends stops changing (its tally is frozen with `jnp.where`), and
one still running after `--max-steps` is *truncated*, counted apart from deaths and
wins. The scan covers `CHUNK` steps per call and the host calls it again until every
episode has ended or the step limit is reached: the same single compiled program, but
a batch of short episodes (a random agent dies within a few hundred steps) does not pay
for a thousand steps. There is one compiled program per kind of player
(`hm.tools.players`): a network of a given shape, or the greedy baseline.

A search player costs a search per move, so it plays the games as a work queue instead
(`run_queue`): `SEARCH_SLOTS` games at a time, a slot whose game ends taking the next
game inside the same compiled scan, so that the work is the games' total length rather
than the longest game's length times every game. The games are the same; their
randomness is drawn per game and step (see `run_queue`).

Players: the policy, `--baseline random` (uniform over the legal actions; a network
with all weights zero, so it runs through the policy's program), `--baseline greedy`
(the scripted `GreedyPlayer`: the legal action with the best immediate reward plus a
small heuristic value, every action tried on a copy of the game) and `--baseline search`
(Gumbel MuZero search over the real game with a uniform prior and the greedy player's
heuristic value: planning that needs no training). `--search N` makes the policy plan:
N simulations of the same search per move, with the policy's prior and value and the
reward its critic was trained on (`hm.search`, docs/search.md).

Games: every player sees the same games for the same `--seed` (the same stages and
randomness streams). Evaluation games come from their own seed family, disjoint from
training's: their key is `fold_in(key(seed), EVALUATION_STREAM)`, while every key a
training run uses descends from `split(key(seed))`, so evaluating with the training
seed does not replay the training games. Step `t` splits `fold_in(play key, t)` into the
player's key and the environment's key: a player never sees the key its step will use.

Python API (for benchmarks and scripts, on a network in memory):

    report = evaluate(network_or_player, num_episodes=256, seed=0, max_steps=1000)
    report.summary()     # the headline figures: return, highest_stage, siphon_share, ...,
                         # and program_owned_share, program_legal_share, siphons_per_episode
    report.to_json()     # one agent's report below

`--json` writes, at `schema_version` 4 (a test pins every key):

    schema_version  4
    policy          where the policy was read from, or null
    episodes, max_steps, seed, greedy, game_version
    search          {name: settings} for each agent that searches ("policy" with
                    `--search`, the "search" baseline): `hm.search.Search.settings()` and
                    "reward": {"term_weights": {term: weight}, "program_bonus": B,
                    "charge_undo": bool}
                    (with `--all-members`, the baselines' here and each member's under
                    its own "search")
    agents          {name: report} for "policy", "random", "greedy", "search" (those evaluated)

With `--all-members`, `agents` is replaced by `members` (each member's row of the
population table with its `report`), `settings` (per setting, the mean and std over
its seeds) and `baselines` ({name: report} for the `--baseline`s, on the same games).

and one agent's report (rates are shares of episodes in [0, 1], std with ddof 0):

    episodes; return_mean, return_std, return_median, return_min, return_max;
    length_mean; win_rate, death_rate, truncation_rate
    highest_stage          {"1".."8", "won": episode count}: the stage an episode ended
                           on; a won game counts under "won" only
    highest_stage_mean     mean of the stage an episode ended on (a won game: 8)
    stage_completions      {"1".."8": episodes that completed that stage}
    stage_completed_step_mean {"1".."8": mean step (1-based, steps since the episode
                           began) at which stage k was completed, or null if none did}
    siphon_episode_rate    share of episodes that siphoned at least once
    program_episode_rate   share of episodes that ran at least one program
    program_owned_episode_rate  share of episodes in which the player owned a program
                           at some point (only siphoning a program block gives one)
    program_legal_episode_rate  share of episodes with a state the player acted in where
                           some program was legal (owned, affordable, its condition met):
                           the opportunities that program_episode_rate is a share of
    siphons_per_episode, programs_per_episode
    programs               {program name: {"runs_per_episode", "episode_rate"}}
    death_cause            {cause: death count}, causes in DEATH_CAUSES (sums to deaths)
    reward_terms_mean      {term: mean per episode} in hm.game.constants.REWARD_TERMS order
    steps                  env steps played; seconds: wall time, compilation included

Cause of death. Only an enemy's attack takes the player's HP (docs/rules.md §10), and an
enemy that attacks does not move in that phase, so the killer is one of the enemies next
to the player after the fatal step, less those that hatched in that phase (born disabled).
When those suspects are all of one type the death is put down to that type; when they
are of several types the state cannot tell which one struck the last blow (activations
run in a random order), so the cause is "several_kinds". "unknown" (no suspect) cannot
happen under the rules; it is kept so that the causes always add up to the deaths.
"""

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
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
from hm.game import geometry
from hm.search import Search, SearchReward
from hm.tools.players import (
    AbstractPlayer,
    GreedyPlayer,
    HeuristicEvaluator,
    NetworkEvaluator,
    NetworkPlayer,
    SearchPlayer,
    random_player,
    reward_of_config,
)
from hm.tools.policy import Policy, PolicyError, load, members_of
from hm.train.config import TrainConfig
from hm.train.network import Network
from hm.train.precision import DTYPES

SCHEMA_VERSION = 4
CHUNK = 128                 # steps per compiled call; the host checks for the end between calls
# Games a search player plays at a time (`run_queue`): past a hundred or so, a CPU gains
# little throughput per simulation, and a game waits for the slowest of its batch less.
SEARCH_SLOTS = 128
DEFAULT_EPISODES = 256
DEFAULT_MAX_STEPS = TrainConfig.max_episode_steps   # where training truncates, too
# Evaluation keys are `fold_in(key(seed), EVALUATION_STREAM)`: a family of their own.
EVALUATION_STREAM = 0x65766131          # "eva1"
BASELINES = ("random", "greedy", "search")
# Simulations of `--baseline search` when `--search` does not say.
DEFAULT_BASELINE_SIMULATIONS = 32

DEATH_CAUSES = (*C.ENEMY_NAMES, "several_kinds", "unknown")
_SEVERAL_KINDS, _UNKNOWN = C.NUM_ENEMY_TYPES, C.NUM_ENEMY_TYPES + 1
_NOT_DEAD = -1
_MANHATTAN = geometry.MANHATTAN.astype(np.int32)


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
    siphons: Int32[Array, ""]
    program_runs: Int32[Array, " programs"]
    owned_program: Bool[Array, ""]          # owned a program at some point
    program_legal: Bool[Array, ""]          # some program was legal in a state acted in
    death_cause: Int32[Array, ""]           # index into DEATH_CAUSES; _NOT_DEAD if alive
    stage_completed_step: Int32[Array, " stages"]   # the `length` when stage k+1 was completed, else 0


def start(key: Key[Array, ""]) -> Episode:
    """A new game with an empty tally."""
    state, obs = game.reset(key)
    return start_from(state, obs.flat())


def start_from(state: game.GameState, obs: Float[Array, " obs"]) -> Episode:
    """An empty tally of the new game `state` (its flat observation `obs`)."""
    false, zero = jnp.asarray(False), jnp.int32(0)
    return Episode(state=state, obs=obs, ended=false, episode_return=jnp.float32(0.0),
                   length=zero, reward_terms=jnp.zeros((len(C.REWARD_TERMS),), jnp.float32),
                   won=false, died=false, siphons=zero,
                   program_runs=jnp.zeros((C.NUM_PROGRAMS,), jnp.int32),
                   owned_program=jnp.any(state.player.owned), program_legal=false,
                   death_cause=jnp.int32(_NOT_DEAD),
                   stage_completed_step=jnp.zeros((C.NUM_STAGES,), jnp.int32))


def stage_moves(episodes: Episode) -> Int32[Array, "*n"]:
    """The moves each game has made on its current stage: its length since it last
    completed a stage (a count UNDO does not rewind, unlike the game's turn)."""
    return episodes.length - jnp.max(episodes.stage_completed_step, axis=-1)


def death_cause(before: game.GameState, after: game.GameState) -> Int32[Array, ""]:
    """Who killed the player of `after`, dead after a step from `before`: an index into
    DEATH_CAUSES (see the module docstring).

    The suspects are the enemies next to the player after the step, less those that
    hatched in the fatal phase (an enemy hatches disabled, so it cannot attack in the
    phase of its birth): an enemy on a cell where `before` had a transmission of its
    type about to hatch.
    """
    here = after.player.row * C.COLS + after.player.col
    e, t = after.enemies, before.transmissions
    cells = e.row.astype(jnp.int32) * C.COLS + e.col.astype(jnp.int32)
    hatching = t.alive & (t.timer <= 1)
    transmission_cells = t.row.astype(jnp.int32) * C.COLS + t.col.astype(jnp.int32)
    newborn = jnp.any(hatching[None, :] & (transmission_cells[None, :] == cells[:, None])
                      & (t.kind[None, :] == e.kind[:, None]), axis=1)
    suspect = e.alive & ~newborn & (jnp.asarray(_MANHATTAN)[cells, here] == 1)
    kinds = jnp.any(suspect[:, None] & (e.kind[:, None] == jnp.arange(C.NUM_ENEMY_TYPES, dtype=jnp.int8)[None, :]),
                    axis=0)
    count = jnp.sum(kinds, dtype=jnp.int32)
    return jnp.where(count == 1, jnp.argmax(kinds).astype(jnp.int32),
                     jnp.where(count > 1, _SEVERAL_KINDS, _UNKNOWN)).astype(jnp.int32)


def advance(episode: Episode, action: Int32[Array, ""], mask: Bool[Array, " actions"], key: Key[Array, ""],
            live: Bool[Array, ""]) -> Episode:
    """`episode` after `action` if `live`, else unchanged; `mask` is the legal actions of
    `episode.state` (`hm.game.legal_actions`)."""
    state, obs, reward, done, info = game.step(episode.state, action, key)
    terms = jnp.stack([info["reward_terms"][name] for name in C.REWARD_TERMS])
    legal = ~info["illegal"]
    length = episode.length + 1
    program = action - C.PROGRAM_ACTION_OFFSET
    ran = legal & (jnp.arange(C.NUM_PROGRAMS, dtype=jnp.int32) == program)
    completed = info["stage_completed"] & (jnp.arange(1, C.NUM_STAGES + 1) == episode.state.stage)
    stepped = Episode(
        state=state, obs=obs.flat(), ended=done, episode_return=episode.episode_return + reward,
        length=length, reward_terms=episode.reward_terms + terms, won=info["won"], died=info["died"],
        siphons=episode.siphons + (legal & (action == C.ACTION_SIPHON)).astype(jnp.int32),
        program_runs=episode.program_runs + ran.astype(jnp.int32),
        owned_program=episode.owned_program | jnp.any(state.player.owned),
        program_legal=episode.program_legal | jnp.any(mask[C.PROGRAM_ACTION_OFFSET:]),
        death_cause=jnp.where(info["died"], death_cause(episode.state, state), episode.death_cause),
        stage_completed_step=jnp.where(completed, length, episode.stage_completed_step))
    return jax.tree.map(lambda new, old: jnp.where(live, new, old), stepped, episode)


@eqx.filter_jit
def _start_all(keys: Key[Array, " n"]) -> Episode:
    return jax.vmap(start)(keys)


@eqx.filter_jit
def _play_chunk(player: AbstractPlayer, episodes: Episode, key: PRNGKeyArray, first_step: Int32[Array, ""],
                max_steps: Int32[Array, ""]) -> Episode:
    """`CHUNK` steps of every episode; step `t` draws from `fold_in(key, t)`."""
    n = episodes.ended.shape[0]

    def step(episodes: Episode, t: Int32[Array, ""]) -> tuple[Episode, None]:
        player_key, env_key = jax.random.split(jax.random.fold_in(key, t))
        mask = jax.vmap(game.legal_actions)(episodes.state)
        action = player.choose(episodes.state, episodes.obs, mask, player_key, stage_moves(episodes))
        live = ~episodes.ended & (t < max_steps)
        episodes = jax.vmap(advance)(episodes, action, mask, jax.random.split(env_key, n), live)
        return episodes, None

    steps = first_step + jnp.arange(CHUNK, dtype=jnp.int32)
    return jax.lax.scan(step, episodes, steps)[0]


class Queue(eqx.Module):
    """An evaluation played as a work queue: `slots` games at a time, each slot taking
    the next unplayed game as soon as its own ends (batched over slots; see
    `run_queue`)."""

    slots: Episode                 # [S] the games being played
    game: Int32[Array, " S"]       # the game each slot plays (0..N-1), N when the slot is idle
    next_game: Int32[Array, ""]    # the first game not yet started
    finished: Episode              # [N] every game's tally, written when it ends


@eqx.filter_jit
def _start_queue(reset_keys: Key[Array, " N"], slots: int) -> Queue:
    """The first `slots` games started; every game's tally a placeholder until it ends
    (the other games are generated as slots take them, `_queue_refill`)."""
    n = reset_keys.shape[0]
    first = jax.vmap(start)(reset_keys[:slots])
    finished = jax.tree.map(lambda x: jnp.zeros((n,) + x.shape[1:], x.dtype), first)
    return Queue(slots=first, game=jnp.arange(slots, dtype=jnp.int32), next_game=jnp.int32(min(slots, n)),
                 finished=finished)


def _queue_refill(queue: Queue, over: Bool[Array, " S"], reset_keys: Key[Array, " N"]) -> Queue:
    """Write the tallies of the slots whose game is `over` and start the next games in
    them (the games in order; a slot with none left goes idle)."""
    n = reset_keys.shape[0]
    where = jnp.where(over, queue.game, n)   # out of range: dropped
    finished = jax.tree.map(lambda all_, slot: all_.at[where].set(slot, mode="drop"), queue.finished, queue.slots)
    rank = jnp.cumsum(over.astype(jnp.int32)) - 1
    game_index = jnp.where(over, jnp.minimum(queue.next_game + rank, n), queue.game)
    fresh = over & (game_index < n)
    keys = reset_keys[jnp.minimum(game_index, n - 1)]
    # only the slots that start a game generate one (`hm.game.reset_where`)
    state, obs = jax.vmap(game.reset_where)(fresh, queue.slots.state, game.Observation(values=queue.slots.obs), keys)
    new = jax.vmap(start_from)(state, obs.values)
    slots = jax.tree.map(lambda a, b: jnp.where(fresh.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), new, queue.slots)
    return Queue(slots=slots, game=game_index, next_game=jnp.minimum(queue.next_game + jnp.sum(over, dtype=jnp.int32), n),
                 finished=finished)


@eqx.filter_jit
def _play_queue_chunk(player: AbstractPlayer, queue: Queue, reset_keys: Key[Array, " N"], key: PRNGKeyArray,
                      first_step: Int32[Array, ""], max_steps: Int32[Array, ""]) -> Queue:
    """`CHUNK` moves of every busy slot. Game g's step t draws the environment's
    randomness from `fold_in(fold_in(key, g), t)`, whichever slot plays it; the player's
    draws come from `fold_in(player stream, move)`."""
    n = reset_keys.shape[0]
    env_root, player_root = jax.random.split(key)

    def move(queue: Queue, t: Int32[Array, ""]) -> tuple[Queue, None]:
        slots = queue.slots
        busy = queue.game < n
        mask = jax.vmap(game.legal_actions)(slots.state)
        action = player.choose(slots.state, slots.obs, mask, jax.random.fold_in(player_root, t), stage_moves(slots))
        env_keys = jax.vmap(lambda g, t: jax.random.fold_in(jax.random.fold_in(env_root, g), t))(queue.game, slots.length)
        slots = jax.vmap(advance)(slots, action, mask, env_keys, busy & ~slots.ended)
        over = busy & (slots.ended | (slots.length >= max_steps))
        return _queue_refill(eqx.tree_at(lambda q: q.slots, queue, slots), over, reset_keys), None

    steps = first_step + jnp.arange(CHUNK, dtype=jnp.int32)
    return jax.lax.scan(move, queue, steps)[0]


def evaluation_key(seed: int) -> PRNGKeyArray:
    """The root key of the evaluation games of `seed` (see the module docstring)."""
    return jax.random.fold_in(jax.random.key(seed), EVALUATION_STREAM)


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
    siphons: np.ndarray            # int32 [n]: siphon actions taken
    program_runs: np.ndarray       # int32 [n, programs]: runs of each program
    owned_program: np.ndarray      # bool [n]: owned a program at some point
    program_legal: np.ndarray      # bool [n]: some program was legal in a state acted in
    death_cause: np.ndarray        # int32 [n]: index into DEATH_CAUSES, -1 if not dead
    stage_completed_step: np.ndarray   # int32 [n, stages]: step that completed stage k+1, 0 if not
    seconds: float


def run_episodes(player: AbstractPlayer | Network, num_episodes: int, max_steps: int, seed: int,
                 greedy: bool = False, slots: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> Results:
    """Play `num_episodes` games with `player` for at most `max_steps` steps each.

    Args:
        player: a player (`hm.tools.players`), or a network (played by `NetworkPlayer`).
        num_episodes: games to play.
        max_steps: the step limit; a game still running then is truncated.
        seed: decides the games and every random draw (the same for every player).
        greedy: with a network, take each state's likeliest action instead of sampling.
        slots: play the games as a work queue, this many at a time (`run_queue`);
            None: a search player's default (`SEARCH_SLOTS`), every other player all
            games side by side.
        progress: called as `progress(games ended, games)` between compiled calls of a
            work queue (a search's evaluation takes minutes).
    """
    if isinstance(player, Network):
        player = NetworkPlayer(network=player, greedy=jnp.asarray(greedy))
    if slots is None and isinstance(player, SearchPlayer):
        slots = SEARCH_SLOTS
    began = time.perf_counter()
    reset_key, play_key = jax.random.split(evaluation_key(seed))
    reset_keys = jax.random.split(reset_key, num_episodes)
    if slots is not None and slots < num_episodes:
        episodes = run_queue(player, reset_keys, play_key, max_steps, slots, progress)
    else:
        episodes = _start_all(reset_keys)
        for first_step in range(0, max_steps, CHUNK):
            episodes = _play_chunk(player, episodes, play_key, jnp.int32(first_step), jnp.int32(max_steps))
            if bool(jnp.all(episodes.ended)):
                break
    host = jax.device_get(episodes)
    return Results(
        episode_return=np.asarray(host.episode_return), length=np.asarray(host.length),
        won=np.asarray(host.won), died=np.asarray(host.died), truncated=~np.asarray(host.ended),
        stage=np.asarray(host.state.stage), reward_terms=np.asarray(host.reward_terms),
        siphons=np.asarray(host.siphons), program_runs=np.asarray(host.program_runs),
        owned_program=np.asarray(host.owned_program), program_legal=np.asarray(host.program_legal),
        death_cause=np.asarray(host.death_cause),
        stage_completed_step=np.asarray(host.stage_completed_step),
        seconds=time.perf_counter() - began)


def run_queue(player: AbstractPlayer, reset_keys: Key[Array, " n"], key: PRNGKeyArray, max_steps: int,
              slots: int, progress: Callable[[int, int], None] | None = None) -> Episode:
    """Every game of `reset_keys` played to its end (or `max_steps`) as a work queue of
    `slots` games at a time; returns their tallies, in game order.

    A slot whose game ends takes the next game at once, so the work is the games' total
    length, not the longest game's × all games: what a player that is expensive per move
    (a search) needs. The games are the same as side by side (`reset_keys`); game g's
    randomness depends on g and its step alone, the player's on the move count.
    `progress(games ended, games)` is called after each compiled call.
    """
    n = reset_keys.shape[0]
    queue = _start_queue(reset_keys, slots)
    first_step = 0
    while bool(jnp.any(queue.game < n)):
        queue = _play_queue_chunk(player, queue, reset_keys, key, jnp.int32(first_step), jnp.int32(max_steps))
        first_step += CHUNK
        if progress is not None:
            progress(int(queue.next_game) - int(jnp.sum(queue.game < n)), n)
    return queue.finished


def summarise(results: Results) -> dict[str, Any]:
    """The report of one player: JSON-able numbers (the schema in the module docstring)."""
    returns = results.episode_return.astype(np.float64)
    n = len(returns)
    stages = [str(stage) for stage in range(1, C.NUM_STAGES + 1)]
    ended_on = np.bincount(results.stage[~results.won], minlength=C.NUM_STAGES + 1)[1:]
    completed = results.stage_completed_step > 0
    completions = completed.sum(axis=0)
    step_sums = np.where(completed, results.stage_completed_step, 0).sum(axis=0, dtype=np.float64)
    ran = results.program_runs > 0
    causes = np.bincount(results.death_cause[results.died], minlength=len(DEATH_CAUSES))
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
        "highest_stage": {**dict(zip(stages, map(int, ended_on))), "won": int(results.won.sum())},
        "highest_stage_mean": float(results.stage.mean()),
        "stage_completions": dict(zip(stages, map(int, completions))),
        "stage_completed_step_mean": {stage: float(total / count) if count else None
                                      for stage, total, count in zip(stages, step_sums, completions)},
        "siphon_episode_rate": float((results.siphons > 0).mean()),
        "program_episode_rate": float(ran.any(axis=1).mean()),
        "program_owned_episode_rate": float(results.owned_program.mean()),
        "program_legal_episode_rate": float(results.program_legal.mean()),
        "siphons_per_episode": float(results.siphons.mean()),
        "programs_per_episode": float(results.program_runs.sum(axis=1).mean()),
        "programs": {name: {"runs_per_episode": float(results.program_runs[:, i].mean()),
                            "episode_rate": float(ran[:, i].mean())}
                     for i, name in enumerate(C.PROGRAM_NAMES)},
        "death_cause": dict(zip(DEATH_CAUSES, map(int, causes))),
        "reward_terms_mean": {name: float(results.reward_terms[:, i].astype(np.float64).mean())
                              for i, name in enumerate(C.REWARD_TERMS)},
        "steps": int(results.length.sum()),
        "seconds": round(results.seconds, 3),   # wall time, compilation included
    }


@dataclasses.dataclass(frozen=True)
class Report:
    """One player's evaluation: the per-episode results and their figures (`summarise`)."""

    player: str
    seed: int
    max_steps: int
    results: Results
    figures: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """Every figure, JSON-able: one agent's report in the `--json` schema."""
        return self.figures

    def summary(self) -> dict[str, float]:
        """The headline figures: mean return, mean highest stage, the shares of episodes
        that siphoned and that ran a program, the win rate; then where programs are lost
        on the way to being run: the shares of episodes that owned one and that had one
        legal (affordable and its condition met), and the siphons per episode."""
        f = self.figures
        return {"return": f["return_mean"], "highest_stage": f["highest_stage_mean"],
                "siphon_share": f["siphon_episode_rate"], "program_share": f["program_episode_rate"],
                "win_rate": f["win_rate"],
                "program_owned_share": f["program_owned_episode_rate"],
                "program_legal_share": f["program_legal_episode_rate"],
                "siphons_per_episode": f["siphons_per_episode"]}

    @property
    def highest_stage_mean(self) -> float:
        return self.figures["highest_stage_mean"]


def make_player(player: AbstractPlayer | Network | str, greedy: bool = False,
                like: Network | None = None, precision: str = "f32",
                search: Search | None = None) -> AbstractPlayer:
    """A player from a network, a player, or a baseline's name ("random", "greedy", "search").

    `greedy` and `precision` apply to a network; `like` gives the random baseline its
    network shape (so it shares that program). `search` gives the "search" baseline its
    settings (default: `DEFAULT_BASELINE_SIMULATIONS` simulations); a network that
    should search is made a player by `search_player`.
    """
    if isinstance(player, AbstractPlayer):
        return player
    if isinstance(player, Network):
        if precision not in DTYPES:
            raise ValueError(f"precision must be one of {tuple(DTYPES)}; got {precision!r}")
        return NetworkPlayer(network=player, greedy=jnp.asarray(greedy), precision=precision)
    if player == "random":
        return random_player(like)
    if player == "greedy":
        return GreedyPlayer()
    if player == "search":
        return SearchPlayer(evaluator=HeuristicEvaluator(), reward=SearchReward(),   # the game's own reward (UNDO charged)
                            search=search or Search(num_simulations=DEFAULT_BASELINE_SIMULATIONS))
    raise ValueError(f"player must be a Network, an AbstractPlayer or one of {BASELINES}; got {player!r}")


def search_player(policy: Policy, search: Search, precision: str = "f32") -> SearchPlayer:
    """`policy` planning with `search`: its logits as the prior, its critic as the value,
    and the reward its critic was trained on (from its training config)."""
    return SearchPlayer(evaluator=NetworkEvaluator(network=policy.network, precision=precision),
                        reward=reward_of_config(policy.config), search=search)


def search_settings(player: AbstractPlayer) -> dict[str, Any] | None:
    """What a searching player searches with, JSON-able (None for other players)."""
    if not isinstance(player, SearchPlayer):
        return None
    weights = np.asarray(player.reward.term_weights)
    return {**player.search.settings(),
            "reward": {"term_weights": {name: float(w) for name, w in zip(C.REWARD_TERMS, weights)},
                       "program_bonus": float(player.reward.program_bonus),
                       "charge_undo": player.reward.charge_undo}}


def evaluate(player: AbstractPlayer | Network | str, num_episodes: int = DEFAULT_EPISODES, seed: int = 0,
             max_steps: int = DEFAULT_MAX_STEPS, greedy: bool = False, precision: str = "f32") -> Report:
    """Evaluate a network in memory, a player, or a baseline by name ("random", "greedy").

    Args:
        player: what plays (see `make_player`).
        num_episodes: games, played side by side.
        seed: the evaluation seed (games disjoint from training's; see the module docstring).
        max_steps: steps per game; a game still running then is truncated.
        greedy: with a network, play its likeliest action instead of sampling.
        precision: with a network, its compute precision ("f32"; "bf16" acts as a run
            trained in bf16 does).
    """
    if num_episodes < 1 or max_steps < 1:
        raise ValueError(f"num_episodes and max_steps must be >= 1; got {num_episodes}, {max_steps}")
    name = player if isinstance(player, str) else type(player).__name__
    results = run_episodes(make_player(player, greedy, precision=precision), num_episodes, max_steps, seed)
    return Report(player=name, seed=seed, max_steps=max_steps, results=results, figures=summarise(results))


def format_reports(reports: dict[str, dict[str, Any]]) -> str:
    """A table with one column per agent, for the terminal."""
    names = list(reports)
    width = max(12, *(len(name) + 2 for name in names))
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, cell) -> None:
        rows.append((label, [cell(reports[name]) for name in names]))

    def share(count: int, r) -> str:
        return f"{count / r['episodes']:.3f}"

    row("return mean", lambda r: f"{r['return_mean']:+.3f}")
    row("return std", lambda r: f"{r['return_std']:.3f}")
    row("return median", lambda r: f"{r['return_median']:+.3f}")
    row("return min/max", lambda r: f"{r['return_min']:+.1f}/{r['return_max']:+.1f}")
    row("length mean", lambda r: f"{r['length_mean']:.1f}")
    row("win rate", lambda r: f"{r['win_rate']:.3f}")
    row("death rate", lambda r: f"{r['death_rate']:.3f}")
    row("truncation rate", lambda r: f"{r['truncation_rate']:.3f}")
    row("highest stage mean", lambda r: f"{r['highest_stage_mean']:.2f}")
    for stage in [str(s) for s in range(1, C.NUM_STAGES + 1)] + ["won"]:
        if any(reports[name]["highest_stage"][stage] for name in names):
            label = "won" if stage == "won" else f"ended on stage {stage}"
            row(label, lambda r, s=stage: share(r["highest_stage"][s], r))
    for stage in map(str, range(1, C.NUM_STAGES + 1)):
        if any(reports[name]["stage_completions"][stage] for name in names):
            row(f"stage {stage} done at step",
                lambda r, s=stage: "-" if r["stage_completed_step_mean"][s] is None
                else f"{r['stage_completed_step_mean'][s]:.1f}")
    row("siphoned (episodes)", lambda r: f"{r['siphon_episode_rate']:.3f}")
    row("ran a program (episodes)", lambda r: f"{r['program_episode_rate']:.3f}")
    row("owned a program (episodes)", lambda r: f"{r['program_owned_episode_rate']:.3f}")
    row("a program legal (episodes)", lambda r: f"{r['program_legal_episode_rate']:.3f}")
    row("siphons / episode", lambda r: f"{r['siphons_per_episode']:.2f}")
    row("programs / episode", lambda r: f"{r['programs_per_episode']:.2f}")
    for program in C.PROGRAM_NAMES:
        if any(reports[name]["programs"][program]["runs_per_episode"] for name in names):
            row(f"  {program} runs / episode",
                lambda r, p=program: f"{r['programs'][p]['runs_per_episode']:.2f}")
    for cause in DEATH_CAUSES:
        if any(reports[name]["death_cause"][cause] for name in names):
            row(f"killed by {cause}", lambda r, c=cause: share(r["death_cause"][c], r))
    for term in C.REWARD_TERMS:
        row(f"term {term}", lambda r, t=term: f"{r['reward_terms_mean'][t]:+.3f}")
    label_width = max(len(label) for label, _ in rows) + 2
    lines = ["".ljust(label_width) + "".join(name.rjust(width) for name in names)]
    lines += [label.ljust(label_width) + "".join(cell.rjust(width) for cell in cells) for label, cells in rows]
    return "\n".join(lines)


class EvaluateArgs(Command):
    """Evaluate a trained policy over many games (vectorised) and/or baselines: return,
    length, win/death/truncation rates, highest stage, when each stage was completed,
    siphon and program use, cause of death, reward terms. Baselines: random plays uniformly
    among the legal actions; greedy is scripted, the best immediate reward plus a heuristic.
    Exit codes: 0 done, 2 bad input (a path that holds no usable policy, a flag out of range)."""

    policy: str | None = None  # Run directory, policy.eqx/policy.json, or checkpoint file.
    episodes: int = DEFAULT_EPISODES  # Games to play (>= 1), all at once.
    max_steps: int = DEFAULT_MAX_STEPS  # Steps per game (>= 1); a game still running then counts as truncated.
    seed: int = 0  # Random seed in [0, 2^32 - 1]; the same seed gives every agent the same games (not training's).
    greedy: bool = False  # Play the policy's likeliest action instead of sampling (the random baseline always samples).
    baseline: list[Literal["random", "greedy", "search"]] = []  # Also (or only) evaluate baselines: random, greedy, search (no training).
    search: int = 0  # Plan each move with N simulations of search over the real game (docs/search.md); 0: the policy alone.
    search_q_span: float = Search.q_span  # Search: the least Q span the normalisation stretches to [0, 1], in reward units (> 0).
    search_gumbel_scale: float = Search.gumbel_scale  # Search: scale of the Gumbel noise at the root (>= 0; 0: no noise).
    search_roots: int = Search.root_searches  # Search: independent searches per move, their improved policies averaged (>= 1).
    json: Path | None = None  # Write the report to this file as JSON.
    member: str | None = None  # A population's member, by index or name; default: the best by recent return.
    all_members: bool = False  # Evaluate every member of a population: one row each, and mean +- std over seeds per setting.

    def configure(self) -> None:
        self.add_argument("policy", nargs="?", metavar="RUN_OR_POLICY")
        self.add_argument("--baseline", nargs="+", action="extend", default=[])
        self.add_argument("--json", metavar="OUT.json")

    def process_args(self) -> None:
        if self.policy is None and not self.baseline:
            self.error("give RUN_OR_POLICY (a run directory, policy.eqx or checkpoint), "
                       "--baseline random/greedy, or both")
        check_int(self, "--episodes", self.episodes, 1)
        check_int(self, "--max-steps", self.max_steps, 1)
        check_seed(self, self.seed)
        if (self.member is not None or self.all_members) and self.policy is None:
            self.error("--member and --all-members need RUN_OR_POLICY: the run whose population to read")
        if self.member is not None and self.all_members:
            self.error("give --member or --all-members, not both")
        if self.greedy and self.policy is None:
            self.error("--greedy needs RUN_OR_POLICY: it plays the policy's likeliest action")
        check_int(self, "--search", self.search, 0)
        check_int(self, "--search-roots", self.search_roots, 1)
        if not self.search_q_span > 0:
            self.error(f"--search-q-span must be above 0, got {self.search_q_span}")
        if not self.search_gumbel_scale >= 0:
            self.error(f"--search-gumbel-scale must be at least 0, got {self.search_gumbel_scale}")
        if self.search and self.greedy:
            self.error("give --search or --greedy, not both: the search chooses the move")
        if self.search and self.policy is None and "search" not in self.baseline:
            self.error("--search needs RUN_OR_POLICY (or --baseline search): the policy it plans with")
        if self.json is not None:
            check_output_file(self, "--json", self.json)

    def search_config(self, default_simulations: int) -> Search:
        """The search `--search` and its options ask for (`default_simulations` where
        `--search` is 0)."""
        return Search(num_simulations=self.search or default_simulations, q_span=self.search_q_span,
                      gumbel_scale=self.search_gumbel_scale, root_searches=self.search_roots)

    def policy_player(self, policy: Policy) -> AbstractPlayer:
        """The policy as `--greedy` and `--search` ask it to play."""
        if self.search:
            return search_player(policy, self.search_config(self.search))
        return make_player(policy.network, self.greedy)


# The columns of `--all-members`: (heading, summary key, format).
MEMBER_COLUMNS = (("return", "return_mean", "+.3f"), ("stage", "highest_stage_mean", ".2f"),
                  ("win", "win_rate", ".3f"), ("siphoned", "siphon_episode_rate", ".3f"),
                  ("program", "program_episode_rate", ".3f"), ("length", "length_mean", ".1f"))


def setting_of(row: dict[str, Any]) -> str:
    """A member's setting: its name without the seed (`lr=0.001,seed=2` -> `lr=0.001`)."""
    parts = [part for part in row["name"].split(",") if not part.startswith("seed=")]
    return ",".join(parts) or "(defaults)"


def group_by_setting(table: list[dict[str, Any]], reports: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per setting, over its seeds: each column's mean and (population) std, and the seeds."""
    groups: dict[str, list[int]] = {}
    for row in table:
        groups.setdefault(setting_of(row), []).append(row["index"])
    out = {}
    for setting, indices in groups.items():
        figures = {"seeds": [table[i]["seed"] for i in indices]}
        for _, key, _ in MEMBER_COLUMNS:
            values = np.array([reports[i][key] for i in indices], np.float64)
            figures[key] = {"mean": float(values.mean()), "std": float(values.std())}
        out[setting] = figures
    return out


def format_members(table: list[dict[str, Any]], reports: list[dict[str, Any]],
                   groups: dict[str, dict[str, Any]]) -> str:
    """One row per member, then one per setting with mean +- std over its seeds."""
    width = max(len("member"), *(len(row["name"]) for row in table), *(len(g) for g in groups)) + 2
    head = "".join(h.rjust(16) for h, _, _ in MEMBER_COLUMNS)
    lines = ["  #  " + "member".ljust(width) + head]
    for row, report in zip(table, reports):
        cells = "".join(format(report[key], spec).rjust(16) for _, key, spec in MEMBER_COLUMNS)
        lines.append(f"{row['index']:>3}  " + row["name"].ljust(width) + cells)
    lines += ["", "     " + "setting (mean +- std over seeds)".ljust(width) + head]
    for setting, figures in groups.items():
        cells = "".join(
            f"{format(figures[key]['mean'], spec)}+-{figures[key]['std']:.2g}".rjust(16)
            for _, key, spec in MEMBER_COLUMNS)
        lines.append("     " + f"{setting} (n={len(figures['seeds'])})".ljust(width) + cells)
    return "\n".join(lines)


def _play(args: "EvaluateArgs", player: AbstractPlayer) -> dict[str, Any]:
    """`player`'s report on the games `args` names (`--episodes`, `--max-steps`, `--seed`);
    a search's progress goes to stderr."""
    def progress(ended: int, games: int) -> None:
        print(f"  {ended}/{games} games over", file=sys.stderr, flush=True)

    return summarise(run_episodes(player, args.episodes, args.max_steps, args.seed, progress=progress))


def _baselines(args: "EvaluateArgs", like: Network | None) -> dict[str, AbstractPlayer]:
    """The `--baseline` players, in the order given, once each; the random one is a
    network of `like`'s shape, so it shares the policy's compiled program."""
    return {name: make_player(name, like=like, search=args.search_config(DEFAULT_BASELINE_SIMULATIONS))
            for name in dict.fromkeys(args.baseline)}


def _search_record(players: dict[str, AbstractPlayer]) -> dict[str, Any]:
    """The `search` entry of the JSON: each searching player's settings."""
    return {name: settings for name, player in players.items() if (settings := search_settings(player))}


def _evaluate_members(args: "EvaluateArgs", table: list[dict[str, Any]], policies: list, out) -> int:
    """`--all-members`: every member on the same games, a row each and per-setting means,
    then the `--baseline`s on those games."""
    print(f"{len(table)} members of {args.policy}; {args.episodes} episodes of at most "
          f"{args.max_steps} steps each, seed {args.seed}", file=out, flush=True)
    players = [args.policy_player(p) for p in policies]
    reports = [_play(args, player) for player in players]
    baseline_players = _baselines(args, policies[0].network)
    baselines = {name: _play(args, player) for name, player in baseline_players.items()}
    groups = group_by_setting(table, reports)
    print(format_members(table, reports, groups), file=out)
    if baselines:
        print(f"\nbaselines on the same games:\n{format_reports(baselines)}", file=out)
    if args.json is not None:
        document = {
            "schema_version": SCHEMA_VERSION,
            "policy": str(args.policy),
            "episodes": args.episodes, "max_steps": args.max_steps, "seed": args.seed,
            "greedy": args.greedy, "game_version": C.GAME_VERSION,
            "search": _search_record(baseline_players),
            "members": [{**row, "report": report, **({"search": search_settings(player)} if args.search else {})}
                        for row, report, player in zip(table, reports, players)],
            "settings": groups,
            "baselines": baselines,
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {args.json}", file=out)
    return 0


def main(argv: Sequence[str] | None = None, stdout=None) -> int:
    """Parse `argv`, evaluate, print (and write `--json`); returns the exit code."""
    out = sys.stdout if stdout is None else stdout
    parser = EvaluateArgs(prog="bin/evaluate")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    policy = None
    if args.all_members:
        try:
            table = members_of(args.policy)
            policies = [load(args.policy, member=row["index"]) for row in table]
        except PolicyError as error:
            parser.error(f"--all-members: {error}")
        use_compile_cache()
        return _evaluate_members(args, table, policies, out)
    if args.policy is not None:
        try:
            policy = load(args.policy, member=args.member)
        except PolicyError as error:
            parser.error(f"{'--member' if args.member is not None else 'RUN_OR_POLICY'}: {error}")
    use_compile_cache()

    players: dict[str, AbstractPlayer] = {}
    if policy is not None:
        players["policy"] = args.policy_player(policy)
        how = " (greedy)" if args.greedy else f" (search, {args.search} simulations)" if args.search else ""
        print(f"policy: {policy.source}{how}", file=out)
    players.update(_baselines(args, policy.network if policy else None))
    print(f"{args.episodes} episodes of at most {args.max_steps} steps, seed {args.seed}", file=out, flush=True)

    reports = {name: _play(args, player) for name, player in players.items()}
    print(format_reports(reports), file=out)
    if args.json is not None:
        document = {
            "schema_version": SCHEMA_VERSION,
            "policy": policy.source if policy else None,
            "episodes": args.episodes, "max_steps": args.max_steps, "seed": args.seed,
            "greedy": args.greedy, "game_version": C.GAME_VERSION,
            "search": _search_record(players),
            "agents": reports,
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {args.json}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
