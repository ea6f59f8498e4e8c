"""The one import namespace over the top-level folders, and no work at import time."""

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mapped_packages_import_from_their_folders() -> None:
    expected = {
        "dlcp.host": "host",
        "dlcp.host.shim": "host/shim",
        "dlcp.controller": "controller",
        "dlcp.testbed": "testbed",
        "dlcp.simulations": "simulations",
    }
    for name, folder in expected.items():
        mod = importlib.import_module(name)
        assert Path(mod.__file__).resolve().parent == (ROOT / folder).resolve(), name


def test_every_package_folder_is_declared() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(cfg["packages"])
    mapping = cfg["package-dir"]
    found = set()
    for pkg, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            sub = ".".join((pkg, *rel.parts)) if rel.parts else pkg
            # A sub-folder mapped elsewhere (host/shim) is its own entry.
            if not any(
                sub != p and sub.startswith(p + ".") and (ROOT / mapping[p]) != (ROOT / folder) for p in mapping
            ):
                found.add(sub)
    assert found <= declared, f"packages missing from pyproject.toml: {sorted(found - declared)}"


def test_no_generic_top_level_names() -> None:
    for generic in ("host", "controller", "testbed", "simulations"):
        code = f"import importlib.util,sys; sys.exit(importlib.util.find_spec('{generic}') is not None)"
        assert subprocess.run([sys.executable, "-c", code], cwd="/").returncode == 0, generic


def test_core_import_is_cheap() -> None:
    code = (
        "import sys, dlcp.assembler, dlcp.policy, dlcp.config;"
        "sys.exit('torch' in sys.modules or 'scapy' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd="/").returncode == 0
