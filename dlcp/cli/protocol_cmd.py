"""``dlcp protocol``: decode DLCP packets from hex or a pcap capture; print the header layout."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dlcp.protocol import HEADER_FIELDS, HEADER_SIZE, UDP_PORT
from dlcp.wire import Header


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    area = sub.add_parser("protocol", help="inspect the DLCP wire format")
    verbs = area.add_subparsers(dest="verb", metavar="VERB", required=True)

    dec = verbs.add_parser(
        "decode",
        help="decode DLCP packets from a hex string or a pcap file",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    dec.add_argument("source", help="hex of one DLCP datagram (UDP payload), or a .pcap file")
    dec.add_argument("--port", type=int, default=UDP_PORT, help="UDP port that carries DLCP in a capture")
    dec.add_argument("--json", action="store_true", help="one JSON object per packet")
    dec.set_defaults(func=_decode)

    lay = verbs.add_parser("layout", help="print the header layout (field, offset, size)")
    lay.add_argument("--json", action="store_true", help="print as JSON")
    lay.set_defaults(func=_layout)


def _records(args: argparse.Namespace) -> list[dict[str, Any]]:
    path = Path(args.source)
    if path.suffix in (".pcap", ".cap") or path.is_file():
        from dlcp.pcap import udp_frames

        out: list[dict[str, Any]] = []
        for i, (ts, frame) in enumerate(udp_frames(path)):
            if args.port not in (frame.dport, frame.sport):
                continue
            rec: dict[str, Any] = {
                "index": i,
                "time": ts,
                "ip": f"{frame.src_ip}:{frame.sport} > {frame.dst_ip}:{frame.dport}",
                "tos": frame.tos,
            }
            rec.update(_decode_one(frame.payload))
            out.append(rec)
        return out
    text = "".join(args.source.split()).removeprefix("0x")
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"{args.source!r} is neither a file nor valid hex") from None
    return [_decode_one(raw)]


def _decode_one(raw: bytes) -> dict[str, Any]:
    try:
        h = Header.unpack(raw)
    except ValueError as exc:
        return {"error": str(exc), "bytes": len(raw)}
    rec = h.as_dict()
    payload = len(raw) - HEADER_SIZE
    if payload != h.length and h.type.name != "TRIMMED":
        rec["warning"] = f"header says {h.length} payload bytes, datagram has {payload}"
    return rec


def _decode(args: argparse.Namespace) -> int:
    records = _records(args)
    for rec in records:
        if args.json:
            sys.stdout.write(json.dumps(rec) + "\n")
        else:
            sys.stdout.write(_pretty(rec) + "\n")
    return 1 if any("error" in r for r in records) else 0


def _pretty(rec: dict[str, Any]) -> str:
    prefix = f"#{rec['index']} {rec['ip']} tos=0x{rec['tos']:02x} " if "ip" in rec else ""
    if "error" in rec:
        return f"{prefix}MALFORMED ({rec['error']})"
    flags = "|".join(rec["flags"]) or "-"
    text = (
        f"{prefix}{rec['type']} v{rec['version']} job={rec['job_id']} src={rec['src']} msg={rec['msg_id']}"
        f" round={rec['round']} layer={rec['layer']} kind={rec['kind']} prio={rec['priority']}"
        f" drop={rec['drop_class']} seq={rec['seq']}/{rec['pkt_count']} off={rec['offset']}"
        f" len={rec['length']} {rec['dtype']} flags={flags}"
    )
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
