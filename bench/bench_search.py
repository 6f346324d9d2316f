"""Search throughput: Gumbel MuZero over the real game (`hm.search`) against its parts.

Two programs on the same batch of games, timed interleaved (`common.time_calls_interleaved`):

* `search`: one `hm.search.plan` of every game with `--num-simulations` simulations, the
  trained network's kind and size as prior and value (`NetworkEvaluator`). Its "steps"
  are simulated steps: games x simulations, one `hm.game.step` and one network forward
  each.
* `search_parts`: the same number of game steps and network forwards with no tree: a
  `lax.scan` of `--num-simulations` steps, each a random legal action of every game
  (`jax.vmap(game.step)`) and the network on the resulting observations.

Their ratio is what the tree (selection, backup, the stored states) costs on top of the
simulator and the network. `memory per node` is one game state, which mctx stores per node.

    python -m bench.bench_search [--num-games 256] [--num-simulations 32] [--out FILE]
"""

import functools
import pathlib
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float32, PRNGKeyArray
from tap import Tap

import hm.game as game
from bench import common
from hm import search
from hm.game import constants as C
from hm.tools.players import NetworkEvaluator
from hm.train.config import TrainConfig
from hm.train.distributions import sample_legal
from hm.train.network import Network, evaluate


class Args(Tap):
    num_games: int = 256  # games searched together (one batch)
    num_simulations: int = 32  # simulations per search
    repeats: int = 3  # timed calls after the first; the median is reported
    seed: int = 0  # PRNG seed of the games, the network and the search
    out: pathlib.Path | None = None  # append the results as JSON lines to this file


class Carry(eqx.Module):
    states: game.GameState   # the games searched (unchanged from call to call)
    key: PRNGKeyArray
    checksum: Float32[Array, ""]


def default_network(key: PRNGKeyArray) -> Network:
    """A network of the trainer's default kind and size (weights from `key`)."""
    config = TrainConfig()
    return Network(C.OBS_FLAT_SIZE, C.NUM_ACTIONS, config.hidden_dim, config.num_layers,
                   kind=config.network, critic=config.critic, value_transform=config.value_transform, key=key)


def searched(evaluator: NetworkEvaluator, settings: search.Search, carry: Carry) -> Carry:
    key, used = jax.random.split(carry.key)
    out = search.plan(evaluator, carry.states, used, settings)
    return Carry(carry.states, key, carry.checksum + jnp.sum(out.qvalues) + jnp.sum(out.action).astype(jnp.float32))


def parts(network: Network, simulations: int, carry: Carry) -> Carry:
    """`simulations` steps of every game, each followed by the network's forward."""
    def one(states_and_sum, key):
        states, total = states_and_sum
        action_key, step_key = jax.random.split(key)
        n = states.stage.shape[0]
        mask = jax.vmap(game.legal_actions)(states)
        action = sample_legal(mask, jax.random.uniform(action_key, (n,)))
        after, obs, reward, done, _ = jax.vmap(game.step)(states, action, jax.random.split(step_key, n))
        logits, value = evaluate(network, jax.vmap(lambda o: o.flat())(obs), "f32")
        # a game that ended keeps its state, as a tree's node below the end does
        after = jax.tree.map(lambda new, old: jnp.where(done.reshape((n,) + (1,) * (new.ndim - 1)), old, new),
                             after, states)
        return (after, total + jnp.sum(value) + jnp.sum(logits[:, 0]) + jnp.sum(reward)), None

    key, used = jax.random.split(carry.key)
    (_, total), _ = jax.lax.scan(one, (carry.states, carry.checksum), jax.random.split(used, simulations))
    return Carry(carry.states, key, total)


def main(args: Args) -> list[dict[str, Any]]:
    root = jax.random.key(args.seed)
    net_key, game_key, search_key = jax.random.split(root, 3)
    network = default_network(net_key)
    states, _ = jax.jit(jax.vmap(game.reset))(jax.random.split(game_key, args.num_games))
    settings = search.Search(num_simulations=args.num_simulations)
    evaluator = NetworkEvaluator(network=network)
    fns = [jax.jit(functools.partial(searched, evaluator, settings)),
           jax.jit(functools.partial(parts, network, args.num_simulations))]
    carries = [Carry(states, search_key, jnp.float32(0.0)) for _ in fns]
    timed = common.time_calls_interleaved(fns, carries, args.repeats)
    config = {"num_games": args.num_games, "num_simulations": args.num_simulations,
              "network": TrainConfig().network}
    steps = args.num_games * args.num_simulations
    results = [common.record(name, config, timing, steps, args.out)
               for name, (timing, _) in zip(("search", "search_parts"), timed)]
    ratio = results[0]["metrics"]["steps_per_s"] / results[1]["metrics"]["steps_per_s"]
    node_bytes = search.state_bytes(jax.tree.map(lambda x: x[0], states))
    print(f"search / (game step + network) throughput: {ratio:.1%} (timed calls interleaved); "
          f"memory per node: one game state, {node_bytes:,} bytes "
          f"({node_bytes * (args.num_simulations + 1) * args.num_games / 2**20:,.0f} MiB of states per search of the batch)")
    return results


if __name__ == "__main__":
    common.disable_compilation_cache()
    main(Args(underscores_to_dashes=True).parse_args())
