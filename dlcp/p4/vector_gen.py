"""Writes the switch test vectors (``tests/vectors/switch/*.json``) from a reference model.

The expected frames come from the few rewrites a DLCP switch does (route:
MACs and TTL; trim: cut to the headers, type TRIMMED), applied here in Python
to frames built with :mod:`dlcp.frames` and :class:`dlcp.wire.Header`. The
committed files must equal what :func:`render` returns (a test checks it), so
change this module, not the JSON.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dlcp import protocol
from dlcp.frames import ETH_HEADER, ETHERTYPE_IPV4, IPV4_HEADER, UDP_HEADER, build_udp_frame, ipv4_checksum, mac_bytes
from dlcp.p4 import names, sizes
from dlcp.p4.vectors import FORMAT, VERSION
from dlcp.protocol import Flag, MessageKind, PacketType
from dlcp.wire import Header

ROUTER_MAC = "02:dc:00:00:00:fe"
HOST_MAC = "02:dc:00:00:00:01"
HOST_IP = "10.0.0.1"
IN_PORT = 0
JOB = 7
TOKEN = 0x5EED

_IP = ETH_HEADER.size
_UDP = _IP + IPV4_HEADER.size
_DLCP = _UDP + UDP_HEADER.size
_FIELD = {f.name: f for f in protocol.HEADER_FIELDS}


def next_hop_mac(port: int) -> str:
    return f"02:dc:00:00:01:{port:02x}"


# ---- frames ------------------------------------------------------------------------------------------------


def dlcp_frame(
    h: Header,
    *,
    payload_len: int = 64,
    dst_ip: str = "10.2.0.5",
    sport: int = 40000,
    dport: int = protocol.UDP_PORT,
    ttl: int = 64,
    ident: int = 0,
    payload: bytes | None = None,
) -> bytes:
    """An Ethernet/IPv4/UDP frame carrying one DLCP datagram, TOS marked as the spec says."""
    if payload is None:
        payload = bytes((h.seq * 7 + i) & 0xFF for i in range(payload_len))
    if h.type != PacketType.TRIMMED:
        h = h.replace(length=len(payload))
    tos = protocol.tos_for(h.priority, h.drop_class)  # malformed classes are written later (with_byte)
    return udp_frame(h.pack() + payload, dst_ip=dst_ip, sport=sport, dport=dport, ttl=ttl, ident=ident, tos=tos)


def udp_frame(
    payload: bytes,
    *,
    dst_ip: str = "10.2.0.5",
    sport: int = 41000,
    dport: int = 5000,
    ttl: int = 64,
    ident: int = 0,
    tos: int = 0,
) -> bytes:
    return build_udp_frame(
        eth_src=HOST_MAC,
        eth_dst=ROUTER_MAC,
        src_ip=HOST_IP,
        dst_ip=dst_ip,
        sport=sport,
        dport=dport,
        payload=payload,
        tos=tos,
        ttl=ttl,
        ident=ident,
    )


def _ipv4(proto: int, body: bytes, *, dst_ip: str, options: bytes = b"", ttl: int = 64) -> bytes:
    ihl = (IPV4_HEADER.size + len(options)) // 4
    src = bytes(int(x) for x in HOST_IP.split("."))
    dst = bytes(int(x) for x in dst_ip.split("."))
    total = ihl * 4 + len(body)
    hdr = IPV4_HEADER.pack(0x40 | ihl, 0, total, 0, 0x4000, ttl, proto, 0, src, dst) + options
    hdr = hdr[:10] + struct.pack("!H", ipv4_checksum(hdr)) + hdr[12:]
    eth = ETH_HEADER.pack(mac_bytes(ROUTER_MAC), mac_bytes(HOST_MAC), ETHERTYPE_IPV4)
    return eth + hdr + body


def tcp_frame(*, dst_ip: str = "10.2.0.5") -> bytes:
    # Ports, seq, ack, offset 5, ACK, window, checksum 0 (switches do not check it), urgent.
    tcp = struct.pack("!HHIIBBHHH", 43000, 80, 1, 1, 0x50, 0x10, 1024, 0, 0) + b"tcp payload"
    return _ipv4(6, tcp, dst_ip=dst_ip)


def with_byte(frame: bytes, dlcp_field: str, value: int) -> bytes:
    """The frame with one byte of the DLCP header overwritten (malformed packets)."""
    at = _DLCP + _FIELD[dlcp_field].offset
    return frame[:at] + bytes([value]) + frame[at + 1 :]


def routed(frame: bytes, port: int) -> dict[str, Any]:
    """What leaves ``port`` when a switch routes ``frame`` there: new MACs, TTL - 1, IPv4 checksum."""
    eth = ETH_HEADER.pack(mac_bytes(next_hop_mac(port)), mac_bytes(ROUTER_MAC), ETHERTYPE_IPV4)
    ihl = (frame[_IP] & 0xF) * 4
    ip = bytearray(frame[_IP : _IP + ihl])
    ip[8] -= 1
    ip[10:12] = b"\0\0"
    ip[10:12] = struct.pack("!H", ipv4_checksum(bytes(ip)))
    return {"port": port, "bytes": (eth + bytes(ip) + frame[_IP + ihl :]).hex()}


def trimmed(frame: bytes, port: int) -> dict[str, Any]:
    """What leaves ``port`` when a switch trims ``frame``: routed, cut to its headers, type TRIMMED."""
    out = bytearray(bytes.fromhex(routed(frame, port)["bytes"])[: sizes.TRIMMED_FRAME_BYTES])
    out[_DLCP] = (out[_DLCP] & 0xF0) | PacketType.TRIMMED
    out[_IP + 2 : _IP + 4] = struct.pack("!H", sizes.TRIMMED_IPV4_TOTAL_LEN)
    out[_UDP + 4 : _UDP + 8] = struct.pack("!HH", sizes.MIN_DLCP_UDP_LENGTH, 0)
    out[_IP + 10 : _IP + 12] = b"\0\0"
    out[_IP + 10 : _IP + 12] = struct.pack("!H", ipv4_checksum(bytes(out[_IP:_UDP])))
    return {"port": port, "bytes": bytes(out).hex()}


def data(seq: int, *, priority: int = 1, drop_class: int = 0, flags: Flag = Flag.NONE, **kw: Any) -> Header:
    h = Header(
        type=PacketType.DATA,
        flags=flags,
        priority=priority,
        drop_class=drop_class,
        job_id=JOB,
        token=TOKEN,
        msg_id=1,
        seq=seq,
        pkt_count=64,
        offset=seq * 16,
    )
    return h.replace(**kw) if kw else h


def control(ptype: PacketType, *, priority: int = protocol.CONTROL_PRIORITY, drop_class: int = 0) -> Header:
    return Header(type=ptype, priority=priority, drop_class=drop_class, job_id=JOB, token=TOKEN, msg_id=1, pkt_count=64)


# ---- table entries -----------------------------------------------------------------------------------------


def route(prefix: str, length: int, group: int) -> dict[str, Any]:
    return {
        "table": names.IPV4_ROUTES,
        "match": {"dst_addr": {"lpm": [prefix, length]}},
        "action": names.SET_NEXT_HOP_GROUP,
        "params": {"group": group},
    }


def group(gid: int, ports: Iterable[int]) -> dict[str, Any]:
    return {
        "table": names.NEXT_HOPS,
        "match": {"group": {"exact": gid}},
        "action_set": [
            {"action": names.SET_NEXT_HOP, "params": {"port": p, "src_mac": ROUTER_MAC, "dst_mac": next_hop_mac(p)}}
            for p in ports
        ],
    }


_ALL_KEYS = ("job_id", "packet_type", "priority", "drop_class", "kind")
_KEY_MASK = {"job_id": 0xFFFF, "packet_type": 0xF, "priority": 0xFF, "drop_class": 0xFF, "kind": 0xFF}


def classify(action: str, queue: int, rank: int, **keys: int) -> dict[str, Any]:
    """A dlcp_classes entry; keys not given are wildcards; ``rank`` is the P4Runtime priority (higher wins)."""
    return {
        "table": names.DLCP_CLASSES,
        "match": {k: {"ternary": [keys.get(k, 0), _KEY_MASK[k] if k in keys else 0]} for k in _ALL_KEYS},
        "priority": rank,
        "action": action,
        "params": {"queue": queue},
    }


def threshold(queue: int, drop_class: int, action: str, value: int) -> dict[str, Any]:
    return {
        "table": names.DLCP_DROP_THRESHOLDS,
        "match": {"queue": {"exact": queue}, "drop_class": {"exact": drop_class}},
        "action": action,
        "params": {"threshold": value},
    }


def counters(**per_counter: list[tuple[list[int], int, int]]) -> dict[str, list[dict[str, Any]]]:
    """Counter expectations; every counter is listed so that unlisted slots must stay at 0."""
    short = {"forwarded": names.FORWARDED, "dropped": names.DROPPED, "trimmed": names.TRIMMED}
    out: dict[str, list[dict[str, Any]]] = {n: [] for n in names.COUNTERS}
    for key, rows in per_counter.items():
        out[short[key]] = [{"ports": ports, "class": klass, "packets": n} for ports, klass, n in rows]
    return out


def pkt(frame: bytes, expect: list[dict[str, Any]], note: str, **extra: Any) -> dict[str, Any]:
    return {"port": IN_PORT, "bytes": frame.hex(), "note": note, "expect": expect, **extra}


# ---- cases -------------------------------------------------------------------------------------------------


def routing_cases() -> list[dict[str, Any]]:
    to_24 = udp_frame(b"to the /24", dst_ip="10.2.0.5")
    to_16 = udp_frame(b"to the /16", dst_ip="10.2.9.5")
    dlcp = dlcp_frame(data(0, priority=3), dst_ip="10.2.0.9")
    opts = _ipv4(17, UDP_HEADER.pack(41000, 5000, 12, 0) + b"opts", dst_ip="10.2.0.5", options=b"\x01\x01\x01\x00")
    arp = ETH_HEADER.pack(b"\xff" * 6, mac_bytes(HOST_MAC), 0x0806) + bytes(28)
    return [
        {
            "name": "routing_lpm_ttl_and_drops",
            "description": "Longest prefix wins; MACs rewritten and TTL decremented; no route, TTL <= 1 and "
            "non-IPv4 frames are dropped; IPv4 options are routed without looking into L4.",
            "entries": [route("10.2.0.0", 16, 3), route("10.2.0.0", 24, 2), group(2, [2]), group(3, [3])],
            "packets": [
                pkt(to_24, [routed(to_24, 2)], "UDP to 10.2.0.5: the /24 wins"),
                pkt(to_16, [routed(to_16, 3)], "UDP to 10.2.9.5: only the /16 matches"),
                pkt(dlcp, [routed(dlcp, 2)], "DLCP data priority 3 is routed like any packet"),
                pkt(udp_frame(b"nowhere", dst_ip="10.9.0.1"), [], "no route: dropped"),
                pkt(udp_frame(b"ttl 1", ttl=1), [], "TTL 1 would expire: dropped"),
                pkt(udp_frame(b"ttl 0", ttl=0), [], "TTL 0: dropped"),
                pkt(arp, [], "not IPv4 (ARP): dropped, the switch is a router"),
                pkt(opts, [routed(opts, 2)], "IPv4 with options: routed, L4 not parsed"),
            ],
            "counters": counters(forwarded=[([2], 0, 2), ([3], 0, 1), ([2], 3, 1)]),
        }
    ]


def ecmp_cases() -> list[dict[str, Any]]:
    members = [2, 3, 4, 5]
    packets = []
    for seq in range(64):
        f = dlcp_frame(data(seq, priority=3), dst_ip="10.1.0.7")
        packets.append({"port": IN_PORT, "bytes": f.hex(), "expect_one_of": [routed(f, p) for p in members]})
    for seq in range(16):
        f = dlcp_frame(control(PacketType.PROBE).replace(seq=seq), dst_ip="10.1.0.7")
        packets.append({"port": IN_PORT, "bytes": f.hex(), "expect_one_of": [routed(f, p) for p in members]})
    for i in range(16):
        f = udp_frame(f"flow packet {i}".encode(), dst_ip="10.1.0.7", ident=i)
        packets.append({"port": IN_PORT, "bytes": f.hex(), "expect_one_of": [routed(f, p) for p in members]})
    for msg_id in range(64):
        f = dlcp_frame(data(0, priority=3).replace(msg_id=msg_id, round=msg_id // 16, pkt_count=1), dst_ip="10.1.0.7")
        packets.append({"port": IN_PORT, "bytes": f.hex(), "expect_one_of": [routed(f, p) for p in members]})
    packets[0]["note"] = "64 DLCP data packets of one message, one 5-tuple, seq 0..63"
    packets[64]["note"] = "16 PROBEs of the same message: control hashes on the 5-tuple only"
    packets[80]["note"] = "16 packets of one non-DLCP UDP flow"
    packets[96]["note"] = "64 one-packet DLCP messages (seq 0) of one 5-tuple: the entropy is seq ^ msg_id"
    return [
        {
            "name": "ecmp_sprays_dlcp_data_only",
            "description": "DLCP data packets of one 5-tuple use every member of the group (hash includes "
            "seq ^ msg_id), one-packet messages too; DLCP control packets and a non-DLCP flow each stay "
            "on one member.",
            "entries": [route("10.1.0.0", 16, 1), group(1, members)],
            "packets": packets,
            "spread": [
                {"packets": list(range(64)), "distinct_ports": len(members)},
                {"packets": list(range(64, 80)), "distinct_ports": 1},
                {"packets": list(range(80, 96)), "distinct_ports": 1},
                {"packets": list(range(96, 160)), "distinct_ports": len(members)},
            ],
            "counters": counters(forwarded=[(members, 3, 128), (members, 7, 16), (members, 0, 16)]),
        }
    ]


def classification_cases() -> list[dict[str, Any]]:
    a = dlcp_frame(data(0, priority=5, kind=MessageKind.PULL))
    b = dlcp_frame(data(1, priority=5, kind=MessageKind.PUSH))
    c = dlcp_frame(control(PacketType.PROBE).replace(kind=MessageKind.PULL))
    d = dlcp_frame(data(2, priority=4, drop_class=2, job_id=9, kind=MessageKind.ALL_GATHER))
    e = udp_frame(b"not dlcp at all, but long enough to look like a DLCP header!!", dport=5000)
    f = dlcp_frame(data(3, priority=5), dport=protocol.UDP_PORT + 1)
    g = dlcp_frame(data(4, priority=4), dport=protocol.UDP_PORT + 2)
    h = dlcp_frame(data(5, priority=2, type=PacketType.TRIMMED), payload=b"")
    i = tcp_frame()
    return [
        {
            "name": "classification_by_job_type_priority_role",
            "description": "dlcp_classes picks the queue by job, type, priority, drop class and role; with no "
            "match a DLCP packet uses its priority class; non-DLCP traffic uses DEFAULT_QUEUE; extra DLCP ports "
            "come from dlcp_ports; a header trimmed upstream goes to TRIM_QUEUE.",
            "entries": [
                route("10.2.0.0", 24, 2),
                group(2, [2]),
                {
                    "table": names.DLCP_PORTS,
                    "match": {"dst_port": {"exact": protocol.UDP_PORT + 2}},
                    "action": names.MARK_DLCP,
                    "params": {},
                },
                classify(
                    names.SET_QUEUE,
                    6,
                    20,
                    job_id=JOB,
                    packet_type=PacketType.DATA,
                    kind=MessageKind.PULL,
                ),
                classify(names.SET_QUEUE, 1, 10, job_id=9),
            ],
            "packets": [
                pkt(a, [routed(a, 2)], "job 7 PULL data: entry 1, queue 6"),
                pkt(b, [routed(b, 2)], "job 7 PUSH data: no entry, its priority 5"),
                pkt(c, [routed(c, 2)], "job 7 PULL PROBE: entry 1 needs DATA, so its priority 7"),
                pkt(d, [routed(d, 2)], "job 9 ALL_GATHER: entry 2, queue 1"),
                pkt(e, [routed(e, 2)], "non-DLCP UDP: DEFAULT_QUEUE"),
                pkt(f, [routed(f, 2)], "DLCP bytes on a port not in dlcp_ports: plain UDP, DEFAULT_QUEUE"),
                pkt(g, [routed(g, 2)], "DLCP on a port added to dlcp_ports: its priority 4"),
                pkt(h, [routed(h, 2)], "TRIMMED from upstream, priority field 2: TRIM_QUEUE"),
                pkt(i, [routed(i, 2)], "TCP: DEFAULT_QUEUE"),
            ],
            "counters": counters(
                forwarded=[
                    ([2], 6, 1),
                    ([2], 5, 1),
                    ([2], sizes.TRIM_QUEUE, 2),
                    ([2], 1, 1),
                    ([2], sizes.DEFAULT_QUEUE, 3),
                    ([2], 4, 1),
                ]
            ),
        }
    ]


def _burst_setup(extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Route 10.2.0.0/24 to port 2; every priority-1 packet goes to queue 1, drop-eligible."""
    return [
        route("10.2.0.0", 24, 2),
        group(2, [2]),
        classify(names.MARK_DROP_ELIGIBLE, 1, 10, priority=1),
        *extra,
    ]


_STALL_NOTE = (
    "Queue (2, 1) drains nothing while the burst is sent, so packet k of the burst finds exactly the burst's "
    "admitted packets before it in the queue."
)


def selective_drop_cases() -> list[dict[str, Any]]:
    def p(seq: int, dc: int) -> bytes:
        return dlcp_frame(data(seq, drop_class=dc))

    seq = [(0, 0), (1, 0), (2, 2), (3, 2), (4, 1), (5, 3), (6, 1), (7, 1), (8, 0), (9, 2)]
    fr = {s: p(s, dc) for s, dc in seq}
    return [
        {
            "name": "selective_drop_per_class_threshold",
            "description": "A burst into a stalled queue: drop class 1 is dropped above 3 queued packets, class 2 "
            "above 1, class 3 above 0; class 0 is never dropped. " + _STALL_NOTE,
            "entries": _burst_setup(
                [
                    threshold(1, 1, names.DROP_ABOVE, 3),
                    threshold(1, 2, names.DROP_ABOVE, 1),
                    threshold(1, 3, names.DROP_ABOVE, 0),
                ]
            ),
            "stalled_queues": [{"port": 2, "queue": 1}],
            "packets": [
                pkt(fr[0], [routed(fr[0], 2)], "settle: leaves before the stall, queue empty", settle=True),
                pkt(fr[1], [routed(fr[1], 2)], "class 0 finds 0: admitted (1 queued)"),
                pkt(fr[2], [routed(fr[2], 2)], "class 2 finds 1, not above 1: admitted (2)"),
                pkt(fr[3], [], "class 2 finds 2 > 1: dropped"),
                pkt(fr[4], [routed(fr[4], 2)], "class 1 finds 2, not above 3: admitted (3)"),
                pkt(fr[5], [], "class 3 finds 3 > 0: dropped"),
                pkt(fr[6], [routed(fr[6], 2)], "class 1 finds 3, not above 3: admitted (4)"),
                pkt(fr[7], [], "class 1 finds 4 > 3: dropped"),
                pkt(fr[8], [routed(fr[8], 2)], "class 0 is never eligible: admitted (5)"),
                pkt(fr[9], [], "class 2 finds 5 > 1: dropped"),
            ],
            "counters": counters(forwarded=[([2], 1, 6)], dropped=[([2], 1, 4)]),
        },
        {
            "name": "selective_drop_control_and_retransmissions_never_dropped",
            "description": "Every priority-1 packet is marked drop-eligible and every drop class is dropped above "
            "0, yet control packets (PROBE, BITMAP, STOP) and retransmissions are admitted. " + _STALL_NOTE,
            "entries": _burst_setup([threshold(1, dc, names.DROP_ABOVE, 0) for dc in (1, 2, 3)]),
            "stalled_queues": [{"port": 2, "queue": 1}],
            "packets": _control_burst(),
            "counters": counters(forwarded=[([2], 1, 6)], dropped=[([2], 1, 2)]),
        },
    ]


def _control_burst() -> list[dict[str, Any]]:
    settle = dlcp_frame(data(0))
    first = dlcp_frame(data(1, drop_class=1))
    second = dlcp_frame(data(2, drop_class=1))
    probe = dlcp_frame(control(PacketType.PROBE, priority=1, drop_class=2))
    bitmap_bits = b"\xff\xfe" + b"\xff" * 6  # packet 8 missing
    bitmap = dlcp_frame(control(PacketType.BITMAP, priority=1, drop_class=3), payload=bitmap_bits)
    stop = dlcp_frame(control(PacketType.STOP, priority=1, drop_class=1).replace(flags=Flag.FINAL), payload=b"")
    retx = dlcp_frame(data(3, drop_class=2, flags=Flag.RETX))
    last = dlcp_frame(data(4, drop_class=2))
    return [
        pkt(settle, [routed(settle, 2)], "settle: leaves before the stall", settle=True),
        pkt(first, [routed(first, 2)], "data class 1 finds 0: admitted (1)"),
        pkt(second, [], "data class 1 finds 1 > 0: dropped"),
        pkt(probe, [routed(probe, 2)], "PROBE (drop_class field 2): never eligible, admitted (2)"),
        pkt(bitmap, [routed(bitmap, 2)], "BITMAP (drop_class field 3): admitted (3)"),
        pkt(stop, [routed(stop, 2)], "STOP (drop_class field 1): admitted (4)"),
        pkt(retx, [routed(retx, 2)], "RETX data class 2: retransmissions are never eligible, admitted (5)"),
        pkt(last, [], "data class 2 finds 5 > 0: dropped"),
    ]


def trimming_cases() -> list[dict[str, Any]]:
    plan = [(0, 0), (1, 1), (2, 2), (3, 1), (4, 1), (5, 3), (6, 0)]
    fr = {s: dlcp_frame(data(s, drop_class=dc), payload_len=256) for s, dc in plan}
    return [
        {
            "name": "trimming_cuts_to_headers_at_top_priority",
            "description": "Class 1 is trimmed above 1 queued packet, class 2 above 0, class 3 dropped above 0. A "
            "trimmed packet leaves as its headers, type TRIMMED, IPv4/UDP lengths fixed, in TRIM_QUEUE, ahead "
            "of the stalled data. " + _STALL_NOTE,
            "entries": _burst_setup(
                [
                    threshold(1, 1, names.TRIM_ABOVE, 1),
                    threshold(1, 2, names.TRIM_ABOVE, 0),
                    threshold(1, 3, names.DROP_ABOVE, 0),
                ]
            ),
            "stalled_queues": [{"port": 2, "queue": 1}],
            "packets": [
                pkt(fr[0], [routed(fr[0], 2)], "settle: leaves before the stall", settle=True),
                pkt(fr[1], [routed(fr[1], 2)], "class 1 finds 0: admitted (1)"),
                pkt(fr[2], [trimmed(fr[2], 2)], "class 2 finds 1 > 0: trimmed"),
                pkt(fr[3], [routed(fr[3], 2)], "class 1 finds 1, not above 1: admitted (2)"),
                pkt(fr[4], [trimmed(fr[4], 2)], "class 1 finds 2 > 1: trimmed"),
                pkt(fr[5], [], "class 3 finds 2 > 0: dropped, not trimmed"),
                pkt(fr[6], [routed(fr[6], 2)], "class 0: admitted (3)"),
            ],
            "counters": counters(
                forwarded=[([2], 1, 4), ([2], sizes.TRIM_QUEUE, 2)],
                trimmed=[([2], 1, 2)],
                dropped=[([2], 1, 1)],
            ),
        }
    ]


def malformed_cases() -> list[dict[str, Any]]:
    good = dlcp_frame(data(0, priority=5, drop_class=2))
    bad = [
        (with_byte(good, "ver_type", 0x20), "version 2"),
        (with_byte(good, "ver_type", 0x00), "version 0"),
        (with_byte(good, "ver_type", 0x19), "type 9 (reserved)"),
        (with_byte(good, "ver_type", 0x1F), "type 15 (reserved)"),
        (with_byte(good, "priority", protocol.NUM_PRIORITY_CLASSES), "priority 8 (out of range)"),
        (with_byte(good, "drop_class", protocol.NUM_DROP_CLASSES), "drop class 4 (out of range)"),
        (udp_frame(good[_DLCP : _DLCP + protocol.HEADER_SIZE - 1], dport=protocol.UDP_PORT), "39-byte datagram"),
        (udp_frame(b"", dport=protocol.UDP_PORT), "empty datagram on the DLCP port"),
    ]
    return [
        {
            "name": "malformed_dlcp_forwarded_as_plain_udp",
            "description": "Malformed DLCP packets (bad version or type, priority or drop class out of range, "
            "shorter than a header) are forwarded unchanged as ordinary UDP: DEFAULT_QUEUE, never drop-eligible, "
            "although an entry marks every DLCP packet drop-eligible in queue 3, dropped above 0.",
            "entries": [
                route("10.2.0.0", 24, 2),
                group(2, [2]),
                classify(names.MARK_DROP_ELIGIBLE, 3, 10),
                *[threshold(3, dc, names.DROP_ABOVE, 0) for dc in (1, 2, 3)],
            ],
            "packets": [pkt(f, [routed(f, 2)], note) for f, note in bad],
            "counters": counters(forwarded=[([2], sizes.DEFAULT_QUEUE, len(bad))]),
        }
    ]


FILES = {
    "routing.json": routing_cases,
    "ecmp.json": ecmp_cases,
    "classification.json": classification_cases,
    "selective_drop.json": selective_drop_cases,
    "trimming.json": trimming_cases,
    "malformed.json": malformed_cases,
}


def render() -> dict[str, str]:
    """File name -> JSON text of every vector file."""
    out = {}
    for name, make in FILES.items():
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "generated_by": "dlcp p4 gen-vectors (dlcp/p4/vector_gen.py); do not edit",
            "cases": make(),
        }
        out[name] = json.dumps(doc, indent=1) + "\n"
    return out


def files(folder: Path) -> dict[Path, str]:
    """The vector files in ``folder``, with their text."""
    return {folder / name: text for name, text in render().items()}
