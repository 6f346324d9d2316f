"""Resuming a run: which checkpoint, which config, whether it fits, and its state.

* `find_resumable(path)`: the checkpoint `--resume PATH` means. A run directory's newest
  checkpoint that cannot be read falls back to the newest good one, with a warning that
  names both.
* `merge_config(config, meta, explicit)`: the checkpoint's config, but for the fields
  given explicitly and those that describe the machine (`MACHINE_FIELDS`).
* `refusal(...)`: why a checkpoint cannot continue this run (architecture, population,
  game version, environment), as one `CheckpointError`.
* `restore(...)`: the state to continue from: exactly the checkpoint's when the batch
  layout is the same, else its weights and counters with fresh optimizer state and games.
"""

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from hm.train import checkpoint
from hm.train.checkpoint import CheckpointError, CheckpointMeta
from hm.train.config import TrainConfig, from_dict, to_dict
from hm.train.learner import abstract_train_state, init, reshard_for
from hm.train.mesh import to_global
from hm.train.progress import format_count

# Config fields a resume does not take from the checkpoint: they describe the machine.
MACHINE_FIELDS = frozenset({"devices"})
# What a resume with another batch layout keeps of a checkpoint (`reshard_for` needs these).
KEPT_ON_LAYOUT_CHANGE = (checkpoint.PARAMS_PREFIX, ".update", ".env_steps")


def find_resumable(path: Path, warn: Callable[[str], None]) -> tuple[Path, CheckpointMeta]:
    """The checkpoint `--resume PATH` means and its meta.

    A checkpoint file is taken as it is. In a run directory the newest checkpoint is
    taken; if it cannot be read (damaged, cut short), the newest one that can be is
    taken instead and `warn` says which was skipped and which is used.

    Raises:
        CheckpointError: nothing readable to resume from at `path`.
    """
    path = Path(path).expanduser()
    latest = checkpoint.find_checkpoint(path)
    if path.is_file():
        return latest, checkpoint.read_meta(latest)
    candidates = checkpoint.list_checkpoints(latest.parent)[::-1]
    problems = []
    for candidate in candidates:
        try:
            meta = checkpoint.read_meta(candidate)
            checkpoint.read_arrays(candidate, prefix=".update")  # the archive's data, not just its meta
        except CheckpointError as error:
            problems.append(str(error))
            continue
        if candidate != latest:
            warn(f"warning: the newest checkpoint {latest} cannot be read ({problems[0]}); "
                 f"resuming from {candidate}, the newest that can")
        return candidate, meta
    raise CheckpointError(f"no checkpoint under {path} can be read: " + "; ".join(problems))


# The config fields a checkpoint's `Architecture` also records (network, critic, value
# transform, sizes).
ARCHITECTURE_FIELDS = tuple(field.name for field in dataclasses.fields(checkpoint.Architecture)
                            if field.name in {f.name for f in dataclasses.fields(TrainConfig)})


def merge_config(config: TrainConfig, meta: CheckpointMeta, explicit: frozenset[str] | None) -> TrainConfig:
    """`config` with every field not given explicitly (and not a machine field) taken from
    the checkpoint's config. `explicit` None: every field comes from `config`."""
    if explicit is None:
        return config
    known = to_dict(config).keys() - explicit - MACHINE_FIELDS
    stored = from_dict(meta.config)  # JSON lists back to the config's tuples
    values = {k: getattr(stored, k) for k in known if k in meta.config}
    # A checkpoint older than an architecture field (its config lacks it) resumes with what
    # its parameters are (`Architecture`'s record), not with today's default.
    values.update({k: getattr(meta.architecture, k) for k in ARCHITECTURE_FIELDS
                   if k in known and k not in meta.config})
    return dataclasses.replace(config, **values)


def refuse_mismatch(path: Path, meta: CheckpointMeta, architecture, game_version: int, env: dict,
                    member_names: list[str]) -> None:
    """Raise `CheckpointError` with every reason `path` cannot continue this run."""
    reasons = checkpoint.refusal_reasons(meta, architecture, game_version, env, member_names)
    if reasons:
        raise CheckpointError(f"cannot resume from {path}: " + "; ".join(reasons))


def restore(path: Path, meta: CheckpointMeta, resolved, env, mesh, layout, say: Callable[[str], None]) -> Any:
    """The state to continue from `path`: exactly its state when the batch layout is the
    same, else its weights and counters with fresh optimizer state and games."""
    template = abstract_train_state(resolved, env)
    param_problems = checkpoint.mismatched_leaves(template, meta, prefix=checkpoint.PARAMS_PREFIX)
    if param_problems:
        raise CheckpointError(f"cannot resume from {path}: parameters differ: " + "; ".join(param_problems))
    where = f"{path} (update {meta.update}, {format_count(meta.env_steps)} steps)"
    if meta.layout == layout:
        problems = checkpoint.mismatched_leaves(template, meta)
        if not problems:
            host = checkpoint.fill(template, checkpoint.read_arrays(path))
            say(f"resumed from {where}")
            # Placed exactly as a fresh state is: the fused program's compiled form
            # (and its cache entry) depends on its inputs' shardings.
            fresh = init(resolved, env=env, mesh=mesh)
            return to_global(host, jax.tree.map(lambda leaf: leaf.sharding, fresh))
        why = "its optimizer or environment state does not fit this run: " + "; ".join(problems[:3])
    else:
        old, new = meta.layout, layout
        why = "a new batch layout: " + ", ".join(
            f"{what} {a} -> {b}"
            for what, a, b in (
                ("num_envs", old.num_envs, new.num_envs),
                ("devices", old.num_devices, new.num_devices),
                ("processes", old.num_processes, new.num_processes),
            )
            if a != b
        )
    kept = checkpoint.read_arrays(path, prefix=KEPT_ON_LAYOUT_CHANGE)
    host = checkpoint.fill(template, kept, prefix=KEPT_ON_LAYOUT_CHANGE)
    say(f"resumed weights from {where} with {why}; weights and counters kept, "
        "optimizer state and environments re-initialised")
    return reshard_for(host, resolved, env=env, mesh=mesh)
