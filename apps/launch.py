"""Run a function in N local processes (tests, benchmarks, ``dlcp train``), with a TCPStore for rendezvous.

The processes are forked from multiprocessing's fork server: a fresh interpreter, started by a process's first
:func:`spawn`, that imports the modules the caller names (``preload``) once. A rank training with torch would
otherwise spend seconds of CPU importing torch and what DDP's constructor imports (``torch._dynamo``) before its
first step, in every process of every run. Each process gets the caller's environment as of the call, as a
spawned one would.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import socket
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

TORCH_PRELOAD = ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo")
"""What a rank training under torch's DistributedDataParallel imports, for ``preload``."""
_preload: list[str] = []
"""Every module a caller asked to preload, in order; the fork server imports those asked before it started."""


def free_tcp_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _child(
    fn: Callable[..., Any], rank: int, world: int, store_port: int, args: tuple, results: Any, env: Mapping[str, str]
) -> None:
    os.environ.clear()
    os.environ.update(env)  # the caller's, not the fork server's (started by an earlier call)
    try:
        results.put((rank, True, fn(rank, world, store_port, *args)))
    except BaseException as exc:  # reported to the parent with its traceback
        results.put((rank, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


class WorkerError(RuntimeError):
    def __init__(self, failures: dict[int, str]) -> None:
        self.failures = failures
        first = min(failures)
        super().__init__(f"rank {first} failed: {failures[first]}")


def spawn(
    fn: Callable[..., Any],
    world: int,
    *args: Any,
    timeout_s: float = 120.0,
    threads_per_proc: int | None = None,
    preload: Sequence[str] = (),
) -> list[Any]:
    """``fn(rank, world, store_port, *args)`` in ``world`` processes; returns results by rank.

    ``threads_per_proc``: ``OMP_NUM_THREADS`` of each process. ``preload``: modules ``fn`` imports, imported once
    by the fork server (see the module; those of a call after the server started are imported by each process).
    Raises :class:`WorkerError` with every failing rank's traceback, or
    TimeoutError if a rank neither returns nor fails within ``timeout_s``.
    """
    ctx = mp.get_context("forkserver")
    _preload.extend(m for m in preload if m not in _preload)
    ctx.set_forkserver_preload(list(_preload))
    results = ctx.Queue()
    store_port = free_tcp_port()
    env_threads = os.environ.get("OMP_NUM_THREADS")
    if threads_per_proc is not None:
        os.environ["OMP_NUM_THREADS"] = str(threads_per_proc)
    env = dict(os.environ)
    procs = [
        ctx.Process(target=_child, args=(fn, r, world, store_port, args, results, env), daemon=True)
        for r in range(world)
    ]
    try:
        for p in procs:
            p.start()
    finally:
        if threads_per_proc is not None:
            if env_threads is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = env_threads
    out: dict[int, Any] = {}
    failures: dict[int, str] = {}
    try:
        while len(out) + len(failures) < world:
            try:
                rank, ok, value = results.get(timeout=timeout_s)
            except queue.Empty:
                missing = sorted(set(range(world)) - set(out) - set(failures))
                raise TimeoutError(f"ranks {missing} did not finish within {timeout_s} s") from None
            (out if ok else failures)[rank] = value
            if failures:
                break
    finally:
        for p in procs:
            p.join(timeout=2.0 if not failures else 0.5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=2.0)
    if failures:
        raise WorkerError(failures)
    return [out[r] for r in range(world)]
