"""The switches' counters of a running fabric, read from their statistics sockets, and their differences.

Each software switch serves its statistics on a Unix socket in the fabric's
state folder (:mod:`dlcp.testbed.switch.stats`); a file socket is reachable from
every namespace, so this needs no namespace of its own.

BMv2 serves no such socket. Its document is made of the same parts from what it
has: DLCP's P4 counters (``forwarded``, ``dropped``, ``trimmed`` per port and
class), read over P4Runtime by DLCP's controller (:mod:`dlcp.testbed.p4counters`,
run in the switches' namespace, where their gRPC servers listen); each port's
received frames from its interface's kernel counters; and, where the kernel
carries out the links' rates (:mod:`dlcp.testbed.shaping`), the drops of the
port's kernel queue (``queue_dropped``: not by class). ``sent`` is what BMv2's
pipeline forwarded, before that queue. What its ports received and its pipeline
neither forwarded nor dropped was lost at its input, where the switch could not
keep up (``input_lost``: per switch, counted in neither ``dropped`` nor a port).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from pyroute2 import NetNS

from dlcp.protocol import NUM_PRIORITY_CLASSES
from dlcp.testbed import layout, p4counters, shaping
from dlcp.testbed.lifecycle import run_in
from dlcp.testbed.state import FabricState
from dlcp.testbed.switch import stats

BMV2_READ_S = 30.0
"""How long the controller may take to read every BMv2's counters."""


def fetch_all(state: FabricState) -> dict[str, Any]:
    """Switch name -> its statistics document (or ``{"error": ...}`` where it cannot be read)."""
    out: dict[str, Any] = {}
    if any(not info.get("stats") for info in state.switches.values()):
        out.update(bmv2_docs(state))
    for name, info in state.switches.items():
        if not info.get("stats"):
            continue
        try:
            out[name] = stats.fetch(Path(info["stats"]))
        except (OSError, ValueError) as exc:
            out[name] = {"error": str(exc)}
    return out


def _controller_cells(state: FabricState) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every BMv2's P4 counter cells, read by DLCP's controller in the switches' namespace; and its errors."""
    try:
        done = run_in(layout.switch_ns(state.name), p4counters.argv(state.fabric_file), BMV2_READ_S)
    except subprocess.TimeoutExpired:
        why = f"the controller did not read the counters within {BMV2_READ_S:g} s"
        return [], {n: why for n in state.switches}
    if done.returncode != 0:
        why = f"the controller could not read the counters: {done.stderr.decode(errors='replace').strip()[-500:]}"
        return [], {n: why for n in state.switches}
    doc = json.loads(done.stdout)
    return list(doc["cells"]), dict(doc["errors"])


def bmv2_docs(state: FabricState) -> dict[str, Any]:
    """Statistics documents, shaped as the software switch's, of the switches that serve no statistics socket."""
    cells, errors = _controller_cells(state)
    with NetNS(layout.switch_ns(state.name)) as ipr:
        kernel = {}
        for link in ipr.get_links():
            st = link.get_attr("IFLA_STATS64") or link.get_attr("IFLA_STATS") or {}
            kernel[link.get_attr("IFLA_IFNAME")] = int(dict(st).get("rx_packets", 0))
        queue_drops = shaping.drops(ipr)
    out: dict[str, Any] = {}
    for name, info in state.switches.items():
        if info.get("stats"):
            continue
        if name in errors:
            out[name] = {"error": f"BMv2's P4 counters: {errors[name]}"}
            continue
        ports: dict[str, Any] = {}
        for port, ifname in info["ports"].items():
            classes = [{"sent": 0, "sent_bytes": 0, "dropped": {}, "trimmed": 0} for _ in range(NUM_PRIORITY_CLASSES)]
            ports[port] = {
                "config": {"interface": ifname},
                "stats": {"rx": kernel.get(ifname, 0), "rx_dropped": {}, "classes": classes,
                          "queue_dropped": queue_drops.get(ifname, 0)},
            }  # fmt: skip
        forwarded = dropped = 0
        for c in cells:
            if c["switch"] != name or str(c["port"]) not in ports:
                continue
            forwarded += c["forwarded"]["packets"]
            dropped += c["dropped"]["packets"]
            cls = ports[str(c["port"])]["stats"]["classes"][c["queue"]]
            cls["sent"] += c["forwarded"]["packets"]
            cls["sent_bytes"] += c["forwarded"]["bytes"]
            if c["dropped"]["packets"]:
                cls["dropped"]["p4"] = c["dropped"]["packets"]
            cls["trimmed"] += c["trimmed"]["packets"]
        received = sum(p["stats"]["rx"] for p in ports.values())
        out[name] = {
            "source": "bmv2: P4 counters, interface counters, kernel queues", "ports": ports,
            "input_lost": received - forwarded - dropped,
        }  # fmt: skip
    return out


def port_totals(doc: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per port of one switch: frames received, sent, dropped (every reason) and trimmed, over all classes."""
    out = {}
    for port, p in doc.get("ports", {}).items():
        s = p["stats"]
        classes = s["classes"]
        out[port] = {
            "rx": int(s["rx"]),
            "sent": sum(int(c["sent"]) for c in classes),
            "sent_bytes": sum(int(c["sent_bytes"]) for c in classes),
            "dropped": sum(int(v) for c in classes for v in c["dropped"].values())
            + sum(int(v) for v in s["rx_dropped"].values())
            + int(s.get("queue_dropped", 0)),
            "trimmed": sum(int(c["trimmed"]) for c in classes),
        }
    return out


def summary(docs: dict[str, Any]) -> dict[str, Any]:
    """Per switch and port totals, and fabric-wide drops and trims (by class)."""
    switches = {}
    drops_by_class: dict[int, int] = {}
    trims_by_class: dict[int, int] = {}
    unclassed = 0
    input_lost = 0
    for name, doc in docs.items():
        if "error" in doc:
            switches[name] = {"error": doc["error"]}
            continue
        switches[name] = port_totals(doc)
        input_lost += int(doc.get("input_lost", 0))
        for p in doc["ports"].values():
            unclassed += int(p["stats"].get("queue_dropped", 0))
            for q, c in enumerate(p["stats"]["classes"]):
                drops_by_class[q] = drops_by_class.get(q, 0) + sum(int(v) for v in c["dropped"].values())
                trims_by_class[q] = trims_by_class.get(q, 0) + int(c["trimmed"])
    return {
        "switches": switches,
        "dropped": sum(drops_by_class.values()) + unclassed,
        "queue_dropped": unclassed,
        "input_lost": input_lost,
        "trimmed": sum(trims_by_class.values()),
        "dropped_by_class": drops_by_class,
        "trimmed_by_class": trims_by_class,
    }


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """``summary(after) - summary(before)``, for what one run did on a fabric that stays up."""

    def sub(a: Any, b: Any) -> Any:
        if isinstance(a, dict):
            return {k: sub(v, b.get(k, 0) if isinstance(b, dict) else 0) for k, v in a.items()}
        if isinstance(a, int | float) and isinstance(b, int | float):
            return a - b
        return a

    return dict(sub(after, before))


def render(docs: dict[str, Any]) -> str:
    lines = []
    for name, doc in docs.items():
        if "error" in doc:
            lines.append(f"{name}: {doc['error']}")
            continue
        lines.append(f"{name}:")
        for port, t in sorted(port_totals(doc).items(), key=lambda kv: int(kv[0])):
            iface = doc["ports"][port]["config"]["interface"]
            lines.append(
                f"  port {port:>3} ({iface:10}): rx {t['rx']:>9}  sent {t['sent']:>9}  dropped {t['dropped']:>7}"
                f"  trimmed {t['trimmed']:>7}"
            )
    return "\n".join(lines)
