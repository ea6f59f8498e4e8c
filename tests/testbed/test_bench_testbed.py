"""``dlcp testbed bench``, shortened: one scenario, one repeat, few samples; the five ways and the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from testbed_support import dlcp

from dlcp.testbed.lifecycle import SIMPLE_SWITCH_GRPC
from dlcp.testbed.toolchain import tools


@pytest.mark.slow
@pytest.mark.root
def test_bench_runs_the_five_ways_and_reports_ratios_against_gloo_allreduce(tmp_path: Path) -> None:
    r = dlcp("testbed", "bench", "--repeat", "1", "--scenario", "loss", "--samples", "384", "--model", "mlp",
             "--eval-every", "2", "--out", str(tmp_path), timeout=500)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    match = re.search(r"^raw: (\S+)/bench\.json", r.stdout, re.M)
    assert match, r.stdout
    report = json.loads((Path(match.group(1)) / "bench.json").read_text())
    assert report["failed"] == [] and report["config"]["eval_every"] == 2
    runs = report["runs"]["loss"]
    assert list(runs) == [
        "gloo all-reduce (DDP default)", "DLCP ring", "DLCP ps", "DLCP ring, switch off", "DLCP ps, switch off",
    ]  # fmt: skip
    for rows in runs.values():
        (row,) = rows
        assert row["iter_p50_s"] > 0 and len(row["accuracy_curve"]) >= 2  # the curve time to accuracy is read from
    by = {x["name"]: x for x in report["ratios"]}
    gloo, ring = runs["gloo all-reduce (DDP default)"][0], runs["DLCP ring"][0]
    assert by["p99_dlcp_ring_vs_gloo_allreduce"]["values"] == pytest.approx([ring["iter_p99_s"] / gloo["iter_p99_s"]])
    best = report["scenarios"]["loss"]["best_mode"]
    assert best in ("ring", "ps")
    assert by["p50_dlcp_best_vs_gloo_allreduce"]["values"] == by[f"p50_dlcp_{best}_vs_gloo_allreduce"]["values"]
    assert by["p99_dlcp_best_vs_gloo_allreduce"]["goal"] == "at most 0.50"
    assert by["p99_dlcp_best_vs_gloo_allreduce"]["measured_in"] == 1
    assert "p99_dlcp_ring_vs_off" in by and "p99_dlcp_ps_vs_off" in by
    assert "loss: star, workers h1, h2, h3 (rank order)" in r.stdout
    assert re.search(r"^p99_dlcp_best_vs_gloo_allreduce .* at most 0\.50: (holds|does NOT hold) \(in [01] of 1\)$",
                     r.stdout, re.M), r.stdout  # fmt: skip


@pytest.mark.slow
@pytest.mark.root
def test_the_resnet_scenario_reports_the_front_layers_wait_with_priorities_on_and_off(tmp_path: Path) -> None:
    r = dlcp("testbed", "bench", "--repeat", "1", "--scenario", "incast-resnet", "--samples", "384",
             "--eval-every", "2", "--out", str(tmp_path), "--json", timeout=500)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["scenarios"]["incast-resnet"]["model"] == "resnet18"
    runs = report["runs"]["incast-resnet"]
    assert list(runs) == ["DLCP ring", "DLCP ring, one priority class", "DLCP ps", "DLCP ps, one priority class"]
    for rows in runs.values():
        (row,) = rows
        assert 0 < row["front_queued_p50_s"] <= row["front_wait_p50_s"] < row["iter_p99_s"]
    by = {x["name"]: x for x in report["ratios"]}
    ring, flat = runs["DLCP ring"][0], runs["DLCP ring, one priority class"][0]
    front = ring["front_wait_p50_s"] / flat["front_wait_p50_s"]
    assert by["front_wait_dlcp_ring_vs_1class"]["values"] == pytest.approx([front])
    assert by["front_wait_dlcp_ring_vs_1class"]["goal"].startswith("at most 0.80")


@pytest.mark.slow
def test_bench_on_bmv2_runs_the_five_ways_at_bmv2_rates_with_its_counters(tmp_path: Path) -> None:
    """--switch bmv2: the incast scenario at BMv2 rates, the same five ways and ratios as on the software switch,
    and every run's switch counters read from BMv2 (P4 counters, ports, kernel queues)."""
    missing = tools.missing_reason(SIMPLE_SWITCH_GRPC, tools.P4C_BM2_SS)
    if missing:
        pytest.skip(missing)
    r = dlcp("testbed", "bench", "--switch", "bmv2", "--repeat", "1", "--scenario", "incast", "--samples", "384",
             "--eval-every", "2", "--out", str(tmp_path), timeout=500)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    match = re.search(r"^raw: (\S+)/bench\.json", r.stdout, re.M)
    assert match, r.stdout
    report = json.loads((Path(match.group(1)) / "bench.json").read_text())
    assert report["failed"] == [] and (report["config"]["switch"], report["config"]["rates"]) == ("bmv2", "bmv2")
    assert report["config"]["model"] == "mlp"
    runs = report["runs"]["incast"]
    assert list(runs) == [
        "gloo all-reduce (DDP default)", "DLCP ring", "DLCP ps", "DLCP ring, switch off", "DLCP ps, switch off",
    ]  # fmt: skip
    for rows in runs.values():
        (row,) = rows
        assert row["iter_p50_s"] > 0
        ports = row["switches"]["switches"]["s1"]
        assert "error" not in ports and ports["1"]["sent"] > 0 and ports["1"]["rx"] > 0, ports
        # The premise of the rates: BMv2 keeps up with what arrives (the links, not BMv2, are the bottleneck).
        received = sum(p["rx"] for p in ports.values())
        lost = row["switches"]["input_lost"]
        assert -0.01 * received <= lost < 0.1 * received, (lost, received)
    names = {x["name"] for x in report["ratios"]}
    assert {"p50_dlcp_best_vs_gloo_allreduce", "p99_dlcp_ring_vs_off", "tta_dlcp_ps_vs_gloo_allreduce"} <= names
    assert "incast: star, workers h1, h2, h3 (rank order); switch bmv2, links hosts 50mbit, h1 10mbit (64KiB)" in (
        r.stdout
    )
    # The fabric ran BMv2: its file says so.
    (fabric,) = Path(match.group(1)).glob("incast/*.toml")
    assert 'switch = "bmv2"' in fabric.read_text()
