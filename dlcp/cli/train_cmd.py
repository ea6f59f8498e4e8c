"""``dlcp train``: multi-process CPU training with DLCP (or gloo) on a synthetic task."""

from __future__ import annotations

import argparse
import json
import sys

from dlcp.apps.train import node


def megabytes(n: int | None) -> str:
    """Bytes as MB (10**6), or n/a where they were not measured."""
    return "n/a" if n is None else f"{n / 1e6:.1f}"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "train",
        help="train a model with N worker processes over DLCP or gloo",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    node.add_arguments(p)
    p.add_argument(
        "--node",
        action="store_true",
        help="run one rank of a multi-node job, as torchrun or dlcp testbed run start it: rank, world and "
        "rendezvous from RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT (or DLCP_STORE_*), the data address from "
        "DLCP_HOST, the job's transport and policy from DLCP_CONFIG; prints the rank's result as JSON",
    )
    node.add_progress(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:
    from dlcp.apps.train.trainer import run

    if args.node:
        node.run(args)
        return 0
    cfg = node.config(args, args.workers)
    r = run(cfg)
    if args.json:
        r = {k: v for k, v in r.items() if k != "iter_times_s"}
        sys.stdout.write(json.dumps(r) + "\n")
        return 0
    sys.stdout.write(
        f"{cfg.backend} {cfg.mode if cfg.backend == 'dlcp' else ''} model={cfg.model} workers={cfg.workers}"
        f" epochs={cfg.epochs} loss-bound={cfg.loss_bound} inject-loss={cfg.inject_loss}\n"
        f"test accuracy {r['test_accuracy']:.4f}  iteration p50 {r['iter_p50_s'] * 1e3:.1f} ms"
        f"  p99 {r['iter_p99_s'] * 1e3:.1f} ms  sent {megabytes(r['bytes_sent'])} MB"
        f" (TCP {megabytes(r['tcp_bytes_sent'])}, DLCP {megabytes(r['dlcp_bytes_sent'])})"
        f"  accepted loss {r['loss_fraction']:.3%}  replicas identical: {r['replicas_identical']}\n"
    )
    return 0
