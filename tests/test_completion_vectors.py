"""The shared completion vectors, run through the Python core and the ns-3 transport's MessageState.

Both targets must give the same verdict after every event: complete or not,
whether a retransmission is needed, how many packets must still arrive, and the
elements accepted as lost.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from sim_support import COMPLETION, needs_ns3
from support import TOKEN, make_message, packets

from dlcp.assembler import Assembler
from dlcp.protocol import HEADER_SIZE, PacketType
from dlcp.wire import Header

CASES: list[dict[str, Any]] = json.loads(COMPLETION.read_text())["cases"]
IDS = [c["name"] for c in CASES]


def test_vector_file_is_well_formed() -> None:
    doc = json.loads(COMPLETION.read_text())
    assert doc["format"] == "dlcp-completion-vectors" and doc["version"] == 1
    for c in CASES:
        assert len(c["events"]) == len(c["expect"]), c["name"]
        assert all(e[0] in ("data", "trimmed", "probe") for e in c["events"])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_python_core(case: dict[str, Any]) -> None:
    spec, values = make_message(case["num_elems"], case["elems_per_packet"], bound=case["loss_bound"])
    asm = Assembler()
    asm.add_job(spec.key.job_id, TOKEN)
    msg = asm.expect(spec, np.zeros_like(values))
    for event, want in zip(case["events"], case["expect"], strict=True):
        if event[0] == "probe":
            asm.on_probe(spec.key)
        else:
            seq = event[1]
            last = len(event) > 2 and event[2] == "LAST"
            pkt = packets(spec, values, seqs=np.array([seq]), last=last).packets()[0]
            if event[0] == "trimmed":
                hdr = Header.unpack(pkt).replace(type=PacketType.TRIMMED)
                pkt = hdr.pack()[:HEADER_SIZE]
            asm.ingest(pkt)
        assert msg.done == want["ready"], (case["name"], event)
        if not want["ready"]:
            assert msg.needs_retransmit == want["needs_retransmit"], (case["name"], event)
            assert msg.packets_before_ready == want["packets_before_ready"], (case["name"], event)
    if case["lost_elems"] is not None:
        assert msg.lost_elems == case["lost_elems"]


@needs_ns3
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_simulator_message_state(case: dict[str, Any]) -> None:
    from dlcp.simulations import engine

    ns = engine.load()
    shape = ns.MessageShape()
    shape.num_elems, shape.elems_per_packet, shape.loss_bound = (
        case["num_elems"],
        case["elems_per_packet"],
        case["loss_bound"],
    )
    st = ns.MessageState(shape)
    for event, want in zip(case["events"], case["expect"], strict=True):
        if event[0] == "probe":
            st.OnProbe()
        else:
            last = len(event) > 2 and event[2] == "LAST"
            (st.OnTrimmed if event[0] == "trimmed" else st.OnData)(event[1], last)
        if not st.done and st.Ready():  # the transport finishes a message as soon as it is ready
            st.Finish()
        assert st.done == want["ready"], (case["name"], event)
        if not want["ready"]:
            assert st.NeedsRetransmit() == want["needs_retransmit"], (case["name"], event)
            assert st.PacketsBeforeReady() == want["packets_before_ready"], (case["name"], event)
    if case["lost_elems"] is not None:
        assert st.lost_elems == case["lost_elems"]
