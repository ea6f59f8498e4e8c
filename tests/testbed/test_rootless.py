"""Without root: ``dlcp testbed run`` re-executes itself in a user and network namespace of its own, or says why not.

The unprivileged caller is made with util-linux's ``unshare --map-user=65534`` (uid 65534 in a user
namespace of its own, with no capabilities), so these tests need no root and no other account: the
interpreter stays readable wherever it is installed. The refusal is provoked by lowering
``user.max_user_namespaces`` in an enclosing user namespace, which the kernel then enforces on ours.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from testbed_support import namespaces_of, star, unique_name

UNSHARE = shutil.which("unshare")
DLCP = [sys.executable, "-P", "-m", "dlcp.cli.main"]
AS_NOBODY = ["-U", "--map-user=65534", "--map-group=65534"]

pytestmark = pytest.mark.skipif(UNSHARE is None, reason="util-linux's unshare is not installed")

# Rank 1 sends datagrams to rank 0 through the fabric until rank 0 has one (bounded: 100 x 0.1 s).
UDP_PAIR = """
import json, os, socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if os.environ["RANK"] == "0":
    s.bind((os.environ["DLCP_HOST"], 19999))
    s.settimeout(30)
    data, peer = s.recvfrom(100)
    print(json.dumps({"euid": os.geteuid(), "got": data.decode(), "from": peer[0]}))
else:
    for _ in range(100):
        s.sendto(b"hello", (os.environ["MASTER_ADDR"], 19999))
        time.sleep(0.1)
    print(json.dumps({"euid": os.geteuid()}))
"""


def as_nobody(argv: list[str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    assert UNSHARE is not None
    return subprocess.run([UNSHARE, *AS_NOBODY, *argv], capture_output=True, text=True, timeout=timeout)


def user_namespaces_refused() -> str | None:
    r = subprocess.run([UNSHARE or "unshare", *AS_NOBODY, "true"], capture_output=True, text=True, timeout=30)
    return r.stderr.strip() if r.returncode else None


@pytest.mark.slow
def test_run_without_root_builds_the_fabric_in_a_user_namespace(tmp_path: Path) -> None:
    refused = user_namespaces_refused()
    if refused:
        pytest.skip(f"this kernel gives no user namespace to an unprivileged process: {refused}")
    name = unique_name("u")
    path = star(tmp_path, name, hosts=2)
    out = tmp_path / "out"
    r = as_nobody([*DLCP, "testbed", "run", "--out", str(out), str(path), "--", sys.executable, "-c", UDP_PAIR])
    assert r.returncode == 0, r.stderr
    assert "not root: running in a user and network namespace of its own" in r.stderr
    (folder,) = out.iterdir()
    rank0 = json.loads((folder / "rank0.json").read_text())
    rank1 = json.loads((folder / "rank1.json").read_text())
    # Root inside the user namespace, and the datagram crossed the fabric's switch from h2 to h1.
    assert rank0 == {"euid": 0, "got": "hello", "from": "10.0.0.2"} and rank1 == {"euid": 0}
    delta = json.loads((folder / "switches.json").read_text())["delta"]["switches"]["s1"]
    assert delta["2"]["rx"] > 0 and delta["1"]["sent"] > 0, delta
    assert namespaces_of(name) == []  # its namespaces were never in this mount namespace's /run/netns


def test_refused_without_root_says_why(tmp_path: Path) -> None:
    name = unique_name("r")
    path = star(tmp_path, name, hosts=2)
    run = shlex.join([*DLCP, "testbed", "run", "--out", str(tmp_path / "out"), str(path), "--", "true"])
    if user_namespaces_refused() is None:
        # Root of an outer user namespace allows one more below it: the caller's, not the testbed's.
        r = subprocess.run(
            [UNSHARE or "unshare", "-r", "sh", "-c",
             f"echo 1 > /proc/sys/user/max_user_namespaces && exec {UNSHARE} {' '.join(AS_NOBODY)} {run}"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert "ENOSPC" in r.stderr and "user.max_user_namespaces" in r.stderr, r.stderr
    else:
        if os.geteuid() == 0:
            pytest.skip("no user namespaces here, and as root the testbed would not need one")
        r = subprocess.run(shlex.split(run), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "the testbed needs root" in r.stderr and "run it with sudo" in r.stderr
    assert "Traceback" not in r.stderr
    assert namespaces_of(name) == [] and not (tmp_path / "out").exists()


def test_up_without_root_says_it_cannot_outlive_the_command(tmp_path: Path) -> None:
    if user_namespaces_refused():
        pytest.skip("no user namespace for an unprivileged caller here")
    name = unique_name("p")
    r = as_nobody([*DLCP, "testbed", "up", str(star(tmp_path, name, hosts=2))], timeout=60)
    assert r.returncode == 2
    assert "the testbed needs root" in r.stderr and "ends with the command" in r.stderr, r.stderr
    assert namespaces_of(name) == []
