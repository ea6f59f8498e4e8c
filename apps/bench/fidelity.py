"""``dlcp sim fidelity``: one small training job on the testbed and in the simulator, side by side.

The testbed part runs the bench's ``incast`` fabric (:mod:`dlcp.apps.bench.testbed`: a star, the
parameter server h1 behind a shaped bottleneck, web-search background and UDP incast toward h1)
with two ways: gloo over TCP (ring) and full DLCP (PS). It needs root and takes a few minutes;
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

from dlcp.apps.testbed.scenario import Way
from dlcp.apps.train.trainer import TrainConfig, param_count
from dlcp.protocol import HEADER_SIZE
from dlcp.units import parse_rate, parse_size

GLOO = Way("gloo/TCP ps", "gloo", "ps")
"""A parameter server over gloo's point-to-point TCP: the same traffic pattern as DLCP's PS, which the simulator's
TCP job reproduces (its name keys the saved testbed runs)."""
PS_ON = Way("DLCP ps", "dlcp", "ps")
WAYS = (GLOO, PS_ON)
SIM_WAYS = {GLOO.name: ("tcp", "ring"), PS_ON.name: ("dlcp", "ps")}
"""Testbed way -> (simulator baseline, job type)."""
STOP_SLACK_S = 10.0
"""Simulated time after the traffic ends for the job to finish (idle time costs nothing to simulate)."""
FIT_TOLERANCE = 0.05
"""How close the fitted compute must bring the simulated gloo median to the testbed's before one more try."""
GOAL = 0.20
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


def train_config(samples: int) -> TrainConfig:
    """The job both sides run: the testbed bench's (3 ranks, ``mlp``, batch 32), one epoch, no evaluation stops."""
    return TrainConfig(workers=3, model="mlp", epochs=1, train_samples=samples, batch_size=32, eval_every=0)


def run_testbed(
    folder: Path, samples: int, repeat: int, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Run gloo and full DLCP on the bench's ``incast`` fabric, taking turns ``repeat`` times (root)."""
    from dlcp.apps.bench.testbed import SCENARIOS
    from dlcp.apps.testbed.scenario import run_way
    from dlcp.testbed import spec as spec_mod
    from dlcp.testbed.lifecycle import Testbed

    say = progress or (lambda text: None)
    cfg = train_config(samples)
    scenario = SCENARIOS["incast"][0]
    folder.mkdir(parents=True, exist_ok=True)
    spec = spec_mod.load(scenario.write(folder))
    runs: dict[str, list[dict[str, Any]]] = {w.name: [] for w in WAYS}
    with Testbed(spec) as tb:
        for r in range(repeat):
            for w in WAYS:
                say(f"testbed {r + 1}/{repeat}: {w.name} ...")
                res = run_way(tb, w, cfg, folder / f"{r}-{w.backend}-{w.mode}", traffic_s=300.0)
                row = res.as_dict()
                runs[w.name].append({k: row[k] for k in ("iter_p50_s", "iter_p99_s", "iter_times_s", "loss_fraction")})
                say(f"testbed {r + 1}/{repeat}: {w.name}: p50 {row['iter_p50_s'] * 1e3:.1f} ms, "
                    f"p99 {row['iter_p99_s'] * 1e3:.1f} ms")  # fmt: skip
    doc = {"scenario": asdict(scenario), "train": asdict(cfg), "runs": runs}
    (folder / "testbed.json").write_text(json.dumps(doc, indent=1))
    return doc


def _host_probe_timeouts() -> tuple[float, float]:
    """The host stack's first and largest probe timeouts (s), from ``Endpoint``'s own defaults."""
    from dlcp.host.endpoint import Endpoint

    params = inspect.signature(Endpoint.__init__).parameters
    return float(params["initial_rto_s"].default), float(params["max_rto_s"].default)


def sim_table(doc: dict[str, Any], way: str, compute_us: float, seed: int = 1) -> dict[str, Any]:
    """The simulator scenario (a TOML table) of the testbed run ``doc`` for one of :data:`WAYS`.

    Hosts: testbed h1 (server, behind the bottleneck) is the simulator's last host, so that a ring
    over hosts 1..N and a PS job with workers 1..N-1 and its server on host N line up with the
    testbed's ranks; host 0 is the host that only sends background traffic.
    """
    from dlcp.testbed.traffic import INCAST_BYTES, INCAST_PERIOD_S, MAX_FLOW_BYTES

    sc, train = doc["scenario"], doc["train"]
    baseline, job_type = SIM_WAYS[way]
    workers = int(train["workers"])
    hosts = workers + 1
    server = hosts - 1
    host_bps = parse_rate(sc["host_rate"])
    bottleneck_bps = parse_rate(sc["bottleneck_rate"])
    payload = train.get("payload_bytes", 8192)
    frame = payload + HEADER_SIZE + FRAME_OVERHEAD
    iterations = int(train["epochs"]) * (int(train["train_samples"]) // (workers * int(train["batch_size"])))
    # Traffic for as long as every iteration takes at a tenth of the bottleneck (the job ends earlier);
    # the run may go on idle for a few TCP timeouts more (a lost SYN costs ns-3 3 s).
    grad_bytes = 4 * param_count(train["model"])  # float32; one DDP bucket (the mlp is far under 25 MB)
    traffic_s = max(1.0, iterations * (compute_us * 1e-6 + 3 * grad_bytes * 8 / (bottleneck_bps / 10)))
    stop_s = traffic_s + STOP_SLACK_S
    rto, max_rto = _host_probe_timeouts()
    job: dict[str, Any] = {
        "type": job_type, "layer_bytes": [grad_bytes], "iterations": iterations, "batch": int(train["batch_size"]),
        "compute_us": compute_us, "first_host": 1,
        "workers": workers if job_type == "ring" else workers - 1, "tag": "job",
    }  # fmt: skip
    if job_type == "ps":
        job["servers"] = 1
    loads: list[dict[str, Any]] = [job]
    if sc["traffic_load"] > 0:
        # The testbed's flows put `load` x the slowest link on the whole fabric; the simulator's, per host.
        per_host = sc["traffic_load"] * min(bottleneck_bps, host_bps) / (SEND_GBPS * 1e9) / hosts
        loads.append({"type": "background", "distribution": "websearch", "load": per_host,
                      "duration_us": traffic_s * 1e6, "max_flow_bytes": MAX_FLOW_BYTES})  # fmt: skip
    if sc["incast"] > 0:
        loads.append({"type": "incast", "senders": int(sc["incast"]), "receiver": server, "bytes": INCAST_BYTES,
                      "rounds": max(1, int(traffic_s / INCAST_PERIOD_S)), "gap_us": INCAST_PERIOD_S * 1e6,
                      "transport": "tcp", "tag": "incast"})  # fmt: skip
    buffer_packets = max(1, parse_size(sc["bottleneck_buffer"]) // frame)
    return {
        "name": f"fidelity-{baseline}",
        "seed": seed,
        "baseline": baseline,
        "stop_s": stop_s,
        "host_pacing": "share",  # the controller paces the testbed's hosts at their share (the rule's numbers)
        "probe_timeout_us": rto * 1e6,
        "max_probe_timeout_us": max_rto * 1e6,
        "topology": {
            "kind": "star",
            "hosts": hosts,
            "host_gbps": SEND_GBPS,
            "host_down_gbps": host_bps / 1e9,
            "bottleneck_host": server,
            "bottleneck_gbps": bottleneck_bps / 1e9,
            "delay_us": LINK_DELAY_US,
            "mtu": 9000,
        },
        # The software switch marks no ECN: every TCP (gloo's, the background's) is loss-driven.
        "switch": {"buffer_packets": buffer_packets, "ecn_threshold_packets": 0},
        "tcp": {"variant": "newreno", "min_rto_us": LINUX_MIN_RTO_US},
        "dlcp": {"transport": {"payload_bytes": payload}, "policy": {"push": {"loss_bound": train["loss_bound"]}}},
        "workload": loads,
    }


def _percentiles(times: list[float]) -> tuple[float, float]:
    import numpy as np

    x = np.asarray([t for t in times if not math.isnan(t)])
    if not x.size:
        return math.nan, math.nan
    return float(np.percentile(x, 50)), float(np.percentile(x, 99))


def _simulate(doc: dict[str, Any], compute_us: float, seeds: int) -> dict[str, dict[str, Any]]:
    from dlcp.simulations import runner

    tables = [sim_table(doc, w.name, compute_us, seed) for w in WAYS for seed in range(1, seeds + 1)]
    results = runner.sweep(tables, parallel=2)
    out: dict[str, dict[str, Any]] = {}
    for i, w in enumerate(WAYS):
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
    runs = {w: [_testbed_row(r) for r in rows] for w, rows in doc["runs"].items()}
    tb = {w.name: {k: statistics.median(r[k] for r in runs[w.name]) for k in ("iter_p50_s", "iter_p99_s")}
          for w in WAYS}  # fmt: skip
    want = tb[GLOO.name]["iter_p50_s"]
    network_only = _simulate(doc, 0.0, seeds)
    compute_us = max(0.0, (want - network_only[GLOO.name]["iter_p50_s"]) * 1e6)
    sim = _simulate(doc, compute_us, seeds)
    # An iteration is not quite compute plus network (the background and incast meet it at other
    # moments): one correction step.
    miss = want - sim[GLOO.name]["iter_p50_s"]
    if abs(miss) > FIT_TOLERANCE * want:
        compute_us = max(0.0, compute_us + miss * 1e6)
        sim = _simulate(doc, compute_us, seeds)
    ratios = {}
    for q in ("p50", "p99"):
        key = f"iter_{q}_s"
        per_repeat = [f[key] / g[key] for f, g in zip(runs[PS_ON.name], runs[GLOO.name], strict=True)]
        t = statistics.median(per_repeat)
        s = sim[PS_ON.name][key] / sim[GLOO.name][key]
        ratios[q] = {
            "testbed": t, "testbed_min": min(per_repeat), "testbed_max": max(per_repeat), "sim": s,
            "sim_over_testbed": s / t, "within_goal": abs(s / t - 1) <= GOAL,
        }  # fmt: skip
    return {"compute_us": compute_us, "testbed": tb, "sim": sim, "sim_network_only": network_only, "ratios": ratios}


def report(result: dict[str, Any]) -> str:
    lines = [f"host compute per iteration, fitted on gloo's testbed median: {result['compute_us'] / 1e3:.2f} ms", ""]
    lines.append(f"{'way':<12}{'testbed p50':>13}{'sim p50':>10}{'testbed p99':>13}{'sim p99':>10}  (ms)")
    for w in WAYS:
        t, s = result["testbed"][w.name], result["sim"][w.name]
        lines.append(f"{w.name:<12}{t['iter_p50_s'] * 1e3:>13.1f}{s['iter_p50_s'] * 1e3:>10.1f}"
                     f"{t['iter_p99_s'] * 1e3:>13.1f}{s['iter_p99_s'] * 1e3:>10.1f}")  # fmt: skip
    lines.append("")
    for q, r in result["ratios"].items():
        ok = "within" if r["within_goal"] else "NOT within"
        lines.append(
            f"DLCP/TCP {q}: testbed {r['testbed']:.2f} ({r['testbed_min']:.2f}..{r['testbed_max']:.2f}), "
            f"sim {r['sim']:.2f}: sim/testbed {r['sim_over_testbed']:.2f}, {ok} {GOAL:.0%}"
        )
    return "\n".join(lines)
