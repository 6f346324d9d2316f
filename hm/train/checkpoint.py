"""Checkpoints: a whole `TrainState` in one file, written atomically, the last few kept.

A checkpoint is an uncompressed zip holding `meta.json` (format, game version,
architecture, batch layout, counters, the training config) and one `.npy` entry per
array leaf of the state, named by its key path (`.params.layers[0].weight`). Two
choices follow from what a checkpoint is for:

* the meta is read without touching the arrays, so a checkpoint that does not fit the
  run (another architecture, another game version) is refused, with the reason, before
  anything is built;
* leaves are found by name, not by position, so a resume with a new batch layout (other
  `--num-envs`, other device count) can take the parameters and leave the rest.

A write goes to a temporary file in the same directory, is fsynced, and is renamed over
the final name: a crash mid-write leaves the previous checkpoint as the latest, never a
torn one. Only the host side lives here; gathering sharded arrays from every process is
`tree_to_host`.
"""

import contextlib
import dataclasses
import datetime
import json
import os
import re
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from hm.train.mesh import to_host

FORMAT = "hm-checkpoint/4"
# Checkpoints of earlier formats are refused, saying why. The training state of format 3
# is format 4's, but its config is that of the trainer before 2026-12-02's redesign
# (other defaults, and options since removed): the tag `research-leftovers-2026-12-02`
# is the last commit that resumes it.
_BEFORE_REDESIGN = ("it was written before the trainer's redesign of 2026-12-02; resume it with "
                    "`git checkout research-leftovers-2026-12-02`, or start a new run from its policy's weights")
_EARLIER_FORMATS = {"hm-checkpoint/1": _BEFORE_REDESIGN, "hm-checkpoint/2": _BEFORE_REDESIGN,
                    "hm-checkpoint/3": _BEFORE_REDESIGN}
CHECKPOINTS_DIR = "checkpoints"
KEEP_LAST = 3
POLICY_FORMAT = "hm-policy/2"
# Format 1: the network without `value_shift` and `value_scale`, which load as 0 and 1.
_POLICY_FORMAT_1 = "hm-policy/1"
POLICY_PARAMS = "policy.eqx"
POLICY_META = "policy.json"
PARAMS_PREFIX = ".params"

_META = "meta.json"
_LEAF_DIR = "leaves/"
_NAME = re.compile(r"^ckpt_(\d{8,})\.ckpt$")
_TEMP_SUFFIX = ".tmp"


class CheckpointError(Exception):
    """A checkpoint that cannot be used here; the message says why."""


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What the parameters' shapes and meaning depend on; a checkpoint must match it to be resumed.

    `network` is the kind (`hm.train.network.KINDS`), `critic` whether the value head
    has its own trunk and `value_transform` what it predicts; checkpoints and policies
    written before they existed hold an MLP with a shared trunk predicting V, which the
    defaults say.
    """

    hidden_dim: int
    num_layers: int
    obs_size: int
    num_actions: int
    network: str = "mlp"
    critic: str = "shared"
    value_transform: str = "none"

    def mismatches(self, wanted: "Architecture") -> list[str]:
        """Each field where this (the checkpoint's) differs from `wanted` (the run's)."""
        return [
            f"{field.name}: checkpoint has {getattr(self, field.name)}, "
            f"this run has {getattr(wanted, field.name)}"
            for field in dataclasses.fields(self)
            if getattr(self, field.name) != getattr(wanted, field.name)
        ]


@dataclasses.dataclass(frozen=True)
class Layout:
    """How the environments were spread; a change re-initialises optimizer and env state."""

    num_envs: int
    num_devices: int
    num_processes: int


@dataclasses.dataclass(frozen=True)
class CheckpointMeta:
    """Everything about a checkpoint but its arrays.

    `leaves` maps each array's key path to `(shape, dtype name)`; `env` identifies the
    environment (`hm.train.envs.describe`).
    """

    game_version: int
    architecture: Architecture
    layout: Layout
    update: int
    env_steps: int
    config: dict[str, Any]
    run_name: str
    leaves: dict[str, tuple[tuple[int, ...], str]]
    env: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The population, in member order: index, name, seed, hyper, recent_return.
    members: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    saved_at: str = ""
    format: str = FORMAT

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "CheckpointMeta":
        raw = json.loads(text)
        if raw.get("format") != FORMAT:
            why = _EARLIER_FORMATS.get(raw.get("format"), "unknown format")
            raise CheckpointError(f"checkpoint format {raw.get('format')!r} cannot be read ({why}); "
                                  f"this version reads {FORMAT!r}")
        raw["architecture"] = Architecture(**raw["architecture"])
        raw["layout"] = Layout(**raw["layout"])
        raw["leaves"] = {name: (tuple(shape), dtype) for name, (shape, dtype) in raw["leaves"].items()}
        return cls(**raw)


def refusal_reasons(
    meta: CheckpointMeta, architecture: Architecture, game_version: int, env: Mapping[str, Any] | None = None,
    member_names: list[str] | None = None,
) -> list[str]:
    """Why a checkpoint cannot continue this run (empty when it can)."""
    reasons = meta.architecture.mismatches(architecture)
    if member_names is not None:
        had = [m["name"] for m in meta.members]
        if had != list(member_names):
            reasons.append(f"population: the checkpoint holds {len(had)} member(s) ({', '.join(had)}), "
                           f"this run asks for {len(member_names)} ({', '.join(member_names)}); "
                           "--num-seeds, --seed and --sweep must be those of the run resumed")
    if meta.game_version != game_version:
        reasons.append(
            f"game version: checkpoint was trained on rules version {meta.game_version}, "
            f"this code implements version {game_version}"
        )
    if env is not None and meta.env and dict(meta.env) != dict(env):
        differ = sorted(key for key in meta.env.keys() | env.keys() if meta.env.get(key) != env.get(key))
        reasons.append(
            "environment: " + ", ".join(f"{key} was {meta.env.get(key)!r}, now {env.get(key)!r}" for key in differ)
        )
    return reasons


# Paths.


def checkpoint_path(directory: Path, update: int) -> Path:
    return Path(directory) / f"ckpt_{update:08d}.ckpt"


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints in `directory`, oldest first (temporary files are not listed)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def find_checkpoint(path: Path) -> Path:
    """The checkpoint `--resume PATH` means: the file itself, or a run directory's latest.

    Raises:
        CheckpointError: nothing to resume from at `path`.
    """
    path = Path(path).expanduser()
    if path.is_file():
        return path
    if not path.exists():
        raise CheckpointError(f"{path} does not exist")
    for directory in (path / CHECKPOINTS_DIR, path):
        if found := list_checkpoints(directory):
            return found[-1]
    raise CheckpointError(f"{path} holds no checkpoint (looked for {CHECKPOINTS_DIR}/ckpt_*.ckpt)")


# Writing.


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write `path` so that it is either complete or absent, never torn.

    The data goes to a temporary file in the same directory (so the rename stays on one
    file system), is fsynced, renamed over `path`, and the directory is fsynced so the
    rename itself survives a power cut.
    """
    path = Path(path)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=_TEMP_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _fsync_directory(path.parent)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems (network mounts) cannot fsync a directory
        pass
    finally:
        os.close(fd)


def save(directory: Path, arrays: Mapping[str, np.ndarray], meta: CheckpointMeta, keep: int = KEEP_LAST) -> Path:
    """Write one checkpoint atomically, then delete all but the newest `keep`.

    Args:
        directory: the run's `checkpoints/` directory (created if missing).
        arrays: host arrays by key path, as `tree_to_host` returns them.
        meta: its `leaves` must describe `arrays`.
        keep: how many checkpoints to keep, newest first.

    Returns:
        The checkpoint's path.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(directory)
    path = checkpoint_path(directory, meta.update)
    if not meta.saved_at:
        meta = dataclasses.replace(meta, saved_at=datetime.datetime.now().astimezone().isoformat(timespec="seconds"))

    def write(file: BinaryIO) -> None:
        with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            archive.writestr(_META, meta.to_json())
            for name, array in arrays.items():
                with archive.open(_LEAF_DIR + name + ".npy", "w", force_zip64=True) as entry:
                    np.lib.format.write_array(entry, np.asarray(array), allow_pickle=False)

    atomic_write(path, write)
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def _remove_stale_temporaries(directory: Path) -> None:
    """Temporaries left by a writer that died mid-write (only one process writes a run)."""
    for path in directory.iterdir():
        if path.name.startswith(".ckpt_") and path.name.endswith(_TEMP_SUFFIX):
            path.unlink(missing_ok=True)


# Reading.


def read_meta(path: Path) -> CheckpointMeta:
    """The meta of a checkpoint, without reading its arrays."""
    try:
        with zipfile.ZipFile(path) as archive:
            return CheckpointMeta.from_json(archive.read(_META).decode())
    except (zipfile.BadZipFile, KeyError, ValueError, TypeError) as error:
        raise CheckpointError(f"{path} is not a readable hm checkpoint ({error})") from error


def read_arrays(path: Path, prefix: str | tuple[str, ...] = "") -> dict[str, np.ndarray]:
    """The arrays of a checkpoint whose key path starts with `prefix` (or one of them)."""
    arrays = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for entry in archive.namelist():
                name = entry[len(_LEAF_DIR) : -len(".npy")]
                if entry.startswith(_LEAF_DIR) and entry.endswith(".npy") and name.startswith(prefix):
                    with archive.open(entry) as file:
                        arrays[name] = np.lib.format.read_array(file, allow_pickle=False)
    except (zipfile.BadZipFile, KeyError, ValueError) as error:
        raise CheckpointError(f"{path} is damaged ({error})") from error
    return arrays


# Between device trees and host arrays.


def _is_array(leaf: Any) -> bool:
    """An array, or the `jax.ShapeDtypeStruct` standing for one in a template."""
    return eqx.is_array(leaf) or isinstance(leaf, jax.ShapeDtypeStruct)


def _array_leaves(tree: Any) -> list[tuple[str, Any]]:
    """(key path, leaf) for every array leaf; functions and other static leaves are skipped."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in flat if _is_array(leaf)]


def tree_on_host(tree: Any) -> Any:
    """`tree` with every array leaf fetched to numpy (a collective on many hosts)."""
    arrays, static = eqx.partition(tree, eqx.is_array)
    return eqx.combine(to_host(arrays), static)


def tree_to_host(tree: Any) -> dict[str, np.ndarray]:
    """Every array leaf of `tree` as a host array, by key path.

    Every process must call this (arrays sharded over hosts are gathered collectively);
    only the writer uses the result. Typed PRNG keys are not supported: a state keeps
    raw key data (`jax.random.key_data`).
    """
    return {name: to_host(leaf) for name, leaf in _array_leaves(tree)}


def leaf_table(arrays: Mapping[str, np.ndarray]) -> dict[str, tuple[tuple[int, ...], str]]:
    return {name: (tuple(array.shape), array.dtype.name) for name, array in arrays.items()}


def all_finite(arrays: Mapping[str, np.ndarray]) -> bool:
    """No NaN or inf in any floating array: a checkpoint is only written from a good state."""
    return all(
        bool(np.isfinite(array).all())
        for array in arrays.values()
        if np.issubdtype(array.dtype, np.floating) or array.dtype.name == "bfloat16"
    )


def mismatched_leaves(like: Any, meta: CheckpointMeta, prefix: str | tuple[str, ...] = "") -> list[str]:
    """Leaves under `prefix` whose presence, shape or dtype differ between `like` and `meta`."""
    problems = []
    wanted = {
        name: (tuple(leaf.shape), np.dtype(leaf.dtype).name)
        for name, leaf in _array_leaves(like)
        if name.startswith(prefix)
    }
    stored = {name: spec for name, spec in meta.leaves.items() if name.startswith(prefix)}
    for name in sorted(wanted.keys() | stored.keys()):
        if name not in stored:
            problems.append(f"{name}: missing from the checkpoint")
        elif name not in wanted:
            problems.append(f"{name}: in the checkpoint but not in this run's state")
        elif wanted[name] != stored[name]:
            problems.append(f"{name}: checkpoint has {stored[name]}, this run has {wanted[name]}")
    return problems


def fill(template: Any, arrays: Mapping[str, np.ndarray], prefix: str | tuple[str, ...] = "") -> Any:
    """`template` with its array leaves under `prefix` replaced by `arrays` (host arrays).

    `template` may be a real state or its abstract shapes; leaves outside `prefix` and
    non-array leaves are kept. Place the result on devices with `hm.train.mesh.to_global`.
    """

    def replace(path, leaf):
        name = jax.tree_util.keystr(path)
        if _is_array(leaf) and name.startswith(prefix):
            return arrays[name]
        return leaf

    return jax.tree_util.tree_map_with_path(replace, template)


# The exported policy.


def export_policy(run_dir: Path, params: Any, description: Mapping[str, Any]) -> Path:
    """Write the parameters alone (`policy.eqx`) and what they are (`policy.json`).

    `policy.eqx` is `equinox.tree_serialise_leaves` of `params`; `policy.json` holds the
    architecture and provenance needed to build a `like` tree and read it back. Call on
    the writing process with parameters from `tree_on_host`.
    """
    run_dir = Path(run_dir)
    atomic_write(run_dir / POLICY_PARAMS, lambda file: eqx.tree_serialise_leaves(file, params))
    text = json.dumps({"format": POLICY_FORMAT, **description}, indent=1, sort_keys=True) + "\n"
    atomic_write(run_dir / POLICY_META, lambda file: file.write(text.encode()))
    return run_dir / POLICY_PARAMS


_POLICY_SIZES = ("obs_size", "num_actions", "hidden_dim", "num_layers")
# What policy.json's "network" held before it named the kind: the class of the only
# network there was, an MLP with a shared trunk.
_LEGACY_NETWORK_CLASS = "hm.train.network.Network"


def read_policy_description(run_dir: Path) -> dict[str, Any]:
    """`policy.json` of an exported policy, checked to describe a network.

    Raises:
        CheckpointError: unreadable, not a JSON object, another format, or without the
            positive integer sizes and rules version a policy needs.
    """
    meta = Path(run_dir) / POLICY_META
    try:
        description = json.loads(meta.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{meta}: cannot read the policy description ({error})") from None
    if not isinstance(description, dict):
        raise CheckpointError(f"{meta}: not a policy description (a JSON object)")
    if description.get("format") not in (POLICY_FORMAT, _POLICY_FORMAT_1):
        raise CheckpointError(f"{meta}: unknown format {description.get('format')!r} (expected {POLICY_FORMAT!r})")
    missing = [k for k in ("game_version",) + _POLICY_SIZES
               if not isinstance(description.get(k), int) or (k != "game_version" and description[k] < 1)]
    if missing:
        raise CheckpointError(f"{meta}: not a policy description: no integer {', '.join(missing)}"
                              " (sizes >= 1)")
    from hm.train.network import CRITICS, KINDS, VALUE_TRANSFORMS

    kind = description.get("network", "mlp")
    kind = "mlp" if kind == _LEGACY_NETWORK_CLASS else kind
    critic = description.get("critic", "shared")
    value_transform = description.get("value_transform", "none")
    if kind not in KINDS:
        raise CheckpointError(f"{meta}: network {kind!r} is not a kind this code builds ({', '.join(KINDS)})")
    if critic not in CRITICS:
        raise CheckpointError(f"{meta}: critic {critic!r} is not one of {', '.join(CRITICS)}")
    if value_transform not in VALUE_TRANSFORMS:
        raise CheckpointError(f"{meta}: value transform {value_transform!r} is not one of "
                              f"{', '.join(VALUE_TRANSFORMS)}")
    return {**description, "network": kind, "critic": critic, "value_transform": value_transform}


def policy_architecture(description: Mapping[str, Any]) -> Architecture:
    """The architecture a checked policy description (`read_policy_description`) names."""
    return Architecture(**{field.name: description[field.name] for field in dataclasses.fields(Architecture)})


def network_like(architecture: Architecture, key: Any = None) -> Any:
    """A `hm.train.network.Network` of `architecture`: real weights from `key`, else shapes only.

    Raises:
        CheckpointError: an architecture the network cannot take (say a conv network for an
            observation that is not the game's).
    """
    from hm.train.network import Network

    def build(key):
        return Network(architecture.obs_size, architecture.num_actions, architecture.hidden_dim,
                       architecture.num_layers, kind=architecture.network, critic=architecture.critic,
                       value_transform=architecture.value_transform, key=key)

    try:
        if key is None:
            return eqx.filter_eval_shape(build, jax.random.key(0))
        return build(key)
    except ValueError as error:
        raise CheckpointError(f"cannot build the network: {error}") from None


def load_policy(run_dir: Path) -> Any:
    """The exported policy of a run: a `hm.train.network.Network` with its trained weights.

    Raises:
        CheckpointError: no policy there, one for other rules or another format, or
            weights that are not the network its description names.
    """
    from hm.game.constants import GAME_VERSION

    run_dir = Path(run_dir)
    description = read_policy_description(run_dir)
    if description["game_version"] != GAME_VERSION:
        raise CheckpointError(
            f"{run_dir}: policy was trained on rules version {description['game_version']}, "
            f"this code implements version {GAME_VERSION}"
        )
    architecture = policy_architecture(description)
    try:
        like = network_like(architecture, jax.random.key(0))
    except CheckpointError as error:
        raise CheckpointError(f"{run_dir / POLICY_META}: {error}") from None

    def value_statistics(network):
        return network.value_shift, network.value_scale

    earlier = description["format"] == _POLICY_FORMAT_1
    if earlier:  # its file has no value statistics: read the rest, then put in the identity
        like = eqx.tree_at(value_statistics, like, (None, None))
    try:
        network = eqx.tree_deserialise_leaves(run_dir / POLICY_PARAMS, like)
    except (OSError, ValueError, EOFError, RuntimeError) as error:
        # equinox names the first leaf whose shape differs, or the file is cut short.
        raise CheckpointError(
            f"{run_dir / POLICY_PARAMS}: does not hold the network {POLICY_META} describes "
            f"({architecture.network} network, {architecture.critic} critic, hidden_dim "
            f"{architecture.hidden_dim}, num_layers {architecture.num_layers}): {error}") from None
    if earlier:
        network = eqx.tree_at(value_statistics, network, (jnp.zeros((), jnp.float32), jnp.ones((), jnp.float32)),
                              is_leaf=lambda leaf: leaf is None)
    return network
