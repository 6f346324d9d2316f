"""Checkpoint files: round trip, atomic writes, keep-last-N, refusal with reasons, policy export.

These use a small stand-in state (same kinds of leaves as `TrainState`: an equinox
network, optimizer-like arrays, int8 env arrays, a typed PRNG key, counters), so they
need no compiled training program.
"""

import dataclasses
import json
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hm.game.constants import GAME_VERSION, NUM_ACTIONS, OBS_FLAT_SIZE
from hm.train import checkpoint
from hm.train.checkpoint import Architecture, CheckpointError, CheckpointMeta, Layout
from hm.train.network import Network


class FakeState(eqx.Module):
    params: Network
    opt_state: tuple[jax.Array, jax.Array]
    envs: jax.Array
    key: jax.Array
    update: jax.Array


ARCH = Architecture(hidden_dim=8, num_layers=1, obs_size=OBS_FLAT_SIZE, num_actions=NUM_ACTIONS)
LAYOUT = Layout(num_envs=4, num_devices=1, num_processes=1)


def make_state(seed: int, update: int = 0) -> FakeState:
    key = jax.random.key(seed)
    params = Network(OBS_FLAT_SIZE, NUM_ACTIONS, ARCH.hidden_dim, ARCH.num_layers, key=key)
    return FakeState(
        params=params,
        opt_state=(jnp.arange(3, dtype=jnp.float32) * seed, jnp.full((2, 2), seed, jnp.int32)),
        envs=jnp.full((LAYOUT.num_envs, 6), seed, jnp.int8),
        key=jax.random.key_data(jax.random.fold_in(key, 7)),
        update=jnp.asarray(update, jnp.int32),
    )


def save_state(directory, state: FakeState, update: int, keep: int = checkpoint.KEEP_LAST, **meta_changes):
    arrays = checkpoint.tree_to_host(state)
    meta = CheckpointMeta(
        game_version=GAME_VERSION,
        architecture=ARCH,
        layout=LAYOUT,
        update=update,
        env_steps=update * 32,
        config={"num_envs": LAYOUT.num_envs, "hidden_dim": ARCH.hidden_dim},
        run_name="test",
        leaves=checkpoint.leaf_table(arrays),
        env={"env": "FakeEnv"},
    )
    return checkpoint.save(directory, arrays, dataclasses.replace(meta, **meta_changes), keep=keep)


def load_state(path, like: FakeState) -> FakeState:
    return to_device(checkpoint.fill(like, checkpoint.read_arrays(path)))


def to_device(tree):
    return jax.tree.map(lambda x: jnp.asarray(x) if isinstance(x, np.ndarray) else x, tree)


def assert_trees_equal(a, b):
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        if eqx.is_array(x):
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        else:
            assert x is y


def test_round_trip_is_bitwise_and_keeps_dtypes(tmp_path):
    state = make_state(3, update=5)
    path = save_state(tmp_path / "checkpoints", state, update=5)
    assert path.name == "ckpt_00000005.ckpt"
    meta = checkpoint.read_meta(path)
    assert meta.update == 5 and meta.env_steps == 160
    assert meta.architecture == ARCH and meta.layout == LAYOUT and meta.game_version == GAME_VERSION
    assert meta.leaves[".envs"] == ((4, 6), "int8")
    assert meta.env == {"env": "FakeEnv"}
    restored = load_state(path, make_state(0))
    assert_trees_equal(restored, state)
    assert restored.envs.dtype == jnp.int8 and restored.key.dtype == jnp.uint32


def test_fill_into_an_abstract_template(tmp_path):
    state = make_state(3, update=5)
    path = save_state(tmp_path, state, update=5)
    template = jax.eval_shape(lambda: make_state(0))
    assert checkpoint.mismatched_leaves(template, checkpoint.read_meta(path)) == []
    assert_trees_equal(load_state(path, template), state)


def test_fill_prefix_replaces_only_parameters(tmp_path):
    trained = make_state(3, update=5)
    path = save_state(tmp_path, trained, update=5)
    fresh = make_state(0)
    arrays = checkpoint.read_arrays(path, prefix=checkpoint.PARAMS_PREFIX)
    assert arrays and all(name.startswith(".params") for name in arrays)
    mixed = to_device(checkpoint.fill(fresh, arrays, prefix=checkpoint.PARAMS_PREFIX))
    assert_trees_equal(mixed.params, trained.params)
    assert_trees_equal(mixed.opt_state, fresh.opt_state)
    assert_trees_equal(mixed.envs, fresh.envs)


def test_crash_mid_write_leaves_previous_checkpoint_latest(tmp_path, monkeypatch):
    directory = tmp_path / "checkpoints"
    good = make_state(1, update=1)
    save_state(directory, good, update=1)

    real_write_array = np.lib.format.write_array
    calls = []

    def write_then_crash(file, array, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full (simulated)")
        return real_write_array(file, array, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", write_then_crash)
    with pytest.raises(OSError, match="simulated"):
        save_state(directory, make_state(2, update=2), update=2)
    monkeypatch.undo()

    assert [p.name for p in directory.iterdir()] == ["ckpt_00000001.ckpt"], "no torn file, no temporary left"
    latest = checkpoint.find_checkpoint(tmp_path)
    assert latest.name == "ckpt_00000001.ckpt"
    assert_trees_equal(load_state(latest, make_state(0)), good)


def test_temporary_of_a_killed_writer_is_ignored_then_removed(tmp_path):
    directory = tmp_path / "checkpoints"
    save_state(directory, make_state(1), update=1)
    # A writer killed with SIGKILL leaves its half-written temporary behind.
    stale = directory / ".ckpt_00000002.ckpt.abc123.tmp"
    stale.write_bytes(b"PK\x03\x04 half a zip")
    assert checkpoint.find_checkpoint(tmp_path).name == "ckpt_00000001.ckpt"
    assert [p.name for p in checkpoint.list_checkpoints(directory)] == ["ckpt_00000001.ckpt"]
    save_state(directory, make_state(3), update=3)
    assert not stale.exists()
    assert checkpoint.find_checkpoint(tmp_path).name == "ckpt_00000003.ckpt"


def test_keeps_only_the_last_n(tmp_path):
    directory = tmp_path / "checkpoints"
    for update in (2, 4, 6, 8, 10):
        save_state(directory, make_state(update), update=update)
    assert [p.name for p in checkpoint.list_checkpoints(directory)] == [
        "ckpt_00000006.ckpt",
        "ckpt_00000008.ckpt",
        "ckpt_00000010.ckpt",
    ]
    save_state(directory, make_state(12), update=12, keep=1)
    assert [p.name for p in checkpoint.list_checkpoints(directory)] == ["ckpt_00000012.ckpt"]


def test_latest_orders_by_update_not_by_name_length(tmp_path):
    directory = tmp_path / "checkpoints"
    save_state(directory, make_state(1), update=99_999_999)
    save_state(directory, make_state(2), update=100_000_000)
    assert checkpoint.find_checkpoint(tmp_path).name == "ckpt_100000000.ckpt"


def test_find_checkpoint_accepts_file_run_dir_and_checkpoints_dir(tmp_path):
    path = save_state(tmp_path / "run" / "checkpoints", make_state(1), update=7)
    assert checkpoint.find_checkpoint(path) == path
    assert checkpoint.find_checkpoint(tmp_path / "run") == path
    assert checkpoint.find_checkpoint(tmp_path / "run" / "checkpoints") == path
    with pytest.raises(CheckpointError, match="does not exist"):
        checkpoint.find_checkpoint(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        checkpoint.find_checkpoint(tmp_path / "empty")


def test_damaged_file_is_refused_with_reason(tmp_path):
    path = save_state(tmp_path, make_state(1), update=1)
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(CheckpointError, match="not a readable hm checkpoint"):
        checkpoint.read_meta(path)


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"hidden_dim": 16}, "hidden_dim: checkpoint has 8, this run has 16"),
        ({"num_layers": 3}, "num_layers: checkpoint has 1, this run has 3"),
        ({"obs_size": 1000}, f"obs_size: checkpoint has {OBS_FLAT_SIZE}, this run has 1000"),
        ({"num_actions": 30}, f"num_actions: checkpoint has {NUM_ACTIONS}, this run has 30"),
        ({"network": "conv"}, "network: checkpoint has mlp, this run has conv"),
        ({"critic": "separate"}, "critic: checkpoint has shared, this run has separate"),
        ({"value_transform": "sqrt"}, "value_transform: checkpoint has none, this run has sqrt"),
    ],
)
def test_architecture_mismatch_is_refused_with_reason(tmp_path, change, expected):
    meta = checkpoint.read_meta(save_state(tmp_path, make_state(1), update=1))
    reasons = checkpoint.refusal_reasons(meta, dataclasses.replace(ARCH, **change), GAME_VERSION)
    assert reasons == [expected]


def test_a_checkpoint_from_before_network_kinds_holds_an_mlp(tmp_path):
    meta = checkpoint.read_meta(save_state(tmp_path, make_state(1), update=1))
    raw = json.loads(meta.to_json())
    for key in ("network", "critic", "value_transform"):
        del raw["architecture"][key]
    old = CheckpointMeta.from_json(json.dumps(raw))
    assert (old.architecture.network, old.architecture.critic, old.architecture.value_transform) == (
        "mlp", "shared", "none")
    assert checkpoint.refusal_reasons(old, ARCH, GAME_VERSION) == []


def test_game_version_mismatch_is_refused_with_reason(tmp_path):
    meta = checkpoint.read_meta(save_state(tmp_path, make_state(1), update=1, game_version=GAME_VERSION + 1))
    (reason,) = checkpoint.refusal_reasons(meta, ARCH, GAME_VERSION)
    assert f"rules version {GAME_VERSION + 1}" in reason and f"implements version {GAME_VERSION}" in reason
    assert checkpoint.refusal_reasons(checkpoint.read_meta(save_state(tmp_path, make_state(1), update=2)), ARCH, GAME_VERSION) == []


def test_other_environment_is_refused_with_reason(tmp_path):
    meta = checkpoint.read_meta(save_state(tmp_path, make_state(1), update=1))
    (reason,) = checkpoint.refusal_reasons(meta, ARCH, GAME_VERSION, {"env": "NullEnv"})
    assert reason == "environment: env was 'FakeEnv', now 'NullEnv'"


def test_mismatched_leaves_names_each_difference(tmp_path):
    meta = checkpoint.read_meta(save_state(tmp_path, make_state(1), update=1))
    wider = FakeState(
        params=make_state(1).params,
        opt_state=make_state(1).opt_state,
        envs=jnp.zeros((8, 6), jnp.int8),
        key=make_state(1).key,
        update=jnp.asarray(0, jnp.int32),
    )
    assert checkpoint.mismatched_leaves(make_state(0), meta) == []
    assert checkpoint.mismatched_leaves(wider, meta) == [".envs: checkpoint has ((4, 6), 'int8'), this run has ((8, 6), 'int8')"]
    assert checkpoint.mismatched_leaves(wider, meta, prefix=".params") == []


def test_non_finite_state_is_detected():
    arrays = checkpoint.tree_to_host(make_state(1))
    assert checkpoint.all_finite(arrays)
    arrays[".opt_state[0]"] = np.array([1.0, np.nan], np.float32)
    assert not checkpoint.all_finite(arrays)


def test_unknown_format_is_refused(tmp_path):
    path = save_state(tmp_path, make_state(1), update=1, format="hm-checkpoint/999")
    with pytest.raises(CheckpointError, match="'hm-checkpoint/999' cannot be read .unknown format.; "
                                              "this version reads 'hm-checkpoint/4'"):
        checkpoint.read_meta(path)


def test_a_checkpoint_from_before_populations_is_refused_with_the_reason(tmp_path):
    path = save_state(tmp_path, make_state(1), update=1, format="hm-checkpoint/1")
    with pytest.raises(CheckpointError, match="written before the trainer.s redesign of 2026-12-02"):
        checkpoint.read_meta(path)


def test_atomic_write_replaces_whole_file(tmp_path):
    target = tmp_path / "config.json"
    checkpoint.atomic_write(target, lambda f: f.write(b"old"))
    with pytest.raises(RuntimeError):

        def fail(f):
            f.write(b"new but torn")
            raise RuntimeError("crash")

        checkpoint.atomic_write(target, fail)
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["config.json"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask, "not mkstemp's private 0600"


def test_exported_policy_loads_back(tmp_path):
    params = make_state(5).params
    description = {**dataclasses.asdict(ARCH), "game_version": GAME_VERSION, "network": "hm.train.network.Network"}
    checkpoint.export_policy(tmp_path, checkpoint.tree_on_host(params), description)
    assert json.loads((tmp_path / "policy.json").read_text())["format"] == checkpoint.POLICY_FORMAT
    assert_trees_equal(checkpoint.load_policy(tmp_path), params)
    description["game_version"] = GAME_VERSION + 1
    checkpoint.export_policy(tmp_path, checkpoint.tree_on_host(params), description)
    with pytest.raises(CheckpointError, match="rules version"):
        checkpoint.load_policy(tmp_path)


@pytest.mark.parametrize("kind, critic", [("conv", "shared"), ("mlp", "separate"), ("conv", "separate")])
def test_every_network_kind_is_exported_and_loaded_back(tmp_path, kind, critic):
    arch = dataclasses.replace(ARCH, network=kind, critic=critic)
    params = checkpoint.network_like(arch, jax.random.key(3))
    checkpoint.export_policy(tmp_path, checkpoint.tree_on_host(params),
                             {**dataclasses.asdict(arch), "game_version": GAME_VERSION})
    description = json.loads((tmp_path / "policy.json").read_text())
    assert (description["network"], description["critic"]) == (kind, critic)
    loaded = checkpoint.load_policy(tmp_path)
    assert (loaded.kind, loaded.critic) == (kind, critic)
    assert_trees_equal(loaded, params)


@pytest.mark.parametrize("network", [None, "hm.train.network.Network"])
def test_an_old_policy_description_means_an_mlp(tmp_path, network):
    # before kinds, policy.json named the network's class, or nothing
    description = {**dataclasses.asdict(ARCH), "game_version": GAME_VERSION}
    del description["network"], description["critic"], description["value_transform"]
    if network is not None:
        description["network"] = network
    checkpoint.export_policy(tmp_path, checkpoint.tree_on_host(make_state(5).params), description)
    assert checkpoint.read_policy_description(tmp_path)["network"] == "mlp"
    loaded = checkpoint.load_policy(tmp_path)
    assert (loaded.kind, loaded.value_transform) == ("mlp", "none")


def test_a_policy_with_a_value_transform_loads_back_with_it(tmp_path):
    # the transform is in the policy's description, so a loaded critic gives reward units
    arch = dataclasses.replace(ARCH, value_transform="sqrt")
    params = checkpoint.network_like(arch, jax.random.key(3))
    checkpoint.export_policy(tmp_path, checkpoint.tree_on_host(params),
                             {**dataclasses.asdict(arch), "game_version": GAME_VERSION})
    assert json.loads((tmp_path / "policy.json").read_text())["value_transform"] == "sqrt"
    loaded = checkpoint.load_policy(tmp_path)
    assert loaded.value_transform == "sqrt"
    assert_trees_equal(loaded, params)


def test_a_policy_from_before_value_statistics_loads_with_the_identity(tmp_path):
    # format 1 wrote the network without value_shift and value_scale
    params = make_state(5).params
    old = eqx.tree_at(lambda n: (n.value_shift, n.value_scale), params, (None, None))
    checkpoint.export_policy(tmp_path, checkpoint.tree_on_host(old),
                             {**dataclasses.asdict(ARCH), "game_version": GAME_VERSION})
    meta = tmp_path / checkpoint.POLICY_META
    meta.write_text(meta.read_text().replace(checkpoint.POLICY_FORMAT, "hm-policy/1"))
    loaded = checkpoint.load_policy(tmp_path)
    assert (float(loaded.value_shift), float(loaded.value_scale)) == (0.0, 1.0)
    assert_trees_equal(loaded, params)


@pytest.mark.parametrize("damage, message", [
    (lambda d: d.update(network="transformer"), "network 'transformer' is not a kind this code builds"),
    (lambda d: d.update(critic="twin"), "critic 'twin' is not one of shared, separate"),
    (lambda d: d.update(value_transform="cube"), "value transform 'cube' is not one of none, sqrt"),
    (lambda d: d.update(network="conv"), "does not hold the network policy.json describes .conv network"),
    (lambda d: d.pop("hidden_dim"), "no integer hidden_dim"),
    (lambda d: d.update(num_layers=0), "no integer num_layers"),
    (lambda d: d.update(hidden_dim=ARCH.hidden_dim * 2), "does not hold the network policy.json describes"),
])
def test_a_damaged_policy_is_refused_with_the_reason(tmp_path, damage, message):
    params = make_state(5).params
    description = {**dataclasses.asdict(ARCH), "game_version": GAME_VERSION}
    damage(description)
    checkpoint.export_policy(tmp_path, checkpoint.tree_on_host(params), description)
    with pytest.raises(CheckpointError, match=message):
        checkpoint.load_policy(tmp_path)


def test_a_policy_description_without_its_format_is_refused(tmp_path):
    params = make_state(5).params
    checkpoint.export_policy(tmp_path, checkpoint.tree_on_host(params),
                             {**dataclasses.asdict(ARCH), "game_version": GAME_VERSION})
    meta = tmp_path / checkpoint.POLICY_META
    description = json.loads(meta.read_text())
    del description["format"]
    meta.write_text(json.dumps(description))
    with pytest.raises(CheckpointError, match="unknown format None"):
        checkpoint.load_policy(tmp_path)


def test_a_torn_policy_file_is_refused_with_the_reason(tmp_path):
    params = make_state(5).params
    description = {**dataclasses.asdict(ARCH), "game_version": GAME_VERSION}
    checkpoint.export_policy(tmp_path, checkpoint.tree_on_host(params), description)
    weights = tmp_path / checkpoint.POLICY_PARAMS
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="does not hold the network"):
        checkpoint.load_policy(tmp_path)
