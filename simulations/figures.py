"""One folder per figure (``simulations/figures/<name>/``): scenarios, README, expected small output.

``run`` simulates the figure's scenario once per variant (a baseline, or a
baseline with other values: a loss bound, a fabric size) as one sweep (local
processes or a Dask cluster) and saves the summaries as JSON; ``plot`` draws
the figure from that JSON only, so ``--plot-only`` re-plots without simulating.
``compare`` checks a run's rows against the figure's ``expected_small.json``.
Every finished run is saved under ``<out>/<name>-<scale>.points/`` as it completes, so a killed
sweep run again resumes from its saved points; a run that fails is reported with its parameters
(``failed``) and the others are kept.
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


Variants = Callable[[str], list[tuple[str, dict[str, Any]]]]
"""(label, overrides of the scenario table) per run, for a scale."""


@dataclass(frozen=True)
class Figure:
    name: str
    variants: Variants
    metric: Callable[[dict[str, Any]], dict[str, float]]
    """The numbers the figure shows, from one run's summary."""
    ylabel: str


def baselines(*names: str, paper: tuple[str, ...] = ()) -> Variants:
    """One run per baseline; at paper scale only ``paper``'s when given (the TCP baselines' runs cost the most)."""
    return lambda scale: [(b, {"baseline": b}) for b in (paper if scale == "paper" and paper else names)]


def _sweep(field: str, small: tuple[Any, ...], paper: tuple[Any, ...], bases: tuple[str, ...]) -> Variants:
    """One run per (baseline, value of a dotted field)."""

    def variants(scale: str) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for b in bases:
            for v in small if scale == "small" else paper:
                over: dict[str, Any] = {"baseline": b}
                cur = over
                *path, last = field.split(".")
                for part in path:
                    cur = cur.setdefault(part, {})
                cur[last] = v
                out.append((f"{b} {last}={v}", over))
        return out

    return variants


def _tail(r: dict[str, Any]) -> dict[str, float]:
    g = r["flows"]["gradient"]
    return {"p50_us": g["fct_p50_s"] * 1e6, "p99_us": g["fct_p99_s"] * 1e6, "max_us": g["fct_max_s"] * 1e6}


def _iteration(r: dict[str, Any]) -> dict[str, float]:
    times = [t for t in r["jobs"][0]["iteration_s"] if not math.isnan(t)]
    job = r["flows"][r["jobs"][0]["tag"]]
    return {
        "mean_iteration_ms": sum(times) / len(times) * 1e3 if times else math.nan,
        "iterations": len(times),
        # how far a run got when no iteration finished before stop_s: the job's messages sent and completed
        "job_messages": job["count"],
        "job_messages_completed": job["completed"],
    }


def _tail_and_loss(r: dict[str, Any]) -> dict[str, float]:
    g = r["flows"]["gradient"]
    return {**_tail(r), "loss_pct": g["loss_fraction"] * 100, "retx_per_msg": g["retransmitted_packets"] / g["count"]}


def _scale(r: dict[str, Any]) -> dict[str, float]:
    return {**_tail(r), "hosts": r["hosts"], "packets_per_s": r["perf"]["packets_per_s"]}


FIGURES: dict[str, Figure] = {
    "incast_tail": Figure("incast_tail", baselines("dlcp", "dctcp", "tcp", "pfabric"), _tail, "gradient FCT (us)"),
    "ps_iteration": Figure(
        "ps_iteration", baselines("dlcp", "dctcp", "tcp", paper=("dlcp", "dctcp")), _iteration, "iteration time (ms)"
    ),
    "ring_iteration": Figure(
        "ring_iteration", baselines("dlcp", "dctcp", "tcp", paper=("dlcp", "dctcp")), _iteration, "iteration time (ms)"
    ),
    "ablation": Figure(
        "ablation",
        baselines(
            "dlcp",
            "dlcp_no_priority",
            "dlcp_no_drop",
            "dlcp_no_spray",
            "dlcp_no_bound",
            "tensor_priority",
            "pfabric",
            "dctcp",
        ),
        _tail,
        "gradient FCT (us)",
    ),
    "loss_bound": Figure(
        "loss_bound",
        _sweep("dlcp.policy.push.loss_bound", (0.0, 0.01, 0.035, 0.1), (0.0, 0.006, 0.01, 0.02, 0.035, 0.1), ("dlcp",)),
        _tail_and_loss,
        "gradient FCT (us) / %",
    ),
    "scale": Figure(
        "scale",
        _sweep("topology.leaves", (2, 4, 8), (1, 2, 4, 8, 16, 32, 64), ("dlcp", "dctcp")),
        _scale,
        "gradient FCT (us)",
    ),
}

TOLERANCE = 0.05
"""A small run is deterministic (seeded); its rows may move by this fraction between compilers or
libm versions, and no further without the expected output being regenerated on purpose."""


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
    variants = fig.variants(scale)
    tables = [merge(base, over) for _, over in variants]
    points = out_dir / f"{name}-{scale}.points"
    results = runner.sweep(tables, parallel=parallel, address=address, progress=progress, points_dir=points)
    done = [(v, r) for v, r in zip(variants, results, strict=True) if runner.FAILED not in r]
    data = {
        "figure": name,
        "scale": scale,
        "rows": {label: fig.metric(r) for (label, _), r in done},
        "failed": [
            {"label": label, "overrides": over, "error": r[runner.FAILED]}
            for (label, over), r in zip(variants, results, strict=True)
            if runner.FAILED in r
        ],
        "runs": [r for _, r in done],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}-{scale}.json").write_text(json.dumps(data, indent=1, sort_keys=True))
    return data


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s values, tables merged key by key."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def expected(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIGURES_DIR / name / "expected_small.json").read_text())
    return data


def compare(rows: dict[str, dict[str, float]], want: dict[str, dict[str, float]], rel: float = TOLERANCE) -> list[str]:
    """Differences between a run's rows and the expected ones beyond ``rel`` (empty: they agree)."""
    diffs = []
    if set(rows) != set(want):
        diffs.append(f"variants {sorted(rows)} != expected {sorted(want)}")
    for label in sorted(set(rows) & set(want)):
        for metric, w in want[label].items():
            g = rows[label].get(metric, math.nan)
            if metric == "packets_per_s":
                continue  # wall-clock speed: not a simulated result
            if not (math.isclose(g, w, rel_tol=rel, abs_tol=1e-9) or (math.isnan(g) and math.isnan(w))):
                diffs.append(f"{label} {metric}: {g:.6g}, expected {w:.6g} (+-{rel:.0%})")
    return diffs


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
    skip = ("iterations", "hosts", "packets_per_s", "job_messages", "job_messages_completed")
    metrics = [k for k in next(iter(rows.values())) if k not in skip]
    ax = plt.figure(figsize=(max(6, len(rows) * len(metrics) * 0.35), 3.5)).add_subplot()
    width = 0.8 / len(rows)
    for i, (baseline, vals) in enumerate(rows.items()):
        xs = [j + i * width for j in range(len(metrics))]
        bars = ax.bar(xs, [0.0 if math.isnan(vals[m]) else vals[m] for m in metrics], width, label=baseline)
        for x, m in zip(xs, metrics, strict=True):
            if math.isnan(vals[m]):  # e.g. no iteration finished before the run's stop_s
                ax.text(
                    x,
                    0,
                    "did not finish",
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize="small",
                    color=bars.patches[0].get_facecolor(),
                )
    ax.set_xticks([j + width * (len(rows) - 1) / 2 for j in range(len(metrics))], metrics)
    ax.set_ylabel(fig.ylabel)
    ax.set_title(f"{fig.name} ({data['scale']})")
    ax.legend(fontsize="small")
    path = out_dir / f"{fig.name}-{data['scale']}.png"
    plt.tight_layout()
    plt.savefig(path, dpi=120)
    plt.close("all")
    return path
