"""Helpers for the software switch's tests: frames, and a data plane with one route to a group of ports."""

from __future__ import annotations

from dlcp.frames import ETH_HEADER, IPV4_HEADER, UDP_HEADER, build_udp_frame
from dlcp.p4 import names
from dlcp.protocol import UDP_PORT, Flag, PacketType
from dlcp.testbed.switch.config import PortConfig
from dlcp.testbed.switch.dataplane import DataPlane
from dlcp.testbed.switch.entries import (
    Action,
    FieldMatch,
    MatchKind,
    Op,
    ProfileGroup,
    ProfileMember,
    TableEntry,
)
from dlcp.wire import Header

DST = "10.2.0.1"
PAYLOAD = ETH_HEADER.size + IPV4_HEADER.size + UDP_HEADER.size
"""Where a UDP payload (the DLCP header) starts in an untagged IPv4 frame without options."""


def mac_of(port: int) -> int:
    return 0x02DC00000000 | port


def dlcp_frame(
    size: int = 1000,
    *,
    priority: int = 1,
    drop_class: int = 0,
    seq: int = 0,
    ptype: PacketType = PacketType.DATA,
    flags: Flag = Flag.NONE,
    sport: int = 40000,
    dst: str = DST,
    msg_id: int = 0,
    round: int = 0,
) -> bytes:
    hdr = Header(
        type=ptype, priority=priority, drop_class=drop_class, seq=seq, flags=flags, job_id=1, msg_id=msg_id, round=round
    ).pack()
    return build_udp_frame(
        eth_src="02:dc:00:00:01:01", eth_dst="02:dc:00:00:00:01", src_ip="10.1.0.1", dst_ip=dst,
        sport=sport, dport=UDP_PORT, payload=hdr + bytes(max(0, size - PAYLOAD - len(hdr))),
    )  # fmt: skip


def udp_frame(size: int = 200, *, sport: int = 5000, dport: int = 6000, dst: str = DST) -> bytes:
    return build_udp_frame(
        eth_src="02:dc:00:00:01:01", eth_dst="02:dc:00:00:00:01", src_ip="10.1.0.1", dst_ip=dst,
        sport=sport, dport=dport, payload=bytes(size - PAYLOAD),
    )  # fmt: skip


def entry(table: str, match: list[FieldMatch], action: str, priority: int = 0, **params: int) -> TableEntry:
    return TableEntry(table, tuple(match), priority=priority, action=Action(action, tuple(params.items())))


def exact(name: str, value: int) -> FieldMatch:
    return FieldMatch(name, MatchKind.EXACT, value)


def ternary(name: str, value: int, mask: int) -> FieldMatch:
    return FieldMatch(name, MatchKind.TERNARY, value, mask)


def route_to(dp: DataPlane, out_ports: list[int], group: int = 1, prefix: int = 0x0A020000, plen: int = 16) -> None:
    """10.2.0.0/16 -> ECMP group ``group`` over ``out_ports`` (member ids = port numbers + 100 * group)."""
    members = []
    for p in out_ports:
        mid = 100 * group + p
        action = Action(names.SET_NEXT_HOP, (("port", p), ("src_mac", mac_of(0xFE)), ("dst_mac", mac_of(p))))
        dp.write_member(Op.INSERT, ProfileMember(names.ECMP_SELECTOR, mid, action))
        members.append((mid, 1))
    dp.write_group(Op.INSERT, ProfileGroup(names.ECMP_SELECTOR, group, tuple(members)))
    dp.write_entry(Op.INSERT, TableEntry(names.NEXT_HOPS, (exact("group", group),), group_id=group))
    lpm = FieldMatch("dst_addr", MatchKind.LPM, prefix, plen)
    dp.write_entry(Op.INSERT, entry(names.IPV4_ROUTES, [lpm], names.SET_NEXT_HOP_GROUP, group=group))


def eligible_by_priority(dp: DataPlane) -> None:
    """Every DLCP packet drop-eligible in the queue of its priority class."""
    for prio in range(8):
        dp.write_entry(
            Op.INSERT,
            entry(names.DLCP_CLASSES, [ternary("priority", prio, 0xFF)], names.MARK_DROP_ELIGIBLE, 10, queue=prio),
        )


def virtual_switch(ports: list[int], configs: dict[int, PortConfig] | None = None) -> DataPlane:
    """Virtual ports on a virtual clock; ``configs`` overrides the default settings of some ports."""
    dp = DataPlane(virtual_clock=True)
    for p in ports:
        dp.add_port((configs or {}).get(p, PortConfig(port=p, interface=None)))
    return dp


def random_frames(seed: int, n: int) -> list[bytes]:
    """A reproducible traffic mix: DLCP of every type, class and drop class (some malformed), plain UDP,
    TCP, other protocols, IPv4 options, TTL 0..3, unrouted destinations, non-IPv4 and short frames."""
    import random
    import struct

    rng = random.Random(seed)
    out = []
    dsts = ["10.2.0.1", "10.3.0.7", "10.4.1.1", "10.9.9.9"]
    for _ in range(n):
        kind = rng.randrange(10)
        dst = rng.choice(dsts)
        if kind < 5:
            f = bytearray(
                dlcp_frame(
                    rng.choice([82, 100, 600, 1500]),
                    priority=rng.randrange(9),
                    drop_class=rng.randrange(5),
                    seq=rng.randrange(1 << 32),
                    ptype=PacketType(rng.randrange(5)),
                    flags=Flag(rng.choice([0, 0, 2, 1])),
                    sport=rng.randrange(1024, 65536),
                    dst=dst,
                )
            )
            if rng.random() < 0.1:
                f[PAYLOAD] = (rng.randrange(16) << 4) | rng.randrange(16)  # version / type, maybe malformed
            if rng.random() < 0.1:
                f[36:38] = struct.pack("!H", 4791)  # the extra DLCP port
        elif kind < 7:
            f = bytearray(
                udp_frame(rng.choice([60, 200, 1400]), sport=rng.randrange(65536), dport=rng.randrange(65536), dst=dst)
            )
            if kind == 6:
                f[23] = rng.choice([6, 1, 47])  # TCP, ICMP, GRE: routed; TCP ports hashed
        elif kind == 7:
            f = bytearray(udp_frame(300, dst=dst))
            f[14] = 0x46  # IHL 6: options, L4 not parsed
        elif kind == 8:
            f = bytearray(udp_frame(200, dst=dst))
            f[22] = rng.randrange(4)  # TTL 0..3
        else:
            f = bytearray(udp_frame(200, dst=dst))
            f[12:14] = rng.choice([b"\x86\xdd", b"\x08\x06", b"\x88\xcc"])
        if f[12:14] == b"\x08\x00":  # keep the IPv4 checksum right after the edits above
            f[24:26] = b"\0\0"
            s = sum(struct.unpack("!10H", bytes(f[14:34])))
            s = (s & 0xFFFF) + (s >> 16)
            s = (s & 0xFFFF) + (s >> 16)
            f[24:26] = struct.pack("!H", ~s & 0xFFFF)
        out.append(bytes(f))
    return out
