"""``dlcp demo --testbed`` (what ``make demo`` runs), shortened: a leaf-spine, two ways, two repeats, few samples."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from testbed_support import dlcp

from dlcp.testbed import layout


@pytest.mark.slow
@pytest.mark.root
def test_testbed_demo_writes_its_table_plot_json_and_verdict(tmp_path: Path) -> None:
    r = dlcp("demo", "--testbed", "--fabric", "leaf-spine", "--ways", "gloo,ring", "--repeat", "2", "--model", "mlp",
             "--samples", "384", "--out", str(tmp_path), timeout=500)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    for turn in ("[1/2] [1/2] gloo all-reduce (DDP default)", "[1/2] [2/2] DLCP ring", "[2/2] [2/2] DLCP ring"):
        assert turn in r.stderr  # the progress display: the ways take turns, repeat by repeat
    lines = r.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("run") and "iter p99 ms" in line)
    assert lines[head + 2].startswith("gloo all-reduce (DDP default) (baseline)")
    assert lines[head + 3].startswith("DLCP ring ")
    assert "fabric: leaf-spine" in r.stdout
    match = re.search(r"^results folder: (\S+)$", r.stdout, re.M)
    assert match, r.stdout
    folder = Path(match.group(1))
    assert folder.parent == tmp_path and folder.is_dir()
    assert f"dlcp testbed explain {folder}" in r.stdout
    doc = json.loads((folder / "demo.json").read_text())
    assert doc["repeat"] == 2 and list(doc["runs"]) == ["gloo", "ring"] and doc["failed"] == []
    rows = [row for rows in doc["runs"].values() for row in rows]
    assert len(rows) == 4 and all(d["iter_p99_s"] > 0 and 0 <= d["test_accuracy"] <= 1 for d in rows)
    assert all(0 <= d["cpu"]["other_share"] <= 1 and d["cpu"]["own_cpu_s"] > 0 for d in rows)
    # The verdict is the last line and carries the table's own figures: medians of the per-repeat ratios.
    verdict = lines[-1]
    ratios = [d["iter_p50_s"] / g["iter_p50_s"] for d, g in zip(doc["runs"]["ring"], doc["runs"]["gloo"], strict=True)]
    low, high = sorted(ratios)
    assert verdict.startswith("verdict: DLCP ring vs DDP's default (gloo all-reduce), median of 2 repeats"), verdict
    assert f"p50 {(low + high) / 2:.2f}x ({low:.2f}..{high:.2f})" in verdict, verdict
    word = r"DLCP faster|DLCP slower|no clear difference|mixed \(p50: \w+, time to accuracy: \w+\)"
    assert re.search(rf": ({word})(; the machine was loaded.*)?$", verdict), verdict
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib")
    assert (folder / "testbed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {folder / 'testbed.png'}" in r.stdout
    fabric = next(folder.glob("demo*.toml")).stem
    assert not (layout.STATE_ROOT / fabric).exists()


def test_demo_options_of_the_testbed_are_refused_without_it() -> None:
    r = dlcp("demo", "--fabric", "leaf-spine")
    assert r.returncode == 2 and "--fabric" in r.stderr and "only with --testbed" in r.stderr
    r = dlcp("demo", "--testbed", "--ways", "gloo,tcp")
    assert r.returncode == 2 and "--ways" in r.stderr and "ps-off" in r.stderr and "gloo-ps" in r.stderr
    r = dlcp("demo", "--repeat", "2")
    assert r.returncode == 2 and "--repeat" in r.stderr and "only with --testbed" in r.stderr
