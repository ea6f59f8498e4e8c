"""Comparisons of training runs with the baseline users run: ratios per repeat, goals, the demo's verdict.

Pure functions over the rows :func:`dlcp.apps.testbed.scenario.run_way` returns (``iter_p50_s``, ``iter_p99_s``,
``test_accuracy``, ``accuracy_curve``), used by ``dlcp testbed bench`` and ``dlcp demo --testbed``.

``runs`` maps a way's key (:attr:`dlcp.apps.testbed.scenario.Way.key`: ``gloo`` for DDP with gloo's all-reduce,
``ring``, ``ps``, ``ring-off``, ``ps-off``, ``ring-1class``, ``ps-1class``, ``gloo-ps``) to one row per repeat,
``None`` where that repeat's run failed. A ratio is computed within each repeat that has both sides and reported
as its median and range over those repeats; the repeats that lack a side are named.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = Mapping[str, Any]
Runs = Mapping[str, Sequence[Row | None]]

BASELINE = "gloo"
"""DDP's default: DistributedDataParallel with gloo's all-reduce (``dlcp train --backend gloo --mode ring``)."""
FULL_MODES = ("ring", "ps")
TARGET_SHARE = 0.9
"""The accuracy target of a repeat: this share of the best final accuracy of its runs."""


def time_to(curve: Sequence[Sequence[float]], target: float) -> float | None:
    """Seconds of training until the accuracy curve (``(t, iteration, accuracy)`` points) first reaches ``target``."""
    for t, _it, acc in curve:
        if acc >= target:
            return float(t)
    return None


def accuracy_target(rows: Sequence[Row | None]) -> float | None:
    """:data:`TARGET_SHARE` of the best final accuracy among ``rows`` (one repeat's runs), to two decimals."""
    finals = [r["test_accuracy"] for r in rows if r is not None]
    return round(TARGET_SHARE * max(finals), 2) if finals else None


def repeats(runs: Runs) -> int:
    return max((len(rows) for rows in runs.values()), default=0)


def _at(runs: Runs, key: str, r: int) -> Row | None:
    rows = runs.get(key, ())
    return rows[r] if r < len(rows) else None


def targets(runs: Runs) -> list[float | None]:
    """Each repeat's accuracy target (over every way's run in that repeat)."""
    return [accuracy_target([_at(runs, k, r) for k in runs]) for r in range(repeats(runs))]


def _tta(row: Row, target: float | None) -> float:
    t = time_to(row.get("accuracy_curve", []), target) if target is not None else None
    return math.inf if t is None else t  # never reached: slower than any run that did


@dataclass(frozen=True)
class Goal:
    op: str
    """``<=``, ``<`` or ``>=``."""
    bound: float
    text: str

    def holds(self, value: float) -> bool:
        return {"<=": value <= self.bound, "<": value < self.bound, ">=": value >= self.bound}[self.op]


def needed(n: int) -> int:
    """Repeats in which a goal must hold for it to hold: two thirds of them, rounded up (2 of 3)."""
    return max(1, math.ceil(2 * n / 3))


@dataclass(frozen=True)
class Ratio:
    scenario: str
    name: str
    values: tuple[float, ...]
    """One per repeat that has both sides, in repeat order."""
    used: tuple[int, ...]
    """The repeats (0-based) the values come from."""
    missing: tuple[int, ...] = ()
    """Repeats in which a side's run failed."""
    goal: Goal | None = None
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    @property
    def held(self) -> int:
        return sum(self.goal.holds(v) for v in self.values) if self.goal else 0

    @property
    def holds(self) -> bool | None:
        """Whether the goal holds in :func:`needed` of the repeats measured (None: no goal, or nothing measured)."""
        if self.goal is None or not self.values:
            return None
        return self.held >= needed(len(self.values))

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "scenario": self.scenario, "name": self.name, "median": self.median,
            "min": min(self.values, default=math.nan), "max": max(self.values, default=math.nan),
            "values": list(self.values), "repeats": [r + 1 for r in self.used],
            "missing_repeats": [r + 1 for r in self.missing], "note": self.note,
        }  # fmt: skip
        if self.goal is not None:
            doc.update(goal=self.goal.text, holds=self.holds, held_in=self.held, measured_in=len(self.values))
        return doc


def _pairs(runs: Runs, a: str, b: str) -> tuple[list[tuple[int, Row, Row]], list[int]]:
    both, missing = [], []
    for r in range(repeats(runs)):
        x, y = _at(runs, a, r), _at(runs, b, r)
        if x is not None and y is not None:
            both.append((r, x, y))
        elif a in runs and b in runs:
            missing.append(r)
    return both, missing


def best_mode(runs: Runs) -> str | None:
    """The full DLCP mode with the lower median iteration p50 over its repeats (None: neither ran)."""
    p50 = {m: [r["iter_p50_s"] for r in runs.get(m, ()) if r is not None] for m in FULL_MODES}
    ran = {m: statistics.median(v) for m, v in p50.items() if v}
    return min(ran, key=lambda m: ran[m]) if ran else None


def ratios(scenario: str, runs: Runs, goals: Mapping[str, Goal] | None = None) -> list[Ratio]:
    """Every comparison ``runs`` allows: each full mode (and the best one, ``dlcp_best``) against gloo's all-reduce
    and against itself with the switch features off; DLCP's PS against the PS over gloo's TCP where that ran."""
    goals = goals or {}
    aims = targets(runs)
    out: list[Ratio] = []

    def add(name: str, a: str, b: str, f: Any, note: str = "") -> None:
        if a not in runs or b not in runs:
            return
        both, missing = _pairs(runs, a, b)
        values = tuple(float(f(x, y, aims[r])) for r, x, y in both)
        out.append(Ratio(scenario, name, values, tuple(r for r, _, _ in both), tuple(missing), goals.get(name), note))

    def p50(x: Row, y: Row, _t: float | None) -> float:
        return float(x["iter_p50_s"] / y["iter_p50_s"])

    def p99(x: Row, y: Row, _t: float | None) -> float:
        return float(x["iter_p99_s"] / y["iter_p99_s"])

    def tta(x: Row, y: Row, t: float | None) -> float:
        a, b = _tta(x, t), _tta(y, t)
        return a / b if math.isfinite(b) else (0.0 if math.isfinite(a) else 1.0)

    def acc(x: Row, y: Row, _t: float | None) -> float:
        return float(x["test_accuracy"] - y["test_accuracy"])

    best = best_mode(runs)
    modes = [(m, m, "") for m in FULL_MODES] + ([("best", best, f"best full DLCP mode: {best}")] if best else [])
    for label, mode, note in modes:
        vs = f"dlcp_{label}_vs_gloo_allreduce"
        add(f"p50_{vs}", mode, BASELINE, p50, note)
        add(f"p99_{vs}", mode, BASELINE, p99, note)
        add(f"tta_{vs}", mode, BASELINE, tta, note)
        add(f"accuracy_dlcp_{label}_minus_gloo_allreduce", mode, BASELINE, acc, note)

    def front(x: Row, y: Row, _t: float | None) -> float:
        return float(x["front_wait_p50_s"] / y["front_wait_p50_s"])

    for mode in FULL_MODES:
        add(f"p99_dlcp_{mode}_vs_off", mode, f"{mode}-off", p99)
        add(f"p50_dlcp_{mode}_vs_off", mode, f"{mode}-off", p50)
        one = f"{mode}-1class"
        add(f"front_wait_dlcp_{mode}_vs_1class", mode, one, front, "the wait for the front layers' bucket, p50")
        add(f"p50_dlcp_{mode}_vs_1class", mode, one, p50, "layer priorities on vs one priority class")
    add("p99_dlcp_ps_vs_ps_over_gloo_tcp", "ps", "gloo-ps", p99, "extra: a PS over gloo's point-to-point TCP")
    add("p50_dlcp_ps_vs_ps_over_gloo_tcp", "ps", "gloo-ps", p50, "extra: a PS over gloo's point-to-point TCP")
    return out


def missing_runs(runs: Runs, names: Mapping[str, str] | None = None) -> list[str]:
    """``'repeat 2 of DLCP ring'`` for each run that failed."""
    names = names or {}
    return [
        f"repeat {r + 1} of {names.get(key, key)}" for key, rows in runs.items() for r, row in enumerate(rows)
        if row is None
    ]  # fmt: skip


def spread(values: Sequence[float]) -> str:
    """``0.87x (0.82..0.91)``: the median and range of ratios."""
    if not values:
        return "n/a"

    def fmt(v: float) -> str:
        return "never" if math.isinf(v) else f"{v:.2f}"

    return f"{fmt(statistics.median(values))}x ({fmt(min(values))}..{fmt(max(values))})"


TIE = 0.10
"""A ratio within this of 1 calls no winner: in three ``make demo`` runs on one 2-core machine the per-repeat
ratios of DLCP ring to gloo all-reduce spread 0.98..1.05 at p50 and 0.77..1.06 in time to accuracy, and their
medians moved by up to 0.07 between runs (docs/testbed.md)."""


def leaning(values: Sequence[float]) -> str:
    """``faster`` when DLCP's figure is below ``1 - TIE`` of gloo's in :func:`needed` of the repeats, ``slower``
    when above ``1 + TIE`` in as many, else ``even``."""
    need = needed(len(values))
    if sum(v < 1 - TIE for v in values) >= need:
        return "faster"
    if sum(v > 1 + TIE for v in values) >= need:
        return "slower"
    return "even"


def verdict(runs: Runs, loaded: str = "") -> str:
    """The demo's last line: DLCP's best full mode against DDP's default at p50, p99 and time to accuracy.

    The medians of the per-repeat ratios with their range, then the verdict from p50 and time to accuracy
    (:func:`leaning`): "DLCP faster" or "DLCP slower" when both lean that way, "no clear difference" when both
    are even, else "mixed"; ``loaded`` (why the machine's load may have skewed it) is appended.
    """
    best = best_mode(runs)
    if best is None or BASELINE not in runs:
        return "verdict: none (the demo needs gloo all-reduce and a full DLCP mode that completed)"
    by_name = {r.name: r for r in ratios("demo", runs)}
    p50, p99, tta = (by_name[f"{k}_dlcp_best_vs_gloo_allreduce"] for k in ("p50", "p99", "tta"))
    if not p50.values:
        return f"verdict: none (no repeat in which both DLCP {best} and gloo all-reduce completed)"
    aims = [t for t in targets(runs) if t is not None]
    aim = f"{statistics.median(aims):.2f}" if aims else "target"
    ways = {leaning(p50.values), leaning(tta.values)}
    word = (
        f"DLCP {ways.pop()}" if ways in ({"faster"}, {"slower"}) else
        "no clear difference" if ways == {"even"} else
        f"mixed (p50: {leaning(p50.values)}, time to accuracy: {leaning(tta.values)})"
    )  # fmt: skip
    n = len(p50.values)
    line = (
        f"verdict: DLCP {best} vs DDP's default (gloo all-reduce), median of {n} repeat{'s' if n > 1 else ''} "
        f"(min..max): p50 {spread(p50.values)}, p99 {spread(p99.values)}, time to {aim} accuracy "
        f"{spread(tta.values)}: {word}"
    )
    return f"{line}; {loaded}" if loaded else line
