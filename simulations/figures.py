"""One folder per figure (``simulations/figures/<name>/``): scenarios, README, expected small output.

``run`` simulates the figure's scenario once per baseline (a sweep: local
processes or a Dask cluster) and saves the summaries as JSON; ``plot`` draws
the figure from that JSON only, so ``--plot-only`` re-plots without simulating.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlcp.simulations import runner

FIGURES_DIR = Path(__file__).resolve().parent / "figures"


@dataclass(frozen=True)
class Figure:
    name: str
    baselines: tuple[str, ...]
    metric: Callable[[dict[str, Any]], dict[str, float]]
    """The numbers the figure shows, from one run's summary."""
    ylabel: str


def _tail(r: dict[str, Any]) -> dict[str, float]:
    g = r["flows"]["gradient"]
    return {"p50_us": g["fct_p50_s"] * 1e6, "p99_us": g["fct_p99_s"] * 1e6, "max_us": g["fct_max_s"] * 1e6}


def _iteration(r: dict[str, Any]) -> dict[str, float]:
    times = [t for t in r["jobs"][0]["iteration_s"] if not math.isnan(t)]
    return {"mean_iteration_ms": sum(times) / len(times) * 1e3 if times else math.nan, "iterations": len(times)}


FIGURES: dict[str, Figure] = {
    "incast_tail": Figure("incast_tail", ("dlcp", "dctcp", "tcp"), _tail, "gradient FCT (us)"),
    "ps_iteration": Figure("ps_iteration", ("dlcp", "dctcp"), _iteration, "iteration time (ms)"),
}


def scenario_table(name: str, scale: str) -> dict[str, Any]:
    path = FIGURES_DIR / name / f"{scale}.toml"
    with open(path, "rb") as f:
        return tomllib.load(f)


def run(
    name: str,
    scale: str,
    out_dir: Path,
    parallel: int = 1,
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    fig = FIGURES[name]
    base = scenario_table(name, scale)
    tables = [dict(base, baseline=b) for b in fig.baselines]
    results = runner.sweep(tables, parallel=parallel, address=address, progress=progress)
    data = {
        "figure": name,
        "scale": scale,
        "rows": {b: fig.metric(r) for b, r in zip(fig.baselines, results, strict=True)},
        "runs": results,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}-{scale}.json").write_text(json.dumps(data, indent=1, sort_keys=True))
    return data


def load(name: str, scale: str, out_dir: Path) -> dict[str, Any]:
    path = out_dir / f"{name}-{scale}.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no saved data; run `dlcp sim figure {name} --scale {scale}` first")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def plot(data: dict[str, Any], out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = FIGURES[data["figure"]]
    rows = data["rows"]
    metrics = [k for k in next(iter(rows.values())) if k != "iterations"]
    ax = plt.figure(figsize=(6, 3.5)).add_subplot()
    width = 0.8 / len(rows)
    for i, (baseline, vals) in enumerate(rows.items()):
        xs = [j + i * width for j in range(len(metrics))]
        ax.bar(xs, [vals[m] for m in metrics], width, label=baseline)
    ax.set_xticks([j + width * (len(rows) - 1) / 2 for j in range(len(metrics))], metrics)
    ax.set_ylabel(fig.ylabel)
    ax.set_title(f"{fig.name} ({data['scale']})")
    ax.legend()
    path = out_dir / f"{fig.name}-{data['scale']}.png"
    plt.tight_layout()
    plt.savefig(path, dpi=120)
    plt.close("all")
    return path
