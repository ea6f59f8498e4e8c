"""Differential: a random traffic mix through BMv2 simple_switch (the P4 program itself) and through the
software switch, with the same entries; every frame's output (port and bytes, or a drop) and the P4 counters
must agree. Skipped, with the reason, where p4c and BMv2 are not installed.

ECMP groups have one member here: which member a hash picks is target-defined (the vectors accept any
member); the rest of the pipeline must be bit-exact. Frames go one at a time, so queues stay empty.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from switch_support import random_frames

from dlcp.p4 import names, sizes, vectors
from dlcp.testbed.switch import vector_run
from dlcp.testbed.switch.config import PortConfig
from dlcp.testbed.switch.dataplane import DataPlane

pytestmark = [pytest.mark.p4c, pytest.mark.bmv2, pytest.mark.root, pytest.mark.slow]

PORTS = [1, 2, 3]
FRAMES = 300
A = vectors.Action


def entries() -> list[vectors.Entry]:
    out = []
    for group, (prefix, plen) in enumerate((("10.2.0.0", 16), ("10.3.0.0", 16), ("10.4.0.0", 15)), start=1):
        out.append(
            vectors.Entry(
                names.IPV4_ROUTES, {"dst_addr": {"lpm": [prefix, plen]}}, A(names.SET_NEXT_HOP_GROUP, {"group": group})
            )
        )
        hop = A(
            names.SET_NEXT_HOP,
            {"port": PORTS[group - 1], "src_mac": "02:dc:00:00:00:fe", "dst_mac": f"02:dc:00:00:01:0{group}"},
        )
        out.append(vectors.Entry(names.NEXT_HOPS, {"group": {"exact": group}}, action_set=(hop,)))
    out.append(vectors.Entry(names.DLCP_PORTS, {"dst_port": {"exact": 4791}}, A(names.MARK_DLCP, {})))
    wild = {k: {"ternary": [0, 0]} for k in ("job_id", "packet_type", "priority", "drop_class", "kind")}
    out.append(
        vectors.Entry(
            names.DLCP_CLASSES,
            {**wild, "priority": {"ternary": [2, 0xFF]}},
            A(names.SET_QUEUE, {"queue": 5}),
            priority=20,
        )
    )
    out.append(
        vectors.Entry(
            names.DLCP_CLASSES,
            {**wild, "drop_class": {"ternary": [3, 0xFF]}},
            A(names.MARK_DROP_ELIGIBLE, {"queue": 1}),
            priority=10,
        )
    )
    out.append(
        vectors.Entry(
            names.DLCP_DROP_THRESHOLDS,
            {"queue": {"exact": 1}, "drop_class": {"exact": 3}},
            A(names.TRIM_ABOVE, {"threshold": 0}),
        )
    )
    return out  # fmt: skip


@pytest.fixture(scope="module")
def bmv2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from dlcp.testbed import bmv2

    reason = bmv2.missing_reason()
    if reason:
        pytest.skip(reason)
    with bmv2.Bmv2Switch.compiled(tmp_path_factory.mktemp("p4"), PORTS) as sw:
        yield sw


def software(frames: list[bytes]) -> tuple[list[list[tuple[int, bytes]]], dict[str, list[int]]]:
    dp = DataPlane(virtual_clock=True)
    for p in PORTS:
        dp.add_port(PortConfig(port=p, interface=None))
    ids = vector_run.IdAllocator()
    for e in entries():
        vector_run.install(dp, e, ids)
    outs = []
    for f in frames:
        dp.inject(1, f)
        outs.append(dp.drain())
    counters = {n: [int(x) for x in dp.counters(n)[0]] for n in names.COUNTERS}
    return outs, counters


def test_random_mix_agrees_with_bmv2(bmv2: object) -> None:
    from dlcp.testbed.bmv2 import Bmv2Switch

    assert isinstance(bmv2, Bmv2Switch)
    frames = random_frames(20261123, FRAMES)
    bmv2.restart()
    for e in entries():
        bmv2.install(e)
    slots = [(p, c) for p in PORTS for c in range(1 << sizes.CLASS_BITS)]
    before = {(n, s): bmv2.read_counter(n, s[0] << sizes.CLASS_BITS | s[1]) for n in names.COUNTERS for s in slots}
    # BMv2 takes the frames in order, one port in; under load an output may come after the next frame was
    # sent, so the outputs are compared as each port's sequence, not frame by frame.
    hw_seq: list[tuple[int, bytes]] = []
    for f in frames:
        bmv2.send(vectors.Frame(1, f))
        hw_seq.extend((x.port, x.data) for x in bmv2.receive(0.05))
    sw_out, sw_counters = software(frames)
    sw_seq = [x for out in sw_out for x in sorted(out)]
    deadline = time.monotonic() + 10
    while len(hw_seq) < len(sw_seq) and time.monotonic() < deadline:
        hw_seq.extend((x.port, x.data) for x in bmv2.receive(0.2))
    for port in PORTS:
        hw_p = [d for p, d in hw_seq if p == port]
        sw_p = [d for p, d in sw_seq if p == port]
        first = next((i for i, (h, w) in enumerate(zip(hw_p, sw_p, strict=False)) if h != w), min(len(hw_p), len(sw_p)))
        assert hw_p == sw_p, (
            f"port {port}: bmv2 sent {len(hw_p)} frames, software {len(sw_p)}; first difference at output {first}: "
            f"bmv2 {hw_p[first].hex()[:80] if first < len(hw_p) else None}, "
            f"software {sw_p[first].hex()[:80] if first < len(sw_p) else None}"
        )
    for n in names.COUNTERS:
        for s in slots:
            idx = s[0] << sizes.CLASS_BITS | s[1]
            assert bmv2.read_counter(n, idx) - before[(n, s)] == sw_counters[n][idx], (n, s)
