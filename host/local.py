"""An in-process group of endpoints on loopback, one thread per rank (tests, examples, demos)."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from typing import Any

from dlcp.host.endpoint import Endpoint
from dlcp.host.udp import open_socket


def local_endpoints(
    world: int, job_id: int = 1, token: int | None = None, distinct_hosts: bool = False, **kwargs: Any
) -> list[Endpoint]:
    """``world`` endpoints of one job on 127.0.0.1, knowing each other's addresses (``distinct_hosts``: rank ``r``
    on 127.0.0.``r + 1``, so that a per-host setting such as ``[transport] send_rate_bps`` tells them apart).

    Every rank's data socket is bound before any endpoint opens its spray sockets: a port picked free and bound
    later could meanwhile be taken by another rank's spray socket (``Address already in use``)."""
    token = secrets.randbits(32) if token is None else token
    if distinct_hosts and world > 254:
        raise ValueError(f"distinct_hosts: at most 254 ranks on 127.0.0.0/24, got {world}")
    socks = [open_socket(f"127.0.0.{r + 1}" if distinct_hosts else "127.0.0.1", 0) for r in range(world)]
    addresses = {r: s.getsockname() for r, s in enumerate(socks)}
    return [
        Endpoint(rank=r, job_id=job_id, token=token, addresses=addresses, sock=socks[r], **kwargs) for r in range(world)
    ]


def run_ranks(fn: Callable[[int], Any], world: int, timeout_s: float = 60.0) -> list[Any]:
    """Run ``fn(rank)`` in one thread per rank; returns each result, or the exception it raised."""
    results: list[Any] = [None] * world

    def target(rank: int) -> None:
        try:
            results[rank] = fn(rank)
        except BaseException as exc:  # returned to the caller
            results[rank] = exc

    threads = [threading.Thread(target=target, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
        if t.is_alive():
            raise TimeoutError(f"a rank did not finish within {timeout_s} s")
    return results
