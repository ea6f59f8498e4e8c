"""The switch buffer policy (push-out), one spec: the core's model, its shared vectors, the ns-3 queue disc.

``tests/vectors/buffer/push_out.json`` is generated from :mod:`dlcp.buffer`; the
software switch (``testbed/switch/egress.c``) implements the same policy in bytes,
so every frame of a vector has the same size and packets and bytes agree.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_support import VECTORS, needs_ns3

from dlcp import buffer, frames
from dlcp.protocol import NUM_PRIORITY_CLASSES, UDP_PORT, PacketType
from dlcp.wire import Header

PUSH_OUT = VECTORS / "buffer" / "push_out.json"
ETH = 14
IP_UDP = 28


def _doc() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PUSH_OUT.read_text())
    return data


def test_vector_file_is_what_the_model_generates() -> None:
    assert _doc() == json.loads(json.dumps(buffer.vector_document())), "regenerate: python -m dlcp.buffer"


def test_model_keeps_higher_classes_share() -> None:
    b = buffer.SharedBuffer(10)
    for i in range(10):
        assert b.enqueue(0, i) == (True, [])
    for i in range(10, 20):
        assert b.enqueue(3, i) == (True, [19 - i])  # newest class-0 packet first
    assert b.enqueue(3, 20) == (False, [])
    assert b.pushed_out[0] == 10 and b.overflow[3] == 1
    with pytest.raises(ValueError, match=r"class must be in 0\.\.7"):
        b.enqueue(8, 0)


def _packet(cls: int, ident: int) -> str:
    hdr = Header(type=PacketType.DATA, priority=cls, drop_class=0, seq=ident, pkt_count=1 << 20, length=64)
    f = frames.build_udp_frame(
        eth_src="02:dc:00:00:00:01",
        eth_dst="02:dc:00:00:00:02",
        src_ip="10.1.0.1",
        dst_ip="10.2.0.1",
        sport=40000,
        dport=UDP_PORT,
        payload=hdr.pack() + bytes(64),
    )
    return f[ETH:].hex()


def _ident(ipv4_hex: str) -> int:
    return Header.unpack(bytes.fromhex(ipv4_hex), IP_UDP).seq


def _harness(capacity: int, port_model: bool = False):  # type: ignore[no-untyped-def]
    from dlcp.simulations import engine

    return engine.load().QueueDiscHarness(capacity, port_model)


QUEUES = pytest.mark.parametrize("port_model", [False, True], ids=["queue_disc", "port_model"])
"""Both DLCP queues: ns-3's queue disc (queue_disc.h) and DLCP's port model's (port.h)."""


def _replay(h: Any, case: dict[str, Any]) -> None:
    for step in case["steps"]:
        if step["op"] == "enqueue":
            q = h.Enqueue(_packet(step["class"], step["id"]))
            assert (q >= 0) == step["admitted"], f"{case['name']}: packet {step['id']}"
            if q >= 0:
                assert q == step["class"]
        else:
            out = str(h.Dequeue())
            assert (h.LastDequeuedQueue(), _ident(out)) == (step["class"], step["id"]), case["name"]
    drained = []
    while out := str(h.Dequeue()):
        drained.append({"class": int(h.LastDequeuedQueue()), "id": _ident(out)})
    assert drained == case["drain"], case["name"]
    assert [int(h.PushedOut(c)) for c in range(NUM_PRIORITY_CLASSES)] == case["pushed_out"], case["name"]
    assert [int(h.Overflow(c)) for c in range(NUM_PRIORITY_CLASSES)] == case["overflow"], case["name"]


@needs_ns3
@QUEUES
@pytest.mark.parametrize("case", _doc()["cases"], ids=[c["name"] for c in _doc()["cases"]])
def test_queue_disc_follows_push_out_vectors(case: dict[str, Any], port_model: bool) -> None:
    _replay(_harness(case["buffer_packets"], port_model), case)


@needs_ns3
@QUEUES
def test_tail_drop_option_differs(port_model: bool) -> None:
    # The comparison policy: the same first case under tail drop keeps the class-2 packets
    # and drops the class-5 ones, so the vectors above do tell the two policies apart.
    case = _doc()["cases"][0]
    h = _harness(case["buffer_packets"], port_model)
    h.SetBufferPolicy("tail_drop")
    verdicts = [h.Enqueue(_packet(s["class"], s["id"])) >= 0 for s in case["steps"]]
    assert verdicts == [True] * 8 + [False] * 5
    with pytest.raises(Exception, match="push_out or tail_drop"):
        h.SetBufferPolicy("red")


@needs_ns3
@QUEUES
@settings(max_examples=40, deadline=None)
@given(
    capacity=st.integers(1, 6),
    steps=st.lists(
        st.one_of(st.tuples(st.just("enqueue"), st.integers(0, 7)), st.tuples(st.just("dequeue"), st.just(0))),
        max_size=40,
    ),
)
def test_queue_disc_matches_the_model_on_any_sequence(
    port_model: bool, capacity: int, steps: list[tuple[str, int]]
) -> None:
    case = {"name": "random", **buffer.run_case(capacity, steps)}
    h = _harness(capacity, port_model)
    # A dequeue from an empty model is a no-op step: the queue disc returns nothing either.
    for s in case["steps"]:
        if s["op"] == "dequeue" and s["id"] == -1:
            assert str(h.Dequeue()) == ""
            continue
        _replay_step(h, s)
    drained = []
    while out := str(h.Dequeue()):
        drained.append({"class": int(h.LastDequeuedQueue()), "id": _ident(out)})
    assert drained == case["drain"]
    assert [int(h.PushedOut(c)) for c in range(NUM_PRIORITY_CLASSES)] == case["pushed_out"]


def _replay_step(h: Any, step: dict[str, Any]) -> None:
    if step["op"] == "enqueue":
        assert (h.Enqueue(_packet(step["class"], step["id"])) >= 0) == step["admitted"]
    else:
        out = str(h.Dequeue())
        assert (h.LastDequeuedQueue(), _ident(out)) == (step["class"], step["id"])
