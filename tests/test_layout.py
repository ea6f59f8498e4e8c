"""The one import namespace over the top-level folders, from anywhere, and no work at import time.

``dlcp/host``, ``dlcp/controller``, ``dlcp/testbed``, ``dlcp/simulations`` and ``dlcp/apps`` are
relative symlinks (committed in git) to the top-level folders, so the source tree, the editable
install and a wheel all resolve ``dlcp.host`` to ``host/``.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FOLDERS = {
    "dlcp.host": "host",
    "dlcp.host.shim": "host/shim",
    "dlcp.controller": "controller",
    "dlcp.testbed": "testbed",
    "dlcp.testbed.switch": "testbed/switch",
    "dlcp.simulations": "simulations",
    "dlcp.apps": "apps",
    "dlcp.apps.train": "apps/train",
    "dlcp.apps.bench": "apps/bench",
    "dlcp.apps.testbed": "apps/testbed",
}
"""Every documented sub-namespace and the folder it lives in."""

LINKED = ("host", "controller", "testbed", "simulations", "apps")
"""The top-level folders linked into ``dlcp/``."""


def _packages_in(tree: Path) -> set[str]:
    """Dotted names of the folders under ``tree/dlcp`` that hold an ``__init__.py``, links followed."""
    found = set()
    for folder, _dirs, files in os.walk(tree / "dlcp", followlinks=True):
        if "__init__.py" in files:
            found.add(".".join(Path(folder).relative_to(tree).parts))
    return found


@pytest.mark.parametrize("name", LINKED)
def test_top_level_folders_are_relative_links_in_dlcp(name: str) -> None:
    link = ROOT / "dlcp" / name
    assert link.is_symlink(), f"dlcp/{name} must be a symlink to ../{name}"
    # Relative, so the link holds in any clone or copy of the tree.
    assert os.readlink(link) == f"../{name}"
    assert link.resolve() == (ROOT / name).resolve()


def test_packages_import_from_their_folders() -> None:
    for name, folder in FOLDERS.items():
        mod = importlib.import_module(name)
        assert Path(mod.__file__).resolve().parent == (ROOT / folder).resolve(), name


def test_every_package_folder_is_found() -> None:
    assert set(FOLDERS) | {"dlcp", "dlcp.cli", "dlcp.p4"} <= _packages_in(ROOT)


@pytest.mark.parametrize("cwd", [ROOT, Path("/")], ids=["repo-root", "elsewhere"])
def test_documented_imports_and_python_m_work_from(cwd: Path) -> None:
    # From the repository root, ./dlcp comes first on sys.path and shadows the installed
    # package: its links must carry every sub-namespace.
    code = (
        f"import importlib, pathlib; names = {sorted(FOLDERS)!r}\n"
        "for n in names: print(n, pathlib.Path(importlib.import_module(n).__file__).resolve().parent)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    where = dict(line.split(" ", 1) for line in run.stdout.splitlines())
    assert where == {n: str((ROOT / f).resolve()) for n, f in FOLDERS.items()}

    run = subprocess.run([sys.executable, "-m", "dlcp", "--help"], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: dlcp ")


def test_no_generic_top_level_names() -> None:
    for generic in LINKED:
        code = f"import importlib.util,sys; sys.exit(importlib.util.find_spec('{generic}') is not None)"
        assert subprocess.run([sys.executable, "-c", code], cwd="/").returncode == 0, generic


def test_core_import_is_cheap() -> None:
    code = (
        "import sys, dlcp.assembler, dlcp.policy, dlcp.config;"
        "sys.exit('torch' in sys.modules or 'scapy' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd="/").returncode == 0


def _copy_sources(dst: Path) -> Path:
    """The working tree without build outputs or virtual environments, symlinks kept (as a clone has them)."""
    skip = shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "out", "*.egg-info", "__pycache__", "*.so", ".*_cache", ".hypothesis"
    )
    shutil.copytree(ROOT, dst, symlinks=True, ignore=skip)
    return dst


@pytest.mark.slow
def test_wheel_holds_each_package_once(tmp_path: Path) -> None:
    src = _copy_sources(tmp_path / "src")
    out = tmp_path / "wheel"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    (wheel,) = out.glob("dlcp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()

    assert not [n for n, k in Counter(names).items() if k > 1], "files packed twice"
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"dlcp"}, tops
    packed = {str(Path(n).parent).replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert packed == _packages_in(src)
    for name, folder in FOLDERS.items():
        for py in (src / folder).glob("*.py"):
            assert f"{name.replace('.', '/')}/{py.name}" in names, py
