"""Jobs on a fabric: one process per host namespace, as on a multi-node cluster, and their results gathered.

Each rank's process gets the launch environment ``torchrun`` and DLCP read
(:mod:`dlcp.host.launch_env`): ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` (rank
0's address) and ``MASTER_PORT``, torchrun's ``PET_*`` settings (so
``torchrun`` run as the command makes one node per host), ``DLCP_HOST`` (the
host's address), ``DLCP_CONFIG`` (the job's host configuration, written from
the fabric file) and ``GLOO_SOCKET_IFNAME`` (gloo's sockets on the fabric).

With ``torchrun`` (``dlcp testbed run --torchrun``), each host runs its own
``torchrun`` node (:func:`torchrun_argv`: ``--nnodes N --node-rank i``, one
process per node, the c10d rendezvous on the first host), and COMMAND is the
script it starts; torchrun then sets the worker's ``RANK``, ``WORLD_SIZE`` and
``MASTER_*``, and DLCP joins torchrun's store (:mod:`dlcp.host.launch_env`).

A run's folder holds every rank's stdout and stderr, the last JSON line each
printed (``rank<N>.json``), the switches' counters before and after
(``switches.json``) and ``run.json``, which ties them together. A process that
fails ends the run: the others are stopped and :class:`WorkerFailed` names the
rank, its host and the end of its error output.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dlcp.controller import pacing
from dlcp.controller.model import JobSpec
from dlcp.controller.paths import Paths
from dlcp.testbed import counters, layout
from dlcp.testbed.lifecycle import Testbed, is_up
from dlcp.testbed.spec import TestbedSpec
from dlcp.testbed.tomlout import dumps as toml_dumps

log = logging.getLogger(__name__)

PLACEHOLDER = re.compile(r"\{(rank|world|host|ip|master)\}")
"""What ``run`` replaces in COMMAND; other braces (a Python one-liner's dict) stay as they are."""
MASTER_PORT = 29500
"""torch's rendezvous port on rank 0's host (DLCP's store takes the next one); namespaces keep it private."""
TORCHRUN = (sys.executable, "-m", "torch.distributed.run")
"""``torchrun`` as this interpreter runs it (the console script of the same torch)."""


class WorkerFailed(RuntimeError):
    def __init__(self, rank: int, host: str, returncode: int, tail: str) -> None:
        self.rank, self.host, self.returncode = rank, host, returncode
        how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited with status {returncode}"
        super().__init__(f"rank {rank} on host {host} {how}; its last output:\n{tail}")


@dataclass
class RankResult:
    rank: int
    host: str
    ip: str
    returncode: int | None = None
    seconds: float = 0.0
    output: Any = None
    """The last line of its stdout that parsed as JSON, if any."""


@dataclass
class RunResult:
    folder: Path
    command: list[str]
    ranks: list[RankResult]
    switches: dict[str, Any] = field(default_factory=dict)
    """Counter totals of what this run did on the switches (after - before)."""

    @property
    def ok(self) -> bool:
        return all(r.returncode == 0 for r in self.ranks)

    def outputs(self) -> list[Any]:
        return [r.output for r in self.ranks]


def job_hosts(spec: TestbedSpec, job_id: int | None) -> tuple[JobSpec | None, list[str]]:
    """The job's hosts in rank order (servers first); without jobs in the file, every host."""
    jobs = spec.fabric.jobs
    if job_id is not None:
        if job_id not in jobs:
            raise ValueError(f"--job {job_id}: no such job in {spec.path} (jobs: {sorted(jobs) or 'none'})")
        job = jobs[job_id]
        return job, list(job.workers)
    if jobs:
        job = jobs[min(jobs)]
        return job, list(job.workers)
    return None, list(spec.fabric.hosts)


def write_job_file(spec: TestbedSpec, job: JobSpec, folder: Path) -> Path:
    """The job's host configuration as a DLCP job file (the tables the fabric file gives the job)."""
    doc = tomllib.loads(spec.path.read_text())
    entry = next(e for e in doc.get("job", []) if e.get("id") == job.id)
    if "config" in entry:
        path = Path(entry["config"])
        return path if path.is_absolute() else spec.path.parent / path
    out: dict[str, Any] = {
        "job": {
            "id": job.id, "name": job.name, "mode": job.mode, "workers": len(job.workers),
            "servers": max(1, len(job.servers)),
        },
    }  # fmt: skip
    for key in ("policy", "transport", "limits"):
        if key in entry:
            out[key] = entry[key]
    # The hosts pace to what the controller sized the switches for (dlcp.controller.pacing), unless the file says.
    rates = pacing.send_rates(spec.fabric, Paths(spec.fabric), job)
    if rates:
        transport = out["transport"] = dict(out.get("transport", {}))
        transport.setdefault("send_rate_bps", rates)
        transport.setdefault("send_burst_bytes", pacing.send_burst_bytes(job))
    path = folder / f"job{job.id}.toml"
    path.write_text(toml_dumps(out))
    return path


def rank_env(spec: TestbedSpec, hosts: Sequence[str], rank: int, job_file: Path | None) -> dict[str, str]:
    fab = spec.fabric
    master = fab.hosts[hosts[0]].ip
    world = str(len(hosts))
    env = {
        "RANK": str(rank), "WORLD_SIZE": world, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": master, "MASTER_PORT": str(MASTER_PORT),
        "PET_NNODES": world, "PET_NODE_RANK": str(rank), "PET_NPROC_PER_NODE": "1",
        "PET_MASTER_ADDR": master, "PET_MASTER_PORT": str(MASTER_PORT),
        "DLCP_HOST": fab.hosts[hosts[rank]].ip, "GLOO_SOCKET_IFNAME": layout.HOST_IF,
        "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
    }  # fmt: skip
    if job_file is not None:
        env["DLCP_CONFIG"] = str(job_file)
    return env


def torchrun_argv(spec: TestbedSpec, hosts: Sequence[str], rank: int, run_id: str) -> list[str]:
    """``torchrun`` for node ``rank`` of the job on ``hosts``, one process per node, the c10d rendezvous on the
    first host: that node's agent hosts the rendezvous store (``is_host``), the others join it. Each node gives its
    host's address (``--local-addr``); torch numbers the nodes in the order of their addresses, so GROUP_RANK and
    RANK follow the job's order wherever the addresses sort as the job lists its hosts (:func:`rendezvous_order`)."""
    fab = spec.fabric
    master = fab.hosts[hosts[0]].ip
    return [
        *TORCHRUN, "--nnodes", str(len(hosts)), "--node-rank", str(rank), "--nproc-per-node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{master}:{MASTER_PORT}", "--rdzv-id", run_id,
        "--rdzv-conf", f"is_host={int(rank == 0)}", "--local-addr", fab.hosts[hosts[rank]].ip, "--max-restarts", "0",
    ]  # fmt: skip


def rendezvous_order(spec: TestbedSpec, hosts: Sequence[str]) -> list[str]:
    """The hosts in the order torch's c10d rendezvous numbers their nodes: by address, as text."""
    return sorted(hosts, key=lambda h: spec.fabric.hosts[h].ip)


def last_json(path: Path) -> Any:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith(("{", "[")):
            with contextlib.suppress(ValueError):
                return json.loads(line)
    return None


def output_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop_groups(procs: dict[int, subprocess.Popen[bytes]], grace_s: float = 5.0) -> None:
    """SIGTERM each process group still running, SIGKILL after ``grace_s``."""
    for p in procs.values():
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in procs.values():
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def cpu_snapshot(state: Any) -> dict[str, Any]:
    """The machine's CPU time (busy and total, in clock ticks) and each running switch process's, now."""
    snap: dict[str, Any] = {"t": time.monotonic(), "machine": None, "switches": {}}
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        snap["machine"] = (sum(fields) - fields[3] - fields[4], sum(fields))  # idle and iowait are not busy
    for p in state.processes if state is not None else []:
        if p.role == "switch":
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
                snap["switches"][p.name] = int(stat[11]) + int(stat[12])  # utime + stime
    return snap


def cpu_used(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What a run took of the machine between two :func:`cpu_snapshot`: the busy fraction of all its cores,
    its cores, the wall time, and each switch process's CPU seconds."""
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[str, Any] = {"wall_s": after["t"] - before["t"], "cores": os.cpu_count() or 1}
    if before["machine"] and after["machine"]:
        busy, total = (a - b for a, b in zip(after["machine"], before["machine"], strict=True))
        out["machine_busy"] = busy / total if total else 0.0
    out["switch_cpu_s"] = {
        name: (after["switches"][name] - t) / hz for name, t in before["switches"].items() if name in after["switches"]
    }
    return out


def fill(arg: str, subs: dict[str, Any]) -> str:
    """``arg`` with its ``{rank}``, ``{world}``, ``{host}``, ``{ip}`` and ``{master}`` replaced."""
    return PLACEHOLDER.sub(lambda m: str(subs[m.group(1)]), arg)


def new_folder(out: Path, label: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = out / f"{label}-{stamp}"
    n = 1
    while folder.exists():
        n += 1
        folder = out / f"{label}-{stamp}-{n}"
    folder.mkdir(parents=True)
    return folder


def start_ranks(
    tb: Testbed,
    command: Sequence[str],
    folder: Path,
    job_id: int | None,
    procs: dict[int, subprocess.Popen[bytes]],
    started: dict[int, float],
    *,
    torchrun: bool = False,
) -> list[RankResult]:
    """Start ``command`` once per rank of the job, each in its host's namespace and in a process group of its own
    (output in ``folder``); fills ``procs`` and ``started`` (rank -> process, start time) as each starts, so that
    a caller's ``finally`` can stop what did start. ``torchrun``: each host runs ``command`` under its own
    ``torchrun`` node (:func:`torchrun_argv`)."""
    spec = tb.spec
    job, hosts = job_hosts(spec, job_id)
    job_file = write_job_file(spec, job, folder) if job is not None else None
    fab = spec.fabric
    ranks = [RankResult(r, h, fab.hosts[h].ip) for r, h in enumerate(hosts)]
    for r in ranks:
        subs = {"rank": r.rank, "world": len(hosts), "host": r.host, "ip": r.ip, "master": ranks[0].ip}
        argv = [fill(a, subs) for a in command]
        if torchrun:
            argv = torchrun_argv(spec, hosts, r.rank, f"{spec.name}-{folder.name}") + argv
        env = rank_env(spec, hosts, r.rank, job_file)
        with open(folder / f"rank{r.rank}.out", "wb") as out, open(folder / f"rank{r.rank}.err", "wb") as err:
            procs[r.rank] = tb.popen(
                r.host, argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )
        started[r.rank] = time.monotonic()
        log.info("rank %d on %s: %s", r.rank, r.host, shlex.join(argv))
    return ranks


def run_job(
    tb: Testbed,
    command: Sequence[str],
    folder: Path,
    *,
    job_id: int | None = None,
    timeout_s: float = 600.0,
    torchrun: bool = False,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Run ``command`` once per rank of the job on the running fabric ``tb``; raises :class:`WorkerFailed`.

    ``torchrun``: ``command`` is torchrun's script and its arguments, and each host runs it under its own
    ``torchrun`` node (:func:`torchrun_argv`)."""
    spec = tb.spec
    job, hosts = job_hosts(spec, job_id)
    folder.mkdir(parents=True, exist_ok=True)
    if torchrun and progress and rendezvous_order(spec, hosts) != list(hosts):
        progress(f"torch's rendezvous numbers the nodes {', '.join(rendezvous_order(spec, hosts))} (by address), "
                 f"not in the job's order {', '.join(hosts)}")  # fmt: skip
    state = tb.store.load(tb.name)
    before_docs = counters.fetch_all(state) if state is not None else {}
    before = counters.summary(before_docs) if state is not None else {}
    cpu_before = cpu_snapshot(state)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    started: dict[int, float] = {}
    try:
        ranks = start_ranks(tb, command, folder, job_id, procs, started, torchrun=torchrun)
        if progress:
            progress(f"{len(hosts)} ranks running on {', '.join(hosts)}")
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs.values()):
            for rank, p in procs.items():
                rc = p.poll()
                if rc is not None and ranks[rank].returncode is None:
                    ranks[rank].returncode = rc
                    ranks[rank].seconds = time.monotonic() - started[rank]
                    if rc != 0:
                        stop_groups(procs)
                        raise WorkerFailed(rank, ranks[rank].host, rc, output_tail(folder / f"rank{rank}.err"))
            if time.monotonic() > deadline:
                stop_groups(procs)
                raise TimeoutError(f"the job did not finish within {timeout_s:.0f} s (--timeout); see {folder}")
            time.sleep(0.1)
    finally:
        stop_groups(procs)
    for r in ranks:
        rc = procs[r.rank].returncode
        if r.returncode is None:
            r.returncode, r.seconds = rc, time.monotonic() - started[r.rank]
        if rc != 0:
            raise WorkerFailed(r.rank, r.host, rc, output_tail(folder / f"rank{r.rank}.err"))
        r.output = last_json(folder / f"rank{r.rank}.out")
        if r.output is not None:
            (folder / f"rank{r.rank}.json").write_text(json.dumps(r.output))
    result = RunResult(folder, list(command), ranks)
    cpu = cpu_used(cpu_before, cpu_snapshot(state))
    if state is not None:
        docs = counters.fetch_all(state)
        result.switches = counters.delta(counters.summary(docs), before)
        (folder / "switches.json").write_text(
            json.dumps({"delta": result.switches, "before": before_docs, "after": docs}, indent=1)
        )
    (folder / "run.json").write_text(
        json.dumps(
            {
                "fabric": spec.name, "fabric_file": str(spec.path), "job": job.id if job else None,
                "command": list(command), "torchrun": torchrun,
                "ranks": [{k: v for k, v in asdict(r).items() if k != "output"} for r in ranks],
                "switches": result.switches, "cpu": cpu,
            },
            indent=1,
        )
    )  # fmt: skip
    return result


def run_on_fabric(
    spec: TestbedSpec,
    command: Sequence[str],
    *,
    job_id: int | None,
    out: Path,
    timeout_s: float,
    keep: bool = False,
    torchrun: bool = False,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """``dlcp testbed run``: up (unless it is up already), the job, then down (unless ``keep`` or it was up)."""
    job_hosts(spec, job_id)  # a bad --job is refused before anything is made
    tb = Testbed(spec)
    was_up = is_up(tb.store.load(spec.name))
    if not was_up:
        tb.up(progress=progress)
    try:
        folder = new_folder(out, spec.name)
        if progress:
            progress(f"results in {folder}")
        return run_job(tb, command, folder, job_id=job_id, timeout_s=timeout_s, torchrun=torchrun, progress=progress)
    finally:
        if not was_up and not keep:
            tb.down()
