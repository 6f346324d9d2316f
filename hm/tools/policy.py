"""A trained policy for the tools: loading it, and choosing actions with it.

`load` takes whatever a person is likely to point at: a run directory (its exported
`policy.eqx` if training finished, else its latest checkpoint's parameters), a
`policy.eqx`/`policy.json` file, a `checkpoints/` directory or one checkpoint file.
A population's checkpoint holds every member: `member` picks one by index or name, and
by default the best by recent mean episode return (the one a finished run exports).
Anything else, or a policy that does not fit this game's observation and actions or
rules version, raises `PolicyError` with the reason, before any array is built.

Reading goes through `hm.train.checkpoint` (its meta checks, `load_policy`,
`mismatched_leaves`, `fill`), so the tools accept exactly what the trainer writes.
The network runs in float32 here whatever precision it was trained in: the tools run
on a CPU, where bfloat16 is slower (`hm.train.precision`).
"""

import dataclasses
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int32

from hm.game import constants as C
from hm.train import checkpoint, distributions
from hm.train.checkpoint import Architecture, CheckpointError
from hm.train.network import Network, evaluate

# The network a uniform-random baseline runs when no policy gives it a shape (any works).
BASELINE_ARCHITECTURE = Architecture(hidden_dim=1, num_layers=1, obs_size=C.OBS_FLAT_SIZE,
                                     num_actions=C.NUM_ACTIONS)


class PolicyError(Exception):
    """A path that holds no usable policy; the message says why."""


@dataclasses.dataclass(frozen=True)
class Policy:
    """A network ready to act, and where it came from.

    `source` names the file read and its run, update and env steps, for reports.
    """

    network: Network
    architecture: Architecture
    source: str
    member: str | None = None   # the member's name, for a policy taken from a population
    # the run's training config (`TrainConfig` fields as saved), or None where not saved;
    # a search player reads the reward the critic was trained on from it
    config: dict[str, Any] | None = None


class _Params(eqx.Module):
    """A template whose key paths are those of the parameters inside a `TrainState`
    (each leaf with the member axis in front)."""

    params: Network


def pick_member(table: list[dict[str, Any]], member: int | str | None, where: Path) -> int:
    """The index of `member` (an index, or a name) in a population's member table; None:
    the best by recent mean episode return (the first member when none is known)."""
    if member is None:
        known = [(row["recent_return"], -row["index"]) for row in table
                 if row.get("recent_return") is not None]
        return -max(known)[1] if known else 0
    names = [row["name"] for row in table]
    if isinstance(member, int) or (isinstance(member, str) and member.isdigit()):
        index = int(member)
        if not 0 <= index < len(table):
            raise PolicyError(f"{where}: no member {index}; it holds {len(table)} "
                              f"(0..{len(table) - 1}: {', '.join(names)})")
        return index
    if member not in names:
        raise PolicyError(f"{where}: no member named {member!r}; its members are: {', '.join(names)}")
    return names.index(member)


def members_of(path: str | Path) -> list[dict[str, Any]]:
    """The member table (index, name, seed, hyper, recent_return) of the checkpoint that
    `path` names (a run directory: its latest checkpoint).

    Raises:
        PolicyError: no checkpoint there.
    """
    path = Path(path).expanduser()
    try:
        found = checkpoint.find_checkpoint(path.parent if path.name in (
            checkpoint.POLICY_PARAMS, checkpoint.POLICY_META) else path)
        return checkpoint.read_meta(found).members
    except CheckpointError as error:
        raise PolicyError(f"{path}: no checkpoint with the population's members: {error}") from None


def _misfits(stored: Architecture) -> list[str]:
    """How a policy's input and output sizes differ from this game's (its width is free)."""
    return [f"{name} is {have}, this game's is {need}"
            for name, have, need in (("obs_size", stored.obs_size, C.OBS_FLAT_SIZE),
                                     ("num_actions", stored.num_actions, C.NUM_ACTIONS))
            if have != need]


def _provenance(path: Path, run_name: Any, update: Any, env_steps: Any) -> str:
    facts = [f"run {run_name}" if run_name else "",
             f"update {update}" if update is not None else "",
             f"{env_steps} env steps" if env_steps is not None else ""]
    facts = [fact for fact in facts if fact]
    return f"{path} ({', '.join(facts)})" if facts else str(path)


def _refuse(path: Path, reasons: list[str]) -> PolicyError:
    return PolicyError(f"{path}: does not fit this game: " + "; ".join(reasons))


def _member_config(config: dict[str, Any] | None, table: list[dict[str, Any]], member: str | None
                   ) -> dict[str, Any] | None:
    """A run's training config with a population member's own swept values in place."""
    if not config:
        return None
    hyper = next((row.get("hyper", {}) for row in table if row.get("name") == member), {})
    return {**config, **hyper}


def _load_exported(run_dir: Path) -> Policy:
    """The `policy.eqx` + `policy.json` pair in `run_dir`."""
    meta_path, params_path = run_dir / checkpoint.POLICY_META, run_dir / checkpoint.POLICY_PARAMS
    for needed in (meta_path, params_path):
        if not needed.is_file():
            other = params_path if needed == meta_path else meta_path
            raise PolicyError(f"{run_dir}: has {other.name} but no {needed.name}; an exported "
                              f"policy is the pair {checkpoint.POLICY_PARAMS} + {checkpoint.POLICY_META}")
    try:
        description = checkpoint.read_policy_description(run_dir)
    except CheckpointError as error:
        raise PolicyError(str(error)) from None
    stored = checkpoint.policy_architecture(description)
    if reasons := _misfits(stored):
        raise _refuse(meta_path, reasons)
    try:
        network = checkpoint.load_policy(run_dir)
    except CheckpointError as error:
        raise PolicyError(str(error)) from None
    source = _provenance(params_path, description.get("run_name"), description.get("update"),
                         description.get("env_steps"))
    member = description.get("member")
    if member is not None and len(description.get("members", [])) > 1:
        source += f", member {member}"
    return Policy(network=network, architecture=stored, source=source, member=member,
                  config=_member_config(description.get("config"), description.get("members", []), member))


def _load_checkpoint(path: Path, member: int | str | None = None) -> Policy:
    """The parameters of one training checkpoint (optimizer and games are not read)."""
    try:
        meta = checkpoint.read_meta(path)
    except CheckpointError as error:
        raise PolicyError(f"{path} is not a policy, run directory or checkpoint: {error}") from None
    stored = meta.architecture
    reasons = _misfits(stored)
    if meta.game_version != C.GAME_VERSION:
        reasons.append(f"trained on rules version {meta.game_version}, this code implements "
                       f"version {C.GAME_VERSION}")
    if reasons:
        raise _refuse(path, reasons)
    try:
        like = checkpoint.network_like(stored)
    except CheckpointError as error:
        raise PolicyError(f"{path}: {error}") from None
    count = len(meta.members)
    template = _Params(params=jax.tree.map(
        lambda x: jax.ShapeDtypeStruct((count,) + x.shape, x.dtype) if eqx.is_array_like(x)
        or isinstance(x, jax.ShapeDtypeStruct) else x, like))
    index = pick_member(meta.members, member, path)
    if problems := checkpoint.mismatched_leaves(template, meta, prefix=checkpoint.PARAMS_PREFIX):
        raise PolicyError(f"{path}: its parameters are not the network its meta describes: "
                          + "; ".join(problems[:3]))
    try:
        arrays = checkpoint.read_arrays(path, prefix=checkpoint.PARAMS_PREFIX)
    except CheckpointError as error:
        raise PolicyError(str(error)) from None
    population = checkpoint.fill(template, arrays, prefix=checkpoint.PARAMS_PREFIX).params
    network = jax.device_put(jax.tree.map(lambda x: x[index] if eqx.is_array(x) else x, population))
    name = meta.members[index]["name"]
    source = _provenance(path, meta.run_name, meta.update, meta.env_steps)
    if count > 1:
        source += f", member {index} ({name})"
    return Policy(network=network, architecture=stored, source=source, member=name,
                  config=_member_config(meta.config, meta.members, name))


def load(path: str | Path, member: int | str | None = None) -> Policy:
    """The policy at `path`: a run directory, `policy.eqx`/`policy.json`, or a checkpoint.

    A run directory's exported policy is preferred (it is the final one); without it the
    latest checkpoint is used, so a run still training can be watched. Naming a `member`
    (index or name) reads it from the checkpoint, which holds the whole population.

    Raises:
        PolicyError: nothing usable there; the message names the path and the reason.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise PolicyError(f"{path} does not exist")
    if member is not None and (path.is_dir() or path.name in (checkpoint.POLICY_PARAMS,
                                                              checkpoint.POLICY_META)):
        where = path if path.is_dir() else path.parent
        try:
            found = checkpoint.find_checkpoint(where)
        except CheckpointError:
            raise PolicyError(f"{where}: --member needs the run's checkpoint (it holds every "
                              f"member), and there is none under {where}") from None
        return _load_checkpoint(found, member)
    if path.is_dir():
        if (path / checkpoint.POLICY_META).exists() or (path / checkpoint.POLICY_PARAMS).exists():
            return _load_exported(path)
        try:
            found = checkpoint.find_checkpoint(path)
        except CheckpointError:
            raise PolicyError(
                f"{path} is not a run directory: it holds neither {checkpoint.POLICY_PARAMS} + "
                f"{checkpoint.POLICY_META} nor {checkpoint.CHECKPOINTS_DIR}/ckpt_*.ckpt") from None
        return _load_checkpoint(found, member)
    if path.name in (checkpoint.POLICY_PARAMS, checkpoint.POLICY_META):
        return _load_exported(path.parent)
    return _load_checkpoint(path, member)


def uniform_network(like: Network | None = None) -> Network:
    """A network whose policy is uniform over the legal actions (and whose value is 0).

    All weights zero give all logits zero, which the masked distribution turns into the
    uniform choice among legal actions. The random baseline is run this way, through
    the same compiled program as a policy of the shape of `like` (default: the smallest).
    """
    if like is None:
        like = checkpoint.network_like(BASELINE_ARCHITECTURE)
    return jax.tree.map(lambda leaf: jnp.zeros(leaf.shape, leaf.dtype), like)


def act(
    network: Network,
    obs: Float[Array, "batch obs"],
    mask: Bool[Array, "batch actions"],
    uniform: Float[Array, " batch"],
    greedy: Bool[Array, ""],
    precision: str = "f32",
) -> tuple[Int32[Array, " batch"], Float[Array, "batch actions"], Float[Array, " batch"]]:
    """Choose one legal action per row, as the learner samples them, or the likeliest.

    Args:
        network: the actor-critic.
        obs: flat observations (`Observation.flat()`).
        mask: the legal actions (`hm.game.legal_actions`).
        uniform: one draw in [0, 1) per row, for sampling by inverse CDF.
        greedy: take the most probable legal action instead of sampling (an array, so
            both choices share one compiled program).
        precision: the network's compute precision ("f32", or "bf16" to act as a run
            trained in bf16 does).

    Returns:
        The actions, every action's probability (0 for illegal ones) and the value estimates.
    """
    logits, value = evaluate(network, obs, precision)
    sampled = distributions.sample(logits, mask, uniform)
    likeliest = jnp.argmax(distributions.log_probs(logits, mask), axis=-1).astype(jnp.int32)
    action = jnp.where(greedy, likeliest, sampled)
    return action, distributions.probs(logits, mask), value
