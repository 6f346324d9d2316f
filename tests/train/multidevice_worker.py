"""Run by test_multidevice.py in a subprocess, with the device/process layout it needs.

    python multidevice_worker.py devices OUT_DIR
        (with XLA_FLAGS=--xla_force_host_platform_device_count=4) trains one chunk of the
        same config on 1 and 4 devices; writes params_<D>.npz and devices.json.
    python multidevice_worker.py process OUT_DIR COORDINATOR PROCESS_ID
        one of two processes joined by jax.distributed (one CPU device each) training
        one chunk together on the 2-device mesh; writes process_<ID>.npz.
"""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import jax
import numpy as np

from hm.train import mesh as mesh_lib
from hm.train.config import ConfigError, TrainConfig, resolve, validate
from hm.train.learner import init, make_train_fn, total_env_steps


def config(devices: int) -> TrainConfig:  # noqa: D103
    # 6 steps, 4 minibatches: groups of 2 env slots (the general minibatch layout); a
    # population of 2 learning rates x 2 seeds, so members and devices are both exercised;
    # value normalisation on, so its statistics (means over every device) are compared too;
    # and a teacher on every other slot, so its slots (2 of each device's 4) and its loss's
    # share (a mean over every device) are compared as well
    from probes import plain

    return plain(num_envs=16, num_steps=6, total_timesteps=16 * 6 * 2, hidden_dim=32,
                 num_minibatches=4, update_epochs=2, updates_per_call=2, lr=5e-3, gamma=0.9,
                 ent_coef=0.01, max_episode_steps=5, precision="f32", devices=devices,
                 value_norm=0.1, num_seeds=2, sweep=(("lr", (5e-3, 1e-3)),),
                 teacher_coef=0.5, teacher_every=2)


def train_one_chunk(devices: int):
    from probes import last_legal, taught_probe_suite

    cfg = config(devices)
    validate(cfg, jax.device_count())
    resolved = resolve(cfg, "cpu", jax.device_count())
    env = taught_probe_suite()
    mesh = mesh_lib.make_mesh(devices)
    state = init(resolved, env=env, mesh=mesh)   # each member from its own seed
    state, metrics = make_train_fn(resolved, env, mesh, teacher_policy=last_legal)(state)
    leaves = mesh_lib.to_host(jax.tree.leaves(state.params))
    extra = {"loss": mesh_lib.to_host(metrics["loss/total"]).tolist(), "steps": total_env_steps(state),
             "episodes": mesh_lib.to_host(metrics["episode/count"]).tolist()}
    return {f"leaf_{i}": leaf for i, leaf in enumerate(leaves)}, extra


def refusals() -> dict[str, str]:
    out = {}
    for name, cfg in {"num_envs": TrainConfig(num_envs=6),
                      "minibatch": TrainConfig(num_envs=8, num_steps=3, total_timesteps=24, num_minibatches=4)}.items():
        try:
            validate(cfg, jax.device_count())
            out[name] = ""
        except ConfigError as error:
            out[name] = f"{error.flag}|{error}"
    return out


def main():
    mode, out = sys.argv[1], pathlib.Path(sys.argv[2])
    if mode == "devices":
        assert jax.device_count() == 4, jax.devices()
        summary = {"refusals": refusals()}
        for devices in (1, 4):
            arrays, extra = train_one_chunk(devices)
            np.savez(out / f"params_{devices}.npz", **arrays)
            summary[str(devices)] = extra
        (out / "devices.json").write_text(json.dumps(summary))
    else:
        coordinator, process_id = sys.argv[3], int(sys.argv[4])
        assert mesh_lib.maybe_initialize_distributed(coordinator, 2, process_id)
        assert jax.process_count() == 2 and jax.device_count() == 2
        arrays, extra = train_one_chunk(2)
        np.savez(out / f"process_{process_id}.npz", **arrays)
        (out / f"process_{process_id}.json").write_text(json.dumps(extra))


if __name__ == "__main__":
    main()
