"""A scapy layer for DLCP: for tools and tests only (scapy handles ~1.5k packets/s).

Importing this module binds DLCP to UDP port :data:`dlcp.protocol.UDP_PORT`::

    from dlcp.scapy_layer import DLCP
    pkt = Ether(src=..., dst=...) / IP(...) / UDP(dport=19110) / DLCP(type="DATA", seq=3)
"""

from __future__ import annotations

from scapy.fields import BitEnumField, BitField, ByteEnumField, ByteField, FlagsField, IntField, ShortField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from dlcp.protocol import HEADER_FIELDS, UDP_PORT, VERSION, DType, Flag, MessageKind, PacketType

_LEN_AT = next(f.offset for f in HEADER_FIELDS if f.name == "length")


class DLCP(Packet):
    name = "DLCP"
    fields_desc = [
        BitField("version", VERSION, 4),
        BitEnumField("type", 0, 4, {int(t): t.name for t in PacketType}),
        ByteEnumField("kind", 0, {int(k): k.name for k in MessageKind}),
        ByteEnumField("dtype", 0, {int(d): d.name for d in DType}),
        ByteField("rsvd0", 0),
        ShortField("job_id", 0),
        ShortField("src", 0),
        IntField("token", 0),
        IntField("msg_id", 0),
        IntField("round", 0),
        ShortField("layer", 0),
        ShortField("length", None),
        IntField("pkt_count", 0),
        FlagsField("flags", 0, 8, [str(f.name) for f in sorted(Flag, key=int) if f] + ["b3", "b4", "b5", "b6", "b7"]),
        ByteField("priority", 0),
        ByteField("drop_class", 0),
        ByteField("rsvd1", 0),
        IntField("seq", 0),
        IntField("offset", 0),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.length is None:
            n = len(pay)
            pkt = pkt[:_LEN_AT] + n.to_bytes(2, "big") + pkt[_LEN_AT + 2 :]
        return pkt + pay


bind_layers(UDP, DLCP, dport=UDP_PORT)
