"""The switch test vectors: committed files equal the generator, load cleanly and say what the spec says."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from dlcp import protocol
from dlcp.drops import DropReason
from dlcp.frames import ETH_HEADER, IPV4_HEADER, ipv4_checksum, parse_udp_frame
from dlcp.p4 import generated, names, sizes, vector_gen, vectors
from dlcp.wire import HEADER_DTYPE, Header, check_headers

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests/vectors/switch"
CASES = vectors.load_dir(VECTORS)
BY_NAME = {c.name: c for c in CASES}


def test_committed_vectors_equal_the_generator_output() -> None:
    assert not generated.stale(vector_gen.files(VECTORS)), "regenerate with `dlcp p4 gen-vectors`"


def test_every_feature_of_the_issue_has_a_case() -> None:
    files = {c.source for c in CASES}
    assert files == set(vector_gen.FILES)
    assert any(
        c.stalled_queues and any(e.action and e.action.name == names.TRIM_ABOVE for e in c.entries) for c in CASES
    )
    assert any(c.spread for c in CASES)


def test_names_used_by_vectors_are_program_names() -> None:
    known = set(names.TABLES) | set(names.ACTIONS) | set(names.COUNTERS)
    for c in CASES:
        for e in c.entries:
            assert e.table in known
            for a in ([e.action] if e.action else []) + list(e.action_set):
                assert a.name in known
        assert set(c.counter_names) == set(names.COUNTERS), c.name


def test_routed_outputs_keep_the_datagram() -> None:
    """A switch rewrites MACs, TTL and checksum only: the UDP datagram leaves as it came (trimming aside)."""
    for c in CASES:
        for p in c.packets:
            f_in = parse_udp_frame(p.frame.data)
            for out in [*(p.expect or ()), *p.expect_one_of]:
                if len(out.data) == sizes.TRIMMED_FRAME_BYTES and len(p.frame.data) > len(out.data):
                    continue
                assert out.data[14 + 9] == p.frame.data[14 + 9], "IPv4 protocol"
                assert out.data[14 + 8] == p.frame.data[14 + 8] - 1, "TTL"
                f_out = parse_udp_frame(out.data)
                if f_in is not None:
                    assert f_out is not None and f_out.payload == f_in.payload, (c.name, p.note)
                    assert (f_out.src_ip, f_out.dst_ip, f_out.tos) == (f_in.src_ip, f_in.dst_ip, f_in.tos)


def test_trimmed_output_is_the_header_of_the_input() -> None:
    case = BY_NAME["trimming_cuts_to_headers_at_top_priority"]
    trimmed = [(p, o) for p in case.packets for o in (p.expect or ()) if len(o.data) == sizes.TRIMMED_FRAME_BYTES]
    assert len(trimmed) == 2
    for p, out in trimmed:
        f_in, f_out = parse_udp_frame(p.frame.data), parse_udp_frame(out.data)
        assert f_in is not None and f_out is not None
        h_in, h_out = Header.unpack(f_in.payload), Header.unpack(f_out.payload)
        assert h_out.type == protocol.PacketType.TRIMMED
        assert h_out == h_in.replace(type=protocol.PacketType.TRIMMED)
        assert h_out.length == len(f_in.payload) - protocol.HEADER_SIZE  # length unchanged, payload gone
        ip = out.data[ETH_HEADER.size : ETH_HEADER.size + IPV4_HEADER.size]
        assert ipv4_checksum(ip) == 0, "the trimmed frame's IPv4 checksum is recomputed"
        assert struct.unpack_from("!H", ip, 2)[0] == sizes.TRIMMED_IPV4_TOTAL_LEN
        # The receiver accepts a trimmed header as such (check_headers does not flag it).
        hdr = np.frombuffer(f_out.payload, dtype=HEADER_DTYPE)
        assert check_headers(hdr, np.array([len(f_out.payload)]))[0] == 0


def test_malformed_packets_are_malformed_for_the_receiver() -> None:
    case = BY_NAME["malformed_dlcp_forwarded_as_plain_udp"]
    for p in case.packets:
        f = parse_udp_frame(p.frame.data)
        assert f is not None and f.dport == protocol.UDP_PORT
        raw = f.payload
        if len(raw) < protocol.HEADER_SIZE:
            continue
        codes = check_headers(np.frombuffer(raw[: protocol.HEADER_SIZE], dtype=HEADER_DTYPE), np.array([len(raw)]))
        h = np.frombuffer(raw[: protocol.HEADER_SIZE], dtype=HEADER_DTYPE)[0]
        out_of_range = h["priority"] >= protocol.NUM_PRIORITY_CLASSES or h["drop_class"] >= protocol.NUM_DROP_CLASSES
        if out_of_range:  # malformed for switches only: the receiver ignores the classes
            assert codes[0] == 0, p.note
        else:
            assert codes[0] in (DropReason.BAD_VERSION, DropReason.BAD_TYPE), p.note


def test_stalled_cases_are_deterministic_by_construction() -> None:
    """Each stalled case begins with settle packets only, and every later packet targets a stalled queue."""
    for c in CASES:
        if not c.stalled_queues:
            continue
        settles = [i for i, p in enumerate(c.packets) if p.settle]
        assert settles == list(range(len(settles))) and settles, c.name


@pytest.mark.parametrize("path", sorted(VECTORS.glob("*.json")), ids=lambda p: p.name)
def test_loader_rejects_broken_files(path: Path, tmp_path: Path) -> None:
    doc = json.loads(path.read_text())
    doc["cases"][0]["packets"][0].update(expect=[], expect_one_of=[])
    broken = tmp_path / path.name
    broken.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="either expect or expect_one_of"):
        vectors.load_file(broken)
    doc["version"] = 99
    broken.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="not a dlcp-switch-vectors v1 file"):
        vectors.load_file(broken)
