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


def _core(args: argparse.Namespace) -> int:
    from dlcp.bench.core import run

    r = run(args.size, args.payload, args.gro, args.repeat)
    if args.json:
        sys.stdout.write(json.dumps(r) + "\n")
        return 0
    sys.stdout.write(f"message {args.size / 1e6:.0f} MB, payload {args.payload} B, {args.gro} B per ingest call\n")
    sys.stdout.write(f"{'step':<10} {'seconds':>9} {'GB/s':>7} {'vs baseline':>12}\n")
    sys.stdout.write(f"{'memcpy':<10} {r['memcpy']['s']:>9.4f} {r['memcpy']['gbps']:>7.2f} {'1.00':>12}\n")
    for step in ("packetize", "ingest"):
        s = r[step]
        sys.stdout.write(f"{step:<10} {s['s']:>9.4f} {s['gbps']:>7.2f} {s['vs_memcpy']:>12.2f}\n")
    c = r["classify"]
    sys.stdout.write(f"{'classify':<10} {c['s']:>9.4f} {'':>7} {c['vs_abs_mean']:>12.2f}  (vs np.abs().mean())\n")
    return 0
