"""``dlcp demo --testbed``: one training job run several ways on an emulated cluster under incast.

The fabric (:class:`dlcp.apps.testbed.scenario.Scenario`): a star of DLCP software
switches, the parameter server's link the bottleneck, background web-search
flows and incast toward the server. The ways (``--ways``): DDP's default, gloo's
all-reduce over TCP (the baseline); full DLCP ring and PS; DLCP with the switch
features off (its packets are plain UDP to the switches: one queue, no selective
drop or trimming, 5-tuple ECMP). They take turns ``--repeat`` times. Output: a
side-by-side table of medians over the repeats, a plot of iteration times and
accuracy over time, the raw JSON, all in the results folder it names, and a last
line with the verdict: DLCP's best full mode against DDP's default.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dlcp.cli import argv as cli_argv
from dlcp.cli.plotting import pyplot

log = logging.getLogger(__name__)


def namespaces_unavailable() -> str | None:
    """Why this process cannot build a testbed, even in a user namespace of its own (not root), or None."""
    if not Path("/proc/self/ns/net").exists():
        return "this kernel has no network namespaces"
    if os.geteuid() != 0:
        from dlcp.testbed import userns

        why = userns.why_not()
        if why:
            return f"the testbed needs root, and without it cannot make a user namespace of its own here: {why}"
    return None


def train_config(args: argparse.Namespace) -> Any:
    from dlcp.apps.train.trainer import TrainConfig

    return TrainConfig(
        workers=args.workers, model=args.model, epochs=args.epochs, train_samples=args.samples, seed=args.seed,
        loss_bound=args.loss_bound, batch_size=32, eval_every=5, backend="dlcp",
    )  # fmt: skip


LOADED_SHARE = 0.25
"""The machine counts as loaded when processes other than the demo's took more than this share of its CPU
(all cores; half a core of two), the median over the demo's runs."""


def load_note(runs: Mapping[str, Sequence[Mapping[str, Any] | None]]) -> str:
    """Why the ratios may be skewed by other work on the machine, or ''."""
    shares = [
        r["cpu"]["other_share"] for rows in runs.values() for r in rows if r and "other_share" in r.get("cpu", {})
    ]
    if not shares or statistics.median(shares) <= LOADED_SHARE:
        return ""
    return (
        f"the machine was loaded: processes other than the demo's took {statistics.median(shares):.0%} of its CPU "
        f"during the runs (median; max {max(shares):.0%}), so these ratios may be skewed"
    )


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def table(runs: Mapping[str, Sequence[Mapping[str, Any] | None]], names: Mapping[str, str]) -> str:
    """One line per way: medians over the repeats (p50 and p99 with their min..max)."""
    from dlcp.apps.bench.compare import targets, time_to

    aims = targets(runs)
    valid = [t for t in aims if t is not None]
    aim = f"{statistics.median(valid):.2f}" if valid else "?"
    head = (
        f"{'run':<40}{'iter p50 ms':>20}{'iter p99 ms':>20}{f't->{aim} s':>10}{'final acc':>10}"
        f"{'loss accepted by class':>36}{'drops':>8}{'trims':>8}{'other cpu':>10}"
    )
    lines = [head, "-" * len(head)]

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} ({min(values):.0f}..{max(values):.0f})" if values else "-"

    for key, rows in runs.items():
        name = names.get(key, key) + (" (baseline)" if key == "gloo" else "")
        done = [(r, row) for r, row in enumerate(rows) if row is not None]
        failed = len(rows) - len(done)
        if not done:
            lines.append(f"{name:<40}  every run failed")
            continue
        p50 = [row["iter_p50_s"] * 1e3 for _, row in done]
        p99 = [row["iter_p99_s"] * 1e3 for _, row in done]
        tta = [time_to(row.get("accuracy_curve", []), aims[r] or 0.0) for r, row in done]
        reached = [t for t in tta if t is not None]
        ttt = "never" if not reached else f"{statistics.median(reached):.1f}"
        acc = statistics.median(row["test_accuracy"] for _, row in done)
        by_class: dict[str, list[float]] = {}
        for _, row in done:
            for k, v in (row.get("loss_fraction_by_class") or {}).items():
                by_class.setdefault(k, []).append(float(v))
        loss = " ".join(f"c{k}:{statistics.median(v) * 100:.2f}%" for k, v in sorted(by_class.items())) or "-"
        drops = statistics.median(row["switches"].get("dropped", 0) for _, row in done)
        trims = statistics.median(row["switches"].get("trimmed", 0) for _, row in done)
        other = _median([row["cpu"]["other_share"] for _, row in done if "other_share" in row.get("cpu", {})])
        lines.append(
            f"{name:<40}{cell(p50):>20}{cell(p99):>20}{ttt:>10}{acc:>10.4f}{loss:>36}{drops:>8.0f}{trims:>8.0f}"
            f"{'-' if other is None else f'{other:.0%}':>10}" + (f"  ({failed} failed)" if failed else "")
        )
    return "\n".join(lines)


def ways(text: str) -> tuple[Any, ...]:
    """``--ways``: the chosen runs of :data:`dlcp.apps.testbed.scenario.WAYS`, in the order given."""
    from dlcp import checks
    from dlcp.apps.testbed.scenario import WAYS

    by_key = {w.key: w for w in WAYS}
    keys = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in by_key]
    if bad or not keys or len(set(keys)) != len(keys):
        raise checks.BadValue("--ways", text, f"must name each of {', '.join(by_key)} at most once, comma-separated")
    return tuple(by_key[k] for k in keys)


def plot(runs: Mapping[str, Sequence[Mapping[str, Any] | None]], names: Mapping[str, str], path: Path,
         title: str) -> Path | None:  # fmt: skip
    """Iteration-time CDFs of every repeat's iterations pooled per way, with each way's median p50 marked, and
    the accuracy curves of every repeat; the baseline is drawn black and named so."""
    plt = pyplot()
    if plt is None:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    for i, (key, rows) in enumerate(runs.items()):
        done = [r for r in rows if r is not None]
        if not done:
            continue
        label = f"{names.get(key, key)}{' (baseline)' if key == 'gloo' else ''}"
        if key == "gloo":
            label = "gloo all-reduce (DDP default, baseline)"
        colour = "black" if key == "gloo" else f"C{i}"
        pooled = []
        for r in done:
            skipped = set(r.get("iter_skipped", []))
            pooled += [x * 1e3 for j, x in enumerate(r["iter_times_s"]) if j not in skipped]
        pooled.sort()
        p50 = statistics.median(r["iter_p50_s"] * 1e3 for r in done)
        width = 2.5 if key == "gloo" else 1.5
        ax1.plot(pooled, [(j + 1) / len(pooled) for j in range(len(pooled))], color=colour, lw=width,
                 label=f"{label}: median p50 {p50:.0f} ms")  # fmt: skip
        ax1.axvline(p50, color=colour, ls=":", lw=1)
        for n, r in enumerate(done):
            curve = r.get("accuracy_curve", [])
            if curve:
                ax2.plot([c[0] for c in curve], [c[2] for c in curve], color=colour, lw=width, alpha=0.8,
                         marker=".", label=label if n == 0 else None)  # fmt: skip
    ax1.set_xscale("log")
    ax1.set_xlabel("iteration time (ms, slowest worker; every repeat's iterations pooled)")
    ax1.set_ylabel("CDF")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    ax2.set_xlabel("training time (s)")
    ax2.set_ylabel("test accuracy (rank 0; one curve per repeat)")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_testbed_demo(args: argparse.Namespace) -> int:
    from dlcp import checks
    from dlcp.apps.train.trainer import check
    from dlcp.cli.train_demo import _out_dir, run_training_demo

    chosen = ways(args.ways)
    checks.in_range("--repeat", args.repeat, 1, 20)
    why = namespaces_unavailable()
    if why:
        sys.stderr.write(f"demo: cannot build the testbed: {why}; running the loopback demo instead\n")
        return run_training_demo(args)
    if os.geteuid() != 0:
        from dlcp.testbed import userns

        sys.stderr.write("demo: not root: running in a user and network namespace of its own\n")
        userns.reexec(cli_argv(*args.raw_argv))
    from dlcp.apps.bench.compare import missing_runs, verdict
    from dlcp.apps.testbed.scenario import Scenario, run_scenario
    from dlcp.testbed.jobs import new_folder
    from dlcp.testbed.lifecycle import TestbedError

    args.workers = max(3, args.workers)  # a PS and two workers at least, so the server's link sees incast
    cfg = train_config(args)
    check(cfg)
    out = new_folder(_out_dir(args.out), "testbed")

    def say(text: str) -> None:
        sys.stderr.write(f"demo: {text}\n")
        sys.stderr.flush()

    say(f"results folder: {out}")
    scenario = Scenario(
        name=f"demo{os.getpid() % 100000}",
        workers=max(3, args.workers),
        topology=args.fabric,
        switch=args.switch,
        seed=args.seed,
        loss_bound=args.loss_bound,
    )
    try:
        turns = run_scenario(scenario, chosen, cfg, out, repeat=args.repeat, traffic_s=300.0, progress=say)
    except TestbedError as exc:
        sys.stderr.write(f"demo: error: {exc}\n")
        return 1
    runs, names = turns.runs, turns.names
    (out / "demo.json").write_text(
        json.dumps({"repeat": args.repeat, "runs": runs, "failed": turns.failures}, indent=1)
    )
    shape = "a star" if scenario.topology == "star" else "a 2-leaf, 2-spine fabric"
    title = (
        f"DLCP on the testbed: {shape} with a {scenario.bottleneck_rate} bottleneck to the PS, under incast "
        f"({args.repeat} repeat{'s' if args.repeat > 1 else ''})"
    )
    picture = plot(runs, names, out / "testbed.png", title)
    sys.stdout.write("\n" + table(runs, names) + "\n")
    sys.stdout.write(
        f"\nfabric: {scenario.topology}, {args.workers} training hosts (h1 the parameter server) and one background "
        f"host; h1's link {scenario.bottleneck_rate}, {scenario.bottleneck_buffer} buffer; background "
        f"{scenario.cdf} flows at {scenario.traffic_load:g} load and incast of {scenario.incast} senders toward h1.\n"
        f"{args.repeat} repeat{'s' if args.repeat > 1 else ''}, the ways taking turns; each figure is the median over "
        "the repeats (p50 and p99 with their min..max). Iteration times: the slowest worker's; drops and trims: "
        "every switch port during a run; t->: seconds of training until rank 0's test accuracy reached 90% of the "
        "best final accuracy of that repeat; other cpu: the share of the machine's CPU that processes other than "
        "the demo's took during a run.\n"
    )
    for m in missing_runs(runs, names):
        sys.stdout.write(f"missing: {m} (a rank failed; see demo.json)\n")
    sys.stdout.write(f"\nresults folder: {out}\nraw results: {out / 'demo.json'}\n")
    if picture:
        sys.stdout.write(f"plot: {picture}\n")
    sys.stdout.write(f"where each run's iteration time went: dlcp testbed explain {out}\n")
    sys.stdout.write(verdict(runs, load_note(runs)) + "\n")
    return 1 if turns.failures else 0
