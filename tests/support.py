"""Helpers shared by the tests (``tests`` is on pytest's pythonpath)."""

from __future__ import annotations

import numpy as np

from dlcp.message import MessageKey, MessageSpec
from dlcp.packetizer import PacketBatch, build_packets
from dlcp.protocol import MessageKind

JOB, TOKEN = 7, 0xC0FFEE


def make_message(
    num_elems: int = 1000,
    epp: int = 64,
    kind: MessageKind = MessageKind.PUSH,
    bound: float = 0.0,
    msg_id: int = 1,
    rnd: int = 0,
    src: int = 0,
    layer: int = 0,
    seed: int = 0,
) -> tuple[MessageSpec, np.ndarray]:
    spec = MessageSpec(MessageKey(JOB, src, msg_id, rnd), kind, num_elems, epp, layer=layer, loss_bound=bound)
    values = np.random.default_rng(seed).standard_normal(num_elems).astype(np.float32)
    return spec, values


def packets(spec: MessageSpec, values: np.ndarray, **kw: object) -> PacketBatch:
    kw.setdefault("token", TOKEN)
    kw.setdefault("priority", 3)
    return build_packets(spec, values, **kw)  # type: ignore[arg-type]


# Process entry points for dlcp.apps.launch.spawn: spawned children import them from here.
def allreduce_worker(rank: int, world: int, store_port: int, n: int, mode: str) -> tuple:
    from dlcp.config import TransportConfig
    from dlcp.host.session import open_session

    with open_session(
        rank=rank, world=world, store_host="127.0.0.1", store_port=store_port,
        transport=TransportConfig(port=0, payload_bytes=4096), server_ranks=(0, 1),
    ) as s:  # fmt: skip
        x = np.arange(n, dtype=np.float32) * (rank + 1)
        s.collectives.allreduce(x, mode=mode)
        return x, s.endpoint.token, s.endpoint.address


def failing_worker(rank: int, world: int, store_port: int) -> int:
    if rank == 1:
        raise RuntimeError("boom on rank 1")
    return rank
