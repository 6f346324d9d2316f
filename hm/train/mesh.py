"""Devices: the data-parallel mesh, multi-host start-up, and moving trees on and off it.

The learner runs on a one-axis `jax.sharding.Mesh` named "data" over every device of
every process (or the first `devices` of them). Env slots are split over that axis;
parameters and optimizer state are replicated. With several processes (a TPU pod
slice, or CPU processes on one machine in tests) every process runs the same program on
global arrays, through JAX's own distributed runtime.
"""

import os

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import PyTree

DATA_AXIS = "data"


def _on_tpu_pod() -> bool:
    """Whether this process is one host of a multi-host Cloud TPU slice."""
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES", "")
    return len([h for h in hosts.split(",") if h]) > 1


def maybe_initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> bool:
    """Join a multi-process run, if there is one. Call before anything else uses JAX.

    With explicit arguments, `jax.distributed.initialize` is called with them; on a
    multi-host TPU slice it is called with none (JAX finds the other hosts itself).
    Otherwise this is a single-process run and nothing happens.

    Returns:
        Whether the distributed runtime is (now) initialised.
    """
    if jax.distributed.is_initialized():
        return True
    given = (coordinator_address, num_processes, process_id)
    if any(value is not None for value in given):
        if not all(value is not None for value in given):
            raise ValueError("--coordinator-address, --num-processes and --process-id go together")
        jax.distributed.initialize(coordinator_address=coordinator_address,
                                   num_processes=num_processes, process_id=process_id)
        return True
    if _on_tpu_pod():
        jax.distributed.initialize()
        return True
    return False


def make_mesh(devices: int | None = None) -> Mesh:
    """A one-axis ("data") mesh over all devices, or the first `devices` of them.

    With several processes the devices are taken evenly from each process (every
    process must own part of the mesh to run the program), in process order.
    """
    all_devices = jax.devices()
    count = len(all_devices) if devices is None else devices
    if not 1 <= count <= len(all_devices):
        raise ValueError(f"--devices must be in [1, {len(all_devices)}]; got {devices}")
    processes = jax.process_count()
    if processes > 1:
        if count % processes:
            raise ValueError(f"--devices must be a multiple of the process count ({processes}); got {count}")
        per_process = count // processes
        chosen = []
        for p in range(processes):
            chosen += [d for d in all_devices if d.process_index == p][:per_process]
    else:
        chosen = all_devices[:count]
    return Mesh(np.array(chosen), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def sharded(mesh: Mesh) -> NamedSharding:
    """Split the leading axis over the data axis."""
    return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def to_global(host_tree: PyTree, shardings: PyTree) -> PyTree:
    """Build global arrays from host values every process holds in full (e.g. a checkpoint).

    Each process contributes the slices its own devices hold; works for one process or
    many. `shardings` is a tree of `NamedSharding` matching `host_tree`.
    """

    def put(value, sharding):
        value = np.asarray(value)
        return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

    return jax.tree.map(put, host_tree, shardings)


def to_host(tree: PyTree) -> PyTree:
    """Fetch a tree of (possibly multi-process, sharded) arrays to numpy on every process."""

    def fetch(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(x.addressable_data(0))
        return np.asarray(x)

    return jax.tree.map(fetch, tree)
