"""Fabrics in namespaces (as root): reachability, spraying, jobs, and that nothing of ours is left after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyroute2 import IPRoute
from testbed_support import dlcp, leaf_spine, namespaces_of, star, unique_name

from dlcp.apps.train import node
from dlcp.testbed import counters, layout, probe, spec
from dlcp.testbed.jobs import WorkerFailed, new_folder, run_job
from dlcp.testbed.lifecycle import Testbed as Fabric
from dlcp.testbed.lifecycle import processes_in

# timing: a switch short of CPU drops frames; a dying worker ends the run within 30 s.
pytestmark = [pytest.mark.root, pytest.mark.timing]


def root_links() -> set[str]:
    with IPRoute() as ipr:
        return {link.get("ifname") for link in ipr.get_links()}


def assert_gone(tb: Fabric, switch_pids: list[int]) -> None:
    assert namespaces_of(tb.name) == []
    for pid in switch_pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert not tb.dir.exists()


@pytest.fixture(scope="module")
def star_tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    tmp = tmp_path_factory.mktemp("star")
    before = root_links()
    tb = Fabric(spec.load(star(tmp, unique_name("s"), hosts=3)))
    with tb:
        assert len(namespaces_of(tb.name)) == 4
        pids = [p.pid for p in tb.state.processes]
        yield tb
    assert_gone(tb, pids)
    assert root_links() - before == set()  # no interface of ours reached the root namespace


def test_ping_and_udp_through_the_star(star_tb: Fabric) -> None:
    hosts = star_tb.spec.fabric.hosts
    h1 = layout.host_ns(star_tb.name, "h1")
    for other in ("h2", "h3"):
        assert probe.ping(h1, hosts[other].ip, count=2).ok
    assert probe.ping(h1, "10.0.0.250", count=1, timeout_s=0.3).received == 0  # no such host: no answer
    assert probe.udp(h1, layout.host_ns(star_tb.name, "h3"), hosts["h3"].ip, count=100, size=8000) == 100


def test_second_up_says_it_is_up(star_tb: Fabric) -> None:
    r = dlcp("testbed", "up", str(star_tb.spec.path))
    assert r.returncode == 1
    assert "already up" in r.stderr
    assert len(namespaces_of(star_tb.name)) == 4


def test_status_lists_the_fabric(star_tb: Fabric) -> None:
    r = dlcp("testbed", "status")
    assert r.returncode == 0 and f"{star_tb.name}: up" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["gloo", "dlcp"])
def test_training_through_the_star(star_tb: Fabric, backend: str, tmp_path: Path) -> None:
    cmd = node.argv(backend, "ring", ["--epochs", "1", "--samples", "1536", "--model", "mlp"])
    result = run_job(star_tb, cmd, new_folder(tmp_path, backend), timeout_s=300)
    assert result.ok
    assert [o["rank"] for o in result.outputs()] == [0, 1, 2]
    assert all(len(o["times"]) == 1536 // (3 * 64) for o in result.outputs())
    # The gradients crossed the switch: every host port received and sent frames during the run.
    ports = result.switches["switches"]["s1"]
    assert all(ports[str(p)]["rx"] > 20 and ports[str(p)]["sent"] > 20 for p in (1, 2, 3)), ports
    assert (result.folder / "switches.json").exists() and (result.folder / "rank2.json").exists()


def test_a_dying_worker_ends_the_run(star_tb: Fabric, tmp_path: Path) -> None:
    code = "import os, sys, time; time.sleep(0.5); sys.exit(3) if os.environ['RANK'] == '1' else time.sleep(60)"
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match="rank 1 on host h2 exited with status 3"):
        run_job(star_tb, [sys.executable, "-c", code], tmp_path / "die", timeout_s=60)
    assert time.monotonic() - start < 30
    hosts = [layout.host_ns(star_tb.name, h) for h in ("h1", "h2", "h3")]
    assert processes_in(hosts) == []  # the other ranks were stopped


def test_leaf_spine_reachability_and_spraying(tmp_path: Path) -> None:
    tb = Fabric(spec.load(leaf_spine(tmp_path, unique_name("ls"))))
    with tb:
        hosts = tb.spec.fabric.hosts
        for a in hosts:
            for b in hosts:
                if a != b:
                    assert probe.ping(layout.host_ns(tb.name, a), hosts[b].ip, count=1).ok, (a, b)
        src, dst = layout.host_ns(tb.name, "h1"), layout.host_ns(tb.name, "h2")

        def spine_sent() -> list[int]:
            docs = counters.fetch_all(tb.store.load(tb.name))  # type: ignore[arg-type]
            return [sum(t["sent"] for t in counters.port_totals(docs[s]).values()) for s in ("spine1", "spine2")]

        before = spine_sent()
        assert probe.udp(src, dst, hosts["h2"].ip, count=200, size=1000) == 200
        mid = spine_sent()
        plain = [m - b for m, b in zip(mid, before, strict=True)]
        assert sorted(plain) == [0, 200], plain  # one flow, one path (5-tuple hashing)
        # A switch process short of CPU (a busy 2-core machine) drops some: 320 of 400 once arrived.
        arrived = probe.dlcp_data(src, dst, hosts["h2"].ip, count=400)
        sprayed = [a - m for a, m in zip(spine_sent(), mid, strict=True)]
        assert arrived >= 300 and sum(sprayed) >= arrived, (arrived, sprayed)
        assert min(sprayed) >= 0.25 * sum(sprayed), sprayed  # per packet, over both uplinks
        pids = [p.pid for p in tb.state.processes]
    assert_gone(tb, pids)


@pytest.mark.slow
def test_down_after_the_run_is_killed(tmp_path: Path) -> None:
    name = unique_name("k")
    path = star(tmp_path, name, hosts=2)
    run = subprocess.Popen(
        [sys.executable, "-P", "-m", "dlcp.cli.main", "testbed", "run", "--out", str(tmp_path / "out"), str(path),
         "--", sys.executable, "-c", "import time; time.sleep(120)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    hosts = [layout.host_ns(name, h) for h in ("h1", "h2")]
    deadline = time.monotonic() + 90
    while len(processes_in(hosts)) < 2 and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)
    workers = processes_in(hosts)
    assert len(workers) == 2, run.communicate(timeout=5)
    run.send_signal(signal.SIGKILL)
    run.wait()
    # Killed: nothing was cleaned up yet...
    assert len(namespaces_of(name)) == 3 and processes_in(hosts) == workers
    r = dlcp("testbed", "down", name)
    assert r.returncode == 0, r.stderr
    # ... and down removed it all: workers, switch, namespaces (with their veths), state.
    assert namespaces_of(name) == []
    assert all(not Path(f"/proc/{p}").exists() for p in workers)
    assert not (layout.STATE_ROOT / name).exists()
    assert dlcp("testbed", "down", name).stdout.strip().endswith("nothing of it was left")
    assert os.geteuid() == 0


def test_background_traffic_and_incast(star_tb: Fabric) -> None:
    from dlcp.testbed import traffic
    from dlcp.testbed.spec import TrafficSettings

    state = star_tb.store.load(star_tb.name)
    assert state is not None
    before = counters.summary(counters.fetch_all(state))
    report = traffic.run(star_tb.spec, TrafficSettings(load=0.3, incast=2, duration_s=2.0, flows=50, seed=1))
    after = counters.summary(counters.fetch_all(state))
    d = counters.delta(after, before)["switches"]["s1"]
    assert report.flows_started > 0 and report.flows_done > 0 and report.errors == 0
    assert report.incast_bursts >= 10
    # The incast went to h1 (no job has servers here: the first host): its port sent at least what arrived intact.
    incast_frames = report.incast_bytes // traffic.UDP_PAYLOAD
    assert d["1"]["sent"] + d["1"]["dropped"] >= incast_frames
    assert processes_in([layout.host_ns(star_tb.name, h) for h in ("h1", "h2", "h3")]) == []
    # Smaller bursts (the bench's at BMv2 rates): whole datagrams of the bytes asked.
    small = traffic.run(star_tb.spec, TrafficSettings(load=0.0, incast=1, incast_bytes=15_000, duration_s=0.5, seed=1))
    assert small.incast_bursts >= 5 and small.incast_bytes == small.incast_bursts * 10 * traffic.UDP_PAYLOAD
