"""`bin/watch` and `bin/evaluate` load every network kind: from an exported policy and
from a training checkpoint, through `hm.tools.policy.load`, and act with it."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hm.game import constants as C
from hm.tools import policy
from hm.train import checkpoint
from hm.train.checkpoint import Architecture, CheckpointMeta, Layout
from hm.train.network import Network

KINDS = [("conv", "shared"), ("mlp", "separate"), ("conv", "separate"), ("local", "shared")]


class StandInState(eqx.Module):
    """The leaves of a `TrainState` the tools read: `.params`, and something else."""

    params: Network
    update: jax.Array


def architecture(kind: str, critic: str) -> Architecture:
    return Architecture(hidden_dim=8, num_layers=1, obs_size=C.OBS_FLAT_SIZE, num_actions=C.NUM_ACTIONS,
                        network=kind, critic=critic)


def assert_same_network(a: Network, b: Network) -> None:
    assert (a.kind, a.critic) == (b.kind, b.critic)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def acts(network: Network) -> None:
    obs = jnp.zeros((2, C.OBS_FLAT_SIZE), jnp.float32).at[:, 0].set(0.4)
    mask = jnp.zeros((2, C.NUM_ACTIONS), bool).at[:, 3].set(True)
    action, probs, value = policy.act(network, obs, mask, jnp.full((2,), 0.5, jnp.float32), jnp.asarray(False))
    assert action.tolist() == [3, 3] and probs.shape == (2, C.NUM_ACTIONS) and value.shape == (2,)


@pytest.mark.parametrize("kind, critic", KINDS)
def test_an_exported_policy_of_any_kind_loads(tmp_path, kind, critic):
    arch = architecture(kind, critic)
    params = checkpoint.network_like(arch, jax.random.key(1))
    checkpoint.export_policy(tmp_path, checkpoint.tree_on_host(params),
                             {**dataclasses.asdict(arch), "game_version": C.GAME_VERSION})
    loaded = policy.load(tmp_path / checkpoint.POLICY_PARAMS)
    assert loaded.architecture == arch
    assert_same_network(loaded.network, params)
    acts(loaded.network)


def members(*returns):
    return [{"index": i, "name": f"seed={i}", "seed": i, "hyper": {}, "recent_return": r}
            for i, r in enumerate(returns)]


@pytest.mark.parametrize("kind, critic", KINDS)
def test_a_checkpoint_of_any_kind_loads(tmp_path, kind, critic):
    # a population of two: the checkpoint's parameters lead with the member axis
    arch = architecture(kind, critic)
    first, second = (checkpoint.network_like(arch, jax.random.key(k)) for k in (2, 3))
    population = jax.tree.map(lambda a, b: jnp.stack([a, b]), first, second)
    arrays = checkpoint.tree_to_host(StandInState(params=population, update=jnp.int32(3)))
    meta = CheckpointMeta(game_version=C.GAME_VERSION, architecture=arch, layout=Layout(8, 1, 1), update=3,
                          env_steps=384, config={}, run_name="stand-in", leaves=checkpoint.leaf_table(arrays),
                          members=members(-1.0, 2.0))
    checkpoint.save(tmp_path / "run" / checkpoint.CHECKPOINTS_DIR, arrays, meta)
    loaded = policy.load(tmp_path / "run")
    assert loaded.architecture == arch
    assert loaded.member == "seed=1", "the best member by recent return by default"
    assert_same_network(loaded.network, second)
    acts(loaded.network)
    for asked in (0, "0", "seed=0"):
        assert_same_network(policy.load(tmp_path / "run", member=asked).network, first)
    with pytest.raises(policy.PolicyError, match="no member 2; it holds 2"):
        policy.load(tmp_path / "run", member=2)
    with pytest.raises(policy.PolicyError, match="no member named 'seed=7'; its members are: seed=0, seed=1"):
        policy.load(tmp_path / "run", member="seed=7")
    # a checkpoint whose meta names another kind than its weights is refused with the reason
    lying = dataclasses.replace(meta, architecture=dataclasses.replace(arch, network="mlp" if kind == "conv" else "conv"),
                                update=4)
    checkpoint.save(tmp_path / "lying", arrays, lying)
    with pytest.raises(policy.PolicyError, match="its parameters are not the network its meta describes"):
        policy.load(tmp_path / "lying")
