"""``dlcp demo --testbed`` (what ``make demo`` runs), shortened: a leaf-spine, two of the ways, few samples."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from testbed_support import dlcp

from dlcp.testbed import layout


@pytest.mark.root
def test_testbed_demo_writes_its_table_plot_and_json(tmp_path: Path) -> None:
    r = dlcp("demo", "--testbed", "--fabric", "leaf-spine", "--ways", "gloo,ps", "--model", "mlp", "--samples", "768",
             "--out", str(tmp_path), timeout=400)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[1/2] gloo/TCP" in r.stderr and "[2/2] DLCP ps" in r.stderr  # the progress display
    lines = r.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("run") and "iter p99 ms" in line)
    rows = [line.split()[0] for line in lines[head + 2 : head + 4]]
    assert rows == ["gloo/TCP", "DLCP"], lines[head : head + 4]
    assert "fabric: leaf-spine" in r.stdout
    match = re.search(r"^results folder: (\S+)$", r.stdout, re.M)
    assert match, r.stdout
    folder = Path(match.group(1))
    assert folder.parent == tmp_path and folder.is_dir()
    doc = json.loads((folder / "demo.json").read_text())
    assert [d["name"] for d in doc] == ["gloo/TCP", "DLCP ps"]
    assert all(d["iter_p99_s"] > 0 and 0 <= d["test_accuracy"] <= 1 for d in doc)
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib")
    assert (folder / "testbed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {folder / 'testbed.png'}" in r.stdout
    fabric = next(folder.glob("demo*.toml")).stem
    assert not (layout.STATE_ROOT / fabric).exists()


def test_demo_options_of_the_testbed_are_refused_without_it() -> None:
    r = dlcp("demo", "--fabric", "leaf-spine")
    assert r.returncode == 2 and "--fabric" in r.stderr and "only with --testbed" in r.stderr
    r = dlcp("demo", "--testbed", "--ways", "gloo,tcp")
    assert r.returncode == 2 and "--ways" in r.stderr and "ps-off" in r.stderr
