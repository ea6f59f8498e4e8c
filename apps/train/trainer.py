"""``dlcp train``: real multi-process data-parallel training on CPU, gloo or DLCP.

The models are :data:`dlcp.models.MODELS`: three MLPs, ``mlp`` (~50k parameters),
``mlp-wide`` (~600k parameters, 2.4 MB of gradients: what the testbed's bench
trains, so that a loss bound covers packets) and ``mlp-large`` (~10.5M
parameters, so communication matters on loopback); a ResNet (``resnet18``,
width set by ``--width``) and a GPT-style transformer (``gpt``). Each trains on
its family's synthetic task (:mod:`dlcp.apps.train.tasks`), deterministic from the
seed and downloaded from nowhere, with a held-out test set; the accuracy is
top-1 (next-token top-1 for ``gpt``). Every worker starts from the same weights
(seeded), trains on its shard of each batch
with SGD + momentum under DDP, and the gradients are summed by gloo's
all-reduce (``--backend gloo``; with ``--mode ps`` a parameter server over
gloo's TCP point-to-point, :mod:`dlcp.apps.train.gloo_ps`) or by DLCP's hook.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import numpy as np

from dlcp import checks, models, resources
from dlcp.apps.launch import TORCH_PRELOAD, spawn
from dlcp.apps.train.tasks import make as make_task_of
from dlcp.apps.train.tasks import sample_bytes
from dlcp.apps.train.traffic import DLCPCounters, dlcp_bytes_sent, tcp_bytes_sent
from dlcp.config import DLCPConfig, TransportConfig, check_payload_bytes
from dlcp.config import load as load_config
from dlcp.host.launch_env import LaunchEnv
from dlcp.host.loss import LossSpec
from dlcp.host.shim.gcfreeze import freeze_after_setup
from dlcp.host.timeline import Timeline, front_bucket_waits
from dlcp.policy import KindPolicy, Policy
from dlcp.protocol import MessageKind

log = logging.getLogger(__name__)


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
    test_samples: int = 0
    """Held-out samples of the final accuracy (0: the model's own, :attr:`dlcp.models.ModelSpec.test_samples`)."""
    seed: int = 0
    payload_bytes: int = 8192
    pull_bound: float | None = None
    """PS pull loss bound (default: the policy's, 0.005)."""
    eval_every: int = 0
    """Rank 0 measures test accuracy every this many iterations (0: only at the end), for accuracy over time;
    the iteration after each measurement is left out of the iteration-time statistics (the others waited)."""
    eval_samples: int = 0
    """Test samples of each measurement during training (at most the test set; 0: the model's own)."""
    width: int = 0
    """``--width``: the ResNet's first-stage channels or the GPT's embedding width (0: the model's own)."""
    bucket_mb: float = 0.0
    """``--bucket-mb``: DDP's bucket cap in MB (0: the model's own, :attr:`dlcp.models.ModelSpec.bucket_mb`)."""
    gc_freeze: bool = True
    """Freeze what set-up built out of the garbage collector's reach before training
    (:func:`dlcp.host.shim.gcfreeze.freeze_after_setup`); false: ``--no-gc-freeze``."""
    device: str = "cpu"
    """``cuda``: the model and its gradients on a CUDA device (rank r on device r modulo the devices), DLCP's
    hook copying each bucket through pinned host memory (:mod:`dlcp.host.shim.torch`)."""
    progress: bool = False
    """Each rank writes ``dlcp train: rank R: iteration I of N`` to stderr after every iteration (how the testbed's
    fault scenarios see that training runs)."""

    def __post_init__(self) -> None:
        checks.at_least("--workers", self.workers, 1)
        checks.one_of("--mode", self.mode, ("ring", "ps"))
        checks.one_of("--backend", self.backend, ("dlcp", "gloo"))
        checks.one_of("--model", self.model, models.MODELS)
        try:
            models.check_width(self.spec, self.width)
        except ValueError as exc:
            raise checks.BadValue("--width", self.width, str(exc).removeprefix("--width ")) from None
        if self.bucket_mb:
            checks.positive("--bucket-mb", self.bucket_mb)
        checks.at_least("--epochs", self.epochs, 1)
        checks.at_least("--batch-size", self.batch_size, 1)
        checks.positive("--lr", self.lr)
        checks.fraction("--loss-bound", self.loss_bound)
        checks.fraction("--inject-loss", self.inject_loss)
        if self.inject_loss and self.backend != "dlcp":
            raise checks.BadValue("--inject-loss", self.inject_loss, "must be 0 with --backend gloo (DLCP injects it)")
        checks.in_range(
            "--samples", self.train_samples, self.workers * self.batch_size,
            note=f"one step: {self.workers} workers x {self.batch_size} samples per batch (--batch-size)",
        )  # fmt: skip
        checks.at_least("test_samples", self.test_samples, 0)
        checks.seed("--seed", self.seed)
        check_payload_bytes("payload_bytes", self.payload_bytes)
        if self.pull_bound is not None:
            checks.fraction("pull_bound", self.pull_bound)
        checks.at_least("--eval-every", self.eval_every, 0)
        checks.at_least("eval_samples", self.eval_samples, 0)
        checks.one_of("--device", self.device, ("cpu", "cuda"))
        if self.device == "cuda":
            if self.backend == "gloo" and self.mode == "ps":
                raise checks.BadValue("--device", self.device, "the PS over gloo's send/recv runs on CPU tensors only")
            why = cuda_missing()
            if why:
                raise checks.BadValue("--device", self.device, why)

    @property
    def spec(self) -> models.ModelSpec:
        return models.MODELS[self.model]

    @property
    def n_test(self) -> int:
        """Held-out samples of the final accuracy (the model's own number where ``test_samples`` is 0)."""
        return self.test_samples or self.spec.test_samples

    @property
    def n_eval(self) -> int:
        """Held-out samples of each measurement during training, at most the test set."""
        return min(self.eval_samples or self.spec.eval_samples, self.n_test)

    @property
    def bucket_cap_mb(self) -> float:
        return self.bucket_mb or self.spec.bucket_mb

    @property
    def iterations(self) -> int:
        """Training iterations: whole global batches per epoch, times the epochs."""
        return self.epochs * (self.train_samples // (self.workers * self.batch_size))


def cuda_missing() -> str | None:
    """Why ``--device cuda`` cannot run here, or None."""
    import torch

    if not torch.cuda.is_available():
        build = (
            "a CPU-only build of torch" if torch.version.cuda is None else f"torch built for CUDA {torch.version.cuda}"
        )
        return f"CUDA is not available here ({build}, torch.cuda.is_available() is False)"
    return None


PROGRESS_PREFIX = "dlcp train: "
"""What each line of ``--progress`` starts with (:attr:`TrainConfig.progress`)."""

WARMUP_ITERATIONS = 2
"""Iterations left out of the iteration-time statistics (p50, p99) of every backend: set-up, not training."""


def param_count(model: str, width: int = 0) -> int:
    """Parameters of ``model`` at ``width`` (0: its own; :func:`dlcp.models.param_count`)."""
    return models.param_count(model, width)


_WORKER_BYTES = resources.WORKER_BASE_BYTES + (100 << 20)
"""A training worker before its model and data: the bench's worker plus DDP and autograd (381 MB measured, mlp)."""
_BYTES_PER_PARAM = 4 * 14
"""float32 parameters, gradients, momentum, DDP's buckets and DLCP's buffers (805 MB measured, mlp-large)."""


def check(cfg: TrainConfig) -> None:
    """What ``cfg`` asks of this machine, before any process starts: refuse what cannot work, warn what will cost."""
    resources.check_workers("--workers", cfg.workers)
    activations = cfg.batch_size * models.activation_floats(cfg.model, cfg.width) * 4
    model = _BYTES_PER_PARAM * param_count(cfg.model, cfg.width) + activations
    data = sample_bytes(cfg.spec) * (cfg.train_samples + cfg.n_test)
    need = cfg.workers * (_WORKER_BYTES + model + data)
    g = resources.gbytes
    breakdown = f"{cfg.workers} workers x ({g(_WORKER_BYTES)} + {g(model)} for {cfg.model} + {g(data)} of samples)"
    if data > model:
        resources.check_memory("--samples", cfg.train_samples, need, breakdown)
    else:
        resources.check_memory("--workers", cfg.workers, need, breakdown)


def make_task(cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The model's deterministic synthetic task (:mod:`dlcp.apps.train.tasks`): (x_train, y_train, x_test, y_test)."""
    return make_task_of(cfg.spec, cfg.seed, cfg.train_samples, cfg.n_test)


def make_model(cfg: TrainConfig) -> Any:
    """The model, with the same weights on every rank (seeded)."""
    import torch

    torch.manual_seed(cfg.seed)
    return models.build(cfg.model, cfg.width)


def objective(logits: Any, y: Any) -> Any:
    """Cross-entropy over every prediction: one per sample, or one per token (``gpt``'s ``(batch, tokens, vocab)``)."""
    from torch.nn import functional as F

    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def accuracy_of(model: Any, x: np.ndarray, y: np.ndarray, batch: int = 256) -> float:
    """Top-1 accuracy of ``model`` on ``(x, y)`` (every token's next-token prediction for ``gpt``), in eval mode
    (batch norm uses its running statistics) and in batches, then back to training mode."""
    import torch

    was_training = model.training
    model.eval()
    right = total = 0
    with torch.no_grad():
        for lo in range(0, len(x), batch):
            xb = torch.from_numpy(x[lo : lo + batch]).to(next(model.parameters()).device)
            pred = model(xb).argmax(dim=-1).cpu().numpy()
            right += int((pred == y[lo : lo + batch]).sum())
            total += pred.size
    model.train(was_training)
    return right / max(1, total)


def policy_for(cfg: TrainConfig) -> Policy:
    kinds = dict(Policy().kinds)
    for kind in (MessageKind.PUSH, MessageKind.REDUCE_SCATTER):
        kinds[kind] = KindPolicy(loss_bound=cfg.loss_bound, drop_quantiles=kinds[kind].drop_quantiles)
    if cfg.pull_bound is not None:
        kinds[MessageKind.PULL] = KindPolicy(loss_bound=cfg.pull_bound)
    return Policy(kinds=kinds)


@dataclass(frozen=True)
class Placement:
    """Where a rank runs: its rendezvous and data addresses, and the job's host configuration.

    ``dlcp train`` runs every rank on loopback (the defaults); the testbed runs one rank per host
    namespace (``dlcp train --node``, from the launch environment and the job file).
    """

    store_host: str = "127.0.0.1"
    host: str = "127.0.0.1"
    job: DLCPConfig | None = None
    """The job's configuration (id, servers, transport, policy, limits); None: loopback defaults."""
    store_is_shared: bool = False
    """The rendezvous store is hosted already (torchrun's agent); no rank hosts it (:class:`LaunchEnv`)."""
    store_scope: str = ""


def _rank_main(
    rank: int, world: int, store_port: int, cfg: TrainConfig, where: Placement = Placement()
) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dlcp.host.session import open_session
    from dlcp.host.shim.torch import DLCPState, dlcp_hook

    torch.set_num_threads(1)
    hosts = rank == 0 and not where.store_is_shared
    store: dist.Store = dist.TCPStore(
        where.store_host, store_port, world, hosts, timedelta(seconds=120), wait_for_workers=False
    )
    if where.store_scope:
        store = dist.PrefixStore(where.store_scope, store)
    dist.init_process_group("gloo", store=dist.PrefixStore("gloo", store), rank=rank, world_size=world)
    x_tr, y_tr, x_te, y_te = make_task(cfg)
    if cfg.device == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    model = make_model(cfg).to(device)
    if device.type == "cpu":
        ddp = DDP(model, bucket_cap_mb=cfg.bucket_cap_mb)
    else:
        ddp = DDP(model, device_ids=[device.index], bucket_cap_mb=cfg.bucket_cap_mb)
    state = None
    session = None
    timeline = Timeline()
    if cfg.backend == "dlcp":
        loss = LossSpec(rate=cfg.inject_loss, seed=cfg.seed * 7919 + rank) if cfg.inject_loss else None
        job = where.job
        if job is None:
            kw: dict[str, Any] = {
                "transport": TransportConfig(port=0, payload_bytes=cfg.payload_bytes), "policy": policy_for(cfg),
                "server_ranks": tuple(range(world)),
            }  # fmt: skip
        else:
            kw = {
                "job_id": job.job.id, "transport": job.transport, "policy": job.policy, "limits": job.limits,
                "server_ranks": tuple(range(min(job.job.servers, world))) if cfg.mode == "ps" else (0,),
                "local_rank": 0,
            }  # fmt: skip
        session = open_session(
            rank=rank, world=world, store_host=where.store_host, store_port=store_port, store=store, host=where.host,
            loss=loss, **kw,
        )  # fmt: skip
        session.endpoint.timeline = timeline
        state = DLCPState(session, model=ddp, mode=cfg.mode)  # type: ignore[arg-type]
        ddp.register_comm_hook(state, dlcp_hook)
    elif cfg.mode == "ps":
        from dlcp.apps.train.gloo_ps import gloo_ps_hook

        ddp.register_comm_hook(None, gloo_ps_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr, momentum=0.9)
    rng = np.random.default_rng(cfg.seed + 1)  # the same shuffle on every rank
    global_batch = cfg.batch_size * world
    steps = cfg.train_samples // global_batch
    times: list[float] = []
    skipped: list[int] = []
    curve: list[tuple[float, int, float]] = []
    x_eval, y_eval = x_te[: cfg.n_eval], y_te[: cfg.n_eval]

    # Everything built so far (torch's modules, the model, the task, the session) lives as long as the run:
    # frozen, a full collection walks only what the iterations allocate. Unfrozen, one took 16-90 ms here,
    # holding the GIL and with it DLCP's receive thread (docs/transport.md); gloo's threads run in C++ and
    # lose less to it, but both backends train the same way (--no-gc-freeze: neither freezes).
    frozen = freeze_after_setup(cfg.gc_freeze)
    # What this rank sends while it trains (not the set-up before, nor the evaluation after).
    tcp_before = tcp_bytes_sent()
    dlcp_before = DLCPCounters.of(session.endpoint) if session is not None else DLCPCounters()
    t0 = time.perf_counter()
    for _epoch in range(cfg.epochs):
        order = rng.permutation(cfg.train_samples)
        for step in range(steps):
            idx = order[step * global_batch + rank * cfg.batch_size : step * global_batch + (rank + 1) * cfg.batch_size]
            xb, yb = torch.from_numpy(x_tr[idx]).to(device), torch.from_numpy(y_tr[idx]).to(device)
            start, t_start = time.perf_counter(), time.monotonic()
            opt.zero_grad()
            value = objective(ddp(xb), yb)
            t_fwd = time.monotonic()
            try:
                value.backward()
            except RuntimeError as exc:
                if state is not None and state.error is not None:
                    raise state.error from exc  # the transport's own error (a silent peer named), not DDP's wrapper
                raise
            t_bwd = time.monotonic()
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # the iteration's time includes its kernels
            times.append(time.perf_counter() - start)
            timeline.at("iter", t_start, t_fwd, t_bwd, time.monotonic(), time.process_time())
            if cfg.progress:
                sys.stderr.write(f"{PROGRESS_PREFIX}rank {rank}: iteration {len(times)} of {cfg.epochs * steps}\n")
                sys.stderr.flush()
            if cfg.eval_every and len(times) % cfg.eval_every == 0:
                skipped.append(len(times))  # the next iteration waits for rank 0's measurement
                if rank == 0:
                    curve.append((time.perf_counter() - t0, len(times), accuracy_of(model, x_eval, y_eval)))
    train_s = time.perf_counter() - t0
    tcp_after = tcp_bytes_sent()
    dlcp_sent = (DLCPCounters.of(session.endpoint) if session is not None else DLCPCounters()) - dlcp_before

    def sample() -> np.ndarray:
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu().numpy()
        return flat[:: max(1, flat.size // 50_000)].copy()

    before_resync = sample()
    if state is not None and cfg.mode == "ps":
        state.resync(model)  # lossy pulls may leave replicas apart: end identical
    accuracy = accuracy_of(model, x_te, y_te)
    if rank == 0 and cfg.eval_every:
        # The curve ends at the reported final accuracy (the full test set), so that a time to
        # target read from it never says "never" for a run that finished above the target.
        curve.append((train_s, len(times), accuracy))
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu().numpy()
    digest = float(np.sum(flat.astype(np.float64) * np.arange(1, flat.size + 1) % 997))
    out: dict[str, Any] = {
        "rank": rank, "times": times, "skipped": skipped, "accuracy": accuracy, "accuracy_curve": curve,
        "train_s": train_s, "param_digest": digest, "sample": before_resync, "timeline": timeline.as_dict(),
        "gc_frozen": frozen,
    }  # fmt: skip
    out["tcp_bytes_sent"] = None if tcp_before is None or tcp_after is None else tcp_after - tcp_before
    out["dlcp_sent"] = dlcp_sent
    if state is not None and session is not None:
        out["loss"] = state.loss_stats()
        stats = state.collectives.stats
        out["posted_ahead"] = {"posted": stats.ahead_posted, "taken": stats.ahead_adopted,
                               "forgotten": stats.ahead_dropped}  # fmt: skip
        state.close()
        session.close()
    dist.destroy_process_group()
    return out


def run_node(cfg: TrainConfig, launch: LaunchEnv) -> dict[str, Any]:
    """One rank of a multi-node job (``dlcp train --node``): rank, world and rendezvous from ``launch``, the job's
    transport, policy and servers from its job file (``DLCP_CONFIG``). Returns the rank's result as JSON data
    (:func:`summarize` of every rank's gives what :func:`run` returns)."""
    job = load_config(launch.config) if launch.config is not None else None
    where = Placement(
        store_host=launch.store_host, host=launch.host, job=job, store_is_shared=launch.store_is_shared,
        store_scope=launch.store_scope,
    )  # fmt: skip
    r = _rank_main(launch.rank, launch.world, launch.store_port, cfg, where)
    r["sample"] = r["sample"].tolist()
    r["dlcp_sent"] = asdict(r["dlcp_sent"])
    return r


def _traffic(per_rank: list[dict[str, Any]]) -> dict[str, int | None]:
    """Bytes all ranks sent while training, measured (``dlcp.apps.train.traffic``): over TCP, over DLCP, and in all."""
    tcp = None if any(r["tcp_bytes_sent"] is None for r in per_rank) else sum(r["tcp_bytes_sent"] for r in per_rank)
    dlcp = dlcp_bytes_sent([r["dlcp_sent"] for r in per_rank])
    return {"tcp_bytes_sent": tcp, "dlcp_bytes_sent": dlcp, "bytes_sent": None if tcp is None else tcp + dlcp}


def run(cfg: TrainConfig, *, checked: bool = False) -> dict[str, Any]:
    """Train as ``cfg`` says; ``checked``: :func:`check` has run already (``dlcp demo`` checks every run first)."""
    if not checked:
        check(cfg)
    # Generous: 2 s per step, more where workers share CPUs; only a hung run times out.
    share = max(1.0, cfg.workers / resources.usable_cpus())
    per_rank = spawn(
        _rank_main, cfg.workers, cfg, timeout_s=600.0 + 2.0 * share * cfg.iterations, threads_per_proc=1,
        preload=(*TORCH_PRELOAD, __name__),
    )  # fmt: skip
    return summarize(cfg, per_rank)


def _front_waits(per_rank: list[dict[str, Any]], n: int, skipped: set[int]) -> dict[str, Any]:
    """The wait for the front layers' bucket (:func:`dlcp.host.timeline.front_bucket_waits`): per iteration the
    slowest rank's (and the part of it that rank's bucket spent queued in the hook's thread), their medians and
    the wait's 99th percentile over the iterations the iteration times count; empty where no rank recorded
    buckets (gloo)."""
    waits = [front_bucket_waits(r["timeline"]["events"]) for r in per_rank if "timeline" in r]
    slowest: list[tuple[float, float] | None] = []
    for i in range(n):
        found = [w[i] for w in waits if i < len(w) and w[i] is not None]
        slowest.append(max(found) if found else None)  # type: ignore[type-var]
    kept = [v for i, v in enumerate(slowest) if v is not None and i not in skipped]
    if not kept:
        return {}
    return {
        "front_wait_s": [None if v is None else v[0] for v in slowest],
        "front_wait_p50_s": float(np.percentile([v[0] for v in kept], 50)),
        "front_wait_p99_s": float(np.percentile([v[0] for v in kept], 99)),
        "front_queued_p50_s": float(np.percentile([v[1] for v in kept], 50)),
    }


def summarize(cfg: TrainConfig, per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """One job's result from its ranks' (in rank order; from :func:`_rank_main` or :func:`run_node`)."""
    for r in per_rank:
        if isinstance(r["dlcp_sent"], dict):
            r["dlcp_sent"] = DLCPCounters(**r["dlcp_sent"])
        r["sample"] = np.asarray(r["sample"])
    n = len(per_rank[0]["times"])
    slowest_all = np.array([max(r["times"][i] for r in per_rank) for i in range(n)])
    # Iteration i (0-based) follows measurement number k when k == i: those waited for rank 0.
    # Left out of the iteration-time statistics: the warm-up (DDP rebuilds its buckets at the start of the
    # second iteration, and both backends allocate their buffers in the first ones) and each iteration
    # after an accuracy measurement (the others waited for rank 0). Time to accuracy counts them all.
    skipped = set(range(min(WARMUP_ITERATIONS, n - 1))) | set(per_rank[0].get("skipped", []))
    slowest = np.array([t for i, t in enumerate(slowest_all) if i not in skipped]) if skipped else slowest_all
    first = per_rank[0]
    result: dict[str, Any] = {
        "config": asdict(cfg),
        "test_accuracy": first["accuracy"],
        "iter_p50_s": float(np.percentile(slowest, 50)),
        "iter_p99_s": float(np.percentile(slowest, 99)),
        "iter_times_s": slowest_all.tolist(),
        "iter_skipped": sorted(skipped),
        "train_s": max(float(r.get("train_s", 0.0)) for r in per_rank),
        "accuracy_curve": first.get("accuracy_curve", []),
        **_traffic(per_rank),
        "replicas_identical": len({r["param_digest"] for r in per_rank}) == 1,
        "max_replica_divergence_before_resync": float(
            max(np.abs(r["sample"] - first["sample"]).max() for r in per_rank)
        ),
        "loss_fraction": float(np.mean([r["loss"]["loss_fraction"] for r in per_rank])) if "loss" in first else 0.0,
    }
    if "posted_ahead" in first:  # DLCP's receives posted ahead of their call, summed over the ranks
        result["posted_ahead"] = {k: sum(r["posted_ahead"][k] for r in per_rank) for k in first["posted_ahead"]}
    if "gc_frozen" in first:
        result["gc_frozen_objects"] = int(min(r["gc_frozen"] for r in per_rank))
    result.update(_front_waits(per_rank, n, skipped))
    if "loss" in first:
        result["loss_fraction_by_class"] = first["loss"]["loss_fraction_by_class"]
        result["loss_fraction_by_kind"] = first["loss"]["loss_fraction_by_kind"]
        result["sender_loss_by_drop_class"] = first["loss"]["sender"]["loss_fraction_by_drop_class"]
    return result
