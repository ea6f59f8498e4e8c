"""The layers of CONVENTIONS.md, read from the imports of every module (import-time or inside a function).

floor 4  dlcp/cli, dlcp/__main__.py                anything
         apps/ (dlcp.apps)                           anything but the CLI (the CLI is a parser over the apps)
floor 3  testbed/ (but testbed/switch, testbed/toolchain)  floors 1-3
floor 2  host/, controller/, testbed/switch/, testbed/toolchain/, simulations/: floor 1 and themselves
         (peers never import each other: the controller and the switch read the P4 spec, never the compiler)
floor 1  dlcp/ (the core spec)                       floor 1 only

Processes count as imports: a module that starts ``python -m dlcp.X`` (a literal command line or
``dlcp.entry.module_argv("dlcp.X")``) is held to the same rules for ``dlcp.X``, and one that starts the
``dlcp`` console script (a command line that begins with ``"dlcp"``, or ``shutil.which("dlcp")``) to
those for the CLI, so no layer below the CLI starts the CLI; and a module entry point that builds its
own command line (``module_argv(__name__)``) can be run (it has a ``__main__`` guard).
"""

from __future__ import annotations

import argparse
import ast
import functools
import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = ("dlcp.cli", "dlcp.apps")
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


def _module_name(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


CONSOLE_SCRIPT = "dlcp"
"""The CLI's console script (pyproject's ``[project.scripts]``): starting it starts :data:`CLI`."""
CLI = "dlcp.cli.main"
SHELL_CALLS = frozenset(
    ("run", "Popen", "call", "check_call", "check_output", "system", "popen", "getoutput", "getstatusoutput")
)
"""Calls that take a shell command line as a string (``subprocess.run("dlcp ...", shell=True)``, ``os.system``)."""


@functools.cache
def cli_areas() -> frozenset[str]:
    """The CLI's areas (``dlcp AREA ...``), from its parser."""
    from dlcp.cli.main import build_parser

    (areas,) = [a.choices for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return frozenset(areas)


def _starts_the_cli(elts: list[ast.expr]) -> bool:
    """Whether a command line's words start the console script: ``dlcp`` then an area, an option or the rest
    (``["dlcp", *args]``); ``("dlcp", "gloo")``, a tuple of choices, does not."""
    if len(elts) < 2 or _module_name(elts[0]) != CONSOLE_SCRIPT:
        return False
    word = _module_name(elts[1])
    return isinstance(elts[1], ast.Starred) or (word is not None and (word in cli_areas() or word.startswith("-")))


def started(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every ``dlcp`` module the file starts as a process of its own."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.List | ast.Tuple):
            names = [_module_name(e) for e in node.elts]
            out += [(node.lineno, m) for flag, m in itertools.pairwise(names) if flag == "-m" and m]
            if _starts_the_cli(node.elts):
                out.append((node.lineno, CLI))
        elif isinstance(node, ast.Call) and node.args:
            called = getattr(node.func, "attr", getattr(node.func, "id", None))
            first = _module_name(node.args[0])
            if called == "module_argv" and first:
                out.append((node.lineno, first))
            elif called == "which" and first == CONSOLE_SCRIPT:
                out.append((node.lineno, CLI))
            elif called in SHELL_CALLS and first and _starts_the_cli([ast.Constant(w) for w in first.split()]):
                out.append((node.lineno, CLI))
    return [(n, m) for n, m in out if _under(m, "dlcp")]


def builds_its_own_command_line(path: Path) -> bool:
    return any(
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) == "module_argv"
        and node.args
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == "__name__"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
    )


def rules(rel: str) -> tuple[str | None, tuple[str, ...]]:
    """The module's own package and the packages it may not import (the own package always goes)."""
    if rel.startswith("dlcp/cli/") or rel == "dlcp/__main__.py":
        return None, ()
    if rel.startswith("apps/"):
        return None, ("dlcp.cli",)
    if rel.startswith("dlcp/"):
        return None, ABOVE_CORE
    for folder, own in FLOOR2.items():
        if rel.startswith(folder + "/"):
            return own, ABOVE_CORE
    if rel.startswith("testbed/"):
        return None, APPS
    return None, ()


def modules() -> list[Path]:
    """Every module of the six folders (dlcp/'s links to the others are not followed: rglob does not)."""
    skip = {".venv", "build", "__pycache__"}
    return [
        p
        for top in ("dlcp", "host", "controller", "testbed", "simulations", "apps")
        for p in sorted((ROOT / top).rglob("*.py"))
        if not skip & set(p.relative_to(ROOT).parts)
    ]


def violations(path: Path, root: Path = ROOT) -> list[str]:
    rel = path.relative_to(root).as_posix()
    own, banned = rules(rel)
    out = []
    for verb, found in (("imports", imports(path)), ("starts", started(path))):
        for line, module in found:
            if own is not None and _under(module, own):
                continue
            if any(_under(module, b) for b in banned):
                out.append(f"{rel}:{line} {verb} {module}")
    return out


def test_the_modules_are_found_once() -> None:
    rels = [p.relative_to(ROOT).as_posix() for p in modules()]
    assert len(rels) == len(set(rels))
    for rel in (
        "dlcp/protocol.py",
        "controller/fabric.py",
        "testbed/switch/dataplane.py",
        "testbed/netns.py",
        "apps/train/trainer.py",
    ):
        assert rel in rels


@pytest.mark.parametrize("rel", sorted(p.relative_to(ROOT).as_posix() for p in modules()))
def test_no_import_or_process_runs_up_or_across_the_floors(rel: str) -> None:
    found = violations(ROOT / rel)
    assert not found, "\n".join(found)


def test_entry_points_can_be_run() -> None:
    """A module that builds its own command line is a module entry point: ``python -m`` runs its ``main``."""
    entries = [p for p in modules() if builds_its_own_command_line(p)]
    names = {p.relative_to(ROOT).as_posix() for p in entries}
    assert {
        "simulations/child.py",
        "testbed/switch/process.py",
        "testbed/controlplane.py",
        "testbed/p4counters.py",
        "testbed/reconciler.py",
        "testbed/traffic.py",
        "testbed/userns.py",
        "apps/train/node.py",
    } <= names
    for p in entries:
        text = p.read_text()
        assert 'if __name__ == "__main__":' in text and "def main(" in text, p


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
        ("testbed/x.py", 'subprocess.run([sys.executable, "-m", "dlcp.cli.main", "switch", "run"])', True),
        ("testbed/x.py", 'module_argv("dlcp.cli.main", "train")', True),
        ("testbed/x.py", 'module_argv("dlcp.testbed.switch.process", "c.toml")', False),
        ("simulations/x.py", '["python", "-m", "dlcp.simulations.child"]', False),
        ("host/x.py", '["python", "-P", "-m", "dlcp.testbed.traffic"]', True),
        ("dlcp/cli/x.py", 'module_argv("dlcp.cli.main")', False),
        ("testbed/x.py", '["dlcp", "train", "--node"]', True),
        ("testbed/x.py", '("dlcp", "controller", "stats", "--json", fabric)', True),
        ("testbed/x.py", 'subprocess.run([shutil.which("dlcp") or "dlcp", "controller", "run"])', True),
        ("testbed/x.py", 'exe = shutil.which("dlcp")', True),
        ("host/x.py", 'popen_in(ns, ["dlcp", "testbed", "up"])', True),
        ("testbed/x.py", '["dlcp-switch", "--help"]', False),
        ("testbed/x.py", 'cmd = ["dlcp", *args]', True),
        ("testbed/x.py", 'subprocess.run("dlcp testbed down star", shell=True)', True),
        ("testbed/x.py", 'os.system("dlcp --version")', True),
        ("testbed/x.py", 'log.info("dlcp testbed: %s", text)', False),
        ("testbed/x.py", 'SWITCH_KINDS = ("dlcp", "bmv2")', False),
        ("host/x.py", 'checks.one_of("--backend", backend, ("dlcp", "gloo"))', False),
        ("testbed/x.py", 'shutil.which("simple_switch_grpc")', False),
        ("testbed/x.py", '["ip", "netns", "exec", "dlcp-s-h-h1", "true"]', False),
        ("apps/x.py", '["dlcp", "train", "--node"]', True),
        ("dlcp/cli/x.py", '["dlcp", "train", "--node"]', False),
        ("apps/x.py", 'module_argv("dlcp.apps.train.node", "--backend", "dlcp")', False),
        ("testbed/x.py", 'module_argv("dlcp.apps.train.node")', True),
        ("apps/x.py", "from dlcp.testbed.lifecycle import Testbed", False),
        ("apps/x.py", "from dlcp.host.session import open_session", False),
        ("apps/x.py", "from dlcp.cli import argv", True),
        ("dlcp/cli/x.py", "from dlcp.apps.train import trainer", False),
        ("testbed/x.py", "from dlcp.apps.testbed import scenario", True),
        ("host/x.py", "from dlcp.apps.train.tasks import make", True),
        ("dlcp/x.py", "from dlcp.apps import launch", True),
    ],
)
def test_the_rule_itself(tmp_path: Path, rel: str, line: str, bad: bool) -> None:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"def f():\n    {line}\n")
    assert bool(violations(path, tmp_path)) == bad
