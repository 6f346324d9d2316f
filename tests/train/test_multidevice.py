"""Several devices and several processes give the single-device result.

Each layout needs its own XLA flags or `jax.distributed` start-up, so it runs in a
subprocess (`multidevice_worker.py`) that trains one chunk of the same config (16 env
slots, 2 updates of 2 epochs x 4 minibatches) and writes the parameters to a file.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

WORKER = pathlib.Path(__file__).with_name("multidevice_worker.py")
TIMEOUT = 600


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    # the suite's XLA flags (tests/conftest.py: quicker compilation), and the device count
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={devices}"])
    env.pop("JAX_PLATFORMS", None)
    # the suite's persistent compilation cache (tests/conftest.py), for quick reruns
    root = pathlib.Path(__file__).resolve().parents[2]
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(root / ".cache" / "jax"))
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    return env


def _params(path: pathlib.Path) -> list[np.ndarray]:
    data = np.load(path)
    return [data[f"leaf_{i}"] for i in range(len(data.files))]


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    out = tmp_path_factory.mktemp("devices")
    subprocess.run([sys.executable, str(WORKER), "devices", str(out)], env=_env(4), check=True,
                   timeout=TIMEOUT, capture_output=True)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("devices", [4])
def test_update_on_several_devices_matches_one(layouts, devices):
    one, many = _params(layouts / "params_1.npz"), _params(layouts / f"params_{devices}.npz")
    assert len(one) == len(many) == 10   # 2 trunk layers, 2 heads (weight, bias), value shift and scale
    for a, b in zip(one, many):
        assert a.shape[0] == 4, "a population of 4 members (2 learning rates x 2 seeds)"
        assert a.shape == b.shape and a.dtype == b.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    summary = json.loads((layouts / "devices.json").read_text())
    assert summary[str(devices)]["steps"] == summary["1"]["steps"] == 16 * 6 * 2
    assert summary[str(devices)]["episodes"] == summary["1"]["episodes"]
    assert summary[str(devices)]["loss"] == pytest.approx(summary["1"]["loss"], rel=1e-5)
    assert len(set(summary["1"]["loss"])) == 4, "the members differ"
    shift, scale = one[-2], one[-1]
    assert np.all(shift != 0.0) and np.all(scale != 1.0), "the value statistics moved"


@pytest.mark.slow
def test_uneven_splits_are_refused(layouts):
    refusals = json.loads((layouts / "devices.json").read_text())["refusals"]
    assert refusals["num_envs"] == (
        "--num-envs|--num-envs must be a positive multiple of the device count (4); got 6")
    flag, message = refusals["minibatch"].split("|")
    assert flag == "--num-minibatches" and "divides evenly over the 4 device(s)" in message


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_train_together(layouts, tmp_path):
    coordinator = f"127.0.0.1:{_free_port()}"
    workers = [subprocess.Popen([sys.executable, str(WORKER), "process", str(tmp_path), coordinator, str(i)],
                                env=_env(1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
               for i in range(2)]
    try:
        outputs = [w.communicate(timeout=TIMEOUT)[0].decode(errors="replace") for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    for w, output in zip(workers, outputs):
        assert w.returncode == 0, output[-3000:]
    first, second = _params(tmp_path / "process_0.npz"), _params(tmp_path / "process_1.npz")
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)  # the processes agree exactly
    for a, b in zip(_params(layouts / "params_1.npz"), first):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)  # and match one device
