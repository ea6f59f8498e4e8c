"""What a run reports as sent is what its sockets sent: TCP from the kernel, DLCP from the transport."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from dlcp.apps.train.traffic import DLCPCounters, dlcp_bytes_sent, tcp_bytes_sent
from dlcp.config import MAX_PAYLOAD_BYTES, TransportConfig
from dlcp.host.collectives import Collectives, split_bounds
from dlcp.host.local import local_endpoints, run_ranks
from dlcp.protocol import HEADER_SIZE


def test_tcp_bytes_are_the_kernels_count_for_this_process() -> None:
    before = tcp_bytes_sent()
    if before is None:
        pytest.skip("this kernel does not count TCP bytes sent per socket (tcp_info.tcpi_bytes_sent, Linux 4.19+)")
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        with client, peer:
            client.sendall(b"x" * 100_000)
            got = 0
            while got < 100_000:
                got += len(peer.recv(1 << 20))
            peer.sendall(b"y" * 123)
            client.recv(1 << 10)
            assert tcp_bytes_sent() - before == 100_123


@pytest.mark.parametrize("payload", [8, 1024, MAX_PAYLOAD_BYTES])
def test_dlcp_bytes_are_the_packets_a_ring_sends(payload: int) -> None:
    """Counted against the ring's own arithmetic: each rank sends every chunk but one, twice, in packets.

    The payload sizes are the valid range's ends and a middle: each really carries a ring all-reduce.
    """
    world, n = 3, 20_001
    eps = local_endpoints(world, transport=TransportConfig(port=0, payload_bytes=payload))
    colls = [Collectives(ep, world) for ep in eps]
    try:
        before = [DLCPCounters.of(ep) for ep in eps]
        xs = [np.full(n, r + 1.0, dtype=np.float32) for r in range(world)]
        run_ranks(lambda r: colls[r].allreduce(xs[r], mode="ring"), world)
        sent = [DLCPCounters.of(ep) - b for ep, b in zip(eps, before, strict=True)]
    finally:
        for ep in eps:
            ep.close()
    assert all(np.array_equal(x, np.full(n, 6.0, dtype=np.float32)) for x in xs)
    chunks = np.diff(split_bounds(n, world)) * 4  # one segment: n is far below 64 MiB
    per_chunk_packets = -(-chunks // payload)
    # Every rank sends each chunk but one in the reduce-scatter and each but one in the all-gather.
    expected = 2 * (world - 1) * int(chunks.sum() + HEADER_SIZE * per_chunk_packets.sum())
    assert sum(s.retransmitted for s in sent) == 0
    assert dlcp_bytes_sent(sent) == expected


def test_retransmissions_count_a_full_packet_each() -> None:
    ranks = [DLCPCounters(payload_received=10_000, packets=3, retransmitted=2, payload_bytes=4096)]
    assert dlcp_bytes_sent(ranks) == 10_000 + 3 * HEADER_SIZE + 2 * (HEADER_SIZE + 4096)


@pytest.mark.slow
def test_training_reports_the_bytes_its_workers_sent() -> None:
    """gloo's TCP bytes and DLCP's packets, both measured, near an all-reduce's volume; none where none went."""
    from dlcp.apps.train.trainer import TrainConfig, param_count, run

    small = {"epochs": 1, "train_samples": 1024, "test_samples": 256, "batch_size": 32, "payload_bytes": 1024}
    gloo = run(TrainConfig(backend="gloo", **small))  # type: ignore[arg-type]
    dlcp = run(TrainConfig(backend="dlcp", mode="ring", **small))  # type: ignore[arg-type]
    iterations = 1024 // (2 * 32)
    volume = 2 * param_count("mlp") * 4 * iterations  # 2 workers: each sends half, twice, of every gradient
    assert gloo["dlcp_bytes_sent"] == 0
    if gloo["tcp_bytes_sent"] is not None:
        assert volume <= gloo["tcp_bytes_sent"] <= 1.1 * volume
        assert dlcp["tcp_bytes_sent"] < 0.01 * volume, "DDP's gloo group is idle under the DLCP hook"
    overhead = 1 + HEADER_SIZE / 1024
    assert volume * overhead <= dlcp["dlcp_bytes_sent"] <= 1.01 * volume * overhead
