"""``dlcp sim fidelity``: one small training job on the testbed and in the simulator, side by side.

The testbed part runs one of the bench's fabrics (:mod:`dlcp.apps.bench.testbed`) with two ways (:data:`FABRICS`):
``incast`` (a star, the parameter server h1 behind a shaped bottleneck, web-search background and UDP incast
toward h1; a parameter server over gloo's TCP against full DLCP's PS) or ``leaf-spine`` (2 leaves, 2 spines,
200 Mbit/s between them, 4 ranks alternating between the leaves; gloo's all-reduce, DDP's default, against full
DLCP's ring). It needs root and takes a few minutes;
its result is a JSON file (``testbed.json``) that the simulator part reads, so the comparison
can be re-run, or re-simulated after a change to the simulator, without the testbed.

The simulator part builds the same fabric and traffic as a scenario (:func:`sim_table`): the
same star and rates, the switch-to-h1 port shaped, buffers in packets of the bottleneck's bytes,
the testbed model's layers (``mlp``, one DDP bucket), web-search flows at the same share of the
bottleneck, the incast as 128 kB bursts every 50 ms (over TCP: the simulator has no raw UDP
sender), Linux's 200 ms minimum TCP timeout, the host stack's probe timeouts and its transport
rules (paced retransmissions; the core's rate rule on each first pass, every DLCP sender paced at
its share of the bottleneck as the controller paces it). The hosts' compute is the one
number the simulator cannot know (on a shared 2-core machine it is mostly Python and CPU
contention): it is fitted so that the simulated gloo median equals the testbed's, and DLCP's
times, both tails and the DLCP/TCP ratios are then predictions.
"""

from __future__ import annotations

import inspect
import json
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dlcp.apps.testbed.scenario import GLOO_ALLREDUCE, RING, Way
from dlcp.apps.train.trainer import TrainConfig, param_count
from dlcp.protocol import HEADER_SIZE
from dlcp.units import parse_rate, parse_size

GLOO = Way("gloo/TCP ps", "gloo", "ps")
"""A parameter server over gloo's point-to-point TCP: the same traffic pattern as DLCP's PS, which the simulator's
TCP job reproduces (its name keys the saved testbed runs)."""
PS_ON = Way("DLCP ps", "dlcp", "ps")
WAYS = (GLOO, PS_ON)
"""The ``incast`` fabric's ways: TCP first (the compute is fitted on it), then DLCP."""
FABRICS: dict[str, tuple[Way, Way]] = {"incast": WAYS, "leaf-spine": (GLOO_ALLREDUCE, RING)}
"""The bench's fabric (:data:`dlcp.apps.bench.testbed.SCENARIOS`) -> its two ways, TCP first."""
SIM_WAYS = {
    GLOO.name: ("tcp", "ring"), PS_ON.name: ("dlcp", "ps"), GLOO_ALLREDUCE.name: ("tcp", "ring"),
    RING.name: ("dlcp", "ring"),
}  # fmt: skip
"""Testbed way -> (simulator baseline, job type)."""
STOP_SLACK_S = 10.0
"""Simulated time after the traffic ends for the job to finish (idle time costs nothing to simulate)."""
FIT_TOLERANCE = 0.05
"""How close the fitted compute must bring the simulated gloo median to the testbed's before one more try."""
GOAL = 0.15
"""The simulated DLCP/TCP ratio should lie within this fraction of the testbed's (the fidelity goal)."""
LINUX_MIN_RTO_US = 200_000.0
"""Linux's minimum TCP retransmission timeout (TCP_RTO_MIN, 200 ms): what gloo's connections get."""
FRAME_OVERHEAD = 8 + 20 + 14
"""UDP, IPv4 and Ethernet headers of a DLCP frame on the testbed's links."""
LINK_DELAY_US = 20.0
"""One way per link: veth and the software switch's forwarding (a 2-hop round trip of about 80 us)."""
SEND_GBPS = 10.0
"""How fast a testbed host puts packets into the switch: its veth is not shaped (the switch shapes its
egress), so about what the software switch forwards with 9000-byte frames here (docs/results.md)."""


def train_config(samples: int, fabric: str = "incast") -> TrainConfig:
    """The job both sides run: the testbed bench fabric's ranks (3 on ``incast``, 4 on ``leaf-spine``), ``mlp``,
    batch 32, one epoch, no evaluation stops."""
    from dlcp.apps.bench.testbed import SCENARIOS

    workers = SCENARIOS[fabric][0].workers
    return TrainConfig(workers=workers, model="mlp", epochs=1, train_samples=samples, batch_size=32, eval_every=0)


def ways_of(doc: dict[str, Any]) -> tuple[Way, Way]:
    """The two ways of a testbed run ``doc`` (TCP first), from its fabric (an ``incast`` run when it names none)."""
    return FABRICS[doc.get("fabric", "incast")]


def run_testbed(
    folder: Path, samples: int, repeat: int, progress: Callable[[str], None] | None = None, fabric: str = "incast"
) -> dict[str, Any]:
    """Run TCP and full DLCP (:data:`FABRICS`) on the bench's ``fabric``, taking turns ``repeat`` times (root)."""
    from dlcp.apps.bench.testbed import SCENARIOS
    from dlcp.apps.testbed.scenario import run_way
    from dlcp.testbed import spec as spec_mod
    from dlcp.testbed.lifecycle import Testbed

    if fabric not in FABRICS:
        raise ValueError(f"fabric: {fabric!r} is not one of {', '.join(FABRICS)}")
    say = progress or (lambda text: None)
    cfg = train_config(samples, fabric)
    scenario = SCENARIOS[fabric][0]
    ways = FABRICS[fabric]
    folder.mkdir(parents=True, exist_ok=True)
    spec = spec_mod.load(scenario.write(folder))
    runs: dict[str, list[dict[str, Any]]] = {w.name: [] for w in ways}
    with Testbed(spec) as tb:
        for r in range(repeat):
            for w in ways:
                say(f"testbed {r + 1}/{repeat}: {w.name} ...")
                res = run_way(tb, w, cfg, folder / f"{r}-{w.backend}-{w.mode}", traffic_s=300.0)
                row = res.as_dict()
                runs[w.name].append({k: row[k] for k in ("iter_p50_s", "iter_p99_s", "iter_times_s", "loss_fraction")})
                say(f"testbed {r + 1}/{repeat}: {w.name}: p50 {row['iter_p50_s'] * 1e3:.1f} ms, "
                    f"p99 {row['iter_p99_s'] * 1e3:.1f} ms")  # fmt: skip
    doc = {"fabric": fabric, "scenario": asdict(scenario), "train": asdict(cfg), "runs": runs}
    (folder / "testbed.json").write_text(json.dumps(doc, indent=1))
    return doc


def _host_probe_timeouts() -> tuple[float, float]:
    """The host stack's first and largest probe timeouts (s), from ``Endpoint``'s own defaults."""
    from dlcp.host.endpoint import Endpoint

    params = inspect.signature(Endpoint.__init__).parameters
    return float(params["initial_rto_s"].default), float(params["max_rto_s"].default)


def sim_table(doc: dict[str, Any], way: str, compute_us: float, seed: int = 1) -> dict[str, Any]:
    """The simulator scenario (a TOML table) of the testbed run ``doc`` for one of its two ways (:func:`ways_of`):
    its fabric (:func:`_star` or :func:`_leaf_spine`), the job, and the testbed hosts' transport rules."""
    sc, train = doc["scenario"], doc["train"]
    baseline, job_type = SIM_WAYS[way]
    workers = int(train["workers"])
    payload = train.get("payload_bytes", 8192)
    iterations = int(train["epochs"]) * (int(train["train_samples"]) // (workers * int(train["batch_size"])))
    grad_bytes = 4 * param_count(train["model"])  # float32; one DDP bucket (the mlp is far under 25 MB)
    job: dict[str, Any] = {
        "type": job_type, "layer_bytes": [grad_bytes], "iterations": iterations, "batch": int(train["batch_size"]),
        "compute_us": compute_us, "tag": "job",
    }  # fmt: skip
    fabric = _leaf_spine if doc.get("fabric", "incast") == "leaf-spine" else _star

    # Traffic for as long as every iteration takes at a tenth of the bottleneck (the job ends earlier);
    # the run may go on idle for a few TCP timeouts more.
    def traffic_s(bottleneck_bps: float) -> float:
        return max(1.0, iterations * (compute_us * 1e-6 + 3 * grad_bytes * 8 / (bottleneck_bps / 10)))

    topology, buffer_bytes, loads, stop_s = fabric(sc, job, workers, traffic_s)
    rto, max_rto = _host_probe_timeouts()
    return {
        "name": f"fidelity-{doc.get('fabric', 'incast')}-{baseline}",
        "seed": seed,
        "baseline": baseline,
        "stop_s": stop_s + STOP_SLACK_S,
        "host_pacing": "share",  # the controller paces the testbed's hosts at their share (the rule's numbers)
        "probe_timeout_us": rto * 1e6,
        "max_probe_timeout_us": max_rto * 1e6,
        "topology": topology | {"delay_us": LINK_DELAY_US, "mtu": 9000},
        # The software switch marks no ECN: every TCP (gloo's, the background's) is loss-driven.
        "switch": {
            "buffer_packets": max(1, buffer_bytes // (payload + HEADER_SIZE + FRAME_OVERHEAD)),
            "ecn_threshold_packets": 0,
        },
        "tcp": {"variant": "newreno", "min_rto_us": LINUX_MIN_RTO_US},
        "dlcp": {"transport": {"payload_bytes": payload}, "policy": {"push": {"loss_bound": train["loss_bound"]}}},
        "workload": loads,
    }


_Fabric = tuple[dict[str, Any], int, list[dict[str, Any]], float]
"""A fabric's topology table, its buffer bytes, the workloads (the job first) and how long its traffic lasts."""


def _star(sc: dict[str, Any], job: dict[str, Any], workers: int, traffic_s: Callable[[float], float]) -> _Fabric:
    """``incast``: testbed h1 (server, behind the bottleneck) is the simulator's last host, so that a ring
    over hosts 1..N and a PS job with workers 1..N-1 and its server on host N line up with the
    testbed's ranks; host 0 is the host that only sends background traffic."""
    from dlcp.testbed.traffic import INCAST_BYTES, INCAST_PERIOD_S, MAX_FLOW_BYTES

    hosts = workers + 1
    server = hosts - 1
    host_bps = parse_rate(sc["host_rate"])
    bottleneck_bps = parse_rate(sc["bottleneck_rate"])
    seconds = traffic_s(bottleneck_bps)
    job |= {"first_host": 1, "workers": workers if job["type"] == "ring" else workers - 1}
    if job["type"] == "ps":
        job["servers"] = 1
    loads: list[dict[str, Any]] = [job]
    if sc["traffic_load"] > 0:
        # The testbed's flows put `load` x the slowest link on the whole fabric; the simulator's, per host.
        per_host = sc["traffic_load"] * min(bottleneck_bps, host_bps) / (SEND_GBPS * 1e9) / hosts
        loads.append({"type": "background", "distribution": "websearch", "load": per_host,
                      "duration_us": seconds * 1e6, "max_flow_bytes": MAX_FLOW_BYTES})  # fmt: skip
    if sc["incast"] > 0:
        loads.append({"type": "incast", "senders": int(sc["incast"]), "receiver": server, "bytes": INCAST_BYTES,
                      "rounds": max(1, int(seconds / INCAST_PERIOD_S)), "gap_us": INCAST_PERIOD_S * 1e6,
                      "transport": "tcp", "tag": "incast"})  # fmt: skip
    topology = {
        "kind": "star", "hosts": hosts, "host_gbps": SEND_GBPS, "host_down_gbps": host_bps / 1e9,
        "bottleneck_host": server, "bottleneck_gbps": bottleneck_bps / 1e9,
    }  # fmt: skip
    return topology, parse_size(sc["bottleneck_buffer"]), loads, seconds


def _leaf_spine(sc: dict[str, Any], job: dict[str, Any], workers: int, traffic_s: Callable[[float], float]) -> _Fabric:
    """``leaf-spine``: 2 leaves of ``per_leaf`` hosts (testbed h1, h2, ... on the first leaf, as the testbed splits
    them: simulator host i is testbed h(i+1)), 2 spines; host links at the hosts' rate, leaf-spine links at the
    fabric's, every buffer the fabric's bytes; the ring's ranks in the testbed's order (h1, h3, h2, h4: every step
    crosses the spines). TCP flows are hashed per flow over the spines and DLCP's packets sprayed, as on the
    testbed; no other traffic, as there."""
    from dlcp.apps.testbed.scenario import Scenario

    tb = Scenario(**sc)
    index = {h: i for i, h in enumerate(tb.hosts)}
    job |= {"workers": workers, "hosts": [index[h] for h in tb.worker_hosts]}
    fabric_bps = parse_rate(sc["fabric_rate"] or sc["host_rate"])
    topology = {
        "kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": tb.per_leaf,
        "host_gbps": parse_rate(sc["host_rate"]) / 1e9, "fabric_gbps": fabric_bps / 1e9,
    }  # fmt: skip
    return topology, parse_size(sc["fabric_buffer"]), [job], traffic_s(fabric_bps)


def _percentiles(times: list[float]) -> tuple[float, float]:
    import numpy as np

    x = np.asarray([t for t in times if not math.isnan(t)])
    if not x.size:
        return math.nan, math.nan
    return float(np.percentile(x, 50)), float(np.percentile(x, 99))


def _simulate(doc: dict[str, Any], compute_us: float, seeds: int) -> dict[str, dict[str, Any]]:
    from dlcp.simulations import runner

    ways = ways_of(doc)
    tables = [sim_table(doc, w.name, compute_us, seed) for w in ways for seed in range(1, seeds + 1)]
    results = runner.sweep(tables, parallel=2)
    out: dict[str, dict[str, Any]] = {}
    for i, w in enumerate(ways):
        # The first iteration opens the TCP connections (gloo opens them before training) and fills the caches.
        times = [t for r in results[i * seeds : (i + 1) * seeds] for t in r["jobs"][0]["iteration_s"][1:]]
        p50, p99 = _percentiles(times)
        done = sum(not math.isnan(t) for t in times)
        out[w.name] = {"iter_p50_s": p50, "iter_p99_s": p99, "iterations": done, "unfinished": len(times) - done}
    return out


def _testbed_row(run: dict[str, Any]) -> dict[str, float]:
    """p50 and p99 of one testbed run's iterations after the first (as the simulator's), else its summary's."""
    times = run.get("iter_times_s") or []
    if len(times) > 2:
        p50, p99 = _percentiles(times[1:])
        return {"iter_p50_s": p50, "iter_p99_s": p99}
    return {"iter_p50_s": run["iter_p50_s"], "iter_p99_s": run["iter_p99_s"]}


def compare(doc: dict[str, Any], seeds: int = 2) -> dict[str, Any]:
    """Simulate the testbed run ``doc``: fit the compute on gloo's median, then report both sides and the ratios."""
    tcp, dlcp = ways_of(doc)
    runs = {w: [_testbed_row(r) for r in rows] for w, rows in doc["runs"].items()}
    tb = {w.name: {k: statistics.median(r[k] for r in runs[w.name]) for k in ("iter_p50_s", "iter_p99_s")}
          for w in (tcp, dlcp)}  # fmt: skip
    want = tb[tcp.name]["iter_p50_s"]
    network_only = _simulate(doc, 0.0, seeds)
    compute_us = max(0.0, (want - network_only[tcp.name]["iter_p50_s"]) * 1e6)
    sim = _simulate(doc, compute_us, seeds)
    # An iteration is not quite compute plus network (the background and incast meet it at other
    # moments): one correction step.
    miss = want - sim[tcp.name]["iter_p50_s"]
    if abs(miss) > FIT_TOLERANCE * want:
        compute_us = max(0.0, compute_us + miss * 1e6)
        sim = _simulate(doc, compute_us, seeds)
    ratios = {}
    for q in ("p50", "p99"):
        key = f"iter_{q}_s"
        per_repeat = [f[key] / g[key] for f, g in zip(runs[dlcp.name], runs[tcp.name], strict=True)]
        t = statistics.median(per_repeat)
        s = sim[dlcp.name][key] / sim[tcp.name][key]
        ratios[q] = {
            "testbed": t, "testbed_min": min(per_repeat), "testbed_max": max(per_repeat), "sim": s,
            "sim_over_testbed": s / t, "within_goal": abs(s / t - 1) <= GOAL,
        }  # fmt: skip
    return {
        "fabric": doc.get("fabric", "incast"), "ways": [tcp.name, dlcp.name], "compute_us": compute_us,
        "testbed": tb, "sim": sim, "sim_network_only": network_only, "ratios": ratios,
    }  # fmt: skip


def report(result: dict[str, Any]) -> str:
    ways = result.get("ways", [w.name for w in WAYS])
    width = max(12, *(len(w) + 2 for w in ways))
    lines = [f"fabric {result.get('fabric', 'incast')}; host compute per iteration, fitted on the testbed's "
             f"{ways[0]} median: {result['compute_us'] / 1e3:.2f} ms", ""]  # fmt: skip
    lines.append(f"{'way':<{width}}{'testbed p50':>13}{'sim p50':>10}{'testbed p99':>13}{'sim p99':>10}  (ms)")
    for w in ways:
        t, s = result["testbed"][w], result["sim"][w]
        lines.append(f"{w:<{width}}{t['iter_p50_s'] * 1e3:>13.1f}{s['iter_p50_s'] * 1e3:>10.1f}"
                     f"{t['iter_p99_s'] * 1e3:>13.1f}{s['iter_p99_s'] * 1e3:>10.1f}")  # fmt: skip
    lines.append("")
    for q, r in result["ratios"].items():
        ok = "within" if r["within_goal"] else "NOT within"
        lines.append(
            f"DLCP/TCP {q}: testbed {r['testbed']:.2f} ({r['testbed_min']:.2f}..{r['testbed_max']:.2f}), "
            f"sim {r['sim']:.2f}: sim/testbed {r['sim_over_testbed']:.2f}, {ok} {GOAL:.0%}"
        )
    return "\n".join(lines)
