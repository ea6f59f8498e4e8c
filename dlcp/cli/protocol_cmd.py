"""``dlcp protocol``: decode DLCP packets from a pcap capture or hex; print the header layout."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from dlcp.capture import CaptureSummary, capture_packets, decode_datagram, format_time
from dlcp.pcap import Layer, PcapReader, open_pcap
from dlcp.protocol import HEADER_FIELDS, HEADER_SIZE, UDP_PORT


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    area = sub.add_parser("protocol", help="inspect the DLCP wire format")
    verbs = area.add_subparsers(dest="verb", metavar="VERB", required=True)

    dec = verbs.add_parser(
        "decode",
        help="decode DLCP packets from a pcap capture or a hex datagram",
        description="Decode the DLCP packets of a classic pcap capture (tcpdump -w: Ethernet, raw IP, or"
        " -i any's Linux cooked capture SLL/SLL2; micro- or nanosecond timestamps), or of one datagram given"
        " as hex. GSO super-datagrams are split into their packets. A summary goes to stderr.",
    )
    dec.add_argument("pcap", nargs="?", metavar="PCAP", help="a pcap file (it must exist)")
    dec.add_argument(
        "--hex", metavar="HEX", help="decode one datagram (its UDP payload) given as hex, instead of a PCAP"
    )
    dec.add_argument(
        "--port", type=int, default=None,
        help="decode only datagrams from or to this UDP port, and every one of them as DLCP;"
        " default: any port, recognising DLCP packets by their header",
    )  # fmt: skip
    dec.add_argument("--json", action="store_true", help="one JSON object per packet (default: one line of text)")
    dec.set_defaults(func=_decode)

    lay = verbs.add_parser("layout", help="print the header layout (field, offset, size)")
    lay.add_argument("--json", action="store_true", help="print as JSON")
    lay.set_defaults(func=_layout)


_SHOW = 40
"""Characters of a bad argument quoted in an error message."""


def _quote(text: str) -> str:
    return repr(text if len(text) <= _SHOW else text[:_SHOW] + "...")


def _hex_bytes(text: str) -> bytes | None:
    """The bytes a hex string spells (spaces, colons and a 0x prefix allowed), or None."""
    digits = "".join(text.replace(":", " ").split()).removeprefix("0x")
    try:
        return bytes.fromhex(digits) if digits else None
    except ValueError:
        return None


def _pcap_path(source: str) -> Path:
    """``source`` as an existing file, or a ValueError saying what it is instead."""
    path = Path(source)
    try:
        st = path.stat()
    except OSError:  # missing, or not even a possible file name (too long)
        if _hex_bytes(source) is not None:
            raise ValueError(
                f"PCAP {_quote(source)} is not a file; to decode it as a hex datagram, use --hex"
            ) from None
        raise ValueError(  # the whole path: a long one is what the user needs to see to spot the typo
            f"PCAP {source!r}: no such file (and not hex either; --hex takes a hex datagram)"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"PCAP {_quote(source)} is not a regular file")
    return path


def _decode(args: argparse.Namespace) -> int:
    if (args.pcap is None) == (args.hex is None):
        raise ValueError("give either a PCAP file or --hex HEX (exactly one of them)")
    if args.port is not None and not 0 < args.port < 1 << 16:
        raise ValueError(f"--port must be a UDP port in 1..65535, got {args.port}")
    if args.hex is not None:
        if args.port is not None:
            raise ValueError("--port filters a capture; it does not apply to --hex")
        raw = _hex_bytes(args.hex)
        if raw is None:
            raise ValueError(f"--hex {_quote(args.hex)} is not valid hex (an even number of hex digits)")
        records = decode_datagram(raw)
        for rec in records:
            _emit(rec, args.json, nanosecond=False)
        return 1 if any("error" in r for r in records) else 0
    path = _pcap_path(args.pcap)
    summary = CaptureSummary()
    f, reader = open_pcap(path)
    with f:
        try:
            for rec in capture_packets(reader, summary, args.port):
                _emit(rec, args.json, reader.nanosecond)
        except BrokenPipeError:  # the reader went away (| head): stop quietly, as tcpdump does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
            return 0
    for line in _report(reader, summary, args.port):
        sys.stderr.write(line + "\n")
    bad = summary.malformed_packets or summary.layers[Layer.MALFORMED] or reader.malformed
    return 1 if bad else 0


def _n(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless one: "1 DLCP packet", "2 DLCP packets"."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _report(reader: PcapReader, s: CaptureSummary, port: int | None) -> list[str]:
    """The summary after the packets: what was read, what was shown, and what was left out and why."""
    res = "nanosecond" if reader.nanosecond else "microsecond"
    lines = [
        f"{reader.name}: {_n(s.records, 'record')}, {reader.linktype_name} (link type {reader.linktype}),"
        f" {res} timestamps: {_n(s.packets, 'DLCP packet')} in {_n(s.dlcp_datagrams, 'datagram')}"
        f" ({_n(s.super_datagrams, 'GSO super-datagram')} split into their packets)"
    ]
    other = [f"{_n(s.not_dlcp, 'UDP datagram')} not DLCP"] if s.not_dlcp else []
    other += [f"{_n(n, 'record')}: {layer.value}" for layer, n in s.layers.items() if n and layer != Layer.UDP]
    if other:
        lines.append("left out: " + ", ".join(other))
    if s.filtered_datagrams:
        ports = ", ".join(str(p) for p, _ in s.filtered_ports.most_common(3))
        lines.append(
            f"--port {port} left out {_n(s.filtered_datagrams, 'DLCP datagram')} ({_n(s.filtered_packets, 'packet')})"
            f" on other ports (most used: {ports}); leave out --port to decode DLCP on any port"
        )
    if not s.packets and not s.filtered_datagrams:
        where = f"from or to port {port}" if port is not None else "with a DLCP header, on any port"
        lines.append(f"no DLCP packets: no UDP datagram {where}")
    if s.snapped:
        lines.append(
            f"warning: the capture's snap length cut {_n(s.snapped, 'datagram')}:"
            f" {_n(s.snapped_packets, 'packet')} in them not shown (capture with a larger tcpdump -s to see them)"
        )
    if s.malformed_packets:
        lines.append(f"warning: {_n(s.malformed_packets, 'malformed DLCP packet')} (shown as MALFORMED)")
    for reason, n in reader.malformed.items():
        lines.append(f"warning: {_n(n, 'record')} with a malformed record header ({reason})")
    if reader.stopped:
        lines.append(f"warning: {reader.stopped}")
    return lines


def _emit(rec: dict[str, Any], as_json: bool, nanosecond: bool) -> None:
    sys.stdout.write((json.dumps(rec) if as_json else _pretty(rec, nanosecond)) + "\n")


def _pretty(rec: dict[str, Any], nanosecond: bool) -> str:
    where = f"#{rec['record']}" if "record" in rec else ""
    if rec.get("segments", 1) > 1:
        where += f".{rec['segment']}"
    prefix = f"{where} " if where else ""
    if "ip" in rec:
        prefix += f"{format_time(rec['time_ns'], nanosecond)} {rec['ip']} tos=0x{rec['tos']:02x} "
    if "type" not in rec:
        return f"{prefix}MALFORMED ({rec['error']})"
    flags = "|".join(rec["flags"]) or "-"
    text = (
        f"{prefix}{rec['type']} v{rec['version']} job={rec['job_id']} src={rec['src']} msg={rec['msg_id']}"
        f" round={rec['round']} layer={rec['layer']} kind={rec['kind']} prio={rec['priority']}"
        f" drop={rec['drop_class']} seq={rec['seq']}/{rec['pkt_count']} off={rec['offset']}"
        f" len={rec['length']} {rec['dtype']} flags={flags}"
    )
    if "error" in rec:
        text += f"  MALFORMED ({rec['error']})"
    return text + (f"  WARNING: {rec['warning']}" if "warning" in rec else "")


def _layout(args: argparse.Namespace) -> int:
    rows = [{"field": f.name, "offset": f.offset, "size": f.size, "doc": f.doc} for f in HEADER_FIELDS]
    if args.json:
        sys.stdout.write(json.dumps({"header_size": HEADER_SIZE, "udp_port": UDP_PORT, "fields": rows}) + "\n")
    else:
        sys.stdout.write(f"DLCP header: {HEADER_SIZE} bytes, network byte order, UDP port {UDP_PORT}\n")
        for r in rows:
            sys.stdout.write(f"  {r['offset']:>3}  {r['size']}  {r['field']:<11} {r['doc']}\n")
    return 0
