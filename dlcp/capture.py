"""DLCP packets in captured traffic: recognise them, split GSO super-datagrams, decode each one.

A capture taken before UDP segmentation (on loopback, or on a NIC with
segmentation offload) holds one *super-datagram* per GSO send: up to 64 DLCP
packets back to back, each ``HEADER_SIZE + payload`` bytes but a shorter last
one. The receiver cuts a GRO buffer at the segment size the kernel reports
and checks each header (:func:`dlcp.wire.segment_count`, ``header_view``,
``check_headers``); the decoder cuts and checks with the same functions
(:func:`dlcp.wire.segment_lengths`). pcap keeps no segment size, so the decoder
takes it from the first packet's header: DLCP sends only the packets of one
message in a GSO send (``host/udp.py``), and all but the last have the first
one's length.

For tools and tests; the data path never goes through here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlcp.drops import DropReason
from dlcp.pcap import Layer, PcapReader, udp_datagram, udp_length
from dlcp.protocol import HEADER_SIZE, NUM_DROP_CLASSES, NUM_PRIORITY_CLASSES, Flag, PacketType
from dlcp.wire import Header, check_headers, header_view, segment_count, segment_lengths

_KNOWN_FLAGS = int(Flag.LAST | Flag.RETX | Flag.FINAL | Flag.NACK)
_NOT_DLCP = (DropReason.BAD_VERSION, DropReason.BAD_TYPE, DropReason.BAD_KIND, DropReason.BAD_DTYPE)


def _first_header(data: bytes) -> np.void:
    return header_view(data, 1, HEADER_SIZE)[0]


def looks_like_dlcp(data: bytes) -> bool:
    """True if ``data`` starts with a DLCP header as senders write it.

    Every field a sender constrains must hold: the version, a known type, kind
    and dtype, known flags, a priority and drop class in range, and zero
    reserved bytes. A random datagram passes with a probability below
    1e-14. The payload is not checked: a truncated DLCP packet still looks
    like one (and decodes as malformed).
    """
    if len(data) < HEADER_SIZE:
        return False
    h = header_view(data, 1, HEADER_SIZE)
    code = int(check_headers(h, np.array([len(data)]))[0])
    if code in _NOT_DLCP:
        return False
    v = h[0]
    return (
        int(v["rsvd0"]) == 0
        and int(v["rsvd1"]) == 0
        and int(v["flags"]) & ~_KNOWN_FLAGS == 0
        and int(v["priority"]) < NUM_PRIORITY_CLASSES
        and int(v["drop_class"]) < NUM_DROP_CLASSES
    )


def segment_size(datagram: bytes, wire_length: int | None = None) -> int:
    """The GSO segment size ``datagram`` was sent with; its whole length if it is a single packet.

    A datagram longer than its first packet, whose first packet is DATA and
    whose second segment starts with a DLCP header, is a super-datagram.
    Otherwise extra bytes are not taken for packets (a receiver without GRO
    ignores them too). ``wire_length`` is the datagram's length on the wire
    when the capture kept only the first ``len(datagram)`` bytes (its snap
    length): if the cut hides the second header, the first one is trusted.
    """
    n = len(datagram)
    total = max(n, wire_length or 0)
    if n < HEADER_SIZE:
        return max(total, 1)
    first = _first_header(datagram)
    length = int(first["length"])
    seg = HEADER_SIZE + length
    if int(first["ver_type"]) & 0xF == PacketType.DATA and length > 0 and total > seg:
        hidden = total > n and n < seg + HEADER_SIZE  # the snap length cut before the second header
        if hidden or looks_like_dlcp(datagram[seg : seg + HEADER_SIZE]):
            return seg
    return total


def split_datagram(datagram: bytes, wire_length: int | None = None) -> list[bytes]:
    """The DLCP packets of one datagram: one, or the segments of a GSO super-datagram.

    With ``wire_length`` (see :func:`segment_size`) the last one may be cut short.
    """
    seg = segment_size(datagram, wire_length)
    return [datagram[i * seg : i * seg + int(n)] for i, n in enumerate(segment_lengths(len(datagram), seg))]


def decode_packet(raw: bytes) -> dict[str, Any]:
    """One DLCP packet as a dict of its header fields.

    A packet the receiver would drop at the wire checks (:func:`dlcp.wire.check_headers`)
    gets ``error`` naming the drop reason, with the fields when the header is readable.
    """
    if len(raw) < HEADER_SIZE:
        return {"error": f"TRUNCATED: {len(raw)} bytes, less than the {HEADER_SIZE}-byte header", "bytes": len(raw)}
    code = DropReason(int(check_headers(header_view(raw, 1, HEADER_SIZE), np.array([len(raw)]))[0]))
    try:
        h = Header.unpack(raw)
    except ValueError as exc:
        return {"error": f"{code.name}: {exc}", "bytes": len(raw)}
    rec: dict[str, Any] = h.as_dict()
    payload = len(raw) - HEADER_SIZE
    if code == DropReason.TRUNCATED:
        rec["error"] = f"TRUNCATED: header says {h.length} payload bytes, packet has {payload}"
    elif code != DropReason.OK:
        rec["error"] = f"{code.name}: {h.length} payload bytes is not a whole number of {h.dtype.name} elements"
    elif payload != h.length and h.type != PacketType.TRIMMED:
        rec["warning"] = f"header says {h.length} payload bytes, datagram has {payload}"
    return rec


def decode_datagram(datagram: bytes, wire_length: int | None = None) -> list[dict[str, Any]]:
    """Decode every DLCP packet in one datagram, numbering them (``segment`` of ``segments``).

    With ``wire_length`` above ``len(datagram)`` (the capture's snap length cut
    it), ``segments`` counts the packets on the wire; a packet cut after its
    header shows with a warning, one cut inside its header is left out.
    """
    seg = segment_size(datagram, wire_length)
    parts = split_datagram(datagram, wire_length)
    snapped = wire_length is not None and wire_length > len(datagram)
    on_wire = segment_count(wire_length, seg) if snapped and wire_length else len(parts)
    out = []
    for i, part in enumerate(parts):
        cut = snapped and len(part) < seg
        if cut and len(part) < HEADER_SIZE:
            break
        rec = decode_packet(part)
        if cut and str(rec.get("error", "")).startswith("TRUNCATED"):
            rec.pop("error")
            rec["warning"] = f"cut by the capture's snap length after {len(part)} of its bytes"
        rec["segment"], rec["segments"] = i, on_wire
        out.append(rec)
    return out


@dataclass
class CaptureSummary:
    """What a pass over a capture saw, for the report after the packets."""

    records: int = 0
    layers: Counter[Layer] = field(default_factory=Counter)
    not_dlcp: int = 0
    """UDP datagrams without a DLCP header (and, with a port filter, not on that port)."""
    dlcp_datagrams: int = 0
    packets: int = 0
    """DLCP packets shown."""
    super_datagrams: int = 0
    """GSO super-datagrams split into their packets."""
    malformed_packets: int = 0
    snapped: int = 0
    """Datagrams cut by the capture's snap length: packets past the cut are not shown."""
    snapped_packets: int = 0
    """Packets of those datagrams past the cut or cut inside their header (counted from the UDP length)."""
    filtered_datagrams: int = 0
    filtered_packets: int = 0
    filtered_ports: Counter[int] = field(default_factory=Counter)
    """How often each port was an end of a DLCP datagram the port filter left out."""


def capture_packets(reader: PcapReader, summary: CaptureSummary, port: int | None = None) -> Iterator[dict[str, Any]]:
    """Decode the DLCP packets of a capture, updating ``summary`` as it goes.

    Without ``port``, a datagram is DLCP when it starts with a DLCP header
    (:func:`looks_like_dlcp`), on any port. With ``port``, every datagram from
    or to that port is decoded as DLCP (one that is not shows as malformed),
    and DLCP datagrams on other ports are counted as filtered out.
    """
    for rec in reader:
        summary.records += 1
        layer, frame = udp_datagram(reader.linktype, rec.data)
        summary.layers[layer] += 1
        if frame is None:
            continue
        on_port = port is None or port in (frame.sport, frame.dport)
        # On the named port everything is taken for DLCP; elsewhere only what looks like it.
        if not (port is not None and on_port) and not looks_like_dlcp(frame.payload):
            summary.not_dlcp += 1
            continue
        announced = udp_length(reader.linktype, rec.data) if rec.orig_len > len(rec.data) else None
        snapped = announced is not None and announced > len(frame.payload)
        packets = decode_datagram(frame.payload, announced if snapped else None)
        if not on_port:
            summary.filtered_datagrams += 1
            summary.filtered_packets += len(packets)
            summary.filtered_ports.update((frame.sport, frame.dport))
            continue
        summary.dlcp_datagrams += 1
        segments = packets[0]["segments"] if packets else 1
        summary.super_datagrams += segments > 1
        if snapped:
            summary.snapped += 1
            summary.snapped_packets += segments - len(packets)
        for p in packets:
            p.update(
                index=summary.packets,
                record=rec.number,
                time=rec.time_ns / 1e9,
                time_ns=rec.time_ns,
                ip=f"{frame.src_ip}:{frame.sport} > {frame.dst_ip}:{frame.dport}",
                tos=frame.tos,
            )
            summary.packets += 1
            summary.malformed_packets += "error" in p
            yield p


def format_time(time_ns: int, nanosecond: bool) -> str:
    """Seconds since the epoch with the capture's own precision (6 or 9 decimals), exactly."""
    sec, ns = divmod(time_ns, 1_000_000_000)
    return f"{sec}.{ns:09d}" if nanosecond else f"{sec}.{ns // 1000:06d}"
