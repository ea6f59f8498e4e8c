"""Ethernet/IPv4/UDP framing with struct: building and parsing whole frames.

Shared by the CLI's pcap decoder, the P4 test vectors, the software switch and
tests. The per-packet cost is a few struct calls; batch data paths do not go
through here.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

ETH_HEADER = struct.Struct("!6s6sH")
IPV4_HEADER = struct.Struct("!BBHHHBBH4s4s")
UDP_HEADER = struct.Struct("!HHHH")
ETHERTYPE_IPV4 = 0x0800
IPPROTO_UDP = 17
IPPROTO_TCP = 6
PPP_HEADER_BYTES = 2
"""The point-to-point links' framing (the PPP protocol field, RFC 1661) that ns-3's point-to-point devices, and
the simulator's DLCP ports, put on every IPv4 packet."""


def mac_bytes(mac: str) -> bytes:
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"bad MAC address {mac!r}")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise ValueError(f"bad MAC address {mac!r}") from None


def mac_str(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def ipv4_checksum(header: bytes) -> int:
    if len(header) % 2:
        header += b"\0"
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@dataclass(frozen=True)
class UdpFrame:
    """A parsed Ethernet/IPv4/UDP frame (``eth_*`` empty for raw-IP captures)."""

    src_ip: str
    dst_ip: str
    sport: int
    dport: int
    tos: int
    ttl: int
    payload: bytes
    eth_src: str = ""
    eth_dst: str = ""


def build_udp_frame(
    *,
    eth_src: str,
    eth_dst: str,
    src_ip: str,
    dst_ip: str,
    sport: int,
    dport: int,
    payload: bytes,
    tos: int = 0,
    ttl: int = 64,
    ident: int = 0,
) -> bytes:
    """An Ethernet frame carrying one IPv4/UDP datagram (UDP checksum 0: allowed on IPv4)."""
    udp = UDP_HEADER.pack(sport, dport, UDP_HEADER.size + len(payload), 0) + payload
    total = IPV4_HEADER.size + len(udp)
    ip_wo = IPV4_HEADER.pack(
        0x45,
        tos,
        total,
        ident,
        0x4000,
        ttl,
        IPPROTO_UDP,
        0,
        ipaddress.IPv4Address(src_ip).packed,
        ipaddress.IPv4Address(dst_ip).packed,
    )
    ip = ip_wo[:10] + struct.pack("!H", ipv4_checksum(ip_wo)) + ip_wo[12:]
    return ETH_HEADER.pack(mac_bytes(eth_dst), mac_bytes(eth_src), ETHERTYPE_IPV4) + ip + udp


def parse_ipv4_udp(data: bytes, eth_src: str = "", eth_dst: str = "") -> UdpFrame | None:
    """Parse an IPv4 packet; ``None`` unless it is a whole, unfragmented UDP datagram."""
    if len(data) < IPV4_HEADER.size:
        return None
    vihl, tos, total, _ident, frag, ttl, proto, _csum, src, dst = IPV4_HEADER.unpack_from(data)
    ihl = (vihl & 0xF) * 4
    if vihl >> 4 != 4 or ihl < 20 or proto != IPPROTO_UDP or frag & 0x3FFF or len(data) < ihl + UDP_HEADER.size:
        return None
    sport, dport, ulen, _ = UDP_HEADER.unpack_from(data, ihl)
    end = min(len(data), ihl + ulen, total) if ulen >= UDP_HEADER.size else ihl + UDP_HEADER.size
    return UdpFrame(
        src_ip=str(ipaddress.IPv4Address(src)),
        dst_ip=str(ipaddress.IPv4Address(dst)),
        sport=sport,
        dport=dport,
        tos=tos,
        ttl=ttl,
        payload=bytes(data[ihl + UDP_HEADER.size : end]),
        eth_src=eth_src,
        eth_dst=eth_dst,
    )


def parse_udp_frame(frame: bytes) -> UdpFrame | None:
    """Parse an Ethernet frame; ``None`` unless it carries IPv4/UDP."""
    if len(frame) < ETH_HEADER.size:
        return None
    dst, src, ethertype = ETH_HEADER.unpack_from(frame)
    if ethertype != ETHERTYPE_IPV4:
        return None
    return parse_ipv4_udp(frame[ETH_HEADER.size :], mac_str(src), mac_str(dst))
