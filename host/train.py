"""``dlcp train``: real multi-process data-parallel training on CPU, gloo or DLCP.

The task is deterministic and needs no download: a 10-class Gaussian-mixture
classification problem in 64 dimensions, generated from the seed (class means
on a sphere, isotropic noise), with a held-out test set. Two models: ``mlp``
(~50k parameters) and ``mlp-large`` (~10.5M parameters, so communication
matters). Every worker starts from the same weights (seeded), trains on its
shard of each batch with SGD + momentum under DDP, and the gradients are summed
by gloo's all-reduce (``--backend gloo``) or by DLCP's hook.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import numpy as np

from dlcp.config import TransportConfig
from dlcp.host.launch import spawn
from dlcp.host.loss import LossSpec
from dlcp.policy import KindPolicy, Policy
from dlcp.protocol import MessageKind

log = logging.getLogger(__name__)

MODELS = {"mlp": (256, 128), "mlp-large": (3200, 3200)}
DIM, CLASSES = 64, 10


@dataclass(frozen=True)
class TrainConfig:
    workers: int = 2
    mode: str = "ring"
    backend: str = "dlcp"
    model: str = "mlp"
    epochs: int = 3
    batch_size: int = 64
    """Per worker."""
    lr: float = 0.05
    loss_bound: float = 0.01
    inject_loss: float = 0.0
    train_samples: int = 8192
    test_samples: int = 2048
    seed: int = 0
    payload_bytes: int = 8192
    pull_bound: float | None = None
    """PS pull loss bound (default: the policy's, 0.005)."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("--workers must be >= 1")
        if self.mode not in ("ring", "ps"):
            raise ValueError("--mode must be ring or ps")
        if self.backend not in ("dlcp", "gloo"):
            raise ValueError("--backend must be dlcp or gloo")
        if self.model not in MODELS:
            raise ValueError(f"--model must be one of {', '.join(MODELS)}")
        if not 0 <= self.loss_bound < 1 or not 0 <= self.inject_loss < 1:
            raise ValueError("--loss-bound and --inject-loss must be in [0, 1)")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError("--epochs and --batch-size must be >= 1")


def make_task(seed: int, n_train: int, n_test: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The deterministic synthetic classification task: (x_train, y_train, x_test, y_test)."""
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((CLASSES, DIM))
    means *= 3.0 / np.linalg.norm(means, axis=1, keepdims=True)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, CLASSES, n)
        x = means[y] + rng.standard_normal((n, DIM)) * 1.1
        return x.astype(np.float32), y.astype(np.int64)

    x_tr, y_tr = draw(n_train)
    x_te, y_te = draw(n_test)
    return x_tr, y_tr, x_te, y_te


def make_model(name: str, seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    h1, h2 = MODELS[name]
    return torch.nn.Sequential(
        torch.nn.Linear(DIM, h1),
        torch.nn.ReLU(),
        torch.nn.Linear(h1, h2),
        torch.nn.ReLU(),
        torch.nn.Linear(h2, CLASSES),
    )


def policy_for(cfg: TrainConfig) -> Policy:
    kinds = dict(Policy().kinds)
    for kind in (MessageKind.PUSH, MessageKind.REDUCE_SCATTER):
        kinds[kind] = KindPolicy(loss_bound=cfg.loss_bound, drop_quantiles=kinds[kind].drop_quantiles)
    if cfg.pull_bound is not None:
        kinds[MessageKind.PULL] = KindPolicy(loss_bound=cfg.pull_bound)
    return Policy(kinds=kinds)


def _rank_main(rank: int, world: int, store_port: int, cfg: TrainConfig) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dlcp.host.session import open_session
    from dlcp.host.shim.torch import DLCPState, dlcp_hook

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", store_port, world, rank == 0, timedelta(seconds=120), wait_for_workers=False)
    dist.init_process_group("gloo", store=dist.PrefixStore("gloo", store), rank=rank, world_size=world)
    x_tr, y_tr, x_te, y_te = make_task(cfg.seed, cfg.train_samples, cfg.test_samples)
    model = make_model(cfg.model, cfg.seed)
    ddp = DDP(model)
    state = None
    session = None
    if cfg.backend == "dlcp":
        loss = LossSpec(rate=cfg.inject_loss, seed=cfg.seed * 7919 + rank) if cfg.inject_loss else None
        session = open_session(
            rank=rank, world=world, store_host="127.0.0.1", store_port=store_port, store=store,
            transport=TransportConfig(port=0, payload_bytes=cfg.payload_bytes), policy=policy_for(cfg), loss=loss,
            server_ranks=tuple(range(world)),
        )  # fmt: skip
        state = DLCPState(session, model=ddp, mode=cfg.mode)  # type: ignore[arg-type]
        ddp.register_comm_hook(state, dlcp_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()
    rng = np.random.default_rng(cfg.seed + 1)  # the same shuffle on every rank
    global_batch = cfg.batch_size * world
    steps = cfg.train_samples // global_batch
    times: list[float] = []
    for _epoch in range(cfg.epochs):
        order = rng.permutation(cfg.train_samples)
        for step in range(steps):
            idx = order[step * global_batch + rank * cfg.batch_size : step * global_batch + (rank + 1) * cfg.batch_size]
            xb, yb = torch.from_numpy(x_tr[idx]), torch.from_numpy(y_tr[idx])
            start = time.perf_counter()
            opt.zero_grad()
            lossf(ddp(xb), yb).backward()
            opt.step()
            times.append(time.perf_counter() - start)

    def sample() -> np.ndarray:
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
        return flat[:: max(1, flat.size // 50_000)].copy()

    before_resync = sample()
    if state is not None and cfg.mode == "ps":
        state.resync(model)  # lossy pulls may leave replicas apart: end identical
    with torch.no_grad():
        pred = model(torch.from_numpy(x_te)).argmax(dim=1).numpy()
    accuracy = float((pred == y_te).mean())
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    digest = float(np.sum(flat.astype(np.float64) * np.arange(1, flat.size + 1) % 997))
    out: dict[str, Any] = {"times": times, "accuracy": accuracy, "param_digest": digest, "sample": before_resync}
    if state is not None and session is not None:
        out["bytes_sent"] = state.bytes_sent
        out["loss"] = state.loss_stats()
        state.close()
        session.close()
    else:
        out["bytes_sent"] = sum(p.numel() * 4 for p in model.parameters()) * len(times)
    dist.destroy_process_group()
    return out


def run(cfg: TrainConfig) -> dict[str, Any]:
    per_rank = spawn(_rank_main, cfg.workers, cfg, timeout_s=1800.0, threads_per_proc=1)
    n = len(per_rank[0]["times"])
    slowest = np.array([max(r["times"][i] for r in per_rank) for i in range(n)])
    first = per_rank[0]
    result: dict[str, Any] = {
        "config": asdict(cfg),
        "test_accuracy": first["accuracy"],
        "iter_p50_s": float(np.percentile(slowest, 50)),
        "iter_p99_s": float(np.percentile(slowest, 99)),
        "iter_times_s": slowest.tolist(),
        "bytes_sent": int(sum(r["bytes_sent"] for r in per_rank)),
        "replicas_identical": len({r["param_digest"] for r in per_rank}) == 1,
        "max_replica_divergence_before_resync": float(
            max(np.abs(r["sample"] - first["sample"]).max() for r in per_rank)
        ),
        "loss_fraction": float(np.mean([r["loss"]["loss_fraction"] for r in per_rank])) if "loss" in first else 0.0,
    }
    if "loss" in first:
        result["loss_fraction_by_class"] = first["loss"]["loss_fraction_by_class"]
        result["loss_fraction_by_kind"] = first["loss"]["loss_fraction_by_kind"]
        result["sender_loss_by_drop_class"] = first["loss"]["sender"]["loss_fraction_by_drop_class"]
    return result
