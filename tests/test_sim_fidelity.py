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
