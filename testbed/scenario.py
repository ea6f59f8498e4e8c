"""Comparisons on one fabric: the same training job run several ways, each under the same background traffic.

A :class:`Scenario` is a star (or a 2-leaf, 2-spine fabric) with a bottleneck toward the parameter server and
one job per way of running (the fabric file's jobs: DLCP with the switch
features on, and off, per mode), written as a fabric file into the results
folder. :func:`run_scenario` brings it up once, and for each :class:`Way` starts
the background traffic (``dlcp testbed traffic``, same seed every time), runs
the training on the job's hosts, and gathers the summary (:func:`dlcp.host.train.summarize`)
with the switches' drops and trims during the run.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlcp.host.train import TrainConfig, summarize
from dlcp.testbed import spec as spec_mod
from dlcp.testbed.jobs import run_job, train_command
from dlcp.testbed.lifecycle import Testbed, python_argv
from dlcp.testbed.state import ProcessRecord, start_ticks
from dlcp.testbed.tomlout import dumps

log = logging.getLogger(__name__)

FEATURES_ON = {"ps": 1, "ring": 3}
FEATURES_OFF = {"ps": 2, "ring": 4}
"""Job ids of the scenario's fabric: each mode with the switch features on and off."""


@dataclass(frozen=True)
class Way:
    """One run: ``backend`` gloo or dlcp; for dlcp, the mode and whether the switches treat it as DLCP."""

    name: str
    backend: str
    mode: str
    features: bool = True

    @property
    def job_id(self) -> int:
        return (FEATURES_ON if self.features else FEATURES_OFF)[self.mode]

    @property
    def key(self) -> str:
        """Its short name (``dlcp demo --ways``): ``gloo``, ``ps``, ``ps-off``, ``ring``, ``ring-off``."""
        return "gloo" if self.backend == "gloo" else f"{self.mode}{'' if self.features else '-off'}"


WAYS = (
    Way("gloo/TCP", "gloo", "ring"),
    Way("DLCP ps, switch off", "dlcp", "ps", features=False),
    Way("DLCP ps", "dlcp", "ps"),
    Way("DLCP ring, switch off", "dlcp", "ring", features=False),
    Way("DLCP ring", "dlcp", "ring"),
)


TOPOLOGIES = ("star", "leaf-spine")


@dataclass(frozen=True)
class Scenario:
    name: str = "demo"
    workers: int = 3
    """Training hosts h1..hN (h1 is the parameter server); one more host, h(N+1), only sends background traffic."""
    topology: str = "star"
    """``star``: one switch. ``leaf-spine``: 2 leaves and 2 spines, the hosts split over the leaves in order (h1
    first), so the parameter server's traffic from the other leaf is sprayed over both spines."""
    switch: str = "dlcp"
    """``testbed.switch``: ``dlcp`` or ``bmv2``."""
    host_rate: str = "1gbit"
    bottleneck_rate: str = "200mbit"
    bottleneck_buffer: str = "256KiB"
    bottleneck_loss: float = 0.0
    traffic_load: float = 0.2
    incast: int = 3
    cdf: str = "web-search"
    seed: int = 0
    loss_bound: float = 0.01
    """Loss bound of the DLCP jobs' gradient messages (PS pushes, ring reduce-scatter), in their host policy."""

    @property
    def bottleneck_link(self) -> str:
        return "h1-s1" if self.topology == "star" else "h1-leaf1"

    def topology_doc(self) -> dict[str, Any]:
        link = {"rate": self.host_rate, "buffer": "1MiB", "mtu": 9000}
        if self.topology == "star":
            return {"kind": "star", "hosts": self.workers + 1, "host_link": link}
        if self.topology == "leaf-spine":
            per_leaf = -(-(self.workers + 1) // 2)
            return {"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": per_leaf, "host_link": link,
                    "fabric_link": link}  # fmt: skip
        raise ValueError(f"topology {self.topology!r}: must be one of {', '.join(TOPOLOGIES)}")

    def fabric_doc(self) -> dict[str, Any]:
        hosts = [f"h{i}" for i in range(1, self.workers + 1)]
        bottleneck: dict[str, Any] = {
            "name": self.bottleneck_link, "rate": self.bottleneck_rate, "buffer": self.bottleneck_buffer,
        }  # fmt: skip
        if self.bottleneck_loss:
            bottleneck["loss"] = self.bottleneck_loss
        jobs = []
        for mode in ("ps", "ring"):
            for features in (True, False):
                job_id = (FEATURES_ON if features else FEATURES_OFF)[mode]
                job: dict[str, Any] = {"id": job_id, "mode": mode, "workers": hosts}
                if mode == "ps":
                    job["servers"] = ["h1"]
                job["transport"] = {"port": 19110 + job_id}
                bound = {"loss_bound": self.loss_bound}
                job["policy"] = {"push": bound, "reduce_scatter": bound}
                job["switch"] = {"features": features}
                jobs.append(job)
        return {
            "testbed": {
                "name": self.name,
                "switch": self.switch,
                "traffic": {"load": self.traffic_load, "incast": self.incast, "cdf": self.cdf, "seed": self.seed},
            },
            "topology": self.topology_doc(),
            "link": [bottleneck],
            "job": jobs,
        }  # fmt: skip

    def write(self, folder: Path) -> Path:
        path = folder / f"{self.name}.toml"
        path.write_text(dumps(self.fabric_doc()))
        return path


@dataclass
class WayResult:
    way: Way
    summary: dict[str, Any]
    switches: dict[str, Any]
    traffic: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.way.name, "backend": self.way.backend, "mode": self.way.mode, "features": self.way.features,
            "seconds": self.seconds, "switches": self.switches, "traffic": self.traffic, **self.summary,
        }  # fmt: skip


def _start_traffic(tb: Testbed, duration_s: float, folder: Path) -> subprocess.Popen[bytes]:
    argv = python_argv("testbed", "traffic", "--json", "--duration", f"{duration_s:g}", str(tb.spec.path))
    out = open(folder / "traffic.json", "wb")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, start_new_session=True)
    out.close()
    # Recorded with the fabric, so that `down` ends it too if this process is killed.
    state = tb.store.load(tb.name)
    if state is not None:
        state.processes.append(ProcessRecord("traffic", "traffic", proc.pid, start_ticks(proc.pid) or 0, ""))
        tb.store.save(state)
    return proc


def run_way(
    tb: Testbed, way: Way, cfg: TrainConfig, folder: Path, traffic_s: float, timeout_s: float = 600.0
) -> WayResult:
    folder.mkdir(parents=True, exist_ok=True)
    extra = [
        "--model", cfg.model, "--epochs", str(cfg.epochs), "--samples", str(cfg.train_samples),
        "--batch-size", str(cfg.batch_size), "--lr", str(cfg.lr), "--seed", str(cfg.seed),
        "--eval-every", str(cfg.eval_every), "--loss-bound", str(cfg.loss_bound),
    ]  # fmt: skip
    traffic = _start_traffic(tb, traffic_s, folder) if traffic_s > 0 else None
    start = time.monotonic()
    try:
        result = run_job(tb, train_command(way.backend, way.mode, extra), folder, job_id=way.job_id,
                         timeout_s=timeout_s)  # fmt: skip
    finally:
        if traffic is not None:
            traffic.terminate()
            traffic.wait()
    summary = summarize(cfg, result.outputs())
    summary.pop("config", None)
    traffic_doc: dict[str, Any] = {}
    try:
        traffic_doc = json.loads((folder / "traffic.json").read_text() or "{}")
    except (OSError, ValueError):
        pass
    out = WayResult(way, summary, result.switches, traffic_doc, time.monotonic() - start)
    (folder / "result.json").write_text(json.dumps(out.as_dict(), indent=1))
    return out


def run_scenario(
    scenario: Scenario,
    ways: tuple[Way, ...],
    cfg: TrainConfig,
    folder: Path,
    *,
    traffic_s: float,
    progress: Callable[[str], None] | None = None,
) -> list[WayResult]:
    """Up the scenario's fabric, run every way under the same background traffic, down."""
    say = progress or (lambda text: log.info("%s", text))
    path = scenario.write(folder)
    spec = spec_mod.load(path)
    results = []
    with Testbed(spec) as tb:
        say(f"fabric {spec.name} up: {len(spec.fabric.hosts)} hosts, bottleneck {scenario.bottleneck_rate} to h1")
        for i, way in enumerate(ways, 1):
            say(f"[{i}/{len(ways)}] {way.name}: training under background traffic ...")
            r = run_way(tb, way, cfg, folder / f"{i}-{way.backend}-{way.mode}-{'on' if way.features else 'off'}",
                        traffic_s)  # fmt: skip
            say(
                f"[{i}/{len(ways)}] {way.name}: iteration p50 {r.summary['iter_p50_s'] * 1e3:.1f} ms, "
                f"p99 {r.summary['iter_p99_s'] * 1e3:.1f} ms, accuracy {r.summary['test_accuracy']:.3f} "
                f"({r.seconds:.0f} s)"
            )
            results.append(r)
    return results
