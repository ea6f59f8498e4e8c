"""``dlcp testbed explain RESULTS``: where each run's iteration time went.

A results folder (``dlcp demo --testbed``'s, ``dlcp testbed bench``'s, ``dlcp testbed run``'s) holds one
folder per run of a job (:func:`dlcp.testbed.jobs.run_job`): every rank's output with its timeline
(:mod:`dlcp.host.timeline`), the switches' counters before and after, and the CPU the run took. For each
run this reads them and reports, per iteration (medians over the measured iterations):

* the phases of the slowest rank: forward, backward (the hook's communication included), optimizer step;
* for DLCP, the rank whose data takes longest on the wire at its paced rate (the *bottleneck sender*):
  what it sent per iteration and how long that takes at its rate, how long its first passes lasted and
  slept in the pacer, how long its link stood idle and where (before its first send of the iteration,
  between messages, after its last), the time its threads waited for data from upstream, probes and
  retransmitted packets, and its receives posted ahead of their call (taken by it, or forgotten);
* CPU: each rank's per iteration, the switches', and how busy the whole machine was;
* the switches: per port and priority class, packets sent, dropped (by reason) and trimmed.

It ends with one line per run naming the largest share of the iteration beyond the bottleneck's wire time.
"""

from __future__ import annotations

import itertools
import json
import statistics
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ExplainError", "explain", "find_runs", "render"]


class ExplainError(ValueError):
    """A results folder that holds no run, or a run that cannot be read."""


def find_runs(folder: Path) -> list[Path]:
    """Every run folder (one with ``run.json``) under ``folder``, in name order; ``folder`` itself if it is one."""
    if not folder.is_dir():
        raise ExplainError(f"{folder}: no such folder")
    if (folder / "run.json").is_file():
        return [folder]
    runs = sorted(p.parent for p in folder.rglob("run.json"))
    if not runs:
        raise ExplainError(f"{folder}: no run of a job in it (no run.json below it)")
    return runs


def _median(values: Iterable[float]) -> float:
    got = list(values)
    return statistics.median(got) if got else 0.0


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ExplainError(f"{path}: cannot be read ({exc})") from exc


def _ranks(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob("rank*.json"), key=lambda p: int(p.stem[4:]) if p.stem[4:].isdigit() else -1):
        if not path.stem[4:].isdigit():
            continue
        doc = _load(path)
        if not isinstance(doc, dict) or "timeline" not in doc:
            raise ExplainError(f"{path}: no timeline (a run of an older DLCP, or not `dlcp train`)")
        out.append(doc)
    if not out:
        raise ExplainError(f"{folder}: no rank's output (rank<N>.json)")
    return out


def _rates(folder: Path, run: dict[str, Any]) -> dict[str, float]:
    """Host IP -> the bits/s its DLCP data is paced to (the job file's ``send_rate_bps``)."""
    job = run.get("job")
    path = folder / f"job{job}.toml"
    if job is None or not path.is_file():
        return {}
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {ip: float(r) for ip, r in doc.get("transport", {}).get("send_rate_bps", {}).items()}


def _iterations(events: Sequence[Sequence[Any]], skipped: set[int]) -> list[tuple[float, float, float, float, float]]:
    """(start, forward done, backward done, step done, CPU s) of each measured iteration."""
    its = [tuple(e[1:6]) for e in events if e[0] == "iter"]
    return [it for i, it in enumerate(its) if i not in skipped]  # type: ignore[misc]


def _sender(
    events: Sequence[Sequence[Any]], its: Sequence[tuple[float, ...]], rate_bps: float | None
) -> dict[str, Any]:
    """What one rank's first passes did per iteration: bytes, time on the wire at its rate, passes, idle."""
    sends: dict[str, tuple[float, int]] = {}
    passes: dict[str, tuple[float, float]] = {}
    waits: list[tuple[float, float]] = []
    retx: list[tuple[float, int]] = []
    probes: list[float] = []
    for e in events:
        if e[0] == "send":
            sends[e[2]] = (e[1], int(e[4]))
        elif e[0] == "pass":
            passes[e[2]] = (e[1], float(e[3]))
        elif e[0] == "wait":
            waits.append((e[1], e[3]))
        elif e[0] == "retx":
            retx.append((e[1], int(e[3])))
        elif e[0] == "probe":
            probes.append(e[1])
    per: dict[str, list[float]] = {k: [] for k in ("bytes", "wire", "passes", "slept", "lead", "gaps", "tail",
                                                   "wait", "retx", "probes")}  # fmt: skip
    for start, _fwd, _bwd, end, _cpu in its:
        mine = sorted(
            (t, passes[k][0], passes[k][1], n) for k, (t, n) in sends.items() if start <= t < end and k in passes
        )
        nbytes = sum(m[3] for m in mine)
        per["bytes"].append(nbytes)
        per["wire"].append(nbytes * 8 / rate_bps if rate_bps else 0.0)
        per["passes"].append(sum(m[1] - m[0] for m in mine))
        per["slept"].append(sum(m[2] for m in mine))
        per["lead"].append(mine[0][0] - start if mine else end - start)
        per["gaps"].append(sum(max(0.0, b[0] - a[1]) for a, b in itertools.pairwise(mine)))
        per["tail"].append(end - mine[-1][1] if mine else 0.0)
        per["wait"].append(sum(min(b, end) - max(a, start) for a, b in waits if a < end and b > start))
        per["retx"].append(sum(n for t, n in retx if start <= t < end))
        per["probes"].append(sum(1 for t in probes if start <= t < end))
    return {k: _median(v) for k, v in per.items()}


def _switch_counters(folder: Path) -> list[dict[str, Any]]:
    """Per switch, port and class: what this run sent, dropped (by reason) and trimmed."""
    path = folder / "switches.json"
    if not path.is_file():
        return []
    doc = _load(path)
    before, after = doc.get("before", {}), doc.get("after", {})
    rows = []
    for sw, a in sorted(after.items()):
        b = before.get(sw, {})
        if "ports" not in a or "ports" not in b:
            continue
        for port, p in sorted(a["ports"].items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
            pb = b["ports"].get(port)
            if pb is None:
                continue
            for q, (ca, cb) in enumerate(zip(p["stats"]["classes"], pb["stats"]["classes"], strict=False)):
                dropped = {r: int(v) - int(cb["dropped"].get(r, 0)) for r, v in ca["dropped"].items()}
                row = {
                    "switch": sw, "port": port, "class": q, "sent": int(ca["sent"]) - int(cb["sent"]),
                    "dropped": {r: v for r, v in dropped.items() if v},
                    "trimmed": int(ca["trimmed"]) - int(cb["trimmed"]),
                }  # fmt: skip
                if row["sent"] or row["dropped"] or row["trimmed"]:
                    rows.append(row)
    return rows


def explain_run(folder: Path) -> dict[str, Any]:
    """The report of one run (JSON data; :func:`render` prints it)."""
    run = _load(folder / "run.json")
    result = _load(folder / "result.json") if (folder / "result.json").is_file() else {}
    ranks = _ranks(folder)
    skipped = set(result.get("iter_skipped", ranks[0].get("skipped", [])))
    its = [_iterations(r["timeline"]["events"], skipped) for r in ranks]
    n = min(len(i) for i in its)
    if n < 2:
        raise ExplainError(f"{folder}: fewer than 2 measured iterations")
    its = [i[:n] for i in its]
    slowest = [max(range(len(ranks)), key=lambda r, k=k: its[r][k][3] - its[r][k][0]) for k in range(n)]  # type: ignore[misc]
    phase = {
        "iteration": [its[r][k][3] - its[r][k][0] for k, r in enumerate(slowest)],
        "forward": [its[r][k][1] - its[r][k][0] for k, r in enumerate(slowest)],
        "backward": [its[r][k][2] - its[r][k][1] for k, r in enumerate(slowest)],
        "step": [its[r][k][3] - its[r][k][2] for k, r in enumerate(slowest)],
    }
    report: dict[str, Any] = {
        "folder": str(folder),
        "name": result.get("name", folder.name),
        "backend": result.get("backend", ""),
        "iterations": n,
        "phases_s": {k: _median(v) for k, v in phase.items()},
        "iteration_p99_s": sorted(phase["iteration"])[min(n - 1, round(0.99 * (n - 1)))],
        "cpu_per_iteration_s": [_median(b[4] - a[4] for a, b in itertools.pairwise(i)) for i in its],
        "cpu": run.get("cpu", {}),
        "switches": _switch_counters(folder),
    }
    hosts = [r["host"] if isinstance(r, dict) else "" for r in run.get("ranks", [])]
    ips = [r.get("ip", "") for r in run.get("ranks", [])]
    rates = _rates(folder, run)
    senders = []
    for rank, doc in enumerate(ranks):
        events = doc["timeline"]["events"]
        if not any(e[0] == "send" for e in events):
            continue
        ip = ips[rank] if rank < len(ips) else ""
        s = _sender(events, its[rank], rates.get(ip))
        s.update(rank=rank, host=hosts[rank] if rank < len(hosts) else "", rate_bps=rates.get(ip))
        s["posted_ahead"] = doc.get("posted_ahead")
        senders.append(s)
    report["senders"] = senders
    report["verdict"] = _verdict(report)
    return report


def _verdict(report: dict[str, Any]) -> str:
    it = report["phases_s"]["iteration"]
    if not report["senders"]:
        return f"iteration {it * 1e3:.0f} ms: no DLCP sends recorded (the transport's insides are not timed)"
    b = max(report["senders"], key=lambda s: (s["wire"], s["passes"]))
    if not b["wire"]:
        return f"iteration {it * 1e3:.0f} ms: the job's hosts are not paced (no rates in its job file)"
    shares = {
        "on the bottleneck sender's wire at its rate": b["wire"],
        "its passes beyond their wire time (CPU, socket)": max(0.0, b["passes"] - b["wire"]),
        "its link idle before its first send (compute, the hook's start)": b["lead"],
        "its link idle between messages (waiting for upstream data, acknowledgements)": b["gaps"],
        "its link idle after its last pass (the last steps' round trips, the optimizer step)": b["tail"],
    }
    name, share = max(list(shares.items())[1:], key=lambda kv: kv[1])
    return (
        f"iteration {it * 1e3:.0f} ms, of which {b['wire'] * 1e3:.0f} ms is rank {b['rank']}'s data on the wire "
        f"at its rate; the most of the rest: {name}, {share * 1e3:.0f} ms"
    )


def explain(folder: Path) -> list[dict[str, Any]]:
    """The report of every run under ``folder``."""
    return [explain_run(f) for f in find_runs(folder)]


def _ahead_text(ahead: dict[str, int] | None) -> str:
    """The run's receives posted ahead of their call (``Collectives.post_ahead``), where the rank reported them."""
    if not ahead or not ahead.get("posted"):
        return ""
    return f"; receives posted ahead {ahead['posted']}, taken {ahead['taken']}, forgotten {ahead['forgotten']}"


def render(reports: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for r in reports:
        ph = r["phases_s"]
        lines.append(f"== {r['name']} ({r['folder']}), {r['iterations']} measured iterations")
        lines.append(
            f"  slowest rank, medians: iteration {ph['iteration'] * 1e3:.1f} ms "
            f"(p99 {r['iteration_p99_s'] * 1e3:.1f}) = "
            f"forward {ph['forward'] * 1e3:.1f} + backward with communication {ph['backward'] * 1e3:.1f} "
            f"+ step {ph['step'] * 1e3:.1f}"
        )
        cpu = r["cpu"]
        per = ", ".join(f"rank {i} {c * 1e3:.1f}" for i, c in enumerate(r["cpu_per_iteration_s"]))
        sw = ", ".join(f"{k} {v:.2f} s" for k, v in cpu.get("switch_cpu_s", {}).items())
        lines.append(
            f"  CPU per iteration (ms): {per}; switches {sw or '-'} in {cpu.get('wall_s', 0):.1f} s; "
            f"machine {cpu.get('machine_busy', 0) * 100:.0f}% busy on {cpu.get('cores', '?')} cores"
        )
        for s in r["senders"]:
            rate = f"{s['rate_bps'] / 1e6:.0f} Mbit/s" if s["rate_bps"] else "unpaced"
            lines.append(
                f"  rank {s['rank']} ({s['host']}, {rate}): sends {s['bytes'] / 1e6:.2f} MB = {s['wire'] * 1e3:.1f} ms "
                f"at its rate; passes {s['passes'] * 1e3:.1f} ms (pacer slept {s['slept'] * 1e3:.1f}); link idle: "
                f"before the first send {s['lead'] * 1e3:.1f}, between {s['gaps'] * 1e3:.1f}, after the last "
                f"{s['tail'] * 1e3:.1f}; waiting for data {s['wait'] * 1e3:.1f} ms; {s['probes']:.0f} probes, "
                f"{s['retx']:.0f} packets retransmitted{_ahead_text(s.get('posted_ahead'))}"
            )
        for row in r["switches"]:
            if row["dropped"] or row["trimmed"]:
                drops = " ".join(f"{k} {v}" for k, v in sorted(row["dropped"].items())) or "none"
                lines.append(f"  switch {row['switch']} port {row['port']} class {row['class']}: sent {row['sent']}, "
                             f"dropped {drops}, trimmed {row['trimmed']}")  # fmt: skip
        lines.append(f"  => {r['verdict']}")
    return "\n".join(lines)
