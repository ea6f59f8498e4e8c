"""p4runtime-shell (its own venv) against the software switch's P4Runtime server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from finsy.proto import p4r
from p4rt_support import RawClient, RecordingBackend

from dlcp.p4.paths import COMMITTED_P4INFO
from dlcp.testbed.switch.p4rt import shell
from dlcp.testbed.switch.p4rt.server import P4RuntimeServer

pytestmark = pytest.mark.skipif(
    not shell.SHELL_PYTHON.exists(),
    reason=f"p4runtime-shell's venv is missing ({shell.SHELL_VENV}): make venv-p4rt-shell",
)
SESSION = __file__.replace("test_shell.py", "shell_session.py")


def step(proc: subprocess.Popen[str], name: str) -> dict[str, object]:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            msg = json.loads(line)
            assert msg["step"] == name, msg
            return msg  # type: ignore[no-any-return]
    raise AssertionError(f"the shell ended before step {name!r}: {proc.stderr.read() if proc.stderr else ''}")


def test_shell_reads_inserts_and_deletes_on_the_switch(
    server: P4RuntimeServer, raw: RawClient, backend: RecordingBackend, tmp_path: object
) -> None:
    blob = tmp_path / "device-config.bin"  # type: ignore[operator]
    blob.write_bytes(b"")
    argv = [str(shell.SHELL_PYTHON), SESSION, f"127.0.0.1:{server.port}", str(COMMITTED_P4INFO), str(blob)]
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            tables = step(proc, "tables")["entries"]
            assert set(tables) == {  # type: ignore[arg-type]
                "DlcpIngress.routing.ipv4_routes",
                "DlcpIngress.classification.dlcp_ports",
                "DlcpIngress.classification.dlcp_classes",
                "DlcpIngress.ecmp.next_hops",
                "DlcpIngress.selective_drop.dlcp_drop_thresholds",
            }
            assert all(v == [] for v in tables.values())  # type: ignore[attr-defined]
            assert backend.resets == 1, "the shell pushed DLCP's P4Info to our server"

            assert step(proc, "inserted")["routes"] == [["0a050000", 16, "03"]], "canonical bytes read back"
            # Our side sees it: in the server's index and in the data plane.
            (ours,) = raw.read(p4r.Entity(table_entry=p4r.TableEntry(table_id=39645294)))
            assert ours.table_entry.match[0].lpm.value == b"\x0a\x05\x00\x00"
            (entry,) = backend.entries.values()
            assert entry.action is not None and entry.action.param("group") == 3

            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert step(proc, "deleted")["routes"] == []
            assert backend.entries == {}
            assert proc.wait(60) == 0
        finally:
            proc.kill()


def test_open_shell_pushes_the_pipeline_only_when_missing(server: P4RuntimeServer, backend: RecordingBackend) -> None:
    address = f"127.0.0.1:{server.port}"
    commands = (
        'te = table_entry["DlcpIngress.routing.ipv4_routes"](action="DlcpIngress.routing.set_next_hop_group")\n'
        'te.match["dst_addr"] = "10.6.0.0/16"\n'
        'te.action["group"] = "2"\n'
        "te.insert()\n"
    )
    result = shell.open_shell(address, election_id=(0, 1), stdin_text=commands, timeout=120)
    assert result.returncode == 0, result.stderr
    assert backend.resets == 1
    (entry,) = backend.entries.values()
    assert entry.action is not None and entry.action.param("group") == 2

    # The switch now runs DLCP's program: the shell takes the P4Info from it and resets nothing.
    result = shell.open_shell(
        address, stdin_text='print("ROUTES", len(list(table_entry["ipv4_routes"].read())))\n', timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "ROUTES 1" in result.stdout
    assert backend.resets == 1 and len(backend.entries) == 1


def test_open_shell_errors(server: P4RuntimeServer, tmp_path: object) -> None:
    with pytest.raises(OSError, match="make venv-p4rt-shell"):
        shell.open_shell(f"127.0.0.1:{server.port}", python=tmp_path / "none")  # type: ignore[operator]
    with pytest.raises(ValueError, match="H,L"):
        shell.parse_election_id("1")
    with pytest.raises(ValueError, match="2\\*\\*64"):
        shell.parse_election_id("1,-1")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["shell", "localhost"], "HOST:PORT"),
        (["shell", "localhost:0"], "HOST:PORT"),
        (["shell", "localhost:9559", "--device-id", "0"], "--device-id"),
        (["shell", "localhost:9559", "--election-id", "1,2,3"], "H,L"),
    ],
)
def test_shell_verb_refuses_bad_arguments_before_starting(argv: list[str], message: str) -> None:
    import argparse

    from dlcp.cli.switch_shell import add_shell_verb

    parser = argparse.ArgumentParser()
    add_shell_verb(parser.add_subparsers())
    args = parser.parse_args(argv)
    with pytest.raises(ValueError, match=message):
        args.func(args)


DLCP = Path(sys.executable).with_name("dlcp")


def test_dlcp_switch_shell_command(server: P4RuntimeServer, raw: RawClient, backend: RecordingBackend) -> None:
    """The real command, commands on standard input: the shell pushes DLCP's P4Info and inserts a route."""
    commands = (
        'te = table_entry["ipv4_routes"](action="set_next_hop_group")\n'
        'te.match["dst_addr"] = "10.7.0.0/16"\n'
        'te.action["group"] = "7"\n'
        "te.insert()\n"
    )
    argv = [str(DLCP), "switch", "shell", f"127.0.0.1:{server.port}", "--election-id", "0,5"]
    result = subprocess.run(argv, input=commands, text=True, capture_output=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    (ours,) = raw.read(p4r.Entity(table_entry=p4r.TableEntry(table_id=39645294)))
    assert ours.table_entry.match[0].lpm.value == b"\x0a\x07\x00\x00"
    assert backend.resets == 1


def test_dlcp_switch_shell_unreachable_is_exit_2() -> None:
    result = subprocess.run(
        [str(DLCP), "switch", "shell", "127.0.0.1:1"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert "127.0.0.1:1" in result.stderr and "UNAVAILABLE" in result.stderr
