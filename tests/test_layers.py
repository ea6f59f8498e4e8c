"""The layers of CONVENTIONS.md, read from the imports of every module (import-time or inside a function).

floor 4  dlcp/cli, dlcp/bench, dlcp/__main__.py      anything
floor 3  testbed/ (but testbed/switch, testbed/toolchain)  floors 1-3
floor 2  host/, controller/, testbed/switch/, testbed/toolchain/, simulations/: floor 1 and themselves
         (peers never import each other: the controller and the switch read the P4 spec, never the compiler)
floor 1  dlcp/ (the core spec)                       floor 1 only
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = ("dlcp.cli", "dlcp.bench")
FLOOR2 = {
    "host": "dlcp.host",
    "controller": "dlcp.controller",
    "testbed/switch": "dlcp.testbed.switch",
    "testbed/toolchain": "dlcp.testbed.toolchain",
    "simulations": "dlcp.simulations",
}
ABOVE_CORE = (*APPS, "dlcp.testbed", *FLOOR2.values())


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every ``dlcp`` import, ``from dlcp import x`` as ``dlcp.x``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.append((node.lineno, node.args[0].value))
    return [(n, m) for n, m in out if _under(m, "dlcp")]


def rules(rel: str) -> tuple[str | None, tuple[str, ...]]:
    """The module's own package and the packages it may not import (the own package always goes)."""
    if rel.startswith(("dlcp/cli/", "dlcp/bench/")) or rel == "dlcp/__main__.py":
        return None, ()
    if rel.startswith("dlcp/"):
        return None, ABOVE_CORE
    for folder, own in FLOOR2.items():
        if rel.startswith(folder + "/"):
            return own, ABOVE_CORE
    if rel.startswith("testbed/"):
        return None, APPS
    return None, ()


def modules() -> list[Path]:
    """Every module of the five folders (dlcp/'s links to the others are not followed: rglob does not)."""
    skip = {".venv", "build", "__pycache__"}
    return [
        p
        for top in ("dlcp", "host", "controller", "testbed", "simulations")
        for p in sorted((ROOT / top).rglob("*.py"))
        if not skip & set(p.relative_to(ROOT).parts)
    ]


def violations(path: Path, root: Path = ROOT) -> list[str]:
    rel = path.relative_to(root).as_posix()
    own, banned = rules(rel)
    out = []
    for line, module in imports(path):
        if own is not None and _under(module, own):
            continue
        if any(_under(module, b) for b in banned):
            out.append(f"{rel}:{line} imports {module}")
    return out


def test_the_modules_are_found_once() -> None:
    rels = [p.relative_to(ROOT).as_posix() for p in modules()]
    assert len(rels) == len(set(rels))
    for rel in ("dlcp/protocol.py", "controller/fabric.py", "testbed/switch/dataplane.py", "testbed/netns.py"):
        assert rel in rels


def test_no_import_runs_up_or_across_the_floors() -> None:
    found = [v for p in modules() for v in violations(p)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("rel", "line", "bad"),
    [
        ("dlcp/p4/x.py", "from dlcp.testbed import netns", True),
        ("dlcp/p4/x.py", "import dlcp.controller.fabric", True),
        ("dlcp/x.py", "from dlcp import cli", True),
        ("dlcp/p4/x.py", "from dlcp.p4 import sizes", False),
        ("dlcp/p4/x.py", "from dlcp.testbed.toolchain import build", True),
        ("controller/x.py", "from dlcp.testbed.toolchain.build import DEFAULT_OUT", True),
        ("controller/x.py", "from dlcp.p4.paths import BMV2_JSON", False),
        ("testbed/switch/x.py", "from dlcp.testbed.toolchain import tools", True),
        ("testbed/toolchain/x.py", "from dlcp.testbed import bmv2", True),
        ("testbed/toolchain/x.py", "from dlcp.testbed.toolchain import tools", False),
        ("testbed/x.py", "from dlcp.testbed.toolchain import build", False),
        ("controller/x.py", "from dlcp.testbed.switch import config", True),
        ("controller/x.py", "from dlcp.controller import model", False),
        ("testbed/switch/x.py", "from dlcp.testbed.netns import Namespace", True),
        ("testbed/switch/x.py", "from dlcp.testbed.switch import entries", False),
        ("testbed/switch/x.py", "from dlcp.controller import fabric", True),
        ("host/x.py", "importlib.import_module('dlcp.simulations.engine')", True),
        ("simulations/x.py", "from dlcp.host import endpoint", True),
        ("testbed/x.py", "from dlcp.controller import fabric", False),
        ("testbed/x.py", "from dlcp.testbed.switch import stats", False),
        ("testbed/x.py", "from dlcp.cli import main", True),
        ("dlcp/cli/x.py", "from dlcp.testbed import rig", False),
    ],
)
def test_the_rule_itself(tmp_path: Path, rel: str, line: str, bad: bool) -> None:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"def f():\n    {line}\n")
    assert bool(violations(path, tmp_path)) == bad
