import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlcp import protocol
from dlcp.drops import DropReason
from dlcp.protocol import HEADER_FIELDS, HEADER_SIZE, DType, Flag, MessageKind, PacketType
from dlcp.wire import HEADER_DTYPE, Header, check_headers, header_view, headers_to_bytes, pack_headers

u8, u16, u32 = (st.integers(0, (1 << b) - 1) for b in (8, 16, 32))
headers = st.builds(
    Header,
    type=st.sampled_from(PacketType),
    flags=st.sampled_from([Flag.NONE, Flag.LAST, Flag.RETX, Flag.LAST | Flag.FINAL]),
    priority=st.integers(0, 7),
    drop_class=st.integers(0, 3),
    job_id=u16,
    src=u16,
    token=u32,
    msg_id=u32,
    round=u32,
    layer=u16,
    kind=st.sampled_from(MessageKind),
    dtype=st.sampled_from(DType),
    seq=u32,
    pkt_count=u32,
    offset=u32,
    length=u16,
)


def test_layout_is_contiguous_and_sized() -> None:
    pos = 0
    for f in HEADER_FIELDS:
        assert f.offset == pos, f.name
        pos += f.size
    assert pos == HEADER_SIZE == HEADER_DTYPE.itemsize
    assert protocol.INVARIANT_BYTES % 4 == 0
    invariant = {f.name for f in HEADER_FIELDS if f.offset < protocol.INVARIANT_BYTES}
    assert {"seq", "offset", "flags", "priority", "drop_class"}.isdisjoint(invariant)


@given(headers)
def test_pack_unpack_round_trip(h: Header) -> None:
    raw = h.pack()
    assert len(raw) == HEADER_SIZE
    assert Header.unpack(raw) == h


@given(headers)
def test_numpy_view_agrees_with_struct(h: Header) -> None:
    view = header_view(h.pack(), 1, HEADER_SIZE)[0]
    for name in ("job_id", "src", "token", "msg_id", "round", "layer", "seq", "pkt_count", "offset", "length"):
        assert int(view[name]) == getattr(h, name)
    assert int(view["ver_type"]) == (1 << 4) | int(h.type)


def test_network_byte_order() -> None:
    raw = Header(PacketType.DATA, seq=0x01020304, job_id=0x0A0B).pack()
    seq_at = next(f.offset for f in HEADER_FIELDS if f.name == "seq")
    assert raw[seq_at : seq_at + 4] == b"\x01\x02\x03\x04"
    assert struct.unpack_from("!H", raw, 4)[0] == 0x0A0B


def test_batch_pack_matches_single() -> None:
    seq = np.arange(5)
    hb = pack_headers(
        ptype=PacketType.DATA,
        flags=0,
        priority=4,
        drop_class=np.array([0, 1, 2, 3, 0]),
        job_id=2,
        src=1,
        token=99,
        msg_id=3,
        round=4,
        layer=5,
        kind=MessageKind.REDUCE_SCATTER,
        dtype=DType.FLOAT16,
        seq=seq,
        pkt_count=5,
        offset=seq * 10,
        length=20,
    )
    raw = headers_to_bytes(hb)
    for i in range(5):
        h = Header.unpack(raw[i].tobytes())
        assert (h.seq, h.offset, h.drop_class, h.kind, h.dtype) == (
            i,
            10 * i,
            [0, 1, 2, 3, 0][i],
            MessageKind.REDUCE_SCATTER,
            DType.FLOAT16,
        )


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b.__setitem__(0, (2 << 4) | 0), DropReason.BAD_VERSION),
        (lambda b: b.__setitem__(0, (1 << 4) | 9), DropReason.BAD_TYPE),
        (lambda b: b.__setitem__(1, 77), DropReason.BAD_KIND),
        (lambda b: b.__setitem__(2, 200), DropReason.BAD_DTYPE),
    ],
)
def test_check_headers_names_the_problem(mutate, reason) -> None:
    raw = bytearray(Header(PacketType.DATA, length=8).pack() + bytes(8))
    mutate(raw)
    codes = check_headers(header_view(bytes(raw), 1, len(raw)), np.array([len(raw)]))
    assert codes.tolist() == [reason]


def test_check_headers_truncated_and_misaligned() -> None:
    raw = Header(PacketType.DATA, length=100).pack() + bytes(10)
    assert check_headers(header_view(raw, 1, len(raw)), np.array([len(raw)])).tolist() == [DropReason.TRUNCATED]
    odd = Header(PacketType.DATA, length=6).pack() + bytes(6)  # 6 bytes is not whole float32 elements
    assert check_headers(header_view(odd, 1, len(odd)), np.array([len(odd)])).tolist() == [DropReason.BAD_LENGTH]
    trimmed = Header(PacketType.TRIMMED, length=4000).pack()  # trimmed: length kept, payload gone
    assert check_headers(header_view(trimmed, 1, len(trimmed)), np.array([len(trimmed)])).tolist() == [0]


def test_unpack_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="truncated"):
        Header.unpack(b"\x10" * 10)
    with pytest.raises(ValueError, match="version"):
        Header.unpack(b"\x20" + bytes(39))
    with pytest.raises(ValueError, match="invalid DLCP header field"):
        Header.unpack(b"\x1f" + bytes(39))


def test_dscp_ecn_mapping() -> None:
    assert protocol.dscp_for(4, 1) == 34  # AF41: class 4, drop precedence 1
    assert protocol.dscp_for(7, 0) == 56  # CS7
    assert protocol.ecn_for(0) == protocol.ECN_ECT0
    assert protocol.ecn_for(2) == protocol.ECN_NOT_ECT
    assert protocol.tos_for(4, 1) == 34 << 2
    with pytest.raises(ValueError, match="priority"):
        protocol.dscp_for(8, 0)
    with pytest.raises(ValueError, match="drop_class"):
        protocol.dscp_for(1, 4)


def test_scapy_layer_matches_struct() -> None:
    pytest.importorskip("scapy")
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from dlcp.scapy_layer import DLCP

    h = Header(PacketType.DATA, Flag.LAST, priority=5, drop_class=2, job_id=3, src=1, token=77, msg_id=9,
               round=11, layer=4, kind=MessageKind.PULL, dtype=DType.FLOAT16, seq=6, pkt_count=8, offset=96,
               length=4)  # fmt: skip
    built = bytes(DLCP(**{k: v for k, v in _scapy_fields(h).items()}) / b"\x01\x02\x03\x04")
    assert built == h.pack() + b"\x01\x02\x03\x04"
    frame = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP() / UDP(dport=protocol.UDP_PORT) / built
    parsed = Ether(bytes(frame))
    assert parsed[DLCP].seq == 6 and parsed[DLCP].length == 4


def _scapy_fields(h: Header) -> dict[str, int]:
    d = {k: v for k, v in h.as_dict().items() if k not in ("type", "kind", "dtype", "flags")}
    d.update(type=int(h.type), kind=int(h.kind), dtype=int(h.dtype), flags=int(h.flags))
    return d  # type: ignore[return-value]
