"""``dlcp train``: multi-process CPU training with DLCP (or gloo) on a synthetic task."""

from __future__ import annotations

import argparse
import json
import sys

from dlcp.models import MODELS


def megabytes(n: int | None) -> str:
    """Bytes as MB (10**6), or n/a where they were not measured."""
    return "n/a" if n is None else f"{n / 1e6:.1f}"


def _plain(value: object) -> object:
    """numpy scalars and arrays as JSON numbers and arrays."""
    tolist = getattr(value, "tolist", None)
    if tolist is None:
        raise TypeError(f"{type(value).__name__} is not JSON serializable")
    return tolist()


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "train",
        help="train a model with N worker processes over DLCP or gloo",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument(
        "--mode",
        choices=("ring", "ps"),
        default="ring",
        help="ring all-reduce or parameter server (with gloo: rank 0 over TCP send/recv)",
    )
    p.add_argument("--backend", choices=("dlcp", "gloo"), default="dlcp", help="gradient exchange")
    p.add_argument(
        "--model",
        choices=tuple(MODELS),
        default="mlp",
        help="; ".join(f"{name}: {m.summary}" for name, m in MODELS.items())
        + " (docs/shims.md: each model's synthetic task and accuracy)",
    )
    p.add_argument(
        "--width", type=int, default=0,
        help="resnet18: channels of the first stage; gpt: embedding width (0: the model's own)",
    )  # fmt: skip
    p.add_argument(
        "--bucket-mb", type=float, default=0.0,
        help="DDP's bucket cap in MB (0: the model's own: 0.5 for resnet18, DDP's 25 for the others)",
    )  # fmt: skip
    p.add_argument(
        "--no-gc-freeze", dest="gc_freeze", action="store_false",
        help="leave set-up's objects to the garbage collector (by default they are frozen before the first "
        "iteration: a full collection stalls a rank's receive thread, docs/transport.md)",
    )  # fmt: skip
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--loss-bound", type=float, default=0.01, help="loss bound of gradient messages")
    p.add_argument("--inject-loss", type=float, default=0.0, help="fraction of data packets each receiver drops")
    p.add_argument("--samples", type=int, default=8192, help="training samples")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=0, help="measure test accuracy every N iterations (0: at the end)")
    p.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu",
        help="where the model and its gradients live; cuda: rank r on CUDA device r modulo the devices (several "
        "ranks may share one), refused where torch has no CUDA",
    )  # fmt: skip
    p.add_argument(
        "--node",
        action="store_true",
        help="run one rank of a multi-node job, as torchrun or dlcp testbed run start it: rank, world and "
        "rendezvous from RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT (or DLCP_STORE_*), the data address from "
        "DLCP_HOST, the job's transport and policy from DLCP_CONFIG; prints the rank's result as JSON",
    )
    p.add_argument(
        "--progress", action="store_true",
        help="each rank writes 'dlcp train: rank R: iteration I of N' to stderr after every iteration",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:
    from dlcp.apps.train.trainer import TrainConfig, run, run_node
    from dlcp.host.launch_env import LaunchEnv

    launch = LaunchEnv.from_environ() if args.node else None
    cfg = TrainConfig(
        workers=launch.world if launch else args.workers, eval_every=args.eval_every, mode=args.mode,
        backend=args.backend, model=args.model, epochs=args.epochs,
        batch_size=args.batch_size, lr=args.lr, loss_bound=args.loss_bound, inject_loss=args.inject_loss,
        train_samples=args.samples, seed=args.seed, width=args.width, bucket_mb=args.bucket_mb,
        gc_freeze=args.gc_freeze, device=args.device, progress=args.progress,
    )  # fmt: skip
    if launch is not None:
        sys.stdout.write(json.dumps(run_node(cfg, launch), default=_plain) + "\n")
        return 0
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
