"""Rendezvous through torch.distributed's TCPStore: addresses, the job token, barriers.

The same code runs across real machines: every rank publishes the address of
its data socket, rank 0 draws the job's random 32-bit token, and all ranks read
both. Key names are prefixed with the job id (and a scope, in a store shared
with others such as torchrun's agent's), so several jobs can share one store.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any


@dataclass(frozen=True)
class RendezvousInfo:
    rank: int
    world: int
    token: int
    addresses: dict[int, tuple[str, int]]


class Rendezvous:
    """A thin wrapper over a ``torch.distributed.Store``."""

    def __init__(self, store: Any, job_id: int, rank: int, world: int, scope: str = "") -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world of {world}")
        self.store = store
        self.prefix = f"{scope}/dlcp/{job_id}" if scope else f"dlcp/{job_id}"
        self.rank = rank
        self.world = world
        self._barriers = 0

    @classmethod
    def tcp(
        cls, host: str, port: int, job_id: int, rank: int, world: int, timeout_s: float = 60.0,
        *, shared: bool = False, scope: str = "",
    ) -> Rendezvous:  # fmt: skip
        """Rank 0 hosts a TCPStore at ``host:port`` and the others connect; ``shared``: it is hosted already."""
        from torch.distributed import TCPStore

        hosts = rank == 0 and not shared
        store = TCPStore(host, port, world, hosts, timedelta(seconds=timeout_s), wait_for_workers=False)
        return cls(store, job_id, rank, world, scope)

    def exchange(self, address: tuple[str, int]) -> RendezvousInfo:
        """Publish this rank's address; return every rank's and the job token."""
        if self.rank == 0:
            self.store.set(f"{self.prefix}/token", str(secrets.randbits(32)))
        self.store.set(f"{self.prefix}/addr/{self.rank}", f"{address[0]}:{address[1]}")
        token = int(self.store.get(f"{self.prefix}/token"))
        addresses: dict[int, tuple[str, int]] = {}
        for r in range(self.world):
            host, port = self.store.get(f"{self.prefix}/addr/{r}").decode().rsplit(":", 1)
            addresses[r] = (host, int(port))
        return RendezvousInfo(self.rank, self.world, token, addresses)

    def barrier(self) -> None:
        """Block until every rank of the job has reached the same barrier."""
        self._barriers += 1
        key = f"{self.prefix}/barrier/{self._barriers}"
        if int(self.store.add(key, 1)) == self.world:
            self.store.set(f"{key}/done", "1")
        self.store.wait([f"{key}/done"])
