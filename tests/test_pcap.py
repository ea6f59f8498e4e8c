"""The pcap reader and the capture decoder: link types, byte orders, malformed and arbitrary input."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from support import make_message, packets

from dlcp.capture import CaptureSummary, capture_packets, decode_datagram, looks_like_dlcp, split_datagram
from dlcp.cli.main import main
from dlcp.frames import build_udp_frame
from dlcp.pcap import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_NAMES,
    LINKTYPE_RAW,
    Layer,
    PcapError,
    PcapReader,
    udp_datagram,
)
from dlcp.protocol import HEADER_FIELDS, HEADER_SIZE, NUM_DROP_CLASSES, NUM_PRIORITY_CLASSES

MACS = {"eth_src": "02:00:00:00:00:01", "eth_dst": "02:00:00:00:00:02"}


def dlcp_frame(payload: bytes, sport: int = 40000, dport: int = 50000) -> bytes:
    return build_udp_frame(**MACS, src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=sport, dport=dport, payload=payload)


def one_packet() -> bytes:
    spec, values = make_message(20, 10)
    return packets(spec, values).packets()[0]


def read(data: bytes) -> tuple[PcapReader, CaptureSummary, list[dict]]:
    reader = PcapReader(io.BytesIO(data))
    summary = CaptureSummary()
    return reader, summary, list(capture_packets(reader, summary))


def pcap_header(linktype: int, endian: str = "<", magic: int = 0xA1B2C3D4) -> bytes:
    return struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, 262144, linktype)


def record(data: bytes, sec: int = 1, frac: int = 0, endian: str = "<", orig: int | None = None) -> bytes:
    return struct.pack(endian + "IIII", sec, frac, len(data), len(data) if orig is None else orig) + data


def test_link_types_and_byte_orders() -> None:
    pkt = one_packet()
    ip = dlcp_frame(pkt)[14:]
    sll = struct.pack("!HHH8sH", 0, 772, 6, bytes(8), 0x0800) + ip
    sll2 = struct.pack("!HHIHBB8s", 0x0800, 0, 1, 772, 0, 6, bytes(8)) + ip
    vlan = dlcp_frame(pkt)[:12] + struct.pack("!HH", 0x8100, 5) + dlcp_frame(pkt)[12:]
    for linktype, frame in (
        (LINKTYPE_ETHERNET, dlcp_frame(pkt)),
        (LINKTYPE_ETHERNET, vlan),
        (LINKTYPE_RAW, ip),
        (LINKTYPE_LINUX_SLL, sll),
        (LINKTYPE_LINUX_SLL2, sll2),
    ):
        for endian in "<>":
            reader, _, pkts = read(pcap_header(linktype, endian) + record(frame, 7, 250_000, endian))
            assert reader.linktype == linktype and not reader.nanosecond
            assert len(pkts) == 1 and pkts[0]["seq"] == 0 and pkts[0]["time_ns"] == 7_250_000_000, (linktype, endian)
            assert pkts[0]["ip"] == "10.0.0.1:40000 > 10.0.0.2:50000"
    reader, _, pkts = read(pcap_header(LINKTYPE_ETHERNET, ">", 0xA1B23C4D) + record(dlcp_frame(pkt), 7, 5, ">"))
    assert reader.nanosecond and pkts[0]["time_ns"] == 7_000_000_005


def test_malformed_records_are_counted_not_fatal(tmp_path: Path, capsys) -> None:
    pkt = one_packet()
    good = dlcp_frame(pkt)
    bad_ihl = good[:14] + b"\x42" + good[15:]  # IHL 2 words
    arp = good[:12] + b"\x08\x06" + bytes(28)
    tcp = good[:23] + b"\x06" + good[24:]
    fragment = good[:20] + b"\x20\x00" + good[22:]  # more fragments
    path = tmp_path / "bad.pcap"
    body = b"".join(
        [
            record(good, 1),
            record(b"\x01\x02\x03"),  # shorter than an Ethernet header
            record(bad_ihl),
            record(arp),
            record(tcp),
            record(fragment),
            record(good, 2, frac=5_000_000),  # microseconds out of range
            record(dlcp_frame(pkt[:30]), 3),  # a DLCP packet cut inside its header
        ]
    )
    path.write_bytes(pcap_header(LINKTYPE_ETHERNET) + body)
    assert main(["protocol", "decode", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["#1", "#7"], "a 30-byte datagram does not look like DLCP"
    assert "8 records" in err and "2 DLCP packets in 2 datagrams" in err
    assert "2 records: malformed" in err and "2 records: not IPv4/UDP" in err and "1 record: IPv4 fragment" in err
    assert "1 UDP datagram not DLCP" in err
    assert "1 record with a malformed record header (timestamp fraction out of range)" in err
    # With the port named, the cut packet is decoded, as malformed.
    assert main(["protocol", "decode", str(path), "--port", "50000"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[-1].startswith("#8 ") and "MALFORMED (TRUNCATED: 30 bytes" in out
    assert "warning: 1 malformed DLCP packet (shown as MALFORMED)" in err


def test_clean_errors_for_files_that_are_not_pcap(tmp_path: Path, capsys) -> None:
    cases = {
        b"\x0a\x0d\x0d\x0a" + bytes(40): "pcapng",
        b"hello": "too short for a pcap file header",
        bytes(24): "not a pcap file",
        pcap_header(147): "link type 147 is not supported",
        struct.pack("<IHHiIII", 0xA1B2C3D4, 1, 0, 0, 0, 65535, 1): "version 1.0 is not supported",
    }
    for data, message in cases.items():
        path = tmp_path / "x.pcap"
        path.write_bytes(data)
        assert main(["protocol", "decode", str(path)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_a_huge_record_length_stops_reading() -> None:
    pkt = dlcp_frame(one_packet())
    data = pcap_header(LINKTYPE_ETHERNET) + record(pkt) + struct.pack("<IIII", 1, 0, 0xFFFFFFF0, 0xFFFFFFF0) + bytes(64)
    reader, summary, pkts = read(data)
    assert len(pkts) == 1 and summary.records == 1
    assert reader.stopped is not None and "corrupt record header at byte" in reader.stopped
    assert f"at byte {24 + 16 + len(pkt)}" in reader.stopped


def test_snapped_datagrams_are_reported(tmp_path: Path, capsys) -> None:
    """A snap length (tcpdump -s) that cuts a super-datagram: whole packets shown, the rest counted."""
    spec, values = make_message(95, 10)  # 10 packets of 80 bytes, the last of 60
    frame = dlcp_frame(bytes(packets(spec, values).buffer()))
    path = tmp_path / "snap.pcap"
    for keep, shown, warned in ((80 * 3 + 18, 3, 0), (80 * 2 + 50, 3, 1), (30, 0, 0)):
        path.write_bytes(pcap_header(LINKTYPE_ETHERNET) + record(frame[: 42 + keep], orig=len(frame)))
        assert main(["protocol", "decode", str(path), "--port", "50000", "--json"]) == 0
        out, err = capsys.readouterr()
        recs = [json.loads(line) for line in out.splitlines()]
        assert [r["seq"] for r in recs] == list(range(shown)) and {r["segments"] for r in recs} <= {10}
        assert ["warning" in r for r in recs] == [False] * (shown - warned) + [True] * warned
        assert not any("error" in r for r in recs)
        hidden = 10 - shown if shown else 1
        assert f"snap length cut 1 datagram: {hidden} packet{'s' if hidden > 1 else ''} in them not shown" in err


def test_short_link_headers_are_malformed() -> None:
    for linktype in LINKTYPE_NAMES:
        for raw in (b"", b"\x45", b"\x45" + bytes(12)):
            assert udp_datagram(linktype, raw) == (Layer.MALFORMED, None), (linktype, raw)


def test_dlcp_is_recognised_by_every_constrained_header_field() -> None:
    pkt = one_packet()
    assert looks_like_dlcp(pkt) and looks_like_dlcp(pkt[:HEADER_SIZE]) and not looks_like_dlcp(pkt[: HEADER_SIZE - 1])
    offsets = {f.name: f.offset for f in HEADER_FIELDS}
    for name, value in (
        ("ver_type", 0x20),  # version 2
        ("ver_type", 0x1F),  # type 15
        ("kind", 9),
        ("dtype", 77),
        ("rsvd0", 1),
        ("rsvd1", 1),
        ("flags", 0x80),
        ("priority", NUM_PRIORITY_CLASSES),
        ("drop_class", NUM_DROP_CLASSES),
    ):
        bad = bytearray(pkt)
        bad[offsets[name]] = value
        assert not looks_like_dlcp(bytes(bad)), name


def test_split_datagram_leaves_trailing_bytes_alone() -> None:
    pkt = one_packet()
    assert split_datagram(pkt + b"junk") == [pkt + b"junk"]
    (rec,) = decode_datagram(pkt + b"junk")
    assert "warning" in rec and "error" not in rec
    assert split_datagram(pkt + pkt) == [pkt, pkt]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_pcap_reader_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    try:
        reader = PcapReader(io.BytesIO(data))
    except PcapError:
        return
    summary = CaptureSummary()
    pkts = list(capture_packets(reader, summary))
    assert summary.records == reader.records and len(pkts) == summary.packets


@st.composite
def captures(draw: st.DrawFn) -> bytes:
    """A valid file header, then records of arbitrary bytes or of mutated DLCP frames, maybe cut anywhere."""
    linktype = draw(st.sampled_from(sorted(LINKTYPE_NAMES)))
    nano = draw(st.booleans())
    endian = draw(st.sampled_from("<>"))
    out = pcap_header(linktype, endian, 0xA1B23C4D if nano else 0xA1B2C3D4)
    frame = dlcp_frame(one_packet())
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            body = draw(st.binary(max_size=200))
        else:
            body = bytearray(frame if linktype == LINKTYPE_ETHERNET else frame[14:])
            for _ in range(draw(st.integers(0, 4))):
                body[draw(st.integers(0, len(body) - 1))] = draw(st.integers(0, 255))
            body = bytes(body[: draw(st.integers(0, len(body)))])
        frac = draw(st.integers(0, 2**32 - 1))
        out += record(body, draw(st.integers(0, 2**32 - 1)), frac, endian)
    return out[: draw(st.integers(24, len(out)))]


@settings(max_examples=300, deadline=None)
@given(captures(), st.sampled_from([None, 50000, 40000, 1]))
def test_decoder_never_raises_on_arbitrary_records(data: bytes, port: int | None) -> None:
    reader = PcapReader(io.BytesIO(data))
    summary = CaptureSummary()
    pkts = list(capture_packets(reader, summary, port))
    assert summary.records == reader.records
    assert sum(summary.layers.values()) == summary.records
    assert summary.layers[Layer.UDP] == summary.not_dlcp + summary.dlcp_datagrams + summary.filtered_datagrams
    assert all("error" in p or "type" in p for p in pkts)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_datagram_split_covers_every_byte(data: bytes) -> None:
    parts = split_datagram(data)
    assert b"".join(parts) == data
    if len(parts) > 1:
        assert all(len(p) == len(parts[0]) for p in parts[:-1]) and 0 < len(parts[-1]) <= len(parts[0])
        assert all(looks_like_dlcp(p) for p in parts[:2]) and len(parts[0]) > HEADER_SIZE
    decode_datagram(data)
