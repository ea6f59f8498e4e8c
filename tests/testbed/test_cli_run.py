"""``dlcp testbed run`` end to end (as root): torchrun across the hosts, and a worker that dies mid-run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from testbed_support import dlcp, namespaces_of, star, unique_name

from dlcp.testbed import layout

pytestmark = pytest.mark.root
JOB = Path(__file__).with_name("torchrun_job.py")
DDP_JOB = Path(__file__).with_name("torchrun_ddp_job.py")


def torchrun() -> list[str]:
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


@pytest.mark.slow
def test_torchrun_one_node_per_namespace(tmp_path: Path) -> None:
    """torchrun on each host, its node rank and rendezvous from the run's environment, gloo across the switch."""
    name = unique_name("tr")
    out = tmp_path / "out"
    r = dlcp("testbed", "run", "--out", str(out), "--timeout", "400", str(star(tmp_path, name, hosts=2)), "--",
             *torchrun(), str(JOB), timeout=450)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (folder,) = out.iterdir()
    ranks = [json.loads((folder / f"rank{i}.json").read_text()) for i in (0, 1)]
    # Two nodes (torchrun's GROUP_RANK), one process each; the all-reduce of 1 + 2 arrived on both.
    assert [(d["rank"], d["group_rank"], d["world"], d["sum"]) for d in ranks] == [(0, 0, 2, 3.0), (1, 1, 2, 3.0)]
    assert {d["master"] for d in ranks} == {"10.0.0.1"}
    ports = json.loads((folder / "switches.json").read_text())["delta"]["switches"]["s1"]
    assert ports["1"]["rx"] > 10 and ports["2"]["rx"] > 10, ports  # the rendezvous and gloo crossed the switch
    assert namespaces_of(name) == []


@pytest.mark.slow
def test_torchrun_flag_trains_a_ddp_script_on_three_nodes_to_identical_replicas(tmp_path: Path) -> None:
    """--torchrun: one torchrun node per host (c10d rendezvous on h1), a user's DDP script with DLCP's hook;
    every node trains every iteration, and their parameters end bit-identical (ring mode: reliable all-gather)."""
    name = unique_name("tn")
    out = tmp_path / "out"
    iterations = 30
    r = dlcp("testbed", "run", "--torchrun", "--out", str(out), "--timeout", "400", str(star(tmp_path, name)), "--",
             str(DDP_JOB), str(iterations), timeout=450)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (folder,) = out.iterdir()
    ranks = [json.loads((folder / f"rank{i}.json").read_text()) for i in range(3)]
    # Each host ran a node of its own: torchrun's node rank, process rank and world; DLCP bound the host's address.
    assert [(d["group_rank"], d["rank"], d["world"]) for d in ranks] == [(i, i, 3) for i in range(3)]
    assert [d["dlcp_host"] for d in ranks] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert all(d["iterations"] == iterations and d["layers"] == 4 for d in ranks), ranks
    # DLCP carried the gradients: 30 iterations of 11,018 float32 gradients each, on every rank.
    assert all(d["bytes_sent"] == iterations * 11_018 * 4 for d in ranks), ranks
    assert len({d["checksum"] for d in ranks}) == 1, ranks
    run = json.loads((folder / "run.json").read_text())
    assert run["torchrun"] is True
    ports = json.loads((folder / "switches.json").read_text())["delta"]["switches"]["s1"]
    assert all(ports[p]["rx"] > iterations for p in ("1", "2", "3")), ports
    assert namespaces_of(name) == []


def test_torchrun_flag_refuses_a_missing_script(tmp_path: Path) -> None:
    name = unique_name("tm")
    r = dlcp("testbed", "run", "--torchrun", str(star(tmp_path, name)), "--", str(tmp_path / "nope.py"))
    assert r.returncode == 2 and "with --torchrun, COMMAND is the training script" in r.stderr, r.stderr
    assert namespaces_of(name) == []


def test_a_worker_dying_mid_run_ends_it_and_teardown_removes_everything(tmp_path: Path) -> None:
    name = unique_name("d")
    code = "import os, sys, time; time.sleep(1); sys.exit(5) if os.environ['RANK'] == '2' else time.sleep(120)"
    r = dlcp("testbed", "run", "--out", str(tmp_path / "out"), str(star(tmp_path, name, hosts=3)), "--",
             sys.executable, "-c", code, timeout=150)  # fmt: skip
    assert r.returncode == 1
    assert "rank 2 on host h3 exited with status 5" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert namespaces_of(name) == [] and not (layout.STATE_ROOT / name).exists()
