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
    assert main(["protocol", "decode", "--hex", raw.hex(), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert (rec["type"], rec["seq"], rec["offset"], rec["length"], rec["job_id"]) == ("DATA", 3, 30, 40, 7)
    assert (rec["segment"], rec["segments"]) == (0, 1)
    spaced = " ".join(raw[i : i + 2].hex() for i in range(0, len(raw), 2))  # as tcpdump -x prints it
    assert main(["protocol", "decode", "--hex", "0x" + spaced, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == rec


def test_decode_malformed_hex(capsys) -> None:
    assert main(["protocol", "decode", "--hex", "2000"]) == 1
    assert "MALFORMED" in capsys.readouterr().out
    assert main(["protocol", "decode", "--hex", "zz-not-hex"]) == 2
    assert "--hex 'zz-not-hex' is not valid hex" in capsys.readouterr().err


def test_long_hex_is_not_taken_for_a_file_name(capsys) -> None:
    """Before: hex of 128 bytes or more failed with "File name too long"."""
    spec, values = make_message(100, 25)
    raw = packets(spec, values).packets()[1]
    assert len(raw) >= 128
    assert main(["protocol", "decode", "--hex", raw.hex(), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq"] == 1
    # Hex where a file is expected: refused, saying which was meant.
    assert main(["protocol", "decode", raw.hex()]) == 2
    err = capsys.readouterr().err
    assert "is not a file" in err and "use --hex" in err and "too long" not in err
    assert len(err) < 200, "the argument is quoted shortened"


def test_decode_input_must_be_explicit(tmp_path: Path, capsys) -> None:
    assert main(["protocol", "decode", str(tmp_path / "missing.pcap")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["protocol", "decode"]) == 2
    assert "either a PCAP file or --hex" in capsys.readouterr().err
    assert main(["protocol", "decode", str(tmp_path), "--hex", "00"]) == 2
    assert "exactly one" in capsys.readouterr().err
    assert main(["protocol", "decode", str(tmp_path)]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert main(["protocol", "decode", "--hex", "00", "--port", "19110"]) == 2
    assert "--port" in capsys.readouterr().err
    (tmp_path / "x.pcap").write_bytes(b"")
    for port in ("0", "70000"):
        assert main(["protocol", "decode", str(tmp_path / "x.pcap"), "--port", port]) == 2
        assert f"--port must be a UDP port in 1..65535, got {port}" in capsys.readouterr().err
    # A file whose name is hex is a file.
    named = tmp_path / "abcd"
    write_pcap(named, [])
    assert main(["protocol", "decode", str(named)]) == 0
    assert "0 records" in capsys.readouterr().err


def test_decode_gso_super_datagram_as_the_receiver_does(assembler, capsys) -> None:
    """Before: a GSO super-datagram decoded as one packet (with a length warning)."""
    spec, values = make_message(95, 10)  # 10 packets, the last one short (5 elements)
    batch = packets(spec, values)
    super_datagram = bytes(batch.buffer())
    assert main(["protocol", "decode", "--hex", super_datagram.hex(), "--json"]) == 0
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["seq"] for r in recs] == list(range(10))
    assert [r["length"] for r in recs] == [40] * 9 + [20]
    assert {r["segments"] for r in recs} == {10} and not any("warning" in r for r in recs)
    # The receiver, given the kernel's segment size, accepts the same packets.
    out = np.zeros(95, dtype=np.float32)
    assembler.expect(spec, out)
    result = assembler.ingest(super_datagram, seg_size=batch.seg_size)
    assert result.accepted == len(recs) and result.dropped == 0
    np.testing.assert_array_equal(out, values)
    # A corrupt segment in the middle is one malformed packet, not the end of the datagram.
    broken = bytearray(super_datagram)
    broken[3 * batch.seg_size] = 0x7F  # version 7, type 15
    assert main(["protocol", "decode", "--hex", broken.hex(), "--json"]) == 1
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(recs) == 10 and ["error" in r for r in recs] == [i == 3 for i in range(10)]
    assert recs[3]["error"].startswith("BAD_VERSION")


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
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 10, "only DLCP datagrams are decoded"
    assert "seq=9/10" in lines[-1] and "LAST" in lines[-1] and "10.0.0.1:40009 > 10.0.0.2:19110" in lines[-1]
    assert lines[0].startswith("#1 1.000000 10.0.0.1:40000") and lines[-1].startswith("#10 10.000000 ")
    assert "1 UDP datagram not DLCP" in err
    # On the named port every datagram is taken for DLCP: the DNS one shows as malformed.
    assert main(["protocol", "decode", str(pcap), "--port", "53"]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("#11 ") and "MALFORMED (TRUNCATED" in out and "10 DLCP datagrams" in err


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
