"""The Tofino compiler's stage and resource use, read from the reports it writes into its output folder.

* ``<pipe>/context.json`` (always written; the driver loads it): every table
  with its gress (``direction``) and the MAU stage of each of its parts
  (``stage_number``). The stages a gress uses are counted from it.
* ``<pipe>/logs/resources.json`` (written with ``-g``): for each MAU stage, the
  units in use (SRAMs, TCAMs, map RAMs, gateways, ALUs, crossbar bytes, ...) and
  how many the stage has. Totals over the stages of the chip.

``<pipe>`` is the folder of each pipeline the compiler lists in ``manifest.json``
(DLCP's program has one, ``pipe``). The compiler's command is in
:func:`dlcp.testbed.toolchain.build.tofino_command`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GRESSES = ("ingress", "egress")

INGRESS_STAGE_BUDGET = 10
"""The most ingress stages DLCP's program may use on Tofino 1 (of 12): two are left for what a user adds.
tests/p4/test_tofino.py holds the program to it."""


@dataclass(frozen=True)
class Resource:
    """One kind of MAU unit, summed over all stages: how many are used and how many the chip has."""

    name: str
    used: int
    available: int

    @property
    def percent(self) -> float:
        return 100.0 * self.used / self.available if self.available else 0.0


@dataclass(frozen=True)
class Report:
    """Stages per gress and MAU resources of one compiled pipeline."""

    pipe: str
    stages_available: int
    stages: dict[str, tuple[int, ...]]
    """gress -> the MAU stages its tables (and gateways) sit in, sorted."""
    resources: tuple[Resource, ...]

    def stages_used(self, gress: str) -> int:
        """Stages the gress reaches: its last stage + 1 (a gap still costs its latency), 0 when it has no table."""
        used = self.stages.get(gress, ())
        return max(used) + 1 if used else 0

    def as_dict(self) -> dict[str, object]:
        return {
            "pipe": self.pipe,
            "stages_available": self.stages_available,
            "stages_used": {g: self.stages_used(g) for g in GRESSES},
            "stages": {g: list(self.stages.get(g, ())) for g in GRESSES},
            "resources": [{"name": r.name, "used": r.used, "available": r.available} for r in self.resources],
        }

    def table(self) -> str:
        """A small text table: stages per gress, then each resource with its share of the chip."""
        lines = [
            f"{'stages':22} " + ", ".join(f"{g} {self.stages_used(g)} of {self.stages_available}" for g in GRESSES)
        ]
        lines.append(f"{'resource':22} {'used':>6} {'of':>6} {'%':>6}")
        lines += [f"{r.name:22} {r.used:>6} {r.available:>6} {r.percent:>6.1f}" for r in self.resources]
        return "\n".join(lines)


class ReportError(ValueError):
    """A report file is missing or not in the form this reader knows (names the file and what is wrong)."""


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: missing (the compiler writes it; resources.json only with -g)") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc})") from None


def _stage_numbers(node: Any) -> set[int]:
    """Every MAU ``stage_number`` anywhere below ``node`` (a table's parts nest differently per table kind)."""
    found: set[int] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "stage_number" and isinstance(value, int):
                if value >= 0:  # -1: phase 0, the port metadata table in the parser, not a MAU stage
                    found.add(value)
            else:
                found |= _stage_numbers(value)
    elif isinstance(node, list):
        for item in node:
            found |= _stage_numbers(item)
    return found


def stages_from_context(context: Any, source: str = "context.json") -> dict[str, tuple[int, ...]]:
    """gress -> sorted MAU stages of its tables, from a parsed ``context.json``."""
    tables = context.get("tables") if isinstance(context, dict) else None
    if not isinstance(tables, list):
        raise ReportError(f"{source}: no 'tables' list")
    stages: dict[str, set[int]] = {}
    for table in tables:
        gress = table.get("direction") if isinstance(table, dict) else None
        if not isinstance(gress, str):
            raise ReportError(f"{source}: a table without a 'direction' ({str(table)[:80]})")
        stages.setdefault(gress, set()).update(_stage_numbers(table))
    return {g: tuple(sorted(s)) for g, s in stages.items()}


# resources.json, per stage: (the name shown, the stage's node, the list of used units, how to count the units
# a stage has). Counts of units in use are the lengths of the lists (each entry is one unit in use).
def _capacity(node: dict[str, Any], *keys: str) -> int:
    n = 1
    for k in keys:
        n *= int(node[k])
    return n


_RESOURCES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("SRAM", "rams", "srams", ("nRows", "nColumns")),
    ("TCAM", "tcams", "tcams", ("nRows", "nColumns")),
    ("map RAM", "map_rams", "maprams", ("nRows", "nUnits")),
    ("gateway", "gateways", "gateways", ("nRows", "nUnits")),
    ("logical table ID", "logical_tables", "ids", ("size",)),
    ("stateful ALU", "meter_alus", "meters", ("nAlus",)),
    ("statistics ALU", "statistic_alus", "stats", ("nAlus",)),
    ("exact xbar byte", "xbar_bytes", "bytes", ("exact_size",)),
    ("ternary xbar byte", "xbar_bytes", "bytes", ("ternary_size",)),
    ("hash bit", "hash_bits", "bits", ("nBits", "nFunctions")),
    ("VLIW instruction", "vliw", "instructions", ("size",)),
    ("action bus byte", "action_bus_bytes", "bytes", ("size",)),
)


def resources_from_json(resources: Any, source: str = "resources.json") -> tuple[int, tuple[Resource, ...]]:
    """(stages on the chip, MAU resources summed over them), from a parsed ``resources.json``."""
    try:
        mau = resources["resources"]["mau"]
        n_stages = int(mau["nStages"])
        stages = mau["mau_stages"]
        totals: list[Resource] = []
        for name, node_key, list_key, cap_keys in _RESOURCES:
            used = available = 0
            for stage in stages:
                node = stage[node_key]
                items = node[list_key]
                if node_key == "xbar_bytes":
                    kind = "exact" if name.startswith("exact") else "ternary"
                    items = [b for b in items if b.get("byte_type") == kind]
                used += len(items)
                available += _capacity(node, *cap_keys)
            # The list stops at the last stage either gress uses (they share the stages): the chip's
            # total counts the stages after it too.
            if stages and len(stages) < n_stages:
                available = available // len(stages) * n_stages
            totals.append(Resource(name, used, available))
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportError(f"{source}: not the resources.json form this reader knows ({exc!r})") from None
    return n_stages, tuple(totals)


def pipe_dirs(out: Path) -> list[Path]:
    """The pipelines' folders in a compiler output folder (from ``manifest.json``, else any with a context.json)."""
    manifest = out / "manifest.json"
    if manifest.is_file():
        data = _load(manifest)
        try:
            pipes = data["programs"][0]["pipes"]
            return [out / Path(p["files"]["context"]["path"]).parent for p in pipes]
        except (KeyError, IndexError, TypeError):
            pass
    return sorted(p.parent for p in out.glob("*/context.json"))


def read(out: Path) -> Report:
    """The report of the (first) pipeline in the compiler output folder ``out``."""
    dirs = pipe_dirs(out)
    if not dirs:
        raise ReportError(f"{out}: no pipeline folder with a context.json (did the compiler finish?)")
    pipe = dirs[0]
    stages = stages_from_context(_load(pipe / "context.json"), str(pipe / "context.json"))
    n_stages, resources = resources_from_json(_load(pipe / "logs" / "resources.json"), str(pipe / "logs"))
    return Report(pipe.name, n_stages, stages, resources)


def artifacts(out: Path) -> list[Path]:
    """What a switch needs from the output: bfrt.json, and per pipeline context.json and the binary."""
    found = [out / "bfrt.json"] if (out / "bfrt.json").is_file() else []
    for pipe in pipe_dirs(out):
        found += [f for f in (pipe / "context.json", pipe / "tofino.bin", pipe / "tofino2.bin") if f.is_file()]
    return found
