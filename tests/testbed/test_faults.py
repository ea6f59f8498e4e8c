"""``dlcp testbed faults``: its parts, then the switch restart and the worker kill at the short size (root)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyroute2 import netns
from testbed_support import dlcp, unique_name

from dlcp.apps.testbed import faults
from dlcp.apps.testbed.faults import FaultRun, RankOutcome
from dlcp.controller import fabric as fabric_mod
from dlcp.controller.state import desired

ROOT = Path(__file__).resolve().parents[2]


def test_names_come_from_the_choices_and_another_is_refused_naming_them() -> None:
    assert faults.chosen("scenarios", None, list(faults.FAULTS)) == tuple(faults.FAULTS)
    assert faults.chosen("ways", "gloo, ring,gloo", list(faults.WAYS)) == ("gloo", "ring")
    with pytest.raises(ValueError, match=r"--ways ring,tcp: 'tcp' is not one; the choices are ring, ps, gloo"):
        faults.chosen("ways", "ring,tcp", list(faults.WAYS))
    with pytest.raises(ValueError, match="at least one"):
        faults.chosen("scenarios", ",", list(faults.FAULTS))


def test_the_error_a_rank_ended_with_is_read_from_its_traceback(tmp_path: Path) -> None:
    err = tmp_path / "rank0.err"
    err.write_text(
        "dlcp train: rank 0: iteration 4 of 12\n[rank0]: Traceback (most recent call last):\n"
        "[rank0]:   File 'x', line 1\n[rank0]: dlcp.host.errors.PeerTimeoutError: peer rank 2 at 10.0.0.3:19111 "
        "silent for 5.0 s while receiving MessageKey(...)\n"
    )
    assert faults.error_of(err, 1) == (
        "PeerTimeoutError: peer rank 2 at 10.0.0.3:19111 silent for 5.0 s while receiving MessageKey(...)",
        True,
    )
    assert faults.iterations_of(err) == 4
    err.write_text("Segmentation fault\n")
    assert faults.error_of(err, -11) == ("killed by signal 11, no error named", False)
    assert faults.iterations_of(err) == 0


def _run(*ranks: RankOutcome, bound: float | None = 7.0) -> FaultRun:
    return FaultRun("worker-kill", "ring", 1, "/nowhere", bound, list(ranks))


def test_a_run_reports_what_the_user_saw_hangs_divergence_and_the_bound() -> None:
    victim = RankOutcome(2, "h3", "killed", "killed")
    late = RankOutcome(0, "h1", "survivor", "error", 1, 8.5, "PeerTimeoutError: peer rank 2 silent", True)
    early = RankOutcome(1, "h2", "survivor", "error", 1, 5.2, "PeerTimeoutError: peer rank 0 silent", True)
    run = _run(victim, late, early)
    assert run.user_sees == "PeerTimeoutError: peer rank 0 silent"  # the first to fail
    assert run.time_s == 8.5 and run.hung == [] and run.replicas == "n/a"
    assert run.within_bound is False  # 8.5 s > 7 s
    assert _run(victim, early).within_bound is True
    assert _run(victim, early, bound=None).within_bound is None  # gloo: no stated bound
    unnamed = RankOutcome(1, "h2", "survivor", "error", -11, 1.0, "killed by signal 11, no error named", False)
    assert _run(victim, unnamed).within_bound is False
    hung = RankOutcome(1, "h2", "survivor", "hung")
    assert _run(victim, early, hung).hung == [1] and _run(victim, hung).time_s is None
    a = RankOutcome(0, "h1", "survivor", "completed", 0, 3.0, digest=1.5)
    b = RankOutcome(1, "h2", "survivor", "completed", 0, 3.1, digest=1.5)
    c = RankOutcome(2, "h3", "survivor", "completed", 0, 3.2, digest=2.5)
    assert _run(a, b).user_sees == "completed" and _run(a, b).replicas == "identical"
    assert _run(a, b, c).replicas == "divergent"


def test_a_link_down_leaves_the_spine_out_of_every_ecmp_group() -> None:
    fab = fabric_mod.load(ROOT / "docs/examples/testbed/leafspine.toml")
    links = faults.spine_links(fab, "spine1")
    assert sorted(links) == ["leaf1-spine1", "leaf2-spine1"]
    before, after = desired(fab), desired(fab.with_links_down(links))
    groups = [e.note for e in before["leaf1"] if e.note.startswith("group")]
    assert any("spine1" in g and "spine2" in g for g in groups), groups  # both spines, before
    groups = [e.note for e in after["leaf1"] if e.note.startswith("group")]
    assert not any("spine1" in g for g in groups) and any("spine2" in g for g in groups), groups
    assert after["spine1"] == []  # nothing reaches it
    with pytest.raises(KeyError, match="no link nolink"):
        fab.with_links_down(["nolink"])


@pytest.mark.root
def test_leftovers_name_a_namespace_and_a_process_of_the_fabric() -> None:
    name = unique_name("fl")
    ns = f"dlcp-{name}-x"
    netns.create(ns)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ticks = faults.start_ticks(proc.pid) or 0
        found = faults.leftovers(name, {proc.pid: ticks})
        assert f"namespace {ns}" in found and f"process {proc.pid}" in found, found
    finally:
        proc.kill()
        proc.wait()
        netns.remove(ns)
    assert faults.leftovers(name, {proc.pid: ticks}) == []


@pytest.mark.timing
@pytest.mark.root
@pytest.mark.slow
def test_switch_restart_and_worker_kill_at_the_short_size(tmp_path: Path) -> None:
    r = dlcp("testbed", "faults", "--short", "--repeat", "1", "--scenarios", "switch-restart,worker-kill",
             "--ways", "ring,gloo", "--json", "--out", str(tmp_path), timeout=900)  # fmt: skip
    report = json.loads(r.stdout.strip().splitlines()[-1])
    runs = {(run["scenario"], run["way"]): run for run in report["runs"]}
    assert set(runs) == {(s, w) for s in ("switch-restart", "worker-kill") for w in ("ring", "gloo")}
    for run in runs.values():
        assert run["error"] is None, run
        assert run["hung"] == [] and run["leftovers"] == [] and run["replicas"] != "divergent", run
    for way in ("ring", "gloo"):
        kill = runs[("worker-kill", way)]
        (victim,) = [rank for rank in kill["ranks"] if rank["role"] == "killed"]
        assert victim["rank"] == 2 and victim["outcome"] == "killed"
        for rank in kill["ranks"]:
            if rank["role"] == "survivor":  # the others cannot finish without it: each names its error
                assert rank["outcome"] == "error" and rank["named"], rank
    ring_kill = runs[("worker-kill", "ring")]
    assert ring_kill["user_sees"].startswith("PeerTimeoutError: peer rank"), ring_kill
    assert ring_kill["within_bound"] is True and ring_kill["time_s"] <= ring_kill["bound_s"], ring_kill
    for way in ("ring", "gloo"):
        restart = runs[("switch-restart", way)]
        assert "switch_started" in restart["events"], restart
        if restart["user_sees"] == "completed":  # resumed: every replica ends the same
            assert restart["replicas"] == "identical", restart
        else:
            assert restart["within_bound"] in (True, None), restart
    assert report["ok"] is True and r.returncode == 0, r.stderr[-3000:]
