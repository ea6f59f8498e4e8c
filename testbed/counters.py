"""The switches' counters of a running fabric, read from their statistics sockets, and their differences.

Each software switch serves its statistics on a Unix socket in the fabric's
state folder (:mod:`dlcp.testbed.switch.stats`); a file socket is reachable from
every namespace, so this needs no namespace of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlcp.testbed.state import FabricState
from dlcp.testbed.switch import stats


def fetch_all(state: FabricState) -> dict[str, Any]:
    """Switch name -> its statistics document (or ``{"error": ...}`` where it cannot be read)."""
    out: dict[str, Any] = {}
    for name, info in state.switches.items():
        if not info.get("stats"):
            out[name] = {
                "error": "BMv2 serves no statistics socket; its P4 counters: "
                f"dlcp testbed exec --fabric {state.name} {name} -- dlcp controller stats {state.fabric_file}"
            }
            continue
        try:
            out[name] = stats.fetch(Path(info["stats"]))
        except (OSError, ValueError) as exc:
            out[name] = {"error": str(exc)}
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
            + sum(int(v) for v in s["rx_dropped"].values()),
            "trimmed": sum(int(c["trimmed"]) for c in classes),
        }
    return out


def summary(docs: dict[str, Any]) -> dict[str, Any]:
    """Per switch and port totals, and fabric-wide drops and trims (by class)."""
    switches = {}
    drops_by_class: dict[int, int] = {}
    trims_by_class: dict[int, int] = {}
    for name, doc in docs.items():
        if "error" in doc:
            switches[name] = {"error": doc["error"]}
            continue
        switches[name] = port_totals(doc)
        for p in doc["ports"].values():
            for q, c in enumerate(p["stats"]["classes"]):
                drops_by_class[q] = drops_by_class.get(q, 0) + sum(int(v) for v in c["dropped"].values())
                trims_by_class[q] = trims_by_class.get(q, 0) + int(c["trimmed"])
    return {
        "switches": switches,
        "dropped": sum(drops_by_class.values()),
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
