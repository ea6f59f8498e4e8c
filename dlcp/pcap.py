"""Minimal reader and writer for classic pcap files (no pcapng)."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

from dlcp.frames import ETH_HEADER, UdpFrame, mac_str, parse_ipv4_udp, parse_udp_frame

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_IPV4 = 228
LINKTYPE_LINUX_SLL = 113
_MAGICS = {
    b"\xd4\xc3\xb2\xa1": "<",
    b"\xa1\xb2\xc3\xd4": ">",
    b"\x4d\x3c\xb2\xa1": "<",  # nanosecond resolution
    b"\xa1\xb2\x3c\x4d": ">",
}


class PcapError(ValueError):
    pass


def read_records(path: str | Path) -> tuple[int, Iterator[tuple[float, bytes]]]:
    """(link type, iterator of (timestamp, captured bytes))."""
    data = Path(path).read_bytes()
    if len(data) < 24:
        raise PcapError(f"{path}: too short for a pcap file")
    endian = _MAGICS.get(data[:4])
    if endian is None:
        raise PcapError(f"{path}: not a classic pcap file (pcapng is not supported; convert with editcap -F pcap)")
    linktype = struct.unpack_from(endian + "I", data, 20)[0]

    def records() -> Iterator[tuple[float, bytes]]:
        pos = 24
        rec = struct.Struct(endian + "IIII")
        while pos + rec.size <= len(data):
            sec, frac, caplen, _ = rec.unpack_from(data, pos)
            pos += rec.size
            if pos + caplen > len(data):
                raise PcapError(f"{path}: truncated record at byte {pos}")
            yield sec + frac * 1e-6, data[pos : pos + caplen]
            pos += caplen

    return linktype, records()


def udp_frames(path: str | Path) -> Iterator[tuple[float, UdpFrame]]:
    """Every IPv4/UDP datagram in a capture, whatever its link type."""
    linktype, records = read_records(path)
    for ts, raw in records:
        frame: UdpFrame | None
        if linktype == LINKTYPE_ETHERNET:
            frame = parse_udp_frame(raw)
        elif linktype in (LINKTYPE_RAW, LINKTYPE_IPV4):
            frame = parse_ipv4_udp(raw)
        elif linktype == LINKTYPE_LINUX_SLL and len(raw) >= 16:
            frame = parse_ipv4_udp(raw[16:]) if raw[14:16] == b"\x08\x00" else None
        else:
            raise PcapError(f"{path}: unsupported link type {linktype}")
        if frame is not None:
            yield ts, frame


def write_pcap(path: str | Path, frames: Iterable[bytes], linktype: int = LINKTYPE_ETHERNET) -> int:
    """Write frames to a classic little-endian pcap file; returns how many."""
    out = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
    n = 0
    for n, frame in enumerate(frames, 1):
        out += struct.pack("<IIII", n, 0, len(frame), len(frame)) + frame
    Path(path).write_bytes(bytes(out))
    return n


__all__ = ["ETH_HEADER", "PcapError", "mac_str", "read_records", "udp_frames", "write_pcap"]
