"""One rank of a multi-node training job, as a process of its own: ``python -m dlcp.apps.train.node [FLAGS]``.

The testbed's scenarios and fault runs start one per host namespace (:func:`argv`, through the testbed's job
runner, :func:`dlcp.testbed.jobs.run_job`); any launcher that sets the launch environment may start it too.
Rank, world and rendezvous come from that environment (:mod:`dlcp.host.launch_env`: ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT`` or ``DLCP_STORE_*``), the data address from ``DLCP_HOST``, the job's transport and
policy from ``DLCP_CONFIG``. It prints the rank's result as one JSON line (:func:`dlcp.apps.train.trainer.run_node`;
:func:`~dlcp.apps.train.trainer.summarize` of every rank's gives the job's). Its flags are those of ``dlcp train``
that one rank reads (:func:`add_arguments`); ``dlcp train --node`` runs the same (:func:`run`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import TYPE_CHECKING

from dlcp.entry import module_argv
from dlcp.models import MODELS

if TYPE_CHECKING:
    from dlcp.apps.train.trainer import TrainConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of one training run: ``dlcp train``'s but ``--workers``, ``--node`` and ``--json``.

    Only the model table is imported here: the CLI registers these flags without loading the training code."""
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


def add_progress(p: argparse.ArgumentParser) -> None:
    """``--progress`` (``dlcp train`` lists it after ``--node``)."""
    p.add_argument(
        "--progress", action="store_true",
        help="each rank writes 'dlcp train: rank R: iteration I of N' to stderr after every iteration",
    )  # fmt: skip


def config(args: argparse.Namespace, workers: int) -> TrainConfig:
    """The training run the flags of :func:`add_arguments` and :func:`add_progress` describe, with ``workers``
    ranks; raises :class:`~dlcp.checks.BadValue` for a value it cannot run with."""
    from dlcp.apps.train.trainer import TrainConfig

    return TrainConfig(
        workers=workers, eval_every=args.eval_every, mode=args.mode,
        backend=args.backend, model=args.model, epochs=args.epochs,
        batch_size=args.batch_size, lr=args.lr, loss_bound=args.loss_bound, inject_loss=args.inject_loss,
        train_samples=args.samples, seed=args.seed, width=args.width, bucket_mb=args.bucket_mb,
        gc_freeze=args.gc_freeze, device=args.device, progress=args.progress,
    )  # fmt: skip


def _plain(value: object) -> object:
    """numpy scalars and arrays as JSON numbers and arrays."""
    tolist = getattr(value, "tolist", None)
    if tolist is None:
        raise TypeError(f"{type(value).__name__} is not JSON serializable")
    return tolist()


def run(args: argparse.Namespace) -> None:
    """Train as this rank of the job the launch environment describes, and print the rank's result as JSON."""
    from dlcp.apps.train.trainer import run_node
    from dlcp.host.launch_env import LaunchEnv

    launch = LaunchEnv.from_environ()
    result = run_node(config(args, launch.world), launch)
    sys.stdout.write(json.dumps(result, default=_plain) + "\n")


def argv(backend: str, mode: str, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """One rank's command line: ``--backend`` and ``--mode``, then ``extra`` flags of :func:`add_arguments` (the
    launch environment gives the rest)."""
    return module_argv(__name__, "--backend", backend, "--mode", mode, *extra)


def main(args: list[str] | None = None) -> int:
    """Run one rank; exit status 2 when a flag or the launch environment is invalid."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {__name__}",
        description="One rank of a multi-node training job (the launch environment names the rank and the job).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_arguments(parser)
    add_progress(parser)
    ns = parser.parse_args(args)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        run(ns)
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"{parser.prog}: error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
