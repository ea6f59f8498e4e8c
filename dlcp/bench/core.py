"""Core data-path benchmark: packetize, ingest and classify, against plain numpy copies."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from dlcp.assembler import Assembler
from dlcp.message import MessageKey, MessageSpec
from dlcp.packetizer import build_packets
from dlcp.policy import Policy
from dlcp.protocol import MessageKind


def _best(fn: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def run(size_bytes: int = 64 << 20, payload_bytes: int = 8192, gro_bytes: int = 65536, repeat: int = 3) -> dict:
    """Seconds and GB/s of each step, with the ratio to a memcpy of the same bytes."""
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
        "memcpy": {"s": copy_s, "gbps": gb / copy_s},
        "packetize": {"s": pack_s, "gbps": gb / pack_s, "vs_memcpy": copy_s / pack_s},
        "ingest": {"s": ingest_s, "gbps": gb / ingest_s, "vs_memcpy": copy_s / ingest_s, "calls": len(chunks)},
        "classify": {"s": classify_s, "vs_abs_mean": stat_s / classify_s},
    }
