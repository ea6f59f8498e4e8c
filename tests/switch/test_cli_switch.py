"""``dlcp switch run`` and ``dlcp switch stats``: bad input refused before anything starts; a run in a
namespace answers statistics and stops cleanly on SIGTERM and SIGINT."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlcp.cli.main import main
from dlcp.frames import build_udp_frame
from dlcp.testbed.netns import Namespace
from dlcp.testbed.switch import stats


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ([], "--port"),
        (["--port", "1=dlcpNoSuch"], "--port 1=dlcpNoSuch: no interface"),
        (["--port", "1=lo", "--port", "1=lo"], "port 1 is given twice"),
        (["--port", "1=lo", "--port", "2=lo"], "interface lo is given for ports 1 and 2"),
        (["--port", "1=lo", "--rate", "1=5qbit"], "--rate 1=5qbit"),
        (["--port", "1=lo", "--rate", "1=10bit"], "out of range"),
        (["--port", "1=lo", "--rate", "2=1gbit"], "--rate 2=1gbit: no port 2"),
        (["--port", "1=lo", "--buffer", "100"], "--buffer 100"),
        (["--port", "1=lo", "--buffer", "1=1GiB"], "--buffer 1=1GiB"),
        (["--port", "1=lo", "--loss", "1=1.5"], "--loss 1=1.5"),
        (["--port", "1=lo", "--loss", "1:9=0.1"], "class 9 is out of range"),
        (["--port", "1=lo", "--delay", "1=20s"], "--delay 1=20s"),
        (["--port", "600=lo"], "--port 600=lo"),
        (["--port", "1=lo", "--grpc", "nohost"], "--grpc"),
    ],
)
def test_bad_input_is_refused_naming_the_argument(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["switch", "run", "--stats-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert named in err, err
    assert not list(tmp_path.iterdir()), "nothing may start before the input is checked"


def test_config_file_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "sw.toml"
    cfg.write_text('[[port]]\nid = 1\ninterface = "lo"\nrate = "fast"\n')
    assert main(["switch", "run", "--config", str(cfg)]) == 2
    assert f"{cfg}: port[0].rate" in capsys.readouterr().err


def test_stats_of_a_switch_that_is_not_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["switch", "stats", "--stats-dir", str(tmp_path), "--device-id", "5"]) == 2
    assert "no switch is running" in capsys.readouterr().err


def _wait_socket(path: Path, proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"the switch exited with {proc.returncode}: {out}")
        assert time.monotonic() < deadline, "no statistics socket"
        time.sleep(0.05)


@pytest.mark.root
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_run_in_a_namespace_stats_and_clean_stop(tmp_path: Path, sig: signal.Signals) -> None:
    with Namespace("cli") as ns:
        ns.add_veth("dlcpS1", "dlcpH1")
        ns.add_veth("dlcpS2", "dlcpH2")
        argv = [sys.executable, "-m", "dlcp.cli.main", "switch", "run", "--port", "1=dlcpS1", "--port", "2=dlcpS2"]
        argv += ["--rate", "2=1gbit", "--loss", "2:3=0.5", "--device-id", "9", "--stats-dir", str(tmp_path)]
        proc = ns.popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            path = stats.socket_path(tmp_path, 9)
            _wait_socket(path, proc)
            # empty tables: a frame is dropped for want of a route, and counted
            frame = build_udp_frame(
                eth_src="02:dc:00:00:00:01", eth_dst="02:dc:00:00:00:02", src_ip="10.0.0.1",
                dst_ip="10.9.0.1", sport=1, dport=2, payload=bytes(64),
            )  # fmt: skip
            with ns.entered():
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                s.bind(("dlcpH1", 0))
                s.send(frame)
                s.close()
            deadline = time.monotonic() + 5
            while True:
                doc = json.loads(
                    subprocess.run(
                        [sys.executable, "-m", "dlcp.cli.main", "switch", "stats", "--json", "--device-id", "9",
                         "--stats-dir", str(tmp_path)],
                        cwd=tmp_path, capture_output=True, check=True,
                    ).stdout
                )  # fmt: skip
                if doc["ports"]["1"]["stats"]["rx"] >= 1 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert doc["device_id"] == 9
            assert doc["ports"]["1"]["stats"]["rx"] == 1
            assert doc["ports"]["1"]["stats"]["rx_dropped"] == {"no_route": 1}
            assert doc["ports"]["2"]["config"]["rate_bps"] == 10**9
            assert doc["ports"]["2"]["config"]["loss"][3] == 0.5
            assert set(doc["counters"]) == {
                "DlcpEgress.forward_counters.forwarded",
                "DlcpIngress.drop_counters.dropped",
                "DlcpIngress.drop_counters.trimmed",
            }
            text = subprocess.run(
                [sys.executable, "-m", "dlcp.cli.main", "switch", "stats", "--device-id", "9", "--stats-dir",
                 str(tmp_path)],
                cwd=tmp_path, capture_output=True, check=True, text=True,
            ).stdout  # fmt: skip
            assert "port 1 (dlcpS1)" in text and "no_route 1" in text
            proc.send_signal(sig)
            assert proc.wait(timeout=10) == 0
            assert not path.exists(), "the statistics socket is removed on exit"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
