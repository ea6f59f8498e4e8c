"""``dlcp sim fidelity``: the testbed's fabric and job as a simulator scenario, the compute fit, the verdict.

The testbed half needs root and minutes (docs/simulations.md gives a run); here the
simulator half runs from a testbed.json made up in the test.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import pytest
from sim_support import needs_ns3

from dlcp.apps.bench import fidelity
from dlcp.apps.bench.testbed import SCENARIOS
from dlcp.apps.train.trainer import param_count
from dlcp.simulations import runner, scenario, workloads


def doc(samples: int = 2048, gloo: float = 0.020, dlcp: float = 0.030, **changes: Any) -> dict[str, Any]:
    sc = asdict(SCENARIOS["incast"][0]) | changes
    row = lambda p50: {"iter_p50_s": p50, "iter_p99_s": 2 * p50, "iter_times_s": []}  # noqa: E731
    return {
        "scenario": sc,
        "train": asdict(fidelity.train_config(samples)),
        "runs": {fidelity.GLOO.name: [row(gloo)], fidelity.PS_ON.name: [row(dlcp)]},
    }


def test_sim_table_is_the_testbed_fabric_and_job() -> None:
    d = doc()
    ps = scenario.from_table(fidelity.sim_table(d, fidelity.PS_ON.name, 1000.0))
    ring = scenario.from_table(fidelity.sim_table(d, fidelity.GLOO.name, 1000.0))
    t = ps.topology
    # h1 (the server, behind the 200 Mbit/s port) is the last of 4 hosts; hosts get 1 Gbit/s from the switch.
    assert (t.kind, t.hosts, t.bottleneck_host, t.bottleneck_gbps, t.host_down_gbps) == ("star", 4, 3, 0.2, 1.0)
    assert ps.switch.buffer_packets == 262144 // (8192 + 40 + 8 + 20 + 14)  # 256 KiB in frames
    assert (ps.baseline, ring.baseline) == ("dlcp", "tcp")
    assert (ps.retransmissions, ps.host_pacing) == ("paced", "share")  # the host stack's rules, paced as on the testbed
    assert ps.probe_timeout_us == 10_000 and ring.tcp.min_rto_us == 200_000
    feat = ps.features
    job = workloads.generate(ps.workload, 4, 10e9, feat, ps.dlcp.policy, 1).jobs[0]
    assert (job.workers, job.servers, job.iterations) == ((1, 2), (3,), 2048 // 96)
    assert job.layer_bytes == (4 * param_count("mlp"),)  # one DDP bucket of float32 gradients
    assert ps.rate == scenario.RateSpec()  # the core's rule, as the host's (no overrides)
    assert math.isclose(sum(job.forward_s) + sum(job.backward_s), 1e-3)
    rjob = workloads.generate(ring.workload, 4, 10e9, ring.features, ring.dlcp.policy, 1).jobs[0]
    assert rjob.workers == (1, 2, 3)
    incast = next(w for w in ps.workload if w.type == "incast")
    assert (incast.receiver, incast.senders, incast.transport) == (3, 3, "tcp")
    # Background: load 0.2 of the 200 Mbit/s bottleneck over the whole fabric = 40 Mbit/s in all.
    bg = next(w for w in ps.workload if w.type == "background")
    assert math.isclose(bg.load * 4 * t.host_gbps * 1e9, 0.2 * 200e6)
    assert not any(w.type == "background" for w in fidelity_workloads(doc(traffic_load=0.0)))


def fidelity_workloads(d: dict[str, Any]) -> tuple[scenario.Workload, ...]:
    return scenario.from_table(fidelity.sim_table(d, fidelity.PS_ON.name, 0.0)).workload


def test_compare_fits_the_compute_on_gloo_and_judges_the_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in simulator: an iteration is compute plus a fixed network time per way.
    net = {fidelity.GLOO.name: 0.004, fidelity.PS_ON.name: 0.009}
    calls = []

    def fake(d: dict[str, Any], compute_us: float, seeds: int) -> dict[str, dict[str, Any]]:
        calls.append(compute_us)
        return {
            w: {"iter_p50_s": compute_us * 1e-6 + n, "iter_p99_s": compute_us * 1e-6 + 2 * n} for w, n in net.items()
        }

    monkeypatch.setattr(fidelity, "_simulate", fake)
    r = fidelity.compare(doc(gloo=0.020, dlcp=0.025))
    assert math.isclose(r["compute_us"], 16_000)  # 20 ms - 4 ms of network
    assert calls == [0.0, pytest.approx(16_000)]  # exact at once: no correction step
    p50 = r["ratios"]["p50"]
    assert math.isclose(p50["testbed"], 1.25) and math.isclose(p50["sim"], 25 / 20)
    assert p50["within_goal"]
    net[fidelity.PS_ON.name] = 0.016  # the simulator now says DLCP takes 32 ms: 1.6 against 1.25
    assert not fidelity.compare(doc(gloo=0.020, dlcp=0.025))["ratios"]["p50"]["within_goal"]
    assert "NOT within" in fidelity.report(fidelity.compare(doc(gloo=0.020, dlcp=0.025)))


@needs_ns3
def test_both_ways_simulate_on_the_testbed_fabric() -> None:
    d = doc(samples=4 * 96, traffic_load=0.0)  # 4 iterations, the incast only
    out = fidelity._simulate(d, 2000.0, 1)
    for way in fidelity.WAYS:
        assert out[way.name]["iterations"] == 3  # the first is left out
        # At least the compute, and the 200 KB gradient through the 200 Mbit/s port (8 ms) at least once.
        assert out[way.name]["iter_p50_s"] > 2e-3 + 8e-3, (way.name, out[way.name])


@needs_ns3
def test_a_shaped_port_toward_a_host_only() -> None:
    size = 1_000_000
    base = {
        "name": "shaped", "stop_s": 0.5,
        "topology": {"kind": "star", "hosts": 2, "host_gbps": 1.0, "bottleneck_host": 1, "bottleneck_gbps": 0.2,
                     "delay_us": 1.0},
        "dlcp": {"policy": {}},
    }  # fmt: skip
    to_shaped = runner.run(base | {"workload": [{"type": "incast", "senders": 1, "receiver": 1, "bytes": size}]})
    from_shaped = runner.run(base | {"workload": [{"type": "incast", "senders": 1, "receiver": 0, "bytes": size}]})
    slow, fast = (r["flows"]["gradient"]["fct_max_s"] for r in (to_shaped, from_shaped))
    assert 1.0 <= slow / (size * 8 / 0.2e9) < 1.15, slow  # at 200 Mbit/s
    assert 1.0 <= fast / (size * 8 / 1e9) < 1.15, fast  # the shaped host still sends at 1 Gbit/s


def test_a_bottleneck_needs_a_star_host() -> None:
    bad = {"topology": {"kind": "star", "hosts": 4, "bottleneck_host": 4, "bottleneck_gbps": 0.2},
           "workload": [{"type": "incast", "senders": 1, "bytes": 1000}]}  # fmt: skip
    with pytest.raises(scenario.ScenarioError, match=r"topology\.bottleneck_host"):
        scenario.from_table(bad)
    bad["topology"] |= {"bottleneck_host": 1, "bottleneck_gbps": 0.0}
    with pytest.raises(scenario.ScenarioError, match=r"topology\.bottleneck_gbps"):
        scenario.from_table(bad)


def leaf_spine_doc(gloo: float = 0.030, dlcp: float = 0.024) -> dict[str, Any]:
    row = lambda p50: {"iter_p50_s": p50, "iter_p99_s": 2 * p50, "iter_times_s": []}  # noqa: E731
    ways = fidelity.FABRICS["leaf-spine"]
    return {
        "fabric": "leaf-spine",
        "scenario": asdict(SCENARIOS["leaf-spine"][0]),
        "train": asdict(fidelity.train_config(2048, "leaf-spine")),
        "runs": {ways[0].name: [row(gloo)], ways[1].name: [row(dlcp)]},
    }


def test_the_leaf_spine_fabric_as_a_scenario() -> None:
    d = leaf_spine_doc()
    tcp, dlcp = fidelity.ways_of(d)
    assert (tcp.backend, tcp.mode, dlcp.backend, dlcp.mode) == ("gloo", "ring", "dlcp", "ring")
    ring = scenario.from_table(fidelity.sim_table(d, dlcp.name, 1000.0))
    gloo = scenario.from_table(fidelity.sim_table(d, tcp.name, 1000.0))
    t = ring.topology
    # 2 leaves of 2 hosts at 1 Gbit/s, 200 Mbit/s between leaves and spines, 256 KiB buffers in frames.
    assert (t.kind, t.leaves, t.spines, t.hosts_per_leaf, t.host_gbps, t.fabric_gbps) == (
        "leaf_spine", 2, 2, 2, 1.0, 0.2,
    )  # fmt: skip
    assert ring.switch.buffer_packets == 262144 // (8192 + 40 + 8 + 20 + 14)
    assert (ring.baseline, gloo.baseline, ring.host_pacing) == ("dlcp", "tcp", "share")
    for s in (ring, gloo):
        assert len(s.workload) == 1  # the training job alone: the bench's leaf-spine has no other traffic
        job = workloads.generate(s.workload, 4, 1e9, s.features, s.dlcp.policy, 1).jobs[0]
        # The testbed's rank order h1, h3, h2, h4 (hosts 0-1 on the first leaf): every ring step crosses the spines.
        assert job.workers == (0, 2, 1, 3) and job.servers == ()
        assert job.iterations == 2048 // (4 * 32)


def test_compare_on_the_leaf_spine_fits_on_gloos_all_reduce(monkeypatch: pytest.MonkeyPatch) -> None:
    tcp, dlcp = fidelity.FABRICS["leaf-spine"]
    net = {tcp.name: 0.010, dlcp.name: 0.006}

    def fake(d: dict[str, Any], compute_us: float, seeds: int) -> dict[str, dict[str, Any]]:
        assert d["fabric"] == "leaf-spine"
        return {
            w: {"iter_p50_s": n + compute_us * 1e-6, "iter_p99_s": 2 * (n + compute_us * 1e-6)} for w, n in net.items()
        }

    monkeypatch.setattr(fidelity, "_simulate", fake)
    r = fidelity.compare(leaf_spine_doc(gloo=0.030, dlcp=0.026))
    assert r["ways"] == [tcp.name, dlcp.name] and r["fabric"] == "leaf-spine"
    assert r["compute_us"] == pytest.approx(20_000)  # gloo's 30 ms less its 10 ms on the network
    assert r["ratios"]["p50"]["sim"] == pytest.approx(26 / 30)
    assert r["ratios"]["p50"]["within_goal"]
    assert "fabric leaf-spine" in fidelity.report(r) and dlcp.name in fidelity.report(r)
    net[dlcp.name] = 0.016  # the simulator now says DLCP takes 36 ms: 1.2 against 0.87
    assert not fidelity.compare(leaf_spine_doc(gloo=0.030, dlcp=0.026))["ratios"]["p50"]["within_goal"]


def test_an_unknown_fabric_is_refused(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="fabric: 'fat-tree' is not one of incast, leaf-spine"):
        fidelity.run_testbed(tmp_path, 2048, 1, fabric="fat-tree")


def test_a_job_on_named_hosts() -> None:
    base = {"topology": {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 2}}
    ring = {"type": "ring", "layer_bytes": [1000], "workers": 4, "hosts": [0, 2, 1, 3]}
    s = scenario.from_table(base | {"workload": [ring]})
    assert workloads.generate(s.workload, 4, 1e9, s.features, s.dlcp.policy, 1).jobs[0].workers == (0, 2, 1, 3)
    ps = {"type": "ps", "layer_bytes": [1000], "workers": 2, "servers": 1, "hosts": [3, 0, 1]}
    job = workloads.generate(scenario.from_table(base | {"workload": [ps]}).workload, 4, 1e9, s.features,
                             s.dlcp.policy, 1).jobs[0]  # fmt: skip
    assert (job.workers, job.servers) == ((3, 0), (1,))
    for hosts in ([0, 2, 1], [0, 2, 2, 3], [0, 2, 1, 4]):
        with pytest.raises(scenario.ScenarioError, match=r"workload\[0\]\.hosts: .* must be 4 distinct hosts"):
            scenario.from_table(base | {"workload": [ring | {"hosts": hosts}]})
