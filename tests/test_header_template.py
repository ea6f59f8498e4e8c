"""A message's HeaderTemplate (one struct pack per message) writes what the batch builder and Header write."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dlcp.message import MessageKey, MessageSpec
from dlcp.packetizer import HeaderTemplate, build_headers
from dlcp.protocol import DTYPE_SIZE, MAX_PAYLOAD, DType, Flag, MessageKind, PacketType
from dlcp.wire import Header


@st.composite
def _specs(draw: st.DrawFn) -> MessageSpec:
    dtype = draw(st.sampled_from([d for d in DType if d != DType.BFLOAT16]))
    epp = draw(st.integers(1, MAX_PAYLOAD // DTYPE_SIZE[dtype]))
    n = draw(st.sampled_from([0, 1, epp - 1, epp, epp + 1, 3 * epp, draw(st.integers(0, 50 * epp))]))
    key = MessageKey(draw(st.integers(0, 2**16 - 1)), draw(st.integers(0, 2**16 - 1)),
                     draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 2**32 - 1)))  # fmt: skip
    return MessageSpec(key, draw(st.sampled_from(list(MessageKind))), max(0, n), epp, dtype,
                       draw(st.integers(0, 2**16 - 1)), draw(st.sampled_from([0.0, 0.01, 0.5])))  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(spec=_specs(), token=st.integers(0, 2**32 - 1), data=st.data())
def test_template_headers_equal_build_headers(spec: MessageSpec, token: int, data: st.DataObject) -> None:
    tmpl = HeaderTemplate(spec, token)
    _, first = build_headers(spec, np.zeros(1, dtype=np.int64), token=token, priority=0, last=False)
    np.testing.assert_array_equal(tmpl.row, first[0])
    seqs = np.unique(data.draw(st.lists(st.integers(0, spec.pkt_count - 1), min_size=1, max_size=20)))
    prio, drop = data.draw(st.integers(0, 7)), data.draw(st.integers(0, 3))
    retx, last = data.draw(st.booleans()), data.draw(st.booleans())
    _, want = build_headers(spec, seqs, token=token, priority=prio, drop_classes=drop, retransmit=retx, last=last)
    got = tmpl.build(seqs, priority=prio, drop_class=drop, retransmit=retx, last=last)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=200, deadline=None)
@given(spec=_specs(), token=st.integers(0, 2**32 - 1), seq=st.integers(0, 2**32 - 1), prio=st.integers(0, 7))
def test_probe_header_equals_header_pack(spec: MessageSpec, token: int, seq: int, prio: int) -> None:
    key = spec.key
    want = Header(
        PacketType.PROBE, Flag.NONE, priority=prio, drop_class=0, job_id=key.job_id, src=key.src, token=token,
        msg_id=key.msg_id, round=key.round, layer=spec.layer, kind=spec.kind, dtype=spec.dtype, seq=seq,
        pkt_count=spec.pkt_count, offset=0, length=0,
    ).pack()  # fmt: skip
    assert HeaderTemplate(spec, token).control(PacketType.PROBE, seq=seq, priority=prio) == want
