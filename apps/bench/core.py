"""Core data-path benchmark: packetize, ingest and classify, against plain numpy copies."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from dlcp import checks, resources
from dlcp.assembler import Assembler
from dlcp.config import check_payload_bytes
from dlcp.message import MessageKey, MessageSpec
from dlcp.packetizer import build_packets
from dlcp.policy import Policy
from dlcp.protocol import HEADER_SIZE, MessageKind


def _best(fn: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


_BYTES_PER_MESSAGE_BYTE = 4.0
"""Peak resident memory per byte of ``--size``: the values, the output, the packets and
the policy's scratch (3.8 measured at 256 MiB)."""


def check(size_bytes: int, payload_bytes: int, gro_bytes: int, repeat: int) -> None:
    """Refuse values the benchmark cannot run with, naming the flag (:class:`~dlcp.checks.BadValue`)."""
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 4 or size_bytes % 4:
        raise checks.BadValue("--size", size_bytes, "must be a positive multiple of 4 bytes (float32 elements)")
    check_payload_bytes("--payload", payload_bytes)
    checks.in_range(
        "--gro", gro_bytes, HEADER_SIZE + payload_bytes, unit="bytes", note="one packet: header + --payload"
    )
    checks.at_least("--repeat", repeat, 1)
    need = int(_BYTES_PER_MESSAGE_BYTE * size_bytes) + (64 << 20)
    avail = resources.available_memory()
    fits = max(0, int(((avail or 0) - (64 << 20)) / _BYTES_PER_MESSAGE_BYTE)) // 4 * 4
    breakdown = f"{_BYTES_PER_MESSAGE_BYTE} x {resources.gbytes(size_bytes)} + 64 MiB"
    resources.check_memory("--size", size_bytes, need, breakdown, f"at most {fits} fits")


def run(size_bytes: int = 64 << 20, payload_bytes: int = 8192, gro_bytes: int = 65536, repeat: int = 3) -> dict:
    """Seconds and GB/s (gigabytes per second) of each step, with the ratio to a memcpy of the same bytes."""
    check(size_bytes, payload_bytes, gro_bytes, repeat)
    n = size_bytes // 4
    values = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    out = np.zeros_like(values)
    epp = payload_bytes // 4
    policy = Policy()
    copy_s = _best(lambda: np.copyto(out, values), repeat)

    rnd = iter(range(1 << 30))

    def spec() -> MessageSpec:
        return MessageSpec(MessageKey(1, 0, 0, next(rnd)), MessageKind.PUSH, n, epp)

    pack_s = _best(lambda: build_packets(spec(), values, token=1, priority=3), repeat)
    batch = build_packets(spec(), values, token=1, priority=3)
    seg = batch.seg_size
    per = max(1, gro_bytes // seg)
    flat = batch.data.reshape(-1)
    chunks = [flat[i * seg : min((i + per) * seg, batch.nbytes)] for i in range(0, batch.count, per)]
    asm = Assembler()
    asm.add_job(1, 1)

    def ingest_all() -> None:
        s = MessageSpec(MessageKey(1, 0, 0, next(rnd)), MessageKind.PUSH, n, epp)
        rows = batch.data
        rows[:, 16:20] = np.frombuffer(s.key.round.to_bytes(4, "big"), np.uint8)
        asm.expect(s, out)
        for c in chunks:
            asm.ingest(c, seg_size=seg)

    ingest_s = _best(ingest_all, repeat)
    classify_s = _best(lambda: policy.classify(values, epp, MessageKind.PUSH, 0, 10), repeat)
    stat_s = _best(lambda: np.abs(values).mean(), repeat)
    gb = size_bytes / 1e9
    return {
        "config": {"size_bytes": size_bytes, "payload_bytes": payload_bytes, "gro_bytes": gro_bytes},
        "memcpy": {"s": copy_s, "gbytes_per_s": gb / copy_s},
        "packetize": {"s": pack_s, "gbytes_per_s": gb / pack_s, "vs_memcpy": copy_s / pack_s},
        "ingest": {"s": ingest_s, "gbytes_per_s": gb / ingest_s, "vs_memcpy": copy_s / ingest_s, "calls": len(chunks)},
        "classify": {"s": classify_s, "vs_abs_mean": stat_s / classify_s},
    }
