"""``dlcp bench allreduce``: DLCP against gloo (torch.distributed) in the same run, on loopback.

Every rank runs the baseline and DLCP back to back with the same tensor size.
An iteration's time is the slowest rank's, measured between two barriers.
"""

from __future__ import annotations

import gc
import inspect
import logging
import resource
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import numpy as np

from dlcp import checks, resources
from dlcp.apps.launch import TORCH_PRELOAD, spawn
from dlcp.config import ConfigError, DLCPConfig, TransportConfig, load
from dlcp.host.collectives import Collectives, Mode, split_bounds
from dlcp.host.loss import LossInjector, LossSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchConfig:
    workers: int = 2
    size: int = 64 << 20
    mode: Mode = "ring"
    inject_loss: float = 0.0
    loss_pattern: str = "random"
    repeat: int = 10
    warmup: int = 2
    baseline: str = "gloo"
    payload_bytes: int = 8192
    reorder_window: int = 0
    rx_nice: int = 0
    seed: int = 0
    config: str | None = None
    """A DLCP job file whose ``[policy]`` and ``[limits]`` DLCP runs with (the flags set the transport)."""

    def __post_init__(self) -> None:
        checks.at_least("--workers", self.workers, 2)
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 4 or self.size % 4:
            raise checks.BadValue("--size", self.size, "must be a positive multiple of 4 bytes (float32 elements)")
        checks.one_of("--mode", self.mode, ("ring", "ps"))
        checks.fraction("--inject-loss", self.inject_loss)
        checks.one_of("--loss-pattern", self.loss_pattern, ("random", "bursty"))
        checks.at_least("--repeat", self.repeat, 1)
        checks.at_least("--warmup", self.warmup, 0)
        checks.one_of("--baseline", self.baseline, ("gloo", "none"))
        checks.seed("--seed", self.seed)
        self.transport()

    def transport(self) -> TransportConfig:
        """DLCP's transport settings, from the flags (a bad one is named by its flag)."""
        try:
            return TransportConfig(
                port=0, payload_bytes=self.payload_bytes, reorder_window=self.reorder_window, rx_nice=self.rx_nice
            )
        except checks.BadValue as exc:
            raise exc.renamed(_FLAGS.get(exc.name, exc.name)) from None


_FLAGS = {"payload_bytes": "--payload", "reorder_window": "--reorder-window", "rx_nice": "--rx-nice"}

_BYTES_PER_TENSOR_BYTE = {"ring": 3.5, "ps": 6.5}
"""Resident memory of a rank per byte of ``--size``, beyond :data:`dlcp.resources.WORKER_BASE_BYTES`:
the tensor, its copies for each system, receive scratch and (PS) the shard's aggregate
and the previous pull. Measured (peak RSS at 256 MiB, 2 workers): ring 2.9 with gloo,
PS 5.2 without."""


def assembly_plan(cfg: BenchConfig) -> tuple[int, int]:
    """(largest message, bytes in assembly at once) that one rank's receiver holds in an all-reduce of ``cfg``.

    Ring: the tensor is cut into segments (``Collectives.allreduce_ring``'s
    ``segment_bytes``), each into one chunk per rank, and every reduce-scatter
    and all-gather receive is posted up front. PS (every rank serves a shard): a
    shard per push from each other worker, and a shard per pull from each other server.
    """
    n, w = cfg.size // 4, cfg.workers
    if cfg.mode == "ring":
        segment = inspect.signature(Collectives.allreduce_ring).parameters["segment_bytes"].default
        n_seg = max(1, min(64, cfg.size // max(1, segment)))
        seg_elems = int(np.diff(split_bounds(n, n_seg)).max())
        largest = int(np.diff(split_bounds(seg_elems, w)).max()) * 4
        return largest, 2 * (w - 1) * n_seg * largest
    largest = int(np.diff(split_bounds(n, w)).max()) * 4
    return largest, 2 * (w - 1) * largest


def check(cfg: BenchConfig, job: DLCPConfig) -> None:
    """What the flags and the job file ask of this machine and of DLCP's limits, before any process starts.

    Raises :class:`~dlcp.checks.BadValue` for a run that cannot work here; logs a warning
    for one that can but will cost (more workers than CPUs, most of the memory).
    """
    largest, at_once = assembly_plan(cfg)
    source = f"--config {cfg.config}: " if cfg.config is not None else ""
    what = f"a --size {cfg.size} all-reduce over --workers {cfg.workers} ({cfg.mode})"
    if largest > job.limits.max_message_bytes:
        raise checks.BadValue(
            f"{source}limits.max_message_bytes", job.limits.max_message_bytes,
            f"must be at least {largest}, the largest message of {what}",
        )  # fmt: skip
    if at_once > job.limits.max_job_bytes:
        raise checks.BadValue(
            f"{source}limits.max_job_bytes", job.limits.max_job_bytes,
            f"must be at least {at_once}, the bytes a receiver holds in assembly during {what}",
        )  # fmt: skip
    resources.check_workers("--workers", cfg.workers)
    base = resources.WORKER_BASE_BYTES
    factor = _BYTES_PER_TENSOR_BYTE[cfg.mode]
    per_rank = base + int(factor * cfg.size)
    need = cfg.workers * per_rank
    breakdown = f"{cfg.workers} workers x ({resources.gbytes(base)} + {factor} x {resources.gbytes(cfg.size)})"
    avail = resources.available_memory()
    if avail is not None and cfg.workers * base > avail:  # too many processes, whatever the size
        resources.check_memory("--workers", cfg.workers, need, breakdown, f"at most {avail // per_rank} fit")
    elif avail is not None:
        fits = max(0, int((avail / cfg.workers - base) / factor) // 4 * 4)
        resources.check_memory("--size", cfg.size, need, breakdown, f"at most {fits} fits")


_BLOCK = 5
"""Measured iterations per turn of each system (see _rank_main)."""


def _timeout_s(cfg: BenchConfig) -> float:
    """How long to wait for the ranks: generous (20 MB/s per rank), so only a hung run times out."""
    turns = -(-cfg.repeat // _BLOCK)
    iterations = (cfg.warmup + cfg.repeat + turns) * (2 if cfg.baseline == "gloo" else 1)
    iterations *= 2 if cfg.inject_loss else 1
    return 600.0 + iterations * cfg.workers * cfg.size / 20e6


def cpu_seconds() -> float:
    """CPU seconds (user + system) this process has used so far, all its threads together.

    ``getrusage(RUSAGE_SELF)`` sums every thread of the process (DLCP's receive
    thread, gloo's worker threads), not only the caller's. Only the sum is used:
    Linux takes it from the scheduler's nanosecond clock, but splits it into
    user and system by the process's tick samples since it started (which in a
    benchmark process are mostly imports), so the split of a short window says
    little about that window.
    """
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _summary(times: list[float], size: int) -> dict[str, float]:
    t = np.asarray(times)
    med = float(np.median(t))
    return {"median_s": med, "p99_s": float(np.percentile(t, 99)), "gbytes_per_s": size / med / 1e9}


def _cpu_summary(cpu: list[list[float]], size: int) -> dict[str, float]:
    """CPU per gigabyte all-reduced; ``cpu[rank][i]``: CPU seconds of rank's process during iteration i.

    The ranks' CPU is summed (the all-reduce of ``size`` bytes is one job, done by all of them).
    """
    per_iteration = np.sum(np.asarray(cpu, dtype=np.float64), axis=0)
    return {
        "cpu_s_per_gbyte": float(per_iteration.sum()) / (per_iteration.size * size / 1e9),
        "cpu_s_per_iteration_median": float(np.median(per_iteration)),
    }


def _rank_main(rank: int, world: int, store_port: int, cfg: BenchConfig, job: DLCPConfig) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from dlcp.host.session import open_session

    torch.set_num_threads(1)
    n = cfg.size // 4
    rng = np.random.default_rng(cfg.seed + rank)
    data = rng.standard_normal(n).astype(np.float32)
    out: dict[str, Any] = {}
    store = dist.TCPStore("127.0.0.1", store_port, world, rank == 0, timedelta(seconds=60), wait_for_workers=False)
    gloo = cfg.baseline == "gloo"
    if gloo:
        dist.init_process_group("gloo", store=dist.PrefixStore("gloo", store), rank=rank, world_size=world)
    loss = LossSpec(rate=cfg.inject_loss, pattern=cfg.loss_pattern, seed=cfg.seed * 1000 + rank)  # type: ignore[arg-type]
    with open_session(
        rank=rank, world=world, store_host="127.0.0.1", store_port=store_port, job_id=1,
        transport=cfg.transport(),
        policy=job.policy, limits=job.limits, loss=loss,
        server_ranks=tuple(range(world)) if cfg.mode == "ps" else (0,), store=store,
    ) as s:  # fmt: skip
        x = data.copy()
        t = torch.from_numpy(data.copy())
        coll = s.collectives
        injector = s.endpoint.loss

        # Each iteration's wall time, and the CPU its process (every thread) used meanwhile.
        Timed = tuple[float, float]

        def timed(call: Any) -> Timed:
            cpu = cpu_seconds()
            start = time.perf_counter()
            call()
            wall = time.perf_counter() - start
            return wall, cpu_seconds() - cpu

        def gloo_once() -> Timed:
            t.copy_(torch.from_numpy(data))
            dist.barrier()
            return timed(lambda: dist.all_reduce(t))

        def dlcp_once(loss: LossInjector | None) -> Timed:
            s.endpoint.loss = loss
            np.copyto(x, data)
            s.rendezvous.barrier()
            return timed(lambda: coll.allreduce(x, mode=cfg.mode))

        # The systems take turns in blocks of a few iterations, in the same processes: a
        # noisy host moves absolute times by tens of percent within a run, so every ratio
        # should compare nearby moments. Each block starts with an unmeasured iteration
        # (the other system just evicted this one's buffers from the caches). With loss
        # injection lossless and lossy DLCP iterations alternate within a block; the
        # lossy tail is compared with the lossless median.
        runs: dict[str, list[Timed]] = {"dlcp": [], "dlcp_lossless": [], "gloo": []}
        lost = total = 0
        for _ in range(cfg.warmup):
            if gloo:
                gloo_once()
            dlcp_once(None)
        # What setup left (imports, torch: about 170,000 objects) moves out of the collector's reach, so a
        # full collection walks only what the iterations allocate. Unfrozen, a full collection took 16-90 ms
        # with the GIL held and landed in whichever iteration triggered it, mostly the lossy ones (they
        # allocate more): DLCP's receive thread needs the GIL to complete a message, so the pause stalled
        # every rank of the ring (docs/results.md; docs/transport.md §1 for training scripts).
        gc.collect()
        gc.freeze()
        out["gc_frozen"] = gc.get_freeze_count()
        while len(runs["dlcp"]) < cfg.repeat:
            k = min(_BLOCK, cfg.repeat - len(runs["dlcp"]))
            if gloo:
                runs["gloo"] += [gloo_once() for _ in range(k + 1)][1:]
            for j in range(k + 1):
                clean = dlcp_once(None) if injector is not None else None
                before = (coll.stats.lost_elems, coll.stats.total_elems)
                measured = dlcp_once(injector)
                if j == 0:
                    continue
                runs["dlcp"].append(measured)
                if clean is not None:
                    runs["dlcp_lossless"].append(clean)
                lost += coll.stats.lost_elems - before[0]
                total += coll.stats.total_elems - before[1]
        names = ["dlcp"] + (["gloo"] if gloo else []) + (["dlcp_lossless"] if injector is not None else [])
        for name in names:
            out[name] = [wall for wall, _ in runs[name]]
            out[name + "_cpu"] = [cpu for _, cpu in runs[name]]
        out["loss_fraction"] = lost / total if total else 0.0
        out["retransmitted"] = s.endpoint.send_stats.retransmitted
        out["injected"] = s.endpoint.loss.dropped if s.endpoint.loss else 0
        out["drops"] = s.endpoint.asm.counters.as_dict()
    if gloo:
        dist.destroy_process_group()
    return out


def run(cfg: BenchConfig) -> dict[str, Any]:
    try:  # a bad file fails here, before any spawn
        job = load(cfg.config) if cfg.config is not None else DLCPConfig()
    except ConfigError as exc:
        raise ConfigError(f"--config {exc}") from None
    check(cfg, job)
    per_rank = spawn(
        _rank_main, cfg.workers, cfg, job, timeout_s=_timeout_s(cfg), threads_per_proc=1,
        preload=(*TORCH_PRELOAD, __name__),
    )  # fmt: skip
    result: dict[str, Any] = {"config": asdict(cfg)}
    for name in ("dlcp", "gloo", "dlcp_lossless"):
        if name in per_rank[0]:
            slowest = [max(r[name][i] for r in per_rank) for i in range(cfg.repeat)]
            result[name] = _summary(slowest, cfg.size) | _cpu_summary([r[name + "_cpu"] for r in per_rank], cfg.size)
    result["dlcp"]["loss_fraction"] = float(np.mean([r["loss_fraction"] for r in per_rank]))
    result["dlcp"]["retransmitted_packets"] = int(sum(r["retransmitted"] for r in per_rank))
    result["dlcp"]["injected_drops"] = int(sum(r["injected"] for r in per_rank))
    result["gc_frozen_objects"] = int(min(r["gc_frozen"] for r in per_rank))
    if "gloo" in result:
        result["ratio_gbytes_per_s_vs_gloo"] = result["dlcp"]["gbytes_per_s"] / result["gloo"]["gbytes_per_s"]
        # Lossless DLCP when loss is injected (the lossy iterations do extra work by design).
        own = result.get("dlcp_lossless", result["dlcp"])
        result["ratio_cpu_s_per_gbyte_vs_gloo"] = own["cpu_s_per_gbyte"] / result["gloo"]["cpu_s_per_gbyte"]
    if "dlcp_lossless" in result:
        result["ratio_p99_lossy_vs_lossless_median"] = result["dlcp"]["p99_s"] / result["dlcp_lossless"]["median_s"]
        # The lossless tail itself: on a noisy host it alone can exceed the goal for the above.
        result["ratio_p99_lossy_vs_lossless_p99"] = result["dlcp"]["p99_s"] / result["dlcp_lossless"]["p99_s"]
    return result
