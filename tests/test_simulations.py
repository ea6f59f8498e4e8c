"""Packet simulations at tiny scale (16 hosts, a few seconds each), one process per run.

Each test states the property it checks; tolerances are derived in the test.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from sim_support import needs_ns3

from dlcp.simulations import runner, scenario, simulate

pytestmark = [needs_ns3]

LEAF_SPINE = {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 8, "delay_us": 1.0, "mtu": 9000}


def table(**kw: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"name": "t", "seed": 1, "stop_s": 0.05, "topology": dict(LEAF_SPINE)}
    t.update(copy.deepcopy(kw))
    return t


INCAST = {"type": "incast", "senders": 8, "bytes": 400_000, "rounds": 2, "gap_us": 500}


def test_conservation_sent_equals_received_plus_dropped() -> None:
    # DLCP only (no TCP), a harsh incast with selective drops and overflow; the run ends idle.
    # Senders at the line (paced at their share, the default, this incast would lose nothing).
    r = runner.run(table(switch={"buffer_packets": 64, "drop_thresholds": [8]}, workload=[INCAST], host_pacing="line"))
    c = r["counters"]
    sent = c["dlcp_data_sent"] + c["dlcp_control_sent"]
    received = c["dlcp_data_received"] + c["dlcp_trimmed_received"] + c["dlcp_control_received"]
    assert c["qdisc_dropped"] > 0, "the scenario must drop something for the check to mean anything"
    assert sent == received + c["qdisc_dropped"]
    assert c["qdisc_received"] == c["qdisc_sent"] + c["qdisc_dropped"], "nothing left queued"
    assert r["flows"]["gradient"]["completed"] == 16


def test_lone_flow_at_line_rate_plus_path_latency() -> None:
    size = 4_000_000
    r = runner.run(
        table(
            workload=[{"type": "incast", "senders": 1, "receiver": 15, "bytes": size}],
            dlcp={"policy": {}},
            host_pacing="line",  # paced at its share the flow would run at 95% of the port (HEADROOM)
        )
    )
    f = r["flows"]["gradient"]
    assert f["completed"] == 1
    # Ideal: every packet's wire bytes at 100 Gbit/s, then the last packet's way over the
    # remaining 3 links (store and forward: its serialisation plus 1 us per link), plus the
    # first link's propagation. Payload 8192 B; per packet 40 DLCP + 8 UDP + 20 IPv4 + 2 PPP.
    rate = 100e9 / 8
    pkts = -(-size // 8192)
    wire = size + pkts * 70
    last = size - (pkts - 1) * 8192  # the last packet is short
    ideal = wire / rate + 4 * 1e-6 + 3 * (last + 70) / rate
    # Tolerance: the pacer spaces packets by exact wire bytes, so what remains is ns-3 rounding
    # each transmission time to whole nanoseconds (0.1% either way covers 489 packets) and
    # nothing else; 1% plus one round trip (4 links each way) above would catch a slower pacer,
    # a lost packet or a wasted round trip.
    assert ideal * 0.999 <= f["fct_max_s"] <= ideal * 1.01 + 8e-6, (f["fct_max_s"], ideal)


def test_priorities_and_selective_drops_as_configured() -> None:
    front = {"type": "incast", "senders": 6, "receiver": 15, "bytes": 300_000, "layer": 0, "num_layers": 6}
    back = dict(front, layer=5, tag="back")
    # A 5% bound covers 1.85 of a message's 37 packets (at 1%, none: every packet would be protected).
    base = table(
        switch={"buffer_packets": 1000, "drop_thresholds": [4]},
        dlcp={"policy": {"push": {"loss_bound": 0.05}}},
        workload=[front | {"tag": "front"}, back],
        host_pacing="line",  # a congested class needs senders above their share
    )
    r = runner.run(base)
    pc = r["counters"]["per_class"]
    # Layer 0 -> class 6, layer 5 -> class 1 (6 data classes; 7 kept for control).
    assert pc["forwarded"][6] > 0 and pc["forwarded"][1] > 0
    assert r["flows"]["front"]["fct_max_s"] < r["flows"]["back"]["fct_p50_s"], "the front layer goes first"
    assert pc["dropped"][1] > 0, "eligible packets of the congested class are dropped above the threshold"
    assert pc["dropped"][7] == 0 and pc["overflow"] == [0] * 8, "control never dropped; the buffer never overflows"
    trim = runner.run(base | {"switch": {"buffer_packets": 1000, "drop_thresholds": [4], "congestion_action": "trim"}})
    tc = trim["counters"]
    assert sum(tc["per_class"]["trimmed"]) > 0 and sum(tc["per_class"]["dropped"]) == 0
    assert tc["dlcp_trimmed_received"] == sum(tc["per_class"]["trimmed"]), "every trimmed header reaches its receiver"


@pytest.mark.slow
def test_same_seed_same_run() -> None:
    t = table(
        workload=[INCAST, {"type": "background", "load": 0.3, "duration_us": 2000, "max_flow_bytes": 500_000}],
    )
    a, b = runner.run(t), runner.run(t)
    c = runner.run(t | {"seed": 2})
    for r in (a, b, c):
        r.pop("perf")
    assert a == b
    assert a["flows"] != c["flows"], "another seed draws other background flows"


@pytest.mark.slow
def test_dlcp_tail_below_dctcp_on_small_incast() -> None:
    t = table(
        seed=3,
        stop_s=0.1,
        switch={"buffer_packets": 512},
        workload=[
            {"type": "incast", "senders": 6, "bytes": 262_144, "rounds": 5, "gap_us": 1000},
            {"type": "background", "load": 0.5, "duration_us": 5000, "max_flow_bytes": 1_000_000},
        ],
    )
    dlcp = runner.run(t)["flows"]["gradient"]
    dctcp = runner.run(t | {"baseline": "dctcp"})["flows"]["gradient"]
    assert dlcp["completed"] == dctcp["completed"] == 30
    assert dlcp["fct_p99_s"] < dctcp["fct_p99_s"], (dlcp["fct_p99_s"], dctcp["fct_p99_s"])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"baseline": "ecmp_only"}, "baseline"),
        ({"topology": {"host_gbps": -1.0}}, "topology.host_gbps"),
        ({"workload": [{"type": "ps", "model": "alexnet", "workers": 4}]}, "workload[0].model"),
        ({"workload": [{"type": "background", "load": -0.2, "duration_us": 10}]}, "workload[0].load"),
        ({"topology": {"kind": "star", "hosts": 1}}, "topology"),
        ({"switch": {"buffer": 3}}, "switch.buffer"),
    ],
)
def test_bad_scenarios_are_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    t = table(workload=[INCAST]) | change
    with pytest.raises(scenario.ScenarioError, match=field.replace("[", r"\[").replace("]", r"\]")):
        runner.run(t)


def test_memory_estimate_refuses_before_running() -> None:
    s = scenario.from_table(table(workload=[INCAST]))
    with pytest.raises(simulate.MemoryRefused, match="MB by estimate"):
        simulate.simulate(s, refuse_over_mb=10)


@pytest.mark.slow
def test_sweep_on_a_dask_cluster_matches_local_processes() -> None:
    distributed = pytest.importorskip("distributed", reason="Dask's distributed (the sim extra) not installed")
    tables = [table(workload=[INCAST]), table(seed=2, workload=[INCAST])]
    local = runner.sweep(tables, parallel=2)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as c:
        done: list[tuple[int, int]] = []
        remote = runner.sweep(tables, address=c.scheduler_address, progress=lambda i, n: done.append((i, n)))
    assert done[-1] == (2, 2)
    for a, b in zip(local, remote, strict=True):
        a.pop("perf")
        b.pop("perf")
    assert local == remote, "the same scenarios give the same runs on the cluster"
    assert local[0]["flows"] != local[1]["flows"]


def test_a_sweep_keeps_the_points_that_finish_reports_a_failed_one_and_resumes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The simulation itself is replaced: what is checked is the sweep's bookkeeping (no ns-3 needed for that,
    # but it lives beside the other sweep tests).
    calls: list[int] = []
    broken = {2}

    def fake_run(t: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        calls.append(t["seed"])
        if t["seed"] in broken:
            raise RuntimeError("simulation 't' failed: out of luck")
        return {"seed": t["seed"]}

    monkeypatch.setattr(runner, "run", fake_run)
    tables = [table(seed=s, workload=[INCAST]) for s in (1, 2, 3)]
    first = runner.sweep(tables, parallel=2, points_dir=tmp_path)
    assert first[0] == {"seed": 1} and first[2] == {"seed": 3}, "the others complete and are kept"
    assert "out of luck" in first[1][runner.FAILED] and first[1]["table"]["seed"] == 2, "reported with its table"
    assert len(list(tmp_path.glob("*.json"))) == 2, "only finished points are saved"
    calls.clear()
    broken.clear()
    again = runner.sweep(tables, parallel=2, points_dir=tmp_path)
    assert calls == [2], "a resumed sweep runs only the point not saved"
    assert again == [{"seed": 1}, {"seed": 2}, {"seed": 3}]
    changed = runner.sweep([table(seed=1, stop_s=0.06, workload=[INCAST])], points_dir=tmp_path)
    assert changed == [{"seed": 1}] and calls == [2, 1], "a point whose table changed runs again"
