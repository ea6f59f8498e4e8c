import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from support import make_message, packets

from dlcp.cli.main import main
from dlcp.frames import build_udp_frame, parse_udp_frame
from dlcp.pcap import write_pcap
from dlcp.protocol import UDP_PORT, tos_for


def test_decode_hex(capsys) -> None:
    spec, values = make_message(100, 10)
    raw = packets(spec, values).packets()[3]
    assert main(["protocol", "decode", raw.hex(), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert (rec["type"], rec["seq"], rec["offset"], rec["length"], rec["job_id"]) == ("DATA", 3, 30, 40, 7)


def test_decode_malformed_hex(capsys) -> None:
    assert main(["protocol", "decode", "2000"]) == 1
    assert "MALFORMED" in capsys.readouterr().out
    assert main(["protocol", "decode", "zz-not-hex"]) == 2
    assert "neither a file nor valid hex" in capsys.readouterr().err


def test_decode_pcap(tmp_path: Path, capsys) -> None:
    spec, values = make_message(100, 10)
    frames = [
        build_udp_frame(
            eth_src="02:00:00:00:00:01",
            eth_dst="02:00:00:00:00:02",
            src_ip="10.0.0.1",
            dst_ip="10.0.0.2",
            sport=40000 + i,
            dport=UDP_PORT,
            payload=p,
            tos=tos_for(3, 0),
        )
        for i, p in enumerate(packets(spec, values).packets())
    ]
    frames.append(build_udp_frame(eth_src="02:00:00:00:00:01", eth_dst="02:00:00:00:00:02", src_ip="10.0.0.1",
                                  dst_ip="10.0.0.2", sport=53, dport=53, payload=b"dns"))  # fmt: skip
    pcap = tmp_path / "x.pcap"
    write_pcap(pcap, frames)
    assert parse_udp_frame(frames[0]).tos == tos_for(3, 0)
    assert main(["protocol", "decode", str(pcap)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 10, "only DLCP datagrams are decoded"
    assert "seq=9/10" in lines[-1] and "LAST" in lines[-1] and "10.0.0.1:40009 > 10.0.0.2:19110" in lines[-1]


def test_layout_and_help() -> None:
    out = subprocess.run([sys.executable, "-m", "dlcp.cli.main", "--help"], capture_output=True, text=True, check=True)
    assert "protocol" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "dlcp.cli.main", "protocol", "layout", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    layout = json.loads(out.stdout)
    assert layout["header_size"] == 40 and layout["fields"][0]["field"] == "ver_type"
    assert np.sum([f["size"] for f in layout["fields"]]) == 40
