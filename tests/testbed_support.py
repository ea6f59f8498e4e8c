"""Fabric files for the testbed tests: small, uniquely named (tests of other sessions may run at once)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

from pyroute2 import netns

_n = itertools.count()


def unique_name(tag: str) -> str:
    return f"t{tag}{os.getpid()}x{next(_n)}"


def star(tmp: Path, name: str, hosts: int = 3, extra: str = "") -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(
        f"""
[testbed]
name = "{name}"

[topology]
kind = "star"
hosts = {hosts}
host_link = {{ rate = "1gbit", buffer = "1MiB", mtu = 9000 }}

[[job]]
id = 1
mode = "ring"
workers = [{", ".join(f'"h{i}"' for i in range(1, hosts + 1))}]
[job.transport]
port = 19111
{extra}
"""
    )
    return path


def leaf_spine(tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(
        f"""
[testbed]
name = "{name}"

[topology]
kind = "leaf-spine"
leaves = 2
spines = 2
hosts_per_leaf = 1
host_link = {{ rate = "1gbit", buffer = "1MiB" }}
fabric_link = {{ rate = "1gbit", buffer = "1MiB" }}
"""
    )
    return path


def namespaces_of(name: str) -> list[str]:
    return [n for n in netns.listnetns() if n.startswith(f"dlcp-{name}-")]


def dlcp(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "dlcp.cli.main", *args], capture_output=True, text=True, timeout=timeout
    )
