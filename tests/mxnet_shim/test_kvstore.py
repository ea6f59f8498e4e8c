"""The MXNet KVStore (``dlcp.host.shim.mxnet``) across real processes; run by ``make test-mxnet`` in .venv-mxnet."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.mxnet
if importlib.util.find_spec("mxnet") is None:
    pytest.skip("MXNet lives in .venv-mxnet: `make test-mxnet` runs these tests", allow_module_level=True)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # mxnet 1.9.1's own: numpy 1.20 removals, distutils
    # isort: off
    import dlcp.host.shim.mxnet  # noqa: F401  (the shim before mxnet, as documented)
    import mxnet as mx

    # isort: on
from mxnet_support import kvstore_worker, reference_training, trainer_worker  # noqa: E402

from dlcp.apps.launch import spawn  # noqa: E402

LOSSLESS = """
[policy.push]
loss_bound = 0.0
[policy.pull]
loss_bound = 0.0
[policy.reduce_scatter]
loss_bound = 0.0
"""


def job_file(tmp_path: Path, mode: str, servers: int = 1, lossless: bool = True) -> str:
    path = tmp_path / f"job-{mode}.toml"
    text = f'[job]\nmode = "{mode}"\nservers = {servers}\n[transport]\nport = 0\n'
    path.write_text(text + (LOSSLESS if lossless else ""))
    return str(path)


@pytest.mark.parametrize("mode", ["ring", "ps"])
def test_pushpull_sums_and_broadcast_copies_rank0(tmp_path: Path, mode: str) -> None:
    world = 3
    out = spawn(kvstore_worker, world, job_file(tmp_path, mode, servers=2), timeout_s=180)
    total = sum(range(1, world + 1))  # rank r contributes r + 1
    base = np.arange(10_000, dtype=np.float32)
    for rank, r in enumerate(out):
        assert r["is_dlcp"] and r["type"] == "dlcp" and r["mode"] == mode
        assert (r["rank"], r["num_workers"]) == (rank, world)
        assert r["optimizer_capable"] is False
        np.testing.assert_array_equal(r["single"], base * total)
        for d in r["devices"]:  # two devices per worker: 1x and 2x
            np.testing.assert_array_equal(d, base * 3 * total)
        for o in r["out"]:
            np.testing.assert_array_equal(o, np.full(3, total, dtype=np.float32))
        np.testing.assert_array_equal(r["keyed"][0], np.full(5, total, dtype=np.float32))
        np.testing.assert_array_equal(r["keyed"][1], np.full(7, 10 * total, dtype=np.float32))
        assert r["halves"].dtype == np.float16
        np.testing.assert_array_equal(r["halves"], np.full((4, 5), total, dtype=np.float16))
        for o in r["broadcast"]:
            np.testing.assert_array_equal(o, np.full((2, 3), 100, dtype=np.float32))
        # gluon's integer keys are layer indices; other keys are numbered in first-seen order.
        assert r["layers"] == {"0": 0, "1": 1, "bias": 0, "2": 2, "3": 3, "4": 4, "5": 5}
        assert r["lost"] == 0


@pytest.mark.parametrize(("mode", "servers", "lossless"), [("ring", 1, False), ("ps", 2, True)])
def test_gluon_trainer_keeps_replicas_identical(tmp_path: Path, mode: str, servers: int, lossless: bool) -> None:
    world = 2
    out = spawn(trainer_worker, world, job_file(tmp_path, mode, servers, lossless), timeout_s=240)
    ref = reference_training(world)
    for run in ("trainer_only", "resynced"):
        a, b = (r[run]["start"] for r in out)
        assert any(not np.array_equal(a[k], b[k]) for k in a), "ranks must start apart, or nothing is synchronised"
    for r in out:
        assert r["update_on_kvstore"] is False
        assert r["lost"] == 0
        for run in ("trainer_only", "resynced"):
            for k, v in out[0][run]["params"].items():
                np.testing.assert_array_equal(r[run]["params"][k], v)  # replicas identical, bit for bit
            assert r[run]["losses"][-1] < 0.2 * r[run]["before"], (r[run]["before"], r[run]["losses"])
        # With equal starting weights, DLCP's sum + step(global batch) is single-process SGD on the global batch.
        for k, v in r["resynced"]["params"].items():
            np.testing.assert_allclose(v, ref["params"][k], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(r["resynced"]["losses"], ref["losses"], rtol=1e-3)
        if mode == "ps":
            for k, v in out[0]["knocked_and_resynced"].items():
                np.testing.assert_array_equal(r["knocked_and_resynced"][k], v)


def _threads_after(code: str, tmp_path: Path) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MXNET_OMP_MAX_THREADS")}
    # cwd outside the repository: its dlcp/ folder would shadow the installed package.
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return int(run.stdout.split()[-1])


def test_torch_thread_count_survives_importing_mxnet(tmp_path: Path) -> None:
    n = len(os.sched_getaffinity(0)) // 2 + 1  # never the count mxnet picks (half the processors)
    # torch.get_num_threads() (or any parallel op) has torch read the OpenMP setting, which
    # mxnet's import then lowers for the whole process.
    prefix = f"import torch; torch.set_num_threads({n}); torch.get_num_threads(); "
    # The premise: importing mxnet on its own changes torch's count.
    assert _threads_after(prefix + "import mxnet; print(torch.get_num_threads())", tmp_path) != n
    assert _threads_after(prefix + "import dlcp.host.shim.mxnet; print(torch.get_num_threads())", tmp_path) == n
    # torch imported by the shim itself (before mxnet) keeps its own default.
    default = _threads_after("import torch; print(torch.get_num_threads())", tmp_path)
    after = _threads_after("import dlcp.host.shim.mxnet, torch; print(torch.get_num_threads())", tmp_path)
    assert after == default


def test_create_without_rendezvous_names_the_missing_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "DLCP_STORE_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="RANK, WORLD_SIZE, DLCP_STORE_PORT not set"):
        mx.kv.create("dlcp")


def test_trainer_given_the_name_uses_no_kvstore_on_one_device() -> None:
    """Why the README passes the KVStore object: MXNet drops a non-"dist" name for a single device."""
    net = mx.gluon.nn.Dense(1, in_units=2)
    net.initialize()
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", kvstore="dlcp")
    trainer._init_kvstore()
    assert trainer._kvstore is None
