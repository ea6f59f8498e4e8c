"""The generated constants (P4 and the one C header) match dlcp/protocol.py, dlcp/frames.py and dlcp/p4/sizes.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlcp import protocol
from dlcp.p4 import gen_constants, generated, sizes
from dlcp.wire import Header

ROOT = Path(__file__).resolve().parents[2]


def test_committed_files_equal_the_generator_output() -> None:
    stale = generated.stale(gen_constants.files(ROOT))
    assert not stale, f"regenerate with `dlcp p4 gen-constants`: {stale}"


def test_stale_detects_an_edit(tmp_path: Path) -> None:
    files = gen_constants.files(tmp_path)
    assert generated.write(files) == list(files)  # folders created
    assert generated.stale(files) == []
    path = tmp_path / "p4src/common/constants.p4"
    path.write_text(path.read_text().replace("19110", "19111"))
    assert generated.stale(files) == [path]
    assert generated.write(files) == [path] and generated.stale(files) == []


def _consts(text: str) -> dict[str, int]:
    return {m[1]: int(m[2], 0) for m in re.finditer(r"const bit<\d+> (\w+) = (\w+);", text)}


def test_constants_carry_the_protocol_values() -> None:
    c = _consts(gen_constants.render_constants())
    assert c["DLCP_UDP_PORT"] == protocol.UDP_PORT
    assert c["DLCP_VERSION"] == protocol.VERSION
    assert c["DLCP_HEADER_BYTES"] == protocol.HEADER_SIZE
    assert {k: v for k, v in c.items() if k.startswith("DLCP_TYPE_") and k != "DLCP_TYPE_MAX"} == {
        f"DLCP_TYPE_{t.name}": int(t) for t in protocol.PacketType
    }
    assert c["DLCP_FLAG_RETX"] == protocol.Flag.RETX
    assert c["TRIMMED_FRAME_BYTES"] == sizes.TRIMMED_FRAME_BYTES == 14 + 20 + 8 + protocol.HEADER_SIZE
    assert c["DLCP_NUM_PRIORITY_CLASSES"] == protocol.NUM_PRIORITY_CLASSES


def test_header_widths_cover_the_layout() -> None:
    widths = [int(w) for w in re.findall(r"bit<(\d+)> \w+;", gen_constants.render_header())]
    assert sum(widths) == 8 * protocol.HEADER_SIZE


@pytest.mark.parametrize("ptype", list(protocol.PacketType))
def test_version_type_split_matches_the_wire_codec(ptype: protocol.PacketType) -> None:
    first = Header(type=ptype).pack()[0]
    assert first >> gen_constants.TYPE_BITS == protocol.VERSION
    assert first & ((1 << gen_constants.TYPE_BITS) - 1) == ptype
    assert gen_constants.VERSION_BITS + gen_constants.TYPE_BITS == 8


def test_queues_are_priority_classes() -> None:
    assert 0 <= sizes.DEFAULT_QUEUE < protocol.NUM_PRIORITY_CLASSES


def test_the_hand_written_network_constants_of_p4_agree_with_dlcp_frames() -> None:
    """headers.p4 types the Ethernet and IP numbers itself; the C switch and Python take them from
    dlcp.frames (through the generated header): the three must not drift apart."""
    from dlcp import frames

    c = _consts((ROOT / "p4src/common/headers.p4").read_text())
    assert c["ETHERTYPE_IPV4"] == frames.ETHERTYPE_IPV4
    assert c["IPPROTO_UDP"] == frames.IPPROTO_UDP
    assert c["IPPROTO_TCP"] == frames.IPPROTO_TCP


def _c_macros(text: str) -> dict[str, int]:
    return {m[1]: int(m[2], 0) for m in re.finditer(r"^#define (\w+) (\d+)", text, re.M)}


def test_one_c_header_with_the_p4_names() -> None:
    """Every C and C++ target reads one header; the names it shares with constants.p4 carry the same values."""
    c = _c_macros(gen_constants.render_c_header())
    p4 = _consts(gen_constants.render_constants())
    shared = set(c) & set(p4)
    assert {"DLCP_UDP_PORT", "DLCP_HEADER_BYTES", "DLCP_TYPE_TRIMMED", "DLCP_NUM_PRIORITY_CLASSES"} <= shared
    assert {n: c[n] for n in shared} == {n: p4[n] for n in shared}
    for f in protocol.HEADER_FIELDS:
        assert (c[f"DLCP_OFF_{f.name.upper()}"], c[f"DLCP_SIZE_{f.name.upper()}"]) == (f.offset, f.size)


C_SOURCES = sorted(
    p
    for folder in ("testbed/switch", "host", "simulations/cpp", "simulations/profile")
    for p in (ROOT / folder).iterdir()
    if p.suffix in (".c", ".h", ".cc") and p.name != gen_constants.C_HEADER
)


@pytest.mark.parametrize("path", C_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_c_sources_use_the_generated_names_only(path: Path) -> None:
    """No C or C++ source re-defines a generated constant, and every ``DLCP_*`` name it uses is generated."""
    text = path.read_text()
    c = _c_macros(gen_constants.render_c_header())
    defined = set(re.findall(r"#define (\w+)|constexpr \w+ (\w+) =", text))
    assert not {n for pair in defined for n in pair} & set(c), "a generated constant typed again"
    used = set(re.findall(r"\bDLCP_[A-Z0-9_]+\b", text)) - {n for pair in defined for n in pair}
    assert used <= set(c), f"not in {gen_constants.C_HEADER}: {sorted(used - set(c))}"
