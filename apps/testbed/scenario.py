"""Comparisons on one fabric: the same training job run several ways, each under the same background traffic.

A :class:`Scenario` is a star (or a 2-leaf, 2-spine fabric) with a bottleneck toward the parameter server and
one job per way of running (the fabric file's jobs: DLCP with the switch
features on, and off, per mode), written as a fabric file into the results
folder. :func:`run_scenario` brings it up once, and the ways take turns (``repeat`` times): for each
:class:`Way` it starts the background traffic (``dlcp testbed traffic``, same seed every time), runs
the training on the job's hosts, and gathers the summary (:func:`dlcp.apps.train.trainer.summarize`)
with the switches' drops and trims and the machine's CPU during the run.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlcp import flow_sizes
from dlcp.apps.train import node
from dlcp.apps.train.trainer import TrainConfig, summarize
from dlcp.protocol import UDP_PORT
from dlcp.testbed import spec as spec_mod
from dlcp.testbed import traffic as traffic_gen
from dlcp.testbed.jobs import WorkerFailed, cpu_snapshot, run_job
from dlcp.testbed.lifecycle import Testbed
from dlcp.testbed.spec import INCAST_BYTES
from dlcp.testbed.state import ProcessRecord, start_ticks
from dlcp.testbed.tomlout import dumps

log = logging.getLogger(__name__)

FEATURES_ON = {"ps": 1, "ring": 3}
FEATURES_OFF = {"ps": 2, "ring": 4}
"""Job ids of the scenario's fabric: each mode with the switch features on and off."""
ONE_CLASS = {"ps": 5, "ring": 6}
"""Job ids of each mode with the switch features on and the layer priorities off (:attr:`Scenario.one_class_jobs`):
the job's policy has one data class (``policy.num_classes = 2``, the top one kept for control), so every bucket's
data takes the same queue of its kind's band; selective drop, trimming, the bands and the control queue stay."""
ONE_CLASS_POLICY = {"num_classes": 2}


@dataclass(frozen=True)
class Way:
    """One run: ``backend`` gloo or dlcp; for dlcp, the mode and whether the switches treat it as DLCP.

    gloo's ``ring`` is DistributedDataParallel with gloo's all-reduce (DDP's default, the baseline); gloo's
    ``ps`` is a parameter server over gloo's point-to-point TCP (an extra row, not a baseline).
    """

    name: str
    backend: str
    mode: str
    features: bool = True
    priorities: bool = True
    """False: the switch features on, one priority class for every layer (:data:`ONE_CLASS`)."""

    @property
    def job_id(self) -> int:
        if not self.priorities:
            return ONE_CLASS[self.mode]
        return (FEATURES_ON if self.features else FEATURES_OFF)[self.mode]

    @property
    def key(self) -> str:
        """Its short name (``dlcp demo --ways``): ``gloo``, ``gloo-ps``, ``ring``, ``ps``, ``ring-off``, ``ps-off``;
        ``ring-1class``, ``ps-1class`` (layer priorities off)."""
        if self.backend == "gloo":
            return "gloo" if self.mode == "ring" else "gloo-ps"
        if not self.priorities:
            return f"{self.mode}-1class"
        return f"{self.mode}{'' if self.features else '-off'}"


GLOO_ALLREDUCE = Way("gloo all-reduce (DDP default)", "gloo", "ring")
RING = Way("DLCP ring", "dlcp", "ring")
PS = Way("DLCP ps", "dlcp", "ps")
RING_OFF = Way("DLCP ring, switch off", "dlcp", "ring", features=False)
PS_OFF = Way("DLCP ps, switch off", "dlcp", "ps", features=False)
GLOO_PS = Way("PS over gloo TCP (extra)", "gloo", "ps")
WAYS = (GLOO_ALLREDUCE, RING, PS, RING_OFF, PS_OFF, GLOO_PS)
"""Every way of every fabric, baseline first; :attr:`Way.key` names them."""
RING_1CLASS = Way("DLCP ring, one priority class", "dlcp", "ring", priorities=False)
PS_1CLASS = Way("DLCP ps, one priority class", "dlcp", "ps", priorities=False)
"""The ways with the layer priorities off: only on a fabric with :attr:`Scenario.one_class_jobs`."""


TOPOLOGIES = ("star", "leaf-spine")


@dataclass(frozen=True)
class Scenario:
    name: str = "demo"
    workers: int = 3
    """Training hosts (the first is the parameter server); with ``background_host``, one more host only sends
    background traffic."""
    topology: str = "star"
    """``star``: one switch. ``leaf-spine``: 2 leaves and 2 spines, the hosts split over the leaves in order (h1
    first), so traffic between the leaves crosses the spines (DLCP's sprayed over both)."""
    switch: str = "dlcp"
    """``testbed.switch``: ``dlcp`` or ``bmv2``."""
    host_rate: str = "1gbit"
    bottleneck_rate: str | None = "200mbit"
    """The rate of the link to the parameter server (h1); None: that link is a host link like the others."""
    bottleneck_buffer: str = "256KiB"
    bottleneck_loss: float = 0.0
    fabric_rate: str | None = None
    """leaf-spine: the rate of the leaf-spine links (None: the hosts' rate)."""
    fabric_buffer: str = "1MiB"
    """leaf-spine: the egress buffer of the leaf-spine links."""
    alternate_leaves: bool = False
    """leaf-spine: the workers, in rank order, alternate between the leaves (h1, then the first host of leaf 2,
    then h2, ...), so that consecutive ranks of a ring sit on different leaves and the ring's data crosses the
    spines, as many flows one way as the other."""
    background_host: bool = True
    traffic_load: float = 0.2
    incast: int = 3
    incast_bytes: int = INCAST_BYTES
    """What each incast sender sends per burst (every 50 ms)."""
    cdf: str = flow_sizes.WEB_SEARCH
    seed: int = 0
    loss_bound: float = 0.01
    """Loss bound of the DLCP jobs' gradient messages (PS pushes, ring reduce-scatter), in their host policy."""
    model: str | None = None
    """The model this scenario trains (``dlcp train --model``); None: the one the bench is given."""
    one_class_jobs: bool = False
    """Also a job per mode with the layer priorities off (:data:`ONE_CLASS`), for :data:`RING_1CLASS` and
    :data:`PS_1CLASS`."""

    @property
    def hosts(self) -> list[str]:
        return [f"h{i}" for i in range(1, self.workers + int(self.background_host) + 1)]

    @property
    def per_leaf(self) -> int:
        return -(-len(self.hosts) // 2)

    @property
    def worker_hosts(self) -> list[str]:
        """The job's hosts in rank order (the first is the parameter server in PS mode)."""
        if self.topology == "leaf-spine" and self.alternate_leaves:
            leaves = self.hosts[: self.per_leaf], self.hosts[self.per_leaf :]
            order = [h for pair in zip(*leaves, strict=False) for h in pair]
            order += [h for h in self.hosts if h not in order]
            return order[: self.workers]
        return self.hosts[: self.workers]

    @property
    def has_traffic(self) -> bool:
        return bool(self.traffic_load or self.incast)

    @property
    def bottleneck_link(self) -> str:
        return "h1-s1" if self.topology == "star" else "h1-leaf1"

    def topology_doc(self) -> dict[str, Any]:
        link = {"rate": self.host_rate, "buffer": "1MiB", "mtu": 9000}
        if self.topology == "star":
            return {"kind": "star", "hosts": len(self.hosts), "host_link": link}
        if self.topology == "leaf-spine":
            fabric = {"rate": self.fabric_rate or self.host_rate, "buffer": self.fabric_buffer, "mtu": 9000}
            return {"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": self.per_leaf,
                    "host_link": link, "fabric_link": fabric}  # fmt: skip
        raise ValueError(f"topology {self.topology!r}: must be one of {', '.join(TOPOLOGIES)}")

    def fabric_doc(self) -> dict[str, Any]:
        hosts = self.worker_hosts
        links: list[dict[str, Any]] = []
        if self.bottleneck_rate or self.bottleneck_loss:
            bottleneck: dict[str, Any] = {"name": self.bottleneck_link, "buffer": self.bottleneck_buffer}
            if self.bottleneck_rate:
                bottleneck["rate"] = self.bottleneck_rate
            if self.bottleneck_loss:
                bottleneck["loss"] = self.bottleneck_loss
            links.append(bottleneck)
        jobs = []
        for mode in ("ps", "ring"):
            kinds: list[tuple[int, bool, dict[str, Any]]] = [
                (FEATURES_ON[mode], True, {}),
                (FEATURES_OFF[mode], False, {}),
            ]
            if self.one_class_jobs:
                kinds.append((ONE_CLASS[mode], True, ONE_CLASS_POLICY))
            for job_id, features, policy in kinds:
                job: dict[str, Any] = {"id": job_id, "mode": mode, "workers": hosts}
                if mode == "ps":
                    job["servers"] = hosts[:1]
                job["transport"] = {"port": UDP_PORT + job_id}
                bound = {"loss_bound": self.loss_bound}
                job["policy"] = {**policy, "push": bound, "reduce_scatter": bound}
                job["switch"] = {"features": features}
                jobs.append(job)
        doc: dict[str, Any] = {
            "testbed": {
                "name": self.name,
                "switch": self.switch,
                "traffic": {"load": self.traffic_load, "incast": self.incast, "cdf": self.cdf, "seed": self.seed},
            },
            "topology": self.topology_doc(),
            "job": jobs,
        }  # fmt: skip
        if self.incast_bytes != INCAST_BYTES:
            doc["testbed"]["traffic"]["incast_bytes"] = self.incast_bytes
        if links:
            doc["link"] = links
        return doc

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
    cpu: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.way.name, "key": self.way.key, "backend": self.way.backend, "mode": self.way.mode,
            "features": self.way.features, "seconds": self.seconds, "switches": self.switches,
            "traffic": self.traffic, "cpu": self.cpu, **self.summary,
        }  # fmt: skip


def _start_traffic(tb: Testbed, duration_s: float, folder: Path) -> subprocess.Popen[bytes]:
    argv = traffic_gen.argv(tb.spec.path, duration_s)
    out = open(folder / "traffic.json", "wb")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, start_new_session=True)
    out.close()
    # Recorded with the fabric, so that `down` ends it too if this process is killed.
    state = tb.store.load(tb.name)
    if state is not None:
        state.processes.append(ProcessRecord("traffic", "traffic", proc.pid, start_ticks(proc.pid) or 0, ""))
        tb.store.save(state)
    return proc


def _machine_ticks() -> tuple[int, int] | None:
    """The machine's CPU time in processes (user, nice, system) and in all (idle too), in clock ticks."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return fields[0] + fields[1] + fields[2], sum(fields)


def _own_cpu_s() -> float:
    """CPU seconds of this process and of its children that ended (the ranks, the traffic generator)."""
    own, ended = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + ended.ru_utime + ended.ru_stime


class CpuWatch:
    """What a run took of the machine, and what the rest of the machine took meanwhile.

    ``other_share`` is the share of the machine's CPU time (all cores) spent in processes that are not this one,
    its ranks, its traffic generator or its switches: other users' work. Interrupt and softirq time (the veths'
    packet work) counts for neither side.
    """

    def __init__(self, tb: Testbed) -> None:
        self.tb = tb
        self.start = self._now()

    def _now(self) -> tuple[float, tuple[int, int] | None, float, dict[str, int]]:
        switches = cpu_snapshot(self.tb.store.load(self.tb.name))["switches"]
        return time.monotonic(), _machine_ticks(), _own_cpu_s(), switches

    def used(self) -> dict[str, Any]:
        t0, m0, own0, sw0 = self.start
        t1, m1, own1, sw1 = self._now()
        hz = os.sysconf("SC_CLK_TCK")
        switches = sum(sw1[n] - v for n, v in sw0.items() if n in sw1) / hz
        out: dict[str, Any] = {"wall_s": t1 - t0, "cores": os.cpu_count() or 1, "own_cpu_s": own1 - own0 + switches}
        if m0 and m1 and m1[1] > m0[1]:
            total_s = (m1[1] - m0[1]) / hz
            busy_s = (m1[0] - m0[0]) / hz
            out["machine_process_share"] = busy_s / total_s
            out["own_share"] = out["own_cpu_s"] / total_s
            out["other_share"] = max(0.0, busy_s - out["own_cpu_s"]) / total_s
        return out


def run_way(
    tb: Testbed, way: Way, cfg: TrainConfig, folder: Path, traffic_s: float, timeout_s: float = 600.0
) -> WayResult:
    """One training run of ``way`` on the running fabric (background traffic for up to ``traffic_s``, 0: none).

    Raises :class:`dlcp.testbed.jobs.WorkerFailed` (naming the rank) when a rank fails.
    """
    folder.mkdir(parents=True, exist_ok=True)
    extra = [
        "--model", cfg.model, "--epochs", str(cfg.epochs), "--samples", str(cfg.train_samples),
        "--batch-size", str(cfg.batch_size), "--lr", str(cfg.lr), "--seed", str(cfg.seed),
        "--eval-every", str(cfg.eval_every), "--loss-bound", str(cfg.loss_bound), "--width", str(cfg.width),
        "--bucket-mb", str(cfg.bucket_mb), *(() if cfg.gc_freeze else ("--no-gc-freeze",)),
    ]  # fmt: skip
    watch = CpuWatch(tb)
    traffic = _start_traffic(tb, traffic_s, folder) if traffic_s > 0 else None
    start = time.monotonic()
    try:
        result = run_job(tb, node.argv(way.backend, way.mode, extra), folder, job_id=way.job_id,
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
    out = WayResult(way, summary, result.switches, traffic_doc, time.monotonic() - start, watch.used())
    (folder / "result.json").write_text(json.dumps(out.as_dict(), indent=1))
    return out


@dataclass
class Turns:
    """The runs of a scenario: per way (by :attr:`Way.key`), one row per repeat, None where it failed."""

    ways: tuple[Way, ...]
    runs: dict[str, list[dict[str, Any] | None]]
    failures: list[dict[str, Any]] = field(default_factory=list)
    """``{"way", "key", "repeat" (1-based), "error", "folder"}`` of each run that failed."""

    @property
    def names(self) -> dict[str, str]:
        return {w.key: w.name for w in self.ways}


def run_scenario(
    scenario: Scenario,
    ways: tuple[Way, ...],
    cfg: TrainConfig,
    folder: Path,
    *,
    repeat: int = 1,
    traffic_s: float = 300.0,
    timeout_s: float = 600.0,
    progress: Callable[[str], None] | None = None,
) -> Turns:
    """Up the scenario's fabric; the ways take turns, ``repeat`` times, each under the same background traffic
    (none where the scenario has none); down. A run whose rank fails is recorded as failed (the rank named) and
    the others go on; a fabric that cannot be built raises :class:`dlcp.testbed.lifecycle.TestbedError`."""
    say = progress or (lambda text: log.info("%s", text))
    folder.mkdir(parents=True, exist_ok=True)
    spec = spec_mod.load(scenario.write(folder))
    turns = Turns(ways, {w.key: [] for w in ways})
    with Testbed(spec) as tb:
        where = f", bottleneck {scenario.bottleneck_rate} to h1" if scenario.bottleneck_rate else ""
        say(f"fabric {spec.name} up: {len(spec.fabric.hosts)} hosts{where}")
        for r in range(1, repeat + 1):
            for i, way in enumerate(ways, 1):
                turn = f"[{r}/{repeat}] " if repeat > 1 else ""
                turn += f"[{i}/{len(ways)}] {way.name}"
                say(f"{turn}: training{' under background traffic' if scenario.has_traffic else ''} ...")
                sub = folder / f"{r}-{way.key}"
                try:
                    res = run_way(tb, way, cfg, sub, traffic_s if scenario.has_traffic else 0.0, timeout_s)
                except (WorkerFailed, TimeoutError) as exc:
                    say(f"{turn}: FAILED: {exc}")
                    turns.runs[way.key].append(None)
                    turns.failures.append(
                        {"way": way.name, "key": way.key, "repeat": r, "error": str(exc), "folder": str(sub)}
                    )
                    continue
                row = res.as_dict()
                turns.runs[way.key].append(row)
                say(
                    f"{turn}: iteration p50 {row['iter_p50_s'] * 1e3:.1f} ms, p99 {row['iter_p99_s'] * 1e3:.1f} ms, "
                    f"accuracy {row['test_accuracy']:.3f} ({res.seconds:.0f} s)"
                )
    return turns
