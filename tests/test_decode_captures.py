"""`dlcp protocol decode` on real tcpdump captures of a bench run (tests/captures/README.md).

Every count is checked two ways: against what the bench run must have sent, and
against scapy's own reading of the same file.
"""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from scapy.layers.inet import UDP
from scapy.utils import rdpcap

from dlcp.cli.main import main
from dlcp.protocol import HEADER_SIZE

CAPTURES = Path(__file__).parent / "captures"

# The run: dlcp bench allreduce --workers 2 --size 1024 --payload 64 --repeat 1 --warmup 0 --baseline none
WORKERS, SIZE, PAYLOAD = 2, 1024, 64
ALLREDUCES = 2  # --repeat 1 plus the unmeasured iteration that starts each block
PACKETS_PER_MESSAGE = SIZE // WORKERS // PAYLOAD  # a ring chunk: 8
MESSAGES = ALLREDUCES * WORKERS * 2  # each rank: one REDUCE_SCATTER and one ALL_GATHER message per all-reduce
DATA_PACKETS = MESSAGES * PACKETS_PER_MESSAGE  # 64
CONTROL_PACKETS = 18  # tcpdump: 18 datagrams of 40 bytes (a bare header)
RECORDS, DLCP_DATAGRAMS, SUPER_DATAGRAMS = 31, 30, 12  # tcpdump: "31 packets captured"; one is b"not dlcp"
RANK_PORT = 42846  # tcpdump -r lo.pcap: one rank's receive socket (an ephemeral port)
FIRST_DLCP_TIME = {"lo-nano.pcap": "1795433185.676287061", "lo.pcap": "1795433185.676287"}  # tcpdump -tt

WHOLE = [
    ("lo.pcap", 1, "Ethernet", False),
    ("lo-nano.pcap", 1, "Ethernet", True),
    ("any-sll2.pcap", 276, "SLL2", False),
    ("any-sll.pcap", 113, "SLL)", False),
]


def decode(capsys, *argv: str) -> tuple[int, list[dict], str]:
    rc = main(["protocol", "decode", *argv, "--json"])
    out, err = capsys.readouterr()
    return rc, [json.loads(line) for line in out.splitlines()], err


def scapy_datagrams(name: str, with_ports: bool = False) -> list[tuple]:
    """(time in ns, UDP payload[, (sport, dport)]) of every datagram, as scapy reads the file."""
    return [
        (int(Decimal(p.time) * 10**9), bytes(p[UDP].payload)) + (((p[UDP].sport, p[UDP].dport),) if with_ports else ())
        for p in rdpcap(str(CAPTURES / name))
        if UDP in p
    ]


@pytest.mark.parametrize(("name", "linktype", "linkname", "nano"), WHOLE)
def test_bench_capture_every_packet(capsys, name: str, linktype: int, linkname: str, nano: bool) -> None:
    """Before: a capture of the bench decoded to nothing (its ports are ephemeral), SLL2 was refused,
    and each GSO super-datagram showed as one packet."""
    rc, pkts, err = decode(capsys, str(CAPTURES / name))
    assert len(pkts) == DATA_PACKETS + CONTROL_PACKETS == 82, err
    assert rc == 0, err
    assert f"link type {linktype}" in err and linkname in err
    assert ("nanosecond" if nano else "microsecond") + " timestamps" in err
    assert f"{RECORDS} records" in err and f"82 DLCP packets in {DLCP_DATAGRAMS} datagrams" in err
    assert f"({SUPER_DATAGRAMS} GSO super-datagrams" in err and "1 UDP datagram not DLCP" in err

    # What the run sent: every message's packets exactly once, none malformed.
    data = [p for p in pkts if p["type"] == "DATA"]
    assert len(data) == DATA_PACKETS and not any("error" in p or "warning" in p for p in pkts)
    seqs: dict[tuple, list[int]] = defaultdict(list)
    for p in data:
        assert p["length"] == PAYLOAD and p["pkt_count"] == PACKETS_PER_MESSAGE
        seqs[(p["job_id"], p["src"], p["msg_id"], p["round"], p["kind"])].append(p["seq"])
    assert len(seqs) == MESSAGES
    assert all(sorted(s) == list(range(PACKETS_PER_MESSAGE)) for s in seqs.values())
    assert {p["segments"] for p in data} == {4, 8}
    assert all(p["type"] != "DATA" and p["segments"] == 1 for p in pkts if p["length"] == 0)

    # Against scapy: the same datagrams, their bytes all accounted for by the packets, the same times.
    theirs = scapy_datagrams(name)
    assert len(theirs) == RECORDS
    dlcp = [(t, payload) for t, payload in theirs if payload != b"not dlcp"]
    assert sum(len(payload) for _, payload in dlcp) == sum(
        HEADER_SIZE + (p["length"] if p["type"] == "DATA" else 0) for p in pkts
    )
    by_record: dict[int, list[dict]] = defaultdict(list)
    for p in pkts:
        by_record[p["record"]].append(p)
    assert len(by_record) == DLCP_DATAGRAMS
    for (t, payload), (_, group) in zip(dlcp, sorted(by_record.items()), strict=True):
        assert all(p["time_ns"] == t for p in group)
        assert sum(HEADER_SIZE + (p["length"] if p["type"] == "DATA" else 0) for p in group) == len(payload)


def test_super_datagrams_split_on_a_real_capture(capsys) -> None:
    """Before: one header per GSO super-datagram (with a length warning), 30 lines for 82 packets."""
    _, pkts, err = decode(capsys, str(CAPTURES / "lo.pcap"), "--port", str(RANK_PORT))
    on_port = [payload for _, payload, ports in scapy_datagrams("lo.pcap", with_ports=True) if RANK_PORT in ports]
    # Independently of the decoder: DATA datagrams hold 40 + PAYLOAD bytes per packet, control ones 40.
    expected = sum(len(p) // (HEADER_SIZE + PAYLOAD) if len(p) > HEADER_SIZE else 1 for p in on_port)
    assert len(on_port) < expected == len(pkts), err
    assert not any("warning" in p or "error" in p for p in pkts)


def test_nanosecond_timestamps(capsys) -> None:
    """Before: nanosecond fractions were read as microseconds (676 s late here)."""
    _, pn, _ = decode(capsys, str(CAPTURES / "lo-nano.pcap"), "--port", str(RANK_PORT))
    assert abs(pn[0]["time"] - 1795433185.676287061) < 1e-6
    main(["protocol", "decode", str(CAPTURES / "lo-nano.pcap")])
    nano = capsys.readouterr().out.splitlines()
    main(["protocol", "decode", str(CAPTURES / "lo.pcap")])
    micro = capsys.readouterr().out.splitlines()
    assert nano[0].split()[1] == FIRST_DLCP_TIME["lo-nano.pcap"]
    assert micro[0].split()[1] == FIRST_DLCP_TIME["lo.pcap"]
    _, pn, _ = decode(capsys, str(CAPTURES / "lo-nano.pcap"))
    _, pu, _ = decode(capsys, str(CAPTURES / "lo.pcap"))
    # The same packets, stamped by the same kernel clock: the microsecond stamp is the nanosecond one cut.
    assert [p["time_ns"] // 1000 * 1000 for p in pn] == [p["time_ns"] for p in pu]
    assert any(p["time_ns"] % 1000 for p in pn)


def test_truncated_capture_keeps_records_before_the_cut(capsys) -> None:
    """Before: a capture cut short decoded to nothing but an error."""
    _, whole, _ = decode(capsys, str(CAPTURES / "lo.pcap"))
    rc, pkts, err = decode(capsys, str(CAPTURES / "lo-truncated.pcap"))
    assert rc == 0, "a cut capture is a warning, not a failure"
    assert pkts == [p for p in whole if p["record"] < 12]
    assert len(pkts) == 29
    assert "warning:" in err and "truncated" in err
    assert "record 12" in err and "byte 3366" in err and "read the 11 records before it" in err


def test_port_filter_says_what_it_dropped(capsys) -> None:
    """Before: the default --port 19110 dropped the whole bench capture without a word."""
    rc, pkts, err = decode(capsys, str(CAPTURES / "lo.pcap"), "--port", "19110")
    assert rc == 0 and pkts == []
    assert "--port 19110 left out 30 DLCP datagrams (82 packets) on other ports" in err
    assert "leave out --port" in err
    _, every, _ = decode(capsys, str(CAPTURES / "lo.pcap"))
    port = int(every[0]["ip"].rsplit(":", 1)[1])  # the first packet's destination: one rank's socket
    _, narrowed, err = decode(capsys, str(CAPTURES / "lo.pcap"), "--port", str(port))

    def ports(p: dict) -> set[int]:
        return {int(end.rsplit(":", 1)[1]) for end in p["ip"].split(" > ")}

    def strip(ps: list[dict]) -> list[dict]:
        return [{k: v for k, v in p.items() if k != "index"} for p in ps]

    assert strip(narrowed) == strip([p for p in every if port in ports(p)])
    assert 0 < len(narrowed) < len(every)
    assert "left out" in err and "DLCP datagrams" in err


def test_a_closed_pipe_ends_the_listing_quietly(tmp_path: Path, monkeypatch, capsys) -> None:
    """`dlcp protocol decode x.pcap | head` printed "dlcp: error: [Errno 32] Broken pipe" and exited 2."""

    class ClosedPipe:
        def __init__(self) -> None:
            self.fd = (tmp_path / "stdout").open("w")

        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            return self.fd.fileno()

    pipe = ClosedPipe()
    monkeypatch.setattr("sys.stdout", pipe)
    assert main(["protocol", "decode", str(CAPTURES / "lo.pcap")]) == 0
    pipe.fd.close()
    assert "error" not in capsys.readouterr().err
