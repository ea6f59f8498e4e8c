"""``--switch bmv2``: the fabric's switches are simple_switch_grpc processes, configured by the same controller.

BMv2 forwards about 5k packets/s here: the traffic is a few pings and 50 datagrams.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from testbed_support import dlcp, namespaces_of, star, unique_name

from dlcp.p4 import tools
from dlcp.testbed import layout, probe, spec
from dlcp.testbed.lifecycle import SIMPLE_SWITCH_GRPC
from dlcp.testbed.lifecycle import Testbed as Fabric

pytestmark = pytest.mark.root


def test_ping_and_udp_through_a_bmv2_star(tmp_path: Path) -> None:
    missing = tools.missing_reason(SIMPLE_SWITCH_GRPC, tools.P4C_BM2_SS)
    if missing:
        pytest.skip(missing)
    tb = Fabric(spec.load(star(tmp_path, unique_name("b"), hosts=3), switch="bmv2"))
    with tb:
        (sw,) = tb.state.processes
        assert Path(f"/proc/{sw.pid}/exe").resolve().name == SIMPLE_SWITCH_GRPC
        hosts = tb.spec.fabric.hosts
        h1 = layout.host_ns(tb.name, "h1")
        for other in ("h2", "h3"):
            assert probe.ping(h1, hosts[other].ip, count=2).ok
        assert probe.ping(h1, "10.0.0.250", count=1, timeout_s=0.3).received == 0
        assert probe.udp(h1, layout.host_ns(tb.name, "h3"), hosts["h3"].ip, count=50, size=1000) == 50
        # The links' rates and buffers: set over Thrift, or said not to be (this recipe's build has no Thrift).
        state = tb.store.load(tb.name)
        assert state is not None
        log = (tb.dir / "controller.log").read_text()
        assert '"queues": [' in log or (
            len(state.warnings) == 1 and "NOT applied" in state.warnings[0] and "Thrift" in state.warnings[0]
        ), (log, state.warnings)
        r = dlcp("testbed", "status")
        assert all(f"warning: {w}" in r.stdout for w in state.warnings)
    assert namespaces_of(tb.name) == [] and not Path(f"/proc/{sw.pid}").exists()


def test_bmv2_missing_is_named(tmp_path: Path) -> None:
    name = unique_name("m")
    path = star(tmp_path, name, hosts=2)
    env = {k: v for k, v in os.environ.items() if k != tools.BIN_DIR_ENV}
    r = subprocess.run(
        [sys.executable, "-P", "-m", "dlcp.cli.main", "testbed", "up", "--switch", "bmv2", str(path)],
        capture_output=True, text=True, timeout=120, env={**env, "PATH": str(tmp_path)},
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "simple_switch_grpc, p4c-bm2-ss not found" in r.stderr and "Traceback" not in r.stderr
    assert namespaces_of(name) == []
