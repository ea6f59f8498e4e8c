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
        (["--port", "1=dlcpNoSuch", "--port", "1=dlcpNoSuch"], "port 1 is given twice"),
        (["--port", "1=dlcpNoSuch", "--port", "2=dlcpNoSuch"], "interface dlcpNoSuch is given for ports 1 and 2"),
        (["--port", "1=dlcpNoSuch", "--rate", "1=5qbit"], "--rate 1=5qbit"),
        (["--port", "1=dlcpNoSuch", "--rate", "1=10bit"], "--rate 1=10bit: '10bit' is below 1kbit"),
        (
            ["--port", "1=dlcpNoSuch", "--rate", "1=2tbit"],
            "--rate 1=2tbit: 2tbit (2000000000000 bit/s) is out of range 1000..1000000000000",
        ),
        (["--port", "1=dlcpNoSuch", "--buffer", "1e400"], "--buffer 1e400: '1e400' is not a finite quantity"),
        (["--port", "1=dlcpNoSuch", "--seed", "-1"], "seed: -1 is out of range"),
        (["--port", "1=dlcpNoSuch", "--rate", "2=1gbit"], "--rate 2=1gbit: no port 2"),
        (["--port", "1=dlcpNoSuch", "--buffer", "100"], "--buffer 100"),
        (["--port", "1=dlcpNoSuch", "--buffer", "1=1GiB"], "--buffer 1=1GiB"),
        (["--port", "1=dlcpNoSuch", "--loss", "1=1.5"], "--loss 1=1.5"),
        (["--port", "1=dlcpNoSuch", "--loss", "1:9=0.1"], "class 9 is out of range"),
        (["--port", "1=dlcpNoSuch", "--delay", "1=20s"], "--delay 1=20s"),
        (["--port", "600=dlcpNoSuch"], "--port 600=dlcpNoSuch"),
        (["--port", "1=dlcpNoSuch", "--grpc", "nohost"], "--grpc"),
    ],
)
def test_bad_input_is_refused_naming_the_argument(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # No interface here exists: were a check missing, the run stops at the interfaces (and this
    # test fails on the message) instead of starting a switch on a real interface.
    assert main(["switch", "run", "--stats-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert named in err, err
    assert not list(tmp_path.iterdir()), "nothing may start before the input is checked"


def test_config_file_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "sw.toml"
    cfg.write_text('[[port]]\nid = 1\ninterface = "dlcpNoSuch"\nrate = "fast"\n')
    assert main(["switch", "run", "--config", str(cfg)]) == 2
    assert f"{cfg}: port[0].rate" in capsys.readouterr().err


def test_stats_of_a_switch_that_is_not_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["switch", "stats", "--stats-dir", str(tmp_path), "--device-id", "5"]) == 2
    assert "no switch is running" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--device-id", "0"], "--device-id: got 0, must be in 1.."),
        (["--device-id", "-1"], "--device-id: got -1"),
        (["--watch", "nan"], "--watch: got nan, must be a finite number"),
        (["--watch", "0"], "--watch: got 0, must be above 0"),
    ],
)
def test_stats_arguments_are_checked(
    argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["switch", "stats", "--stats-dir", str(tmp_path), *argv]) == 2
    assert named in capsys.readouterr().err


def test_an_unusable_stats_folder_is_named_before_the_switch_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the folder would be: nothing can be made under it
    assert main(["switch", "run", "--stats-dir", str(blocker / "stats"), "--port", "1=dlcpNoSuch"]) == 2
    assert f"--stats-dir {blocker / 'stats'}: cannot make the statistics folder" in capsys.readouterr().err


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
            deadline = time.monotonic() + 30  # each read is a process of its own: slow on a loaded machine
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


CONTROLLER = """
import sys
import finsy as fy
from p4rt_support import RawClient, Stream, dlcp_config, member, route, update, INSERT
from dlcp.p4.paths import COMMITTED_P4INFO
schema = fy.P4Schema(COMMITTED_P4INFO)
raw = RawClient(int(sys.argv[1]), device_id=9)
stream = Stream(raw)
stream.arbitrate(1)
assert stream.next_arbitration().status.code == 0
raw.set_pipeline(dlcp_config())
group = fy.P4ActionProfileGroup("ecmp_selector", group_id=1, members=[fy.P4Member(1, weight=1)])
hops = fy.P4TableEntry("next_hops", match=fy.Match(group=1), action=fy.P4IndirectAction(group_id=1))
raw.write([update(INSERT, e, schema) for e in (member(1, 2), group, hops, route("10.9.0.0/16", 1))])
stream.close()
raw.close()
"""


@pytest.mark.root
def test_run_with_grpc_a_controller_programs_forwarding(tmp_path: Path) -> None:
    """`dlcp switch run --grpc`: empty tables at start; a P4Runtime controller's writes make it forward."""
    tests = Path(__file__).resolve().parents[1]
    frame = build_udp_frame(
        eth_src="02:dc:00:00:00:01", eth_dst="02:dc:00:00:00:02", src_ip="10.0.0.1",
        dst_ip="10.9.0.1", sport=1, dport=2, payload=bytes(64),
    )  # fmt: skip
    with Namespace("grpc") as ns:
        ns.add_veth("dlcpS1", "dlcpH1")
        ns.add_veth("dlcpS2", "dlcpH2")
        argv = [sys.executable, "-m", "dlcp.cli.main", "switch", "run", "--port", "1=dlcpS1", "--port", "2=dlcpS2"]
        argv += ["--grpc", "127.0.0.1:0", "--device-id", "9", "--stats-dir", str(tmp_path)]
        proc = ns.popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            path = stats.socket_path(tmp_path, 9)
            _wait_socket(path, proc)
            with ns.entered():
                doc = stats.fetch(path)
                tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                tx.bind(("dlcpH1", 0))
                rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
                rx.bind(("dlcpH2", 0))
                rx.settimeout(10)  # a loaded machine may run the switch's thread late

            def forwarded() -> bytes | None:
                tx.send(frame)
                try:
                    return rx.recv(65536)
                except TimeoutError:
                    return None

            # A new switch has empty tables: the frame is taken and dropped for want of a route (waited for
            # in its statistics, not by a timeout on what comes out)
            tx.send(frame)
            deadline = time.monotonic() + 30
            while (rx1 := stats.fetch(path)["ports"]["1"]["stats"])["rx"] < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert rx1["rx"] == 1 and rx1["rx_dropped"] == {"no_route": 1}, rx1
            ctl = ns.popen(
                [sys.executable, "-c", CONTROLLER, str(doc["grpc_port"])],
                cwd=tmp_path, env={"PYTHONPATH": str(tests), "PATH": "/usr/bin:/bin"},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )  # fmt: skip
            out = ctl.communicate(timeout=60)[0].decode()
            assert ctl.returncode == 0, out
            got = forwarded()
            assert got is not None, "the controller's entries forward the frame"
            assert got[:6] == bytes.fromhex("02dc00000002") and got[22] == frame[22] - 1  # next hop MAC, TTL - 1
            tx.close()
            rx.close()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
