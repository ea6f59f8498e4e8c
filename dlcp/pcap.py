"""Reader and writer for classic pcap files (no pcapng), as ``tcpdump -w`` writes them.

The reader takes what tcpdump and libpcap produce on Linux: micro- and
nanosecond timestamps, either byte order, and the link types of a capture on
one interface (Ethernet, raw IP) or on ``-i any`` (Linux cooked capture, SLL
and SLL2). It never raises on the records themselves: a record it cannot use is
counted with its reason, and a file cut short keeps every whole record before
the cut and says where it stopped.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from dlcp.frames import ETH_HEADER, ETHERTYPE_IPV4, IPPROTO_UDP, IPV4_HEADER, UDP_HEADER, UdpFrame, parse_ipv4_udp

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_LINUX_SLL2 = 276
LINKTYPE_NAMES = {
    LINKTYPE_ETHERNET: "Ethernet",
    LINKTYPE_RAW: "raw IP",
    LINKTYPE_LINUX_SLL: "Linux cooked capture (SLL)",
    LINKTYPE_IPV4: "raw IPv4",
    LINKTYPE_LINUX_SLL2: "Linux cooked capture v2 (SLL2)",
}
"""The link types this reader decodes, by pcap LINKTYPE_* number."""

FILE_HEADER = struct.Struct("IHHiIII")  # magic, major, minor, thiszone, sigfigs, snaplen, linktype
RECORD_HEADER = struct.Struct("IIII")  # seconds, fraction, captured length, original length
_MAGIC_USEC = 0xA1B2C3D4
_MAGIC_NSEC = 0xA1B23C4D
_MAGIC_PCAPNG = b"\x0a\x0d\x0d\x0a"
MAX_RECORD_BYTES = 1 << 24
"""A captured length above this is a corrupt record header (libpcap's largest snap length is 256 KiB)."""
_VLAN_TPIDS = (0x8100, 0x88A8)
_SLL_HEADER = 16  # pkttype, hatype, halen, 8 address bytes, protocol (bytes 14..15)
_SLL2_HEADER = 20  # protocol (bytes 0..1), reserved, ifindex, hatype, pkttype, halen, 8 address bytes


class PcapError(ValueError):
    """The file is not a pcap file this reader can read (raised before any record is read)."""


@dataclass(frozen=True)
class PcapRecord:
    number: int
    """1-based position in the file, as tcpdump and Wireshark number packets."""
    offset: int
    """Byte offset of the record header in the file."""
    time_ns: int
    """Capture time in nanoseconds since the epoch (exact for either timestamp resolution)."""
    orig_len: int
    """Length of the packet on the wire; more than ``len(data)`` when the snap length cut it."""
    data: bytes


class PcapReader:
    """Iterate over the records of a classic pcap file.

    The file header is checked in ``__init__`` (:class:`PcapError` if it is not
    one). Iteration then never raises on content: a record header that
    promises more bytes than the file holds ends the iteration and sets
    :attr:`stopped`; a record with an impossible header field is still
    yielded, and counted in :attr:`malformed` with the reason.

    Example::

        with open("bench.pcap", "rb") as f:
            reader = PcapReader(f, "bench.pcap")
            for rec in reader:
                ...
            if reader.stopped:
                print(reader.stopped)
    """

    def __init__(self, f: BinaryIO, name: str = "<pcap>") -> None:
        self._f = f
        self.name = name
        head = f.read(FILE_HEADER.size)
        if head[:4] == _MAGIC_PCAPNG:
            raise PcapError(
                f"{name}: a pcapng file; this reader reads classic pcap (tcpdump -w writes it;"
                " convert with: editcap -F pcap IN OUT)"
            )
        if len(head) < FILE_HEADER.size:
            raise PcapError(f"{name}: {len(head)} bytes, too short for a pcap file header ({FILE_HEADER.size} bytes)")
        for endian in "<>":
            magic = struct.unpack_from(endian + "I", head)[0]
            if magic in (_MAGIC_USEC, _MAGIC_NSEC):
                break
        else:
            raise PcapError(f"{name}: not a pcap file (magic 0x{head[:4].hex()})")
        _, major, minor, _, _, snaplen, linktype = struct.unpack(endian + FILE_HEADER.format, head)
        if major != 2:
            raise PcapError(f"{name}: pcap format version {major}.{minor} is not supported (expected 2.x)")
        # The top bits of the link-type word are FCS length and flags (pcap-linktype(7)).
        linktype &= 0x0FFFFFFF
        if linktype not in LINKTYPE_NAMES:
            known = ", ".join(f"{v} ({k})" for k, v in LINKTYPE_NAMES.items())
            raise PcapError(f"{name}: link type {linktype} is not supported (supported: {known})")
        self.endian = endian
        self.nanosecond = magic == _MAGIC_NSEC
        self.snaplen = snaplen
        self.linktype = linktype
        self.stopped: str | None = None
        """Why reading stopped before the end of the file (it was cut short), or None."""
        self.malformed: dict[str, int] = {}
        """Records yielded despite an impossible header field, by reason."""
        self.records = 0
        """Records yielded so far."""
        self._rec = struct.Struct(endian + RECORD_HEADER.format)
        self._pos = FILE_HEADER.size

    @property
    def linktype_name(self) -> str:
        return LINKTYPE_NAMES[self.linktype]

    def __iter__(self) -> Iterator[PcapRecord]:
        frac_limit, frac_ns = (1_000_000_000, 1) if self.nanosecond else (1_000_000, 1000)
        while True:
            head = self._f.read(self._rec.size)
            if not head:
                return
            number = self.records + 1
            if len(head) < self._rec.size:
                self._stop(number, f"{len(head)} bytes of its {self._rec.size}-byte record header")
                return
            sec, frac, caplen, orig_len = self._rec.unpack(head)
            if caplen > MAX_RECORD_BYTES:
                self.stopped = (
                    f"{self.name}: corrupt record header at byte {self._pos} (record {number}: captured length"
                    f" {caplen} > {MAX_RECORD_BYTES}); read the {self.records} records before it"
                )
                return
            data = self._f.read(caplen)
            if len(data) < caplen:
                self._stop(number, f"its header and {len(data)} of its {caplen} captured bytes")
                return
            if frac >= frac_limit:
                self._count("timestamp fraction out of range")
            if caplen > orig_len:
                self._count("captured length above original length")
            self.records = number
            yield PcapRecord(number, self._pos, sec * 1_000_000_000 + frac * frac_ns, orig_len, data)
            self._pos += self._rec.size + caplen

    def _stop(self, number: int, what: str) -> None:
        self.stopped = (
            f"{self.name}: truncated: the file ends inside record {number} (at byte {self._pos},"
            f" which holds only {what}); read the {self.records} records before it"
        )

    def _count(self, reason: str) -> None:
        self.malformed[reason] = self.malformed.get(reason, 0) + 1


class Layer(enum.Enum):
    """What a captured record turned out to hold."""

    UDP = "IPv4/UDP datagram"
    OTHER = "not IPv4/UDP"
    FRAGMENT = "IPv4 fragment"
    MALFORMED = "malformed"


def network_payload(linktype: int, raw: bytes) -> tuple[int, bytes] | None:
    """(ethertype, network-layer bytes) of a record, or None if the link header is cut short."""
    if linktype == LINKTYPE_ETHERNET:
        if len(raw) < ETH_HEADER.size:
            return None
        ethertype, pos = ETH_HEADER.unpack_from(raw)[2], ETH_HEADER.size
        while ethertype in _VLAN_TPIDS:  # 802.1Q / 802.1ad tags: 2 bytes TCI, 2 bytes inner type
            if len(raw) < pos + 4:
                return None
            ethertype = int.from_bytes(raw[pos + 2 : pos + 4], "big")
            pos += 4
        return ethertype, raw[pos:]
    if linktype == LINKTYPE_LINUX_SLL:
        if len(raw) < _SLL_HEADER:
            return None
        return int.from_bytes(raw[14:16], "big"), raw[_SLL_HEADER:]
    if linktype == LINKTYPE_LINUX_SLL2:
        if len(raw) < _SLL2_HEADER:
            return None
        return int.from_bytes(raw[0:2], "big"), raw[_SLL2_HEADER:]
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4):
        if not raw:
            return None
        return (ETHERTYPE_IPV4 if raw[0] >> 4 == 4 else 0), raw
    raise ValueError(f"link type {linktype} is not supported")


def udp_datagram(linktype: int, raw: bytes) -> tuple[Layer, UdpFrame | None]:
    """Classify one record and, for an IPv4/UDP datagram, parse it.

    The UDP payload of a datagram cut by the snap length is what was captured.
    """
    net = network_payload(linktype, raw)
    if net is None:
        return Layer.MALFORMED, None
    ethertype, ip = net
    if ethertype != ETHERTYPE_IPV4:
        return Layer.OTHER, None
    if len(ip) < IPV4_HEADER.size:
        return Layer.MALFORMED, None
    vihl, _tos, total, _id, frag, _ttl, proto = IPV4_HEADER.unpack_from(ip)[:7]
    ihl = (vihl & 0xF) * 4
    if vihl >> 4 != 4 or ihl < IPV4_HEADER.size or total < ihl:
        return Layer.MALFORMED, None
    if proto != IPPROTO_UDP:
        return Layer.OTHER, None
    if frag & 0x3FFF:
        return Layer.FRAGMENT, None
    if len(ip) < ihl + UDP_HEADER.size:
        return Layer.MALFORMED, None
    frame = parse_ipv4_udp(ip)
    return (Layer.UDP, frame) if frame is not None else (Layer.MALFORMED, None)


def udp_length(linktype: int, raw: bytes) -> int | None:
    """Payload bytes the UDP header of a record's datagram announces (None if not a readable UDP header)."""
    net = network_payload(linktype, raw)
    if net is None or len(net[1]) < IPV4_HEADER.size:
        return None
    ihl = (net[1][0] & 0xF) * 4
    if len(net[1]) < ihl + UDP_HEADER.size:
        return None
    return int(UDP_HEADER.unpack_from(net[1], ihl)[2]) - UDP_HEADER.size


def open_pcap(path: str | Path) -> tuple[BinaryIO, PcapReader]:
    """Open ``path`` and check its header; the caller closes the file."""
    f = Path(path).open("rb")
    try:
        return f, PcapReader(f, str(path))
    except BaseException:
        f.close()
        raise


def write_pcap(
    path: str | Path,
    frames: Iterable[bytes],
    linktype: int = LINKTYPE_ETHERNET,
    *,
    nanosecond: bool = False,
    times_ns: Iterable[int] | None = None,
) -> int:
    """Write frames to a classic little-endian pcap file; returns how many.

    Record ``n`` (from 1) is stamped ``n`` seconds unless ``times_ns`` gives the times.
    """
    magic = _MAGIC_NSEC if nanosecond else _MAGIC_USEC
    out = bytearray(struct.pack("<" + FILE_HEADER.format, magic, 2, 4, 0, 0, 262144, linktype))
    times = iter(times_ns) if times_ns is not None else None
    n = 0
    for n, frame in enumerate(frames, 1):
        t = next(times) if times is not None else n * 1_000_000_000
        sec, ns = divmod(t, 1_000_000_000)
        frac = ns if nanosecond else ns // 1000
        out += struct.pack("<" + RECORD_HEADER.format, sec, frac, len(frame), len(frame)) + frame
    Path(path).write_bytes(bytes(out))
    return n


__all__ = [
    "LINKTYPE_ETHERNET",
    "LINKTYPE_IPV4",
    "LINKTYPE_LINUX_SLL",
    "LINKTYPE_LINUX_SLL2",
    "LINKTYPE_NAMES",
    "LINKTYPE_RAW",
    "Layer",
    "PcapError",
    "PcapReader",
    "PcapRecord",
    "network_payload",
    "open_pcap",
    "udp_datagram",
    "udp_length",
    "write_pcap",
]
