"""Training through faults on the testbed (``dlcp testbed faults``): what the user sees, no hangs, no divergence,
nothing left behind.

Each run builds a fabric, starts a training rank with ``--progress`` on each of the job's hosts
(:mod:`dlcp.apps.train.node`, one rank per host namespace), waits until every rank has finished ``fault_at``
iterations, injects one fault, and then waits for every rank that was not killed, at most ``hang_after_s``. The
faults (:data:`FAULTS`):

* ``switch-restart``: the star's switch is killed with SIGKILL and started again, with empty tables; a
  controller that stays connected (:mod:`dlcp.testbed.reconciler`, what ``dlcp controller run`` runs, started
  for the run in the switch namespace) reconciles it when it comes back;
* ``spine-down``: on a 2-leaf, 2-spine fabric whose ranks alternate between the leaves (so that every ring step
  and every PS exchange crosses the spines), both links of spine ``spine1`` go down (both veth ends); the
  controller is told which links are down (the software switch reports no port status), recomputes the paths
  without them and rewrites the leaves' ECMP groups, so that sprayed traffic continues over ``spine2``;
* ``worker-kill``: the last rank (a worker) is killed with SIGKILL;
* ``server-kill``: rank 0 is killed with SIGKILL: DLCP PS's parameter server; for the ring and gloo, which have
  no server, rank 0 is the equivalent: it hosts the rendezvous store and is the root of every broadcast.

Every run's fabric is taken down after it and checked for what is left: namespaces named after the fabric, veths
with the project's prefix in the root namespace, processes of the run (ranks, switches, controller), the state
folder. A rank still running ``hang_after_s`` after the fault is named as hung, then stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlcp.apps.testbed.scenario import FEATURES_ON, GLOO_ALLREDUCE, PS, RING, Scenario, Way
from dlcp.apps.train import node
from dlcp.apps.train.trainer import PROGRESS_PREFIX
from dlcp.controller.model import Fabric
from dlcp.testbed import counters, layout, reconciler
from dlcp.testbed import spec as spec_mod
from dlcp.testbed.jobs import last_json, start_ranks, stop_groups
from dlcp.testbed.lifecycle import Testbed, TestbedError, host_popen, our_namespaces
from dlcp.testbed.state import ProcessRecord, start_ticks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fault:
    name: str
    topology: str
    what: str
    """One line: what is done to the fabric or the job."""


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("switch-restart", "star", "the switch s1 is killed (SIGKILL) and started again; the controller "
              "(dlcp controller run) reconciles it"),
        Fault("spine-down", "leaf-spine", "both links of spine1 go down; the controller removes spine1 from the "
              "leaves' ECMP groups"),
        Fault("worker-kill", "star", "the last rank is killed (SIGKILL)"),
        Fault("server-kill", "star", "rank 0 is killed (SIGKILL): DLCP PS's parameter server; for ring and gloo, "
              "which have none, rank 0, the rendezvous host, is the equivalent"),
    )
}  # fmt: skip
"""Every fault scenario, by name, in the order a run takes them."""

WAYS: dict[str, Way] = {"ring": RING, "ps": PS, "gloo": GLOO_ALLREDUCE}
"""The ways each scenario trains (``--ways``): DLCP ring, DLCP PS, and DDP's default (gloo's all-reduce)."""

RESTARTED_SWITCH = "s1"
DOWN_SPINE = "spine1"
BOUND_SLACK_S = 2.0
"""A named error must come within the transport's peer timeout plus this (a DLCP way's stated bound)."""
CONTROLLER_INTERVAL_S = 5.0
"""How often the run's controller re-reads the switches besides the reconcile on reconnect."""
START_TIMEOUT_S = 300.0
"""How long the ranks may take to reach ``fault_at`` iterations (imports, rendezvous, on a loaded machine)."""
_ERROR_LINE = re.compile(r"^((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Failed|Timeout)): (.*)$")
_RANK_TAG = re.compile(r"^\[rank\d+\]:\s*")
"""What torch puts before each line of an uncaught exception's traceback."""
_PROGRESS = re.compile(re.escape(PROGRESS_PREFIX) + r"rank \d+: iteration (\d+) of (\d+)")


def chosen(kind: str, text: str | None, known: Sequence[str]) -> tuple[str, ...]:
    """``text`` (comma-separated names, or None for all) as names of ``known``; :class:`ValueError` naming the
    choices for a name that is not one."""
    if text is None:
        return tuple(known)
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise ValueError(f"--{kind}: give at least one of {', '.join(known)}")
    for n in names:
        if n not in known:
            raise ValueError(f"--{kind} {text}: {n!r} is not one; the choices are {', '.join(known)}")
    return names


def scenario_for(fault: Fault, tag: str) -> Scenario:
    """The fabric of ``fault``: a star of 3 ranks, or a leaf-spine of 4 alternating between the leaves; every link
    at 1 Gbit/s, no bottleneck, no background traffic."""
    common: dict[str, Any] = dict(bottleneck_rate=None, background_host=False, traffic_load=0.0, incast=0)
    if fault.topology == "star":
        return Scenario(name=f"f{tag}", workers=3, **common)
    return Scenario(name=f"f{tag}", workers=4, topology="leaf-spine", alternate_leaves=True, **common)


@dataclass
class FaultConfig:
    model: str = "mlp-wide"
    samples: int = 4096
    """Training samples (one epoch; batch 32 per rank)."""
    fault_at: int = 3
    """Iterations every rank has finished when the fault is injected."""
    hang_after_s: float = 60.0
    """A rank still running this long after the fault is hung."""
    loss_bound: float = 0.02

    def train_args(self) -> list[str]:
        return ["--model", self.model, "--epochs", "1", "--samples", str(self.samples), "--batch-size", "32",
                "--loss-bound", str(self.loss_bound), "--progress"]  # fmt: skip


@dataclass
class RankOutcome:
    rank: int
    host: str
    role: str
    """``killed`` (the fault's victim) or ``survivor``."""
    outcome: str = "running"
    """``completed``, ``error`` (exited non-zero), ``hung`` (still running ``hang_after_s`` after the fault),
    ``killed``."""
    returncode: int | None = None
    after_fault_s: float | None = None
    """When it exited, in seconds after the fault."""
    error: str | None = None
    """The exception its process ended with (``Name: message``), or how it ended when it named none."""
    named: bool = False
    """Its error names an exception (the user sees what went wrong)."""
    iterations: int = 0
    """Iterations it reported finished (``--progress``)."""
    digest: float | None = None
    """Its final parameter checksum (completed ranks)."""
    longest_iteration_s: float | None = None
    """Its longest training iteration (completed ranks): where training resumed, what the fault cost."""


@dataclass
class FaultRun:
    scenario: str
    way: str
    repeat: int
    folder: str
    bound_s: float | None
    """DLCP: a named error must come within this many seconds of the fault (peer timeout + 2 s); gloo: None (its
    process group's timeout is torch's 30 minutes; only the hang bound applies)."""
    ranks: list[RankOutcome] = field(default_factory=list)
    events: dict[str, float] = field(default_factory=dict)
    """Seconds after the fault: ``switch_started``, ``reconciled``, ``links_down``, ``rerouted``."""
    spine_bytes: dict[str, dict[str, int]] = field(default_factory=dict)
    """spine-down: bytes each spine sent, counted from the fault (``rerouted``: until the controller rerouted;
    ``after``: from then to the end of the run)."""
    leftovers: list[str] = field(default_factory=list)
    error: str | None = None
    """The run could not be carried out (a fabric that did not build, ranks that did not reach the fault)."""

    @property
    def survivors(self) -> list[RankOutcome]:
        return [r for r in self.ranks if r.role == "survivor"]

    @property
    def hung(self) -> list[int]:
        return [r.rank for r in self.survivors if r.outcome == "hung"]

    @property
    def user_sees(self) -> str:
        if self.error is not None:
            return "not run"
        if self.survivors and all(r.outcome == "completed" for r in self.survivors):
            return "completed"
        errors = sorted((r for r in self.survivors if r.outcome == "error"), key=lambda r: r.after_fault_s or 0.0)
        if errors:
            return errors[0].error or "error"
        return "hung"

    @property
    def time_s(self) -> float | None:
        """Seconds from the fault to the last survivor's exit (None: one hung)."""
        if self.hung or not self.survivors or self.error is not None:
            return None
        return max(r.after_fault_s or 0.0 for r in self.survivors)

    @property
    def stall_s(self) -> float | None:
        """The longest iteration of any survivor that completed (None: none completed)."""
        found = [r.longest_iteration_s for r in self.survivors if r.longest_iteration_s is not None]
        return max(found) if found else None

    @property
    def replicas(self) -> str:
        """``identical``, ``divergent`` (survivors that completed ended with different parameters) or ``n/a``
        (fewer than two completed)."""
        digests = [r.digest for r in self.survivors if r.outcome == "completed" and r.digest is not None]
        if len(digests) < 2:
            return "n/a"
        return "identical" if len(set(digests)) == 1 else "divergent"

    @property
    def within_bound(self) -> bool | None:
        """Every survivor that failed did so with a named error within the bound (None: no bound, or none
        failed)."""
        failed = [r for r in self.survivors if r.outcome == "error"]
        if self.bound_s is None or not failed:
            return None
        return all(r.named and (r.after_fault_s or 0.0) <= self.bound_s for r in failed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "way": self.way, "repeat": self.repeat, "user_sees": self.user_sees,
            "time_s": self.time_s, "stall_s": self.stall_s, "bound_s": self.bound_s, "within_bound": self.within_bound,
            "hung": self.hung,
            "replicas": self.replicas, "leftovers": self.leftovers, "events": self.events, "error": self.error,
            "spine_bytes": self.spine_bytes,
            "ranks": [dataclasses.asdict(r) for r in self.ranks], "folder": self.folder,
        }  # fmt: skip


def error_of(stderr: Path, returncode: int) -> tuple[str, bool]:
    """The exception a rank ended with (the last ``Name: message`` line of its stderr) and whether it named one;
    otherwise how it ended."""
    try:
        lines = stderr.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in reversed(lines):
        m = _ERROR_LINE.match(_RANK_TAG.sub("", line.strip()))
        if m:
            return f"{m.group(1).rpartition('.')[2]}: {m.group(2)}"[:300], True
    how = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    return f"{how}, no error named", False


def iterations_of(stderr: Path) -> int:
    """The last iteration a rank reported finished (``dlcp train --progress``), 0 if none."""
    try:
        with open(stderr, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))  # past a traceback
            tail = f.read().decode(errors="replace")
    except OSError:
        return 0
    found = _PROGRESS.findall(tail)
    return int(found[-1][0]) if found else 0


def leftovers(fabric: str, pids: dict[int, int]) -> list[str]:
    """What of fabric ``fabric`` is left: its namespaces, veths with the project's prefix in this namespace that
    name it, processes among ``pids`` (pid -> start ticks) still running, its state folder."""
    from pyroute2 import IPRoute

    out = [f"namespace {n}" for n in our_namespaces(fabric)]
    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = link.get_attr("IFLA_IFNAME") or ""
            if name.startswith(layout.PREFIX) and link.get_attr("IFLA_INFO_KIND", "") == "veth":
                out.append(f"veth {name} in the root namespace")
    for pid, ticks in sorted(pids.items()):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        if start_ticks(pid) == ticks:
            out.append(f"process {pid}")
    state_dir = layout.STATE_ROOT / fabric
    if state_dir.exists():
        out.append(f"state folder {state_dir}")
    return out


def _start_controller(tb: Testbed, folder: Path) -> subprocess.Popen[bytes]:
    """The controller that stays (:mod:`dlcp.testbed.reconciler`) for the fabric, inside the switch namespace,
    recorded so that ``down`` ends it."""
    argv = reconciler.argv(tb.spec.path, CONTROLLER_INTERVAL_S)
    with open(folder / "controller.jsonl", "wb") as out, open(folder / "controller.err", "wb") as err:
        proc = host_popen(layout.switch_ns(tb.name), argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                          start_new_session=True)  # fmt: skip
    state = tb.store.load(tb.name)
    if state is not None:
        state.processes.append(
            ProcessRecord("controller", "controller", proc.pid, start_ticks(proc.pid) or 0, layout.switch_ns(tb.name))
        )
        tb.store.save(state)
    return proc


def _applied_since(folder: Path, switch: str, since_wall: float) -> float | None:
    """The wall time of the controller's first ``applied`` event for ``switch`` after ``since_wall``."""
    try:
        lines = (folder / "controller.jsonl").read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        with contextlib.suppress(ValueError):
            ev = json.loads(line)
            if ev.get("switch") == switch and ev.get("event") == "applied" and ev.get("time", 0) >= since_wall:
                return float(ev["time"])
    return None


def sent_bytes(tb: Testbed, switches: Sequence[str]) -> dict[str, int]:
    """Bytes each of ``switches`` has sent, over all its ports (its statistics socket)."""
    state = tb.store.load(tb.name)
    docs = counters.fetch_all(state) if state is not None else {}
    return {
        name: sum(p["sent_bytes"] for p in counters.port_totals(docs[name]).values())
        for name in switches
        if name in docs and "error" not in docs[name]
    }


def spine_links(fabric: Fabric, spine: str) -> list[str]:
    """The links of switch ``spine``."""
    return [name for name, link in fabric.links.items() if any(end[0] == spine for end in link.ends)]


class _Injector(threading.Thread):
    """Carries out a fault beside the main thread, which meanwhile times the ranks; records when each step was
    done (seconds after the fault)."""

    def __init__(self, tb: Testbed, fault: Fault, procs: dict[int, subprocess.Popen[bytes]]) -> None:
        super().__init__(name=f"dlcp-fault-{fault.name}", daemon=True)
        self.tb, self.fault, self.procs = tb, fault, procs
        self.t0 = 0.0
        self.wall0 = 0.0
        self.events: dict[str, float] = {}
        self.victim: int | None = None
        self.spines = [n for n in tb.spec.fabric.switches if n.startswith("spine")]
        self.bytes: dict[str, dict[str, int]] = {}
        self.error: BaseException | None = None
        if fault.name == "worker-kill":
            self.victim = max(procs)
        elif fault.name == "server-kill":
            self.victim = 0

    def kill_victim(self) -> None:
        """The process fault: done at once, in the caller's thread (nothing to wait for)."""
        assert self.victim is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[self.victim].pid, signal.SIGKILL)

    def mark(self, what: str) -> None:
        self.events[what] = round(time.monotonic() - self.t0, 3)

    def run(self) -> None:
        try:
            if self.fault.name == "switch-restart":
                self.tb.kill_switch(RESTARTED_SWITCH)
                self.mark("switch_killed")
                self.tb.start_switch(RESTARTED_SWITCH)
                self.mark("switch_started")
            elif self.fault.name == "spine-down":
                links = spine_links(self.tb.spec.fabric, DOWN_SPINE)
                self.bytes["fault"] = sent_bytes(self.tb, self.spines)
                self.tb.set_links(links, up=False)
                self.mark("links_down")
                self.tb.apply(down=links)
                self.mark("rerouted")
                self.bytes["rerouted"] = sent_bytes(self.tb, self.spines)
        except BaseException as exc:  # reported with the run
            self.error = exc


def run_one(
    fault: Fault, way: Way, cfg: FaultConfig, folder: Path, repeat: int, say: Callable[[str], None]
) -> FaultRun:
    """One run: up, train, inject ``fault`` at ``cfg.fault_at`` iterations, wait for the ranks, down, check."""
    folder.mkdir(parents=True, exist_ok=True)
    scenario = scenario_for(fault, f"{fault.name[:2]}{os.getpid() % 100000}")
    spec = spec_mod.load(scenario.write(folder))
    job = spec.fabric.jobs[FEATURES_ON[way.mode]]
    bound = None if way.backend == "gloo" else job.host.transport.peer_timeout_s + BOUND_SLACK_S
    run = FaultRun(fault.name, way.key, repeat, str(folder), bound)
    tb = Testbed(spec)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    started: dict[int, float] = {}
    pids: dict[int, int] = {}
    try:
        tb.up()
        state = tb.store.load(tb.name)
        pids.update({p.pid: p.ticks for p in state.processes} if state else {})
        if fault.name == "switch-restart":
            ctl = _start_controller(tb, folder)
            pids[ctl.pid] = start_ticks(ctl.pid) or 0
        command = node.argv(way.backend, way.mode, cfg.train_args())
        ranks = start_ranks(tb, command, folder, job.id, procs, started)
        pids.update({p.pid: start_ticks(p.pid) or 0 for p in procs.values()})
        injector = _Injector(tb, fault, procs)
        run.ranks = [RankOutcome(r.rank, r.host, "killed" if r.rank == injector.victim else "survivor") for r in ranks]
        _await_progress(folder, procs, cfg.fault_at)
        injector.t0, injector.wall0 = time.monotonic(), time.time()
        if injector.victim is not None:
            injector.kill_victim()
            injector.mark("killed")
        else:
            injector.start()
        _await_ranks(run, folder, procs, injector.t0, cfg.hang_after_s)
        if injector.is_alive() or injector.ident is not None:
            injector.join(timeout=120.0)
        if injector.error is not None:
            run.error = f"the fault could not be injected: {injector.error}"
        if fault.name == "switch-restart":
            done = _applied_since(folder, RESTARTED_SWITCH, injector.wall0)
            if done is not None:
                run.events["reconciled"] = round(done - injector.wall0, 3)
        run.events.update(injector.events)
        if {"fault", "rerouted"} <= set(injector.bytes):
            end = sent_bytes(tb, injector.spines)
            at, mid = injector.bytes["fault"], injector.bytes["rerouted"]
            run.spine_bytes = {
                "rerouted": {n: mid[n] - at[n] for n in mid if n in at},
                "after": {n: end[n] - mid[n] for n in end if n in mid},
            }
    except (TestbedError, TimeoutError, OSError, KeyError, ValueError) as exc:
        run.error = str(exc)
        say(f"{fault.name} {way.key} [{repeat}]: could not run: {exc}")
    finally:
        stop_groups(procs, grace_s=2.0)
        with contextlib.suppress(Exception):
            state = tb.store.load(tb.name)
            pids.update({p.pid: p.ticks for p in state.processes} if state else {})
        tb.down()
    run.leftovers = leftovers(spec.name, pids)
    (folder / "fault.json").write_text(json.dumps(run.as_dict(), indent=1))
    return run


def _await_progress(folder: Path, procs: dict[int, subprocess.Popen[bytes]], fault_at: int) -> None:
    """Until every rank has reported ``fault_at`` iterations; raises if a rank exits or time runs out first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        done = [iterations_of(folder / f"rank{r}.err") for r in sorted(procs)]
        if min(done) >= fault_at:
            return
        ended = [r for r, p in procs.items() if p.poll() is not None]
        if ended:
            raise TimeoutError(f"rank {ended[0]} exited (status {procs[ended[0]].returncode}) before the fault, "
                               f"at {done[ended[0]]} iterations; see {folder}")  # fmt: skip
        if time.monotonic() > deadline:
            raise TimeoutError(f"the ranks did not reach {fault_at} iterations within {START_TIMEOUT_S:.0f} s "
                               f"(at {done}); see {folder}")  # fmt: skip
        time.sleep(0.02)


def _await_ranks(
    run: FaultRun, folder: Path, procs: dict[int, subprocess.Popen[bytes]], t0: float, hang_after_s: float
) -> None:
    """Time every rank's exit after the fault; those still running ``hang_after_s`` after it are hung."""
    deadline = t0 + hang_after_s
    pending = {r.rank: r for r in run.ranks}
    while pending:
        for rank, out in list(pending.items()):
            rc = procs[rank].poll()
            if rc is None:
                continue
            out.returncode, out.after_fault_s = rc, round(time.monotonic() - t0, 3)
            del pending[rank]
        if pending and time.monotonic() > deadline:
            for out in pending.values():
                out.outcome = "hung"
            stop_groups({r: procs[r] for r in pending}, grace_s=2.0)
            for out in pending.values():
                out.returncode = procs[out.rank].returncode
            break
        time.sleep(0.02)
    for out in run.ranks:
        err = folder / f"rank{out.rank}.err"
        out.iterations = iterations_of(err)
        if out.outcome == "hung":
            continue
        if out.role == "killed":
            out.outcome = "killed"
        elif out.returncode == 0:
            out.outcome = "completed"
            doc = last_json(folder / f"rank{out.rank}.out")
            if isinstance(doc, dict) and "param_digest" in doc:
                out.digest = float(doc["param_digest"])
                out.longest_iteration_s = round(max(doc.get("times") or [0.0]), 3)
                (folder / f"rank{out.rank}.json").write_text(json.dumps(doc))
        else:
            out.outcome = "error"
            out.error, out.named = error_of(err, out.returncode or 0)


def run_all(
    faults: Sequence[str],
    ways: Sequence[str],
    cfg: FaultConfig,
    folder: Path,
    *,
    repeat: int,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every fault with every way, ``repeat`` times (the ways take turns within a repeat); the report."""
    say = progress or (lambda text: log.info("%s", text))
    runs: list[FaultRun] = []
    total = len(faults) * len(ways) * repeat
    for name in faults:
        fault = FAULTS[name]
        for r in range(1, repeat + 1):
            for key in ways:
                n = len(runs) + 1
                say(f"[{n}/{total}] {name}, {WAYS[key].name}, repeat {r}: {fault.what}")
                run = run_one(fault, WAYS[key], cfg, folder / name / f"{r}-{key}", r, say)
                runs.append(run)
                t = "" if run.time_s is None else f" after {run.time_s:.1f} s"
                say(f"[{n}/{total}] {run.user_sees.splitlines()[0][:140]}{t}; hung {run.hung or 'none'}; replicas "
                    f"{run.replicas}; left behind: {len(run.leftovers)}")  # fmt: skip
    return report(runs, cfg, faults, ways, repeat, folder)


def report(
    runs: list[FaultRun], cfg: FaultConfig, faults: Sequence[str], ways: Sequence[str], repeat: int, folder: Path
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for name in faults:
        for key in ways:
            mine = [r for r in runs if r.scenario == name and r.way == key]
            times = [r.time_s for r in mine if r.time_s is not None]
            rows.append({
                "scenario": name, "way": key, "runs": len(mine),
                "completed": sum(r.user_sees == "completed" for r in mine),
                "named_errors": sum(r.user_sees not in ("completed", "hung", "not run") and all(
                    s.named for s in r.survivors if s.outcome == "error") for r in mine),
                "unnamed_errors": sum(any(s.outcome == "error" and not s.named for s in r.survivors) for r in mine),
                "hangs": sum(bool(r.hung) for r in mine),
                "divergent": sum(r.replicas == "divergent" for r in mine),
                "left_behind": sum(bool(r.leftovers) for r in mine),
                "over_bound": sum(r.within_bound is False for r in mine),
                "not_run": sum(r.error is not None for r in mine),
                "time_s": [min(times), max(times)] if times else None,
                "stall_s": [min(stalls), max(stalls)] if (stalls := [r.stall_s for r in mine if r.stall_s]) else None,
                "outcomes": [r.user_sees for r in mine],
                "spine_bytes_after": [r.spine_bytes.get("after") for r in mine] if name == "spine-down" else None,
            })  # fmt: skip
    totals = {k: sum(row[k] for row in rows) for k in ("hangs", "divergent", "left_behind", "over_bound",
                                                       "unnamed_errors", "not_run")}  # fmt: skip
    return {
        "config": {**dataclasses.asdict(cfg), "repeat": repeat, "bound_slack_s": BOUND_SLACK_S},
        "scenarios": {n: FAULTS[n].what for n in faults},
        "summary": rows,
        "totals": totals,
        "ok": not any(totals.values()),
        "runs": [r.as_dict() for r in runs],
        "folder": str(folder),
    }
