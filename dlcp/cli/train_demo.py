"""The training demo behind ``dlcp demo``: gloo vs DLCP vs DLCP under loss, side by side."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from dlcp import checks
from dlcp.apps.train.trainer import TrainConfig, check, run
from dlcp.cli.plotting import pyplot
from dlcp.cli.train_cmd import megabytes

log = logging.getLogger(__name__)


def _runs(args: argparse.Namespace) -> list[tuple[str, TrainConfig]]:
    """The three runs, every value checked (:class:`~dlcp.checks.BadValue`) before any of them starts."""
    common: dict[str, Any] = {
        "workers": args.workers, "model": args.model, "epochs": args.epochs, "train_samples": args.samples,
        "seed": args.seed, "loss_bound": args.loss_bound,
    }  # fmt: skip
    return [
        ("gloo", TrainConfig(**common, backend="gloo")),
        ("dlcp", TrainConfig(**common, backend="dlcp", mode="ring")),
        (f"dlcp+{args.inject_loss * 100:g}% loss",
         TrainConfig(**common, backend="dlcp", mode="ring", inject_loss=args.inject_loss)),
    ]  # fmt: skip


def _out_dir(path: str) -> Path:
    """``--out`` as a folder this process can write, created if missing."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise checks.BadValue("--out", path, "must be a folder, and it is a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise checks.BadValue("--out", path, f"must be a folder that can be created ({exc.strerror})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise checks.BadValue("--out", path, "must be a folder this user can write")
    return out


def run_training_demo(args: argparse.Namespace) -> int:
    runs = _runs(args)
    check(runs[0][1])  # the runs differ only in backend and loss: one check covers the machine's share
    out_dir = _out_dir(args.out)
    results: list[dict[str, Any]] = []
    for i, (name, cfg) in enumerate(runs, 1):
        sys.stderr.write(f"[{i}/{len(runs)}] training with {name} ({args.workers} workers, {args.model}) ...\n")
        sys.stderr.flush()
        start = time.perf_counter()
        r = run(cfg, checked=True)
        r["name"] = name
        results.append(r)
        sys.stderr.write(f"[{i}/{len(runs)}] {name}: done in {time.perf_counter() - start:.0f} s\n")
    (out_dir / "demo.json").write_text(json.dumps(results, indent=1))
    plot = _plot(results, out_dir / "iteration_times.png")
    sys.stdout.write(f"\n{'run':<16} {'test acc':>9} {'iter p50 ms':>12} {'iter p99 ms':>12} {'loss accepted':>14}"
                     f" {'MB sent':>9} {'replicas':>9}\n")  # fmt: skip
    for r in results:
        sys.stdout.write(
            f"{r['name']:<16} {r['test_accuracy']:>9.4f} {r['iter_p50_s'] * 1e3:>12.1f} {r['iter_p99_s'] * 1e3:>12.1f}"
            f" {r['loss_fraction']:>14.3%} {megabytes(r['bytes_sent']):>9}"
            f" {'same' if r['replicas_identical'] else 'DIFFER':>9}\n"
        )
    sys.stdout.write(
        "\nMB sent: bytes all workers sent while training, measured: TCP payload from the kernel's per-socket"
        " counters\n(gloo), DLCP data packets (header and payload, retransmissions included) from the transport's"
        " counters.\n"
    )
    sys.stdout.write(f"\nraw results: {out_dir / 'demo.json'}" + (f"\nplot: {plot}" if plot else "") + "\n")
    return 0


def _plot(results: list[dict[str, Any]], path: Path) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        t = [x * 1e3 for x in r["iter_times_s"]]
        ax1.plot(t, label=r["name"], linewidth=1)
        ax2.plot(sorted(t), [(i + 1) / len(t) for i in range(len(t))], label=r["name"])
    ax1.set_xlabel("iteration")
    ax1.set_ylabel("iteration time (ms, slowest worker)")
    ax1.legend()
    ax2.set_xlabel("iteration time (ms)")
    ax2.set_ylabel("CDF")
    ax2.grid(alpha=0.3)
    fig.suptitle("DLCP vs gloo: iteration times")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
