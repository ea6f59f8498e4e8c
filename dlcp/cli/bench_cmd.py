"""``dlcp bench``: benchmarks that print ratios against a baseline measured in the same run."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    area = sub.add_parser("bench", help="benchmarks (ratios against a same-run baseline)")
    verbs = area.add_subparsers(dest="verb", metavar="VERB", required=True)
    core = verbs.add_parser(
        "core",
        help="packetize / ingest / classify throughput against memcpy",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    core.add_argument("--size", type=int, default=64 << 20, help="message bytes")
    core.add_argument("--payload", type=int, default=8192, help="payload bytes per packet")
    core.add_argument("--gro", type=int, default=65536, help="bytes per ingest call (a GRO buffer)")
    core.add_argument("--repeat", type=int, default=3, help="repetitions; the best is reported")
    core.add_argument("--json", action="store_true", help="print JSON")
    core.set_defaults(func=_core)
    register_allreduce(verbs)


def _core(args: argparse.Namespace) -> int:
    from dlcp.apps.bench.core import run

    r = run(args.size, args.payload, args.gro, args.repeat)
    if args.json:
        sys.stdout.write(json.dumps(r) + "\n")
        return 0
    sys.stdout.write(f"message {args.size / 1e6:.0f} MB, payload {args.payload} B, {args.gro} B per ingest call\n")
    sys.stdout.write(f"{'step':<10} {'seconds':>9} {'GB/s':>7} {'vs baseline':>12}\n")
    sys.stdout.write(f"{'memcpy':<10} {r['memcpy']['s']:>9.4f} {r['memcpy']['gbytes_per_s']:>7.2f} {'1.00':>12}\n")
    for step in ("packetize", "ingest"):
        s = r[step]
        sys.stdout.write(f"{step:<10} {s['s']:>9.4f} {s['gbytes_per_s']:>7.2f} {s['vs_memcpy']:>12.2f}\n")
    c = r["classify"]
    sys.stdout.write(f"{'classify':<10} {c['s']:>9.4f} {'':>7} {c['vs_abs_mean']:>12.2f}  (vs np.abs().mean())\n")
    return 0


def register_allreduce(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = verbs.add_parser(
        "allreduce",
        help="DLCP all-reduce against gloo on loopback",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--workers", type=int, default=2, help="processes")
    p.add_argument("--size", type=int, default=64 << 20, help="tensor bytes (float32)")
    p.add_argument("--mode", choices=("ring", "ps"), default="ring", help="ring all-reduce or parameter server")
    p.add_argument("--inject-loss", type=float, default=0.0, help="fraction of data packets each receiver drops")
    p.add_argument("--loss-pattern", choices=("random", "bursty"), default="random", help="injected loss pattern")
    p.add_argument("--repeat", type=int, default=10, help="timed iterations")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    p.add_argument("--baseline", choices=("gloo", "none"), default="gloo", help="baseline run in the same processes")
    p.add_argument("--payload", type=int, default=8192, help="DLCP payload bytes per packet")
    p.add_argument(
        "--reorder-window", type=int, default=0,
        help="transport.reorder_window: early NACKs of reliable messages (0: off)",
    )  # fmt: skip
    p.add_argument(
        "--rx-nice", type=int, default=0,
        help="transport.rx_nice: DLCP's receive thread's nice relative to its rank's main thread"
        " (negative needs CAP_SYS_NICE; 0: inherit)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--config", metavar="FILE", default=None,
        help="DLCP job file (TOML): DLCP runs with its [policy] (loss bounds, drop classes) and [limits]",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_allreduce)


def _allreduce(args: argparse.Namespace) -> int:
    from dlcp.apps.bench.allreduce import BenchConfig, run

    cfg = BenchConfig(
        workers=args.workers, size=args.size, mode=args.mode, inject_loss=args.inject_loss,
        loss_pattern=args.loss_pattern, repeat=args.repeat, warmup=args.warmup, baseline=args.baseline,
        payload_bytes=args.payload, reorder_window=args.reorder_window,
        rx_nice=args.rx_nice, seed=args.seed, config=args.config,
    )  # fmt: skip
    r = run(cfg)
    if args.json:
        sys.stdout.write(json.dumps(r) + "\n")
        return 0
    sys.stdout.write(
        f"all-reduce {cfg.size / 1e6:.1f} MB, {cfg.workers} workers, mode {cfg.mode},"
        f" injected loss {cfg.inject_loss:.2%} ({cfg.loss_pattern}), {cfg.repeat} iterations\n"
    )
    sys.stdout.write(f"{'':<15} {'median s':>10} {'p99 s':>10} {'GB/s':>8} {'CPU s/GB':>9}\n")
    for name in ("gloo", "dlcp_lossless", "dlcp"):
        if name in r:
            v = r[name]
            label = {"dlcp_lossless": "dlcp (no loss)", "dlcp": "dlcp" + (" (loss)" if cfg.inject_loss else "")}.get(
                name, name
            )
            sys.stdout.write(
                f"{label:<15} {v['median_s']:>10.4f} {v['p99_s']:>10.4f} {v['gbytes_per_s']:>8.3f}"
                f" {v['cpu_s_per_gbyte']:>9.3f}\n"
            )
    d = r["dlcp"]
    sys.stdout.write(
        f"dlcp loss accepted {d['loss_fraction']:.3%}, retransmitted {d['retransmitted_packets']} packets,"
        f" injected drops {d['injected_drops']}\n"
    )
    if "ratio_gbytes_per_s_vs_gloo" in r:
        sys.stdout.write(f"ratio dlcp/gloo (GB/s): {r['ratio_gbytes_per_s_vs_gloo']:.2f}\n")
        sys.stdout.write(
            f"ratio dlcp/gloo (CPU s per GB all-reduced, summed over ranks): {r['ratio_cpu_s_per_gbyte_vs_gloo']:.2f}\n"
        )
    if "ratio_p99_lossy_vs_lossless_median" in r:
        sys.stdout.write(
            f"ratio dlcp p99 under loss / lossless median: {r['ratio_p99_lossy_vs_lossless_median']:.2f}\n"
            f"ratio dlcp p99 under loss / lossless p99: {r['ratio_p99_lossy_vs_lossless_p99']:.2f}\n"
        )
    return 0
