"""Differential: a random traffic mix through BMv2 simple_switch (the P4 program itself) and through the
software switch, with the same entries; every frame's output (port and bytes, or a drop) and the P4 counters
must agree. Skipped, with the reason, where p4c and BMv2 are not installed.

ECMP groups have one member here: which member a hash picks is target-defined (the vectors accept any
member); the rest of the pipeline must be bit-exact. Frames go one at a time, so queues stay empty.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from switch_support import random_frames

from dlcp.p4 import build, names, p4info, sizes, tools, vectors
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
    reason = tools.missing_reason(tools.P4C_BM2_SS, tools.SIMPLE_SWITCH, tools.SIMPLE_SWITCH_CLI)
    if reason:
        pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    from dlcp.testbed.bmv2 import Bmv2Switch

    out = tmp_path_factory.mktemp("p4")
    result = build.build_v1model(out)
    assert result.ok, result.output
    info = p4info.load(out / "v1model" / "dlcp.p4info.txtpb")
    with Bmv2Switch(out / "v1model" / "dlcp.json", info, PORTS) as sw:
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
    hw_out = []
    for f in frames:
        bmv2.send(vectors.Frame(1, f))
        hw_out.append(sorted((x.port, x.data) for x in bmv2.receive(0.05)))
    sw_out, sw_counters = software(frames)
    mismatches = [
        f"frame {i} ({f.hex()[:80]}...): bmv2 {h}, software {sorted(s)}"
        for i, (f, h, s) in enumerate(zip(frames, hw_out, sw_out, strict=True))
        if h != sorted(s)
    ]
    assert not mismatches, "\n".join(mismatches[:10])
    for n in names.COUNTERS:
        for s in slots:
            idx = s[0] << sizes.CLASS_BITS | s[1]
            assert bmv2.read_counter(n, idx) - before[(n, s)] == sw_counters[n][idx], (n, s)
