"""``dlcp demo --testbed``: one training job, in PS and ring mode, three ways, on an emulated cluster under incast.

The fabric (:class:`dlcp.testbed.scenario.Scenario`): a star of DLCP software
switches, the parameter server's link the bottleneck, background web-search
flows and incast toward the server. The ways: gloo over TCP; DLCP with the
switch features off (its packets are plain UDP to the switches: one queue, no
selective drop or trimming, 5-tuple ECMP); full DLCP. Output: a side-by-side
table, a plot of iteration times and accuracy over time, the raw JSON, all in
the results folder it names.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

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
    from dlcp.host.train import TrainConfig

    return TrainConfig(
        workers=args.workers, model=args.model, epochs=args.epochs, train_samples=args.samples, seed=args.seed,
        loss_bound=args.loss_bound, batch_size=32, eval_every=5, backend="dlcp",
    )  # fmt: skip


def time_to(curve: list[list[float]], target: float) -> float | None:
    for t, _it, acc in curve:
        if acc >= target:
            return float(t)
    return None


def table(rows: list[dict[str, Any]], target: float) -> str:
    head = (
        f"{'run':<22}{'iter p50 ms':>12}{'iter p99 ms':>12}{f't->{target:.2f} s':>11}{'final acc':>10}"
        f"{'loss accepted by class':>36}{'drops':>8}{'trims':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ttt = time_to(r.get("accuracy_curve", []), target)
        by_class = r.get("loss_fraction_by_class")
        loss = " ".join(f"c{k}:{float(v) * 100:.2f}%" for k, v in sorted(by_class.items())) if by_class else "-"
        sw = r["switches"]
        lines.append(
            f"{r['name']:<22}{r['iter_p50_s'] * 1e3:>12.1f}{r['iter_p99_s'] * 1e3:>12.1f}"
            f"{'never' if ttt is None else f'{ttt:.1f}':>11}{r['test_accuracy']:>10.4f}{loss:>36}"
            f"{sw.get('dropped', 0):>8}{sw.get('trimmed', 0):>8}"
        )
    return "\n".join(lines)


def ways(text: str) -> tuple[Any, ...]:
    """``--ways``: the chosen runs of :data:`dlcp.testbed.scenario.WAYS`, in the order given."""
    from dlcp import checks
    from dlcp.testbed.scenario import WAYS

    by_key = {w.key: w for w in WAYS}
    keys = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in by_key]
    if bad or not keys or len(set(keys)) != len(keys):
        raise checks.BadValue("--ways", text, f"must name each of {', '.join(by_key)} at most once, comma-separated")
    return tuple(by_key[k] for k in keys)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in rows:
        skipped = set(r.get("iter_skipped", []))
        t = sorted(x * 1e3 for i, x in enumerate(r["iter_times_s"]) if i not in skipped)
        ax1.plot(t, [(i + 1) / len(t) for i in range(len(t))], label=r["name"])
        curve = r.get("accuracy_curve", [])
        if curve:
            ax2.plot([c[0] for c in curve], [c[2] for c in curve], marker=".", label=r["name"])
    ax1.set_xscale("log")
    ax1.set_xlabel("iteration time (ms, slowest worker)")
    ax1.set_ylabel("CDF")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    ax2.set_xlabel("training time (s)")
    ax2.set_ylabel("test accuracy (rank 0)")
    ax2.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_testbed_demo(args: argparse.Namespace) -> int:
    from dlcp.cli.train_demo import _out_dir, run_training_demo
    from dlcp.host.train import check

    chosen = ways(args.ways)
    why = namespaces_unavailable()
    if why:
        sys.stderr.write(f"demo: cannot build the testbed: {why}; running the loopback demo instead\n")
        return run_training_demo(args)
    if os.geteuid() != 0:
        from dlcp.testbed import userns

        sys.stderr.write("demo: not root: running in a user and network namespace of its own\n")
        userns.reexec(args.raw_argv)
    from dlcp.testbed.jobs import WorkerFailed, new_folder
    from dlcp.testbed.lifecycle import TestbedError
    from dlcp.testbed.scenario import Scenario, run_scenario

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
        results = run_scenario(scenario, chosen, cfg, out, traffic_s=300.0, progress=say)
    except (TestbedError, WorkerFailed) as exc:
        sys.stderr.write(f"demo: error: {exc}\n")
        return 1
    rows = [r.as_dict() for r in results]
    (out / "demo.json").write_text(json.dumps(rows, indent=1))
    target = round(0.9 * max(r["test_accuracy"] for r in rows), 2)
    shape = "a star" if scenario.topology == "star" else "a 2-leaf, 2-spine fabric"
    title = f"DLCP on the testbed: {shape} with a {scenario.bottleneck_rate} bottleneck to the PS, under incast"
    picture = plot(rows, out / "testbed.png", title)
    sys.stdout.write("\n" + table(rows, target) + "\n")
    sys.stdout.write(
        f"\nfabric: {scenario.topology}, {args.workers} training hosts (h1 the parameter server) and one background "
        f"host; h1's link {scenario.bottleneck_rate}, {scenario.bottleneck_buffer} buffer; background "
        f"{scenario.cdf} flows at {scenario.traffic_load:g} load and incast of {scenario.incast} senders toward h1.\n"
        "iteration times: the slowest worker's; drops and trims: every switch port during the run; "
        f"t->{target:.2f}: seconds of training until rank 0's test accuracy reached {target:.2f} "
        "(90% of the best final accuracy).\n"
    )
    sys.stdout.write(f"\nresults folder: {out}\nraw results: {out / 'demo.json'}\n")
    if picture:
        sys.stdout.write(f"plot: {picture}\n")
    return 0
