"""ECMP on the software switch: DLCP data sprayed per packet over every member of a group; everything
else (non-DLCP flows, DLCP control packets) keeps one member per 5-tuple."""

from __future__ import annotations

import struct
import subprocess
import sys
import zlib
from collections import Counter

from switch_support import dlcp_frame, route_to, udp_frame, virtual_switch

from dlcp.p4 import names
from dlcp.protocol import Flag, PacketType
from dlcp.testbed.switch.dataplane import DataPlane, ecmp_hash
from dlcp.testbed.switch.entries import Op, ProfileGroup

MEMBERS = [2, 3, 4, 5]


def fabric() -> DataPlane:
    dp = virtual_switch([1, *MEMBERS])
    route_to(dp, MEMBERS)
    return dp


def out_port(dp: DataPlane, frame: bytes) -> int:
    v = dp.inject(1, frame)
    assert not v.dropped, v
    sent = dp.drain()
    assert len(sent) == 1
    return sent[0][0]


def test_dlcp_data_is_sprayed_over_every_member() -> None:
    dp = fabric()
    ports = Counter(out_port(dp, dlcp_frame(300, seq=s)) for s in range(2000))  # one 5-tuple
    assert set(ports) == set(MEMBERS)
    for p in MEMBERS:  # CRC32 of seq spreads evenly: 500 expected per member
        assert 400 <= ports[p] <= 600, ports


def test_one_packet_messages_are_sprayed_too() -> None:
    """The entropy is seq ^ msg_id: messages of one packet (all seq 0) of one 5-tuple spread over every member,
    message by message (on seq alone they all took one member)."""
    dp = fabric()
    ports = Counter(out_port(dp, dlcp_frame(300, msg_id=m, round=7)) for m in range(400))
    assert set(ports) == set(MEMBERS) and min(ports.values()) >= 60, ports


def test_retransmissions_are_sprayed_too() -> None:
    dp = fabric()
    ports = {out_port(dp, dlcp_frame(300, seq=s, flags=Flag.RETX)) for s in range(64)}
    assert ports == set(MEMBERS)


def test_dlcp_control_packets_keep_their_flow_path() -> None:
    dp = fabric()
    for ptype in (PacketType.PROBE, PacketType.BITMAP, PacketType.STOP, PacketType.TRIMMED):
        ports = {out_port(dp, dlcp_frame(300, seq=s, ptype=ptype)) for s in range(64)}
        assert len(ports) == 1, ptype


def test_other_traffic_keeps_one_path_per_5_tuple() -> None:
    dp = fabric()
    used = set()
    for flow in range(40):
        ports = {out_port(dp, udp_frame(200, sport=1000 + flow, dport=7)) for _ in range(20)}
        assert len(ports) == 1, flow
        used |= ports
    assert len(used) >= 3, "distinct 5-tuples hash onto different members"


def test_member_choice_is_the_crc32_selector() -> None:
    """Same choice as BMv2's v1model action selector: CRC32 over the field list, modulo the group size."""
    dp = fabric()
    for s in range(32):
        h = ecmp_hash(0x0A010001, 0x0A020001, 17, 40000, 19110, s)
        assert h == zlib.crc32(struct.pack("!IIBHHI", 0x0A010001, 0x0A020001, 17, 40000, 19110, s))
        assert out_port(dp, dlcp_frame(300, seq=s)) == MEMBERS[h % len(MEMBERS)]
        entropy = s ^ 0x01020304  # seq ^ msg_id
        h = ecmp_hash(0x0A010001, 0x0A020001, 17, 40000, 19110, entropy)
        assert out_port(dp, dlcp_frame(300, seq=s, msg_id=0x01020304, round=99)) == MEMBERS[h % len(MEMBERS)]


def test_the_hash_needs_no_switch_first() -> None:
    """``ecmp_hash`` in a process that made no DataPlane yet (its table was filled only by one): it returned
    0xFFFFFFFF for every input."""
    code = (
        "import struct, zlib; from dlcp.testbed.switch.dataplane import ecmp_hash; "
        "print(ecmp_hash(1, 2, 17, 3, 4, 5) == zlib.crc32(struct.pack('!IIBHHI', 1, 2, 17, 3, 4, 5)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stdout + out.stderr


def test_a_group_shrinks_and_grows_without_stale_members() -> None:
    dp = fabric()
    dp.write_group(Op.MODIFY, ProfileGroup(names.ECMP_SELECTOR, 1, ((102, 1), (104, 1))))
    assert {out_port(dp, dlcp_frame(300, seq=s)) for s in range(200)} == {2, 4}
    dp.write_group(Op.MODIFY, ProfileGroup(names.ECMP_SELECTOR, 1, ((105, 3),)))
    assert {out_port(dp, dlcp_frame(300, seq=s)) for s in range(50)} == {5}
