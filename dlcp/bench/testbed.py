"""``dlcp testbed bench``: DLCP against gloo on the emulated cluster, every ratio measured in the same run.

Two scenarios on a star of software switches (:class:`dlcp.testbed.scenario.Scenario`):

* ``incast``: background web-search flows and incast toward the parameter server, whose link is the
  bottleneck; the same PS job over gloo's TCP, with DLCP and the switch features off, and with full DLCP,
  and gloo's ring all-reduce for reference;
* ``loss``: 1% random loss on the parameter server's link, no other traffic, every link at the hosts' 1 Gbit/s;
  gloo (PS, and ring for reference) against full DLCP (PS);
* ``loss-200mbit`` (only when named): the same with that link at the incast scenario's 200 Mbit/s. There a
  push takes about as long as TCP's shortest retransmission timeout, and DLCP and gloo share one floor
  (docs/results.md, #14): no transport can halve gloo's p99 there, so the goal is judged on ``loss``.

Each scenario's fabric comes up once; its ways then take turns, ``repeat`` times, so that a slow
moment of the machine hits every way alike. For each repeat the ratios are computed within the
repeat; the report gives their median and their range (min..max) over the repeats.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlcp.host.train import TrainConfig
from dlcp.testbed import spec as spec_mod
from dlcp.testbed.lifecycle import Testbed
from dlcp.testbed.scenario import Scenario, Way, run_way

GLOO_RING = Way("gloo/TCP ring", "gloo", "ring")
GLOO = Way("gloo/TCP ps", "gloo", "ps")
PS_OFF = Way("DLCP ps, switch off", "dlcp", "ps", features=False)
PS_ON = Way("DLCP ps", "dlcp", "ps")

SCENARIOS: dict[str, tuple[Scenario, tuple[Way, ...]]] = {
    "incast": (Scenario(name="bincast"), (GLOO, GLOO_RING, PS_OFF, PS_ON)),
    "loss": (
        Scenario(name="bloss", bottleneck_rate="1gbit", bottleneck_loss=0.01, traffic_load=0.0, incast=0),
        (GLOO, GLOO_RING, PS_ON),
    ),
    "loss-200mbit": (
        Scenario(name="blosb", bottleneck_loss=0.01, traffic_load=0.0, incast=0),
        (GLOO, GLOO_RING, PS_ON),
    ),
}
"""The goals compare DLCP's PS mode with the same PS traffic over gloo's TCP (``dlcp train --backend gloo
--mode ps``); gloo's own all-reduce (ring) is measured beside them for reference: with one server on the
bottleneck it moves a third less through it than any PS does."""
DEFAULT_SCENARIOS = ("incast", "loss")
"""What a plain ``dlcp testbed bench`` runs (``--scenario`` names others)."""
GOALS = {
    ("incast", "p99_full_vs_gloo"): "at most 0.60 (p99 at least 40% below gloo's)",
    ("incast", "accuracy_full_minus_gloo"): "at least -0.005",
    ("incast", "p99_full_vs_off"): "below 1 (the switch features help)",
    ("loss", "p99_full_vs_gloo"): "at most 0.50 (p99 at least 50% below gloo's)",
}


@dataclass(frozen=True)
class Ratio:
    scenario: str
    name: str
    values: tuple[float, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "name": self.name, "median": statistics.median(self.values),
            "min": min(self.values), "max": max(self.values), "values": list(self.values),
            "goal": GOALS.get((self.scenario, self.name), ""),
        }  # fmt: skip


def _ratios(scenario: str, runs: dict[str, list[dict[str, Any]]]) -> list[Ratio]:
    gloo, full = runs[GLOO.name], runs[PS_ON.name]
    pairs = list(zip(full, gloo, strict=True))
    out = [
        Ratio(scenario, "p99_full_vs_gloo", tuple(f["iter_p99_s"] / g["iter_p99_s"] for f, g in pairs)),
        Ratio(scenario, "p50_full_vs_gloo", tuple(f["iter_p50_s"] / g["iter_p50_s"] for f, g in pairs)),
        Ratio(
            scenario, "accuracy_full_minus_gloo",
            tuple(f["test_accuracy"] - g["test_accuracy"] for f, g in pairs),
        ),
    ]  # fmt: skip
    if GLOO_RING.name in runs:
        ring = list(zip(full, runs[GLOO_RING.name], strict=True))
        out += [
            Ratio(scenario, "p99_full_vs_gloo_ring", tuple(f["iter_p99_s"] / g["iter_p99_s"] for f, g in ring)),
            Ratio(scenario, "p50_full_vs_gloo_ring", tuple(f["iter_p50_s"] / g["iter_p50_s"] for f, g in ring)),
        ]
    if PS_OFF.name in runs:
        off = runs[PS_OFF.name]
        out.append(
            Ratio(
                scenario,
                "p99_full_vs_off",
                tuple(f["iter_p99_s"] / o["iter_p99_s"] for f, o in zip(full, off, strict=True)),
            )
        )
    return out


def run(
    cfg: TrainConfig,
    folder: Path,
    *,
    repeat: int,
    scenarios: tuple[str, ...] = DEFAULT_SCENARIOS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    say = progress or (lambda text: None)
    ratios: list[Ratio] = []
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name in scenarios:
        scenario, ways = SCENARIOS[name]
        # The fabric's name carries the process id: two benches on one machine must not share namespaces.
        scenario = dataclasses.replace(
            scenario, name=f"{scenario.name}{os.getpid() % 100000}", loss_bound=cfg.loss_bound
        )
        sub = folder / name
        sub.mkdir(parents=True, exist_ok=True)
        spec = spec_mod.load(scenario.write(sub))
        runs: dict[str, list[dict[str, Any]]] = {w.name: [] for w in ways}
        with Testbed(spec):
            tb = Testbed(spec)
            for r in range(repeat):
                for w in ways:
                    say(f"{name} {r + 1}/{repeat}: {w.name} ...")
                    res = run_way(tb, w, cfg, sub / f"{r}-{w.backend}-{w.mode}-{int(w.features)}", traffic_s=300.0)
                    row = res.as_dict()
                    runs[w.name].append(row)
                    say(f"{name} {r + 1}/{repeat}: {w.name}: p50 {row['iter_p50_s'] * 1e3:.1f} ms, "
                        f"p99 {row['iter_p99_s'] * 1e3:.1f} ms, accuracy {row['test_accuracy']:.4f}")  # fmt: skip
        raw[name] = runs
        ratios += _ratios(name, runs)
    return {
        "config": {"model": cfg.model, "samples": cfg.train_samples, "epochs": cfg.epochs, "workers": cfg.workers,
                   "loss_bound": cfg.loss_bound, "repeat": repeat},
        "ratios": [r.as_dict() for r in ratios],
        "runs": {s: {w: [{k: v for k, v in row.items() if k != "iter_times_s"} for row in rows]
                     for w, rows in runs.items()} for s, runs in raw.items()},
        "folder": str(folder),
    }  # fmt: skip
