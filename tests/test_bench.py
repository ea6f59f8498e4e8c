"""``dlcp bench allreduce``: the JSON it promises, and a job file's policy reaching DLCP."""

from pathlib import Path

import pytest

from dlcp.apps.bench.allreduce import BenchConfig, run
from dlcp.cli.main import main

LOSSY = dict(workers=2, size=1 << 21, repeat=2, warmup=1, baseline="none", inject_loss=0.03, payload_bytes=1024)


def test_a_job_files_policy_is_what_dlcp_runs_with(tmp_path: Path) -> None:
    """Reduce-scatter may lose up to 1% by default; a file with bound 0 makes every phase exact."""
    strict = tmp_path / "strict.toml"
    strict.write_text("[policy.reduce_scatter]\nloss_bound = 0.0\n")
    default, exact = run(BenchConfig(**LOSSY)), run(BenchConfig(**LOSSY, config=str(strict)))  # type: ignore[arg-type]
    for r in (default, exact):
        assert set(r["dlcp"]) >= {"median_s", "p99_s", "gbytes_per_s", "loss_fraction"}
        assert r["dlcp"]["injected_drops"] > 0 and r["dlcp"]["retransmitted_packets"] > 0
        assert "gloo" not in r and "dlcp_lossless" in r
    assert 0 < default["dlcp"]["loss_fraction"] <= 0.01
    assert exact["dlcp"]["loss_fraction"] == 0.0
    assert exact["config"]["config"] == str(strict)


def test_a_bad_job_file_is_refused_before_any_worker_starts(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[policy.reduce_scatter]\nloss_bound = 3.5\n")
    assert main(["bench", "allreduce", "--config", str(bad), "--json"]) == 2
    err = capsys.readouterr()
    assert "policy.reduce_scatter.loss_bound" in err.err and err.out == ""


@pytest.mark.timing
def test_cpu_seconds_counts_every_thread_of_the_process() -> None:
    """The CPU a helper thread burns shows up though the caller only waits (a receive thread's, gloo's)."""
    import threading
    import time

    from dlcp.apps.bench.allreduce import cpu_seconds

    def burn() -> None:
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass

    before = cpu_seconds()
    worker = threading.Thread(target=burn)
    worker.start()
    worker.join()
    assert cpu_seconds() - before >= 0.25


@pytest.mark.timing
def test_cpu_per_gbyte_is_reported_for_both_systems_and_grows_with_the_work() -> None:
    """Positive figures and their ratio; 32 times the bytes cost more CPU (beyond a fixed cost per call: at 16 times,
    gloo's grew by only 1.28 times once, beside other work)."""
    small, large = (
        run(BenchConfig(workers=2, size=size, repeat=3, warmup=1, payload_bytes=8192)) for size in (1 << 19, 1 << 24)
    )
    for r in (small, large):
        for name in ("dlcp", "gloo"):
            assert r[name]["cpu_s_per_gbyte"] > 0 and r[name]["cpu_s_per_iteration_median"] > 0
        ratio = r["dlcp"]["cpu_s_per_gbyte"] / r["gloo"]["cpu_s_per_gbyte"]
        assert r["ratio_cpu_s_per_gbyte_vs_gloo"] == pytest.approx(ratio)
    for name in ("dlcp", "gloo"):
        assert large[name]["cpu_s_per_iteration_median"] > 1.5 * small[name]["cpu_s_per_iteration_median"], name
    # Setup's objects are frozen before the measured iterations (every rank: the fewest is reported).
    assert small["gc_frozen_objects"] > 10_000 and large["gc_frozen_objects"] > 10_000


def test_testbed_bench_scenarios_the_cli_offers_are_the_benchs() -> None:
    """Every scenario ``dlcp testbed bench --scenario`` accepts exists and runs the five ways, baseline first;
    goals name ratios of scenarios the default run includes; ``loss`` runs at the hosts' rate."""
    import argparse

    from dlcp.apps.bench import testbed as bench
    from dlcp.cli.main import build_parser

    parser = build_parser()
    area = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["testbed"]
    verbs = next(a for a in area._actions if isinstance(a, argparse._SubParsersAction)).choices
    (option,) = [a for a in verbs["bench"]._actions if "--scenario" in a.option_strings]
    assert set(option.choices) == set(bench.SCENARIOS)
    assert set(bench.DEFAULT_SCENARIOS) == {"incast", "loss", "leaf-spine"}
    for name, (_, ways) in bench.SCENARIOS.items():
        if name == "incast-resnet":
            assert [w.key for w in ways] == ["ring", "ring-1class", "ps", "ps-1class"]
        else:
            assert [w.key for w in ways] == ["gloo", "ring", "ps", "ring-off", "ps-off"]
    assert bench.WAYS[0].name == "gloo all-reduce (DDP default)" and bench.WAYS[0].mode == "ring"
    assert set(bench.GOALS) <= set(bench.SCENARIOS)
    loss, slow, incast = (bench.SCENARIOS[n][0] for n in ("loss", "loss-200mbit", "incast"))
    assert loss.bottleneck_rate == loss.host_rate and loss.bottleneck_loss == slow.bottleneck_loss == 0.01
    assert slow.bottleneck_rate == incast.bottleneck_rate != loss.bottleneck_rate
    for name in set(bench.SCENARIOS) - {"incast-resnet"}:
        assert set(bench.GOALS[name]) >= {"p99_dlcp_ring_vs_off", "p99_dlcp_ps_vs_off"}
    assert set(bench.GOALS["incast-resnet"]) == {
        f"{r}_dlcp_{m}_vs_1class" for r in ("front_wait", "p50") for m in ("ring", "ps")
    }


def test_the_resnet_scenario_turns_the_layer_priorities_off_and_keeps_the_switch_features(tmp_path: Path) -> None:
    """incast-resnet's fabric: incast's, plus a job per mode with one data class (``policy.num_classes = 2``);
    the controller then gives every layer of a kind one queue of its band, and keeps trimming, drop classes
    and the control queue; the jobs with priorities spread the layers over the band's queues."""
    from dlcp.apps.bench import testbed as bench
    from dlcp.apps.testbed.scenario import FEATURES_ON, ONE_CLASS, RING_1CLASS
    from dlcp.controller import modes
    from dlcp.testbed import spec as spec_mod

    scenario, ways = bench.SCENARIOS["incast-resnet"]
    assert scenario.model == "resnet18" and scenario.topology == "star" and scenario.incast == 3
    incast = bench.SCENARIOS["incast"][0]
    assert (scenario.bottleneck_rate, scenario.traffic_load) == (incast.bottleneck_rate, incast.traffic_load)
    assert RING_1CLASS.job_id == ONE_CLASS["ring"] and RING_1CLASS in ways
    jobs = spec_mod.load(scenario.write(tmp_path)).fabric.jobs
    assert {j.id for j in jobs.values()} == {1, 2, 3, 4, 5, 6}
    assert {j.id for j in spec_mod.load(incast.write(tmp_path)).fabric.jobs.values()} == {1, 2, 3, 4}
    by_id = {j.id: j for j in jobs.values()}
    for mode in ("ring", "ps"):
        flat, full = by_id[ONE_CLASS[mode]], by_id[FEATURES_ON[mode]]
        assert flat.switch.features and flat.host.policy.data_classes == 1 and flat.mode == mode
        flat_queues = {r.kind: {r.queue} for r in modes.class_rules(flat)}
        full_queues: dict[object, set[int]] = {}
        for r in modes.class_rules(full):
            full_queues.setdefault(r.kind, set()).add(r.queue)
        assert set(flat_queues) == set(full_queues) and all(len(q) == 3 for q in full_queues.values())
        assert all(flat_queues[k] <= full_queues[k] for k in flat_queues)
        assert modes.eligible_queues(flat) and modes.CONTROL_QUEUE in modes.queues_of(flat)


def test_a_scenario_the_bench_does_not_know_is_refused_naming_the_choices(capsys: pytest.CaptureFixture) -> None:
    from dlcp.apps.bench import testbed as bench

    with pytest.raises(ValueError, match=r"unknown scenario 'fat-tree'.*incast, loss, leaf-spine"):
        bench.scenario_named("fat-tree")
    with pytest.raises(SystemExit) as exc:
        main(["testbed", "bench", "--scenario", "fat-tree"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "fat-tree" in err and "leaf-spine" in err and "incast" in err


def test_leaf_spine_scenario_puts_the_ring_across_the_spines_on_fabric_links_slower_than_the_hosts(
    tmp_path: Path,
) -> None:
    """4 workers alternate between the leaves; the leaf-spine links, not the host links, are the bottleneck; two
    of the ring's data flows cross the spines in each direction, so per-flow ECMP can put two on one spine."""
    from dlcp.apps.bench import testbed as bench
    from dlcp.controller.pacing import data_pairs
    from dlcp.controller.paths import Paths
    from dlcp.testbed import spec as spec_mod

    scenario, _ = bench.SCENARIOS["leaf-spine"]
    s = spec_mod.load(scenario.write(tmp_path))
    fab = s.fabric
    assert sorted(fab.switches) == ["leaf1", "leaf2", "spine1", "spine2"]
    ring = next(j for j in fab.jobs.values() if j.mode == "ring" and j.switch.features)
    leaf = {h: fab.hosts[h].switch for h in ring.workers}
    assert list(ring.workers) == ["h1", "h3", "h2", "h4"]
    assert [leaf[h] for h in ring.workers] == ["leaf1", "leaf2", "leaf1", "leaf2"]
    for name, link in fab.links.items():
        expected = 200_000_000 if "spine" in name else 1_000_000_000
        assert link.rate_bps == expected, name
    crossing = [(leaf[a], leaf[b]) for a, b in data_pairs(ring) if leaf[a] != leaf[b]]
    assert sorted(crossing) == [("leaf1", "leaf2")] * 2 + [("leaf2", "leaf1")] * 2
    paths = Paths(fab)
    for a, b in data_pairs(ring):
        spines = {sw for sw, _ in paths.hops(a, b) if sw.startswith("spine")}
        assert spines == {"spine1", "spine2"}, (a, b)  # both spines are next hops: ECMP's choice, or spraying
    assert not scenario.has_traffic and len(fab.hosts) == 4
    ps = next(j for j in fab.jobs.values() if j.mode == "ps" and j.switch.features)
    assert list(ps.servers) == ["h1"]


@pytest.mark.parametrize(
    ("workers", "background", "order"),
    [(4, False, "h1 h3 h2 h4"), (4, True, "h1 h4 h2 h5"), (5, False, "h1 h4 h2 h5 h3"), (2, False, "h1 h2")],
)
def test_alternating_workers_take_each_host_once_and_leave_the_background_host_out(
    workers: int, background: bool, order: str
) -> None:
    from dlcp.apps.testbed.scenario import Scenario

    s = Scenario(workers=workers, topology="leaf-spine", alternate_leaves=True, background_host=background)
    assert s.worker_hosts == order.split()
    assert Scenario(workers=workers, topology="leaf-spine", background_host=background).worker_hosts == [
        f"h{i}" for i in range(1, workers + 1)
    ]


def _row(p50: float, p99: float, acc: float, curve: list[tuple[float, int, float]]) -> dict[str, object]:
    return {"iter_p50_s": p50, "iter_p99_s": p99, "test_accuracy": acc, "accuracy_curve": [list(c) for c in curve]}


def _synthetic_runs() -> dict[str, list[dict[str, object] | None]]:
    """Three repeats; DLCP ring failed in repeat 2; every figure chosen so the ratios can be worked out by hand."""

    def curve(t_half: float, final: float) -> list[tuple[float, int, float]]:
        return [(t_half / 2, 5, 0.3), (t_half, 10, 0.75), (2 * t_half, 15, final)]

    return {
        "gloo": [_row(0.40, 1.00, 0.82, curve(10, 0.82)), _row(0.50, 1.20, 0.82, curve(12, 0.82)),
                 _row(0.40, 1.00, 0.81, curve(10, 0.81))],
        "ring": [_row(0.30, 0.50, 0.82, curve(8, 0.82)), None, _row(0.34, 0.70, 0.80, curve(8.5, 0.80))],
        "ps": [_row(0.44, 0.60, 0.82, curve(11, 0.82)), _row(0.45, 0.60, 0.83, curve(11, 0.83)),
               _row(0.42, 0.55, 0.82, curve(11, 0.82))],
        "ring-off": [_row(0.35, 0.80, 0.82, curve(9, 0.82)), _row(0.35, 0.80, 0.82, curve(9, 0.82)),
                     _row(0.35, 0.60, 0.82, curve(9, 0.82))],
        "ps-off": [_row(0.60, 2.0, 0.82, curve(15, 0.82))] * 3,
    }  # fmt: skip


def test_ratios_are_computed_within_repeats_that_have_both_sides_and_name_the_missing_one() -> None:
    from dlcp.apps.bench.compare import best_mode, missing_runs, ratios, time_to

    runs = _synthetic_runs()
    assert best_mode(runs) == "ring"  # median p50 0.32 s against ps's 0.44 s
    got = {r.name: r for r in ratios("incast", runs)}
    ring = got["p99_dlcp_ring_vs_gloo_allreduce"]
    assert ring.values == pytest.approx((0.5, 0.7)) and ring.used == (0, 2) and ring.missing == (1,)
    assert got["p50_dlcp_ps_vs_gloo_allreduce"].values == pytest.approx((1.1, 0.9, 1.05))
    assert got["p50_dlcp_best_vs_gloo_allreduce"].values == got["p50_dlcp_ring_vs_gloo_allreduce"].values
    assert got["accuracy_dlcp_ring_minus_gloo_allreduce"].values == pytest.approx((0.0, -0.01))
    assert got["p99_dlcp_ring_vs_off"].values == pytest.approx((0.625, 0.7 / 0.6))
    assert got["p99_dlcp_ps_vs_off"].values == pytest.approx((0.3, 0.3, 0.275))
    # Time to 90% of the repeat's best final accuracy (0.74 in repeats 1 and 3: 0.9 x 0.82): the curve's 0.75.
    assert time_to(runs["gloo"][0]["accuracy_curve"], 0.74) == 10  # type: ignore[index,arg-type]
    assert got["tta_dlcp_ring_vs_gloo_allreduce"].values == pytest.approx((0.8, 0.85))
    assert got["tta_dlcp_ps_vs_gloo_allreduce"].values == pytest.approx((1.1, 11 / 12, 1.1))
    assert "p99_dlcp_ps_vs_ps_over_gloo_tcp" not in got  # the extra row did not run
    assert missing_runs(runs, {"ring": "DLCP ring"}) == ["repeat 2 of DLCP ring"]


def test_the_priority_ratios_compare_the_front_layers_wait_with_one_class() -> None:
    from dlcp.apps.bench.compare import ratios

    def row(p50: float, front: float) -> dict[str, object]:
        return {**_row(p50, p50, 0.9, [(1.0, 5, 0.9)]), "front_wait_p50_s": front}

    runs = {
        "ring": [row(0.30, 0.10), row(0.32, 0.12)], "ring-1class": [row(0.30, 0.20), row(0.30, 0.10)],
        "ps": [row(0.40, 0.2)], "ps-1class": [None],
    }  # fmt: skip
    got = {r.name: r for r in ratios("incast-resnet", runs)}
    assert got["front_wait_dlcp_ring_vs_1class"].values == pytest.approx((0.5, 1.2))
    assert got["p50_dlcp_ring_vs_1class"].values == pytest.approx((1.0, 0.32 / 0.30))
    assert got["front_wait_dlcp_ps_vs_1class"].values == () and got["front_wait_dlcp_ps_vs_1class"].missing == (0, 1)
    assert "p50_dlcp_ring_vs_gloo_allreduce" not in got  # no baseline ran


def test_a_goal_holds_when_it_holds_in_two_of_three_repeats() -> None:
    from dlcp.apps.bench.compare import Goal, Ratio, needed

    goal = Goal("<=", 0.6, "at most 0.60")
    assert [needed(n) for n in (1, 2, 3, 4, 6)] == [1, 2, 2, 3, 4]
    assert Ratio("s", "r", (0.5, 0.7, 0.55), (0, 1, 2), goal=goal).holds is True
    assert Ratio("s", "r", (0.5, 0.7, 0.65), (0, 1, 2), goal=goal).holds is False
    assert Ratio("s", "r", (0.5, 0.7), (0, 2), (1,), goal=goal).holds is False  # 1 of the 2 measured
    assert Ratio("s", "r", (), (), (0,), goal=goal).holds is None
    doc = Ratio("s", "r", (0.5, 0.7, 0.55), (0, 1, 2), goal=goal).as_dict()
    assert doc["held_in"] == 2 and doc["measured_in"] == 3 and doc["median"] == 0.55
    assert Goal("<", 1.0, "").holds(0.99) and not Goal("<", 1.0, "").holds(1.0)
    assert Goal(">=", -0.005, "").holds(-0.005) and not Goal(">=", -0.005, "").holds(-0.006)


def test_bench_keeps_the_other_runs_when_one_fails_and_reports_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlcp.apps.bench import testbed as bench
    from dlcp.apps.testbed.scenario import Turns
    from dlcp.apps.train.trainer import TrainConfig
    from dlcp.cli.testbed_cmd import render_bench

    seen = []

    def fake(scenario, ways, cfg, folder, *, repeat, progress):  # type: ignore[no-untyped-def]
        seen.append((scenario.name, cfg.workers, [w.key for w in ways], repeat))
        failure = {"way": "DLCP ring", "key": "ring", "repeat": 2, "error": "rank 1 on host h2 exited with status 5"}
        return Turns(ways, _synthetic_runs(), [failure])

    monkeypatch.setattr(bench, "run_scenario", fake)
    report = bench.run(TrainConfig(workers=3, eval_every=5), tmp_path, repeat=3, scenarios=("incast", "leaf-spine"))
    assert [(n.rstrip("0123456789"), w, r) for n, w, _, r in seen] == [("bincast", 3, 3), ("bleaf", 4, 3)]
    assert seen[0][2] == ["gloo", "ring", "ps", "ring-off", "ps-off"]
    assert [f["scenario"] for f in report["failed"]] == ["incast", "leaf-spine"]
    assert report["scenarios"]["incast"]["missing"] == ["repeat 2 of DLCP ring"]
    assert report["runs"]["incast"]["DLCP ring"][1] is None
    by = {(r["scenario"], r["name"]): r for r in report["ratios"]}
    p99 = by["incast", "p99_dlcp_best_vs_gloo_allreduce"]
    assert p99["repeats"] == [1, 3] and p99["missing_repeats"] == [2]
    assert p99["holds"] is False and p99["held_in"] == 1  # 0.5 and 0.7: at most 0.6 in 1 of the 2
    assert by["incast", "p50_dlcp_best_vs_gloo_allreduce"]["holds"] is True  # 0.75 and 0.85
    assert by["incast", "p99_dlcp_ring_vs_off"]["holds"] is False  # 0.625 and 1.17: 1 of 2
    assert by["leaf-spine", "p50_dlcp_best_vs_gloo_allreduce"]["held_in"] == 1  # 0.75 and 0.85: at most 0.75
    text = render_bench(report)
    assert (
        "missing: repeat 2 of DLCP ring" in text and "FAILED: incast repeat 2 of DLCP ring: rank 1 on host h2" in text
    )
    assert "does NOT hold (in 1 of 2)" in text


def test_a_failed_run_is_recorded_with_its_rank_and_the_turns_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_scenario: the ways take turns repeat by repeat; a rank's failure marks that run missing, names the rank."""
    from types import SimpleNamespace

    from dlcp.apps.testbed import scenario as sc
    from dlcp.apps.train.trainer import TrainConfig
    from dlcp.testbed.jobs import WorkerFailed

    class Fabric:
        def __init__(self, spec: object) -> None:
            pass

        def __enter__(self) -> "Fabric":
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    order = []

    def run_way(tb, way, cfg, folder, traffic_s, timeout_s):  # type: ignore[no-untyped-def]
        order.append((folder.name, traffic_s))
        if folder.name == "2-ring":
            raise WorkerFailed(1, "h2", 5, "boom")
        return SimpleNamespace(as_dict=lambda: {"iter_p50_s": 0.1, "iter_p99_s": 0.2, "test_accuracy": 0.8}, seconds=1)

    monkeypatch.setattr(sc, "Testbed", Fabric)
    monkeypatch.setattr(sc.spec_mod, "load", lambda path: SimpleNamespace(name="f", fabric=SimpleNamespace(hosts={})))
    monkeypatch.setattr(sc, "run_way", run_way)
    quiet = sc.Scenario(name="q", traffic_load=0.0, incast=0)
    turns = sc.run_scenario(quiet, (sc.GLOO_ALLREDUCE, sc.RING), TrainConfig(), tmp_path, repeat=3)
    assert [name for name, _ in order] == ["1-gloo", "1-ring", "2-gloo", "2-ring", "3-gloo", "3-ring"]
    assert {t for _, t in order} == {0.0}  # no background traffic to start in a quiet scenario
    assert [r is None for r in turns.runs["ring"]] == [False, True, False]
    (failure,) = turns.failures
    assert failure["way"] == "DLCP ring" and failure["repeat"] == 2 and "rank 1 on host h2" in failure["error"]


def test_verdict_states_the_best_mode_against_ddps_default_whichever_way_it_goes() -> None:
    from dlcp.apps.bench.compare import verdict
    from dlcp.cli.testbed_demo import LOADED_SHARE, load_note

    runs = _synthetic_runs()
    line = verdict(runs)
    assert line.startswith("verdict: DLCP ring vs DDP's default (gloo all-reduce), median of 2 repeats")
    assert "p50 0.80x (0.75..0.85)" in line and "p99 0.60x (0.50..0.70)" in line
    assert "time to 0.74 accuracy 0.82x (0.80..0.85)" in line and line.endswith("DLCP faster")
    slow = {k: [None if r is None else {**r, "iter_p50_s": 2 * r["iter_p50_s"]} for r in rows]  # type: ignore[dict-item]
            for k, rows in runs.items() if k != "gloo"}  # fmt: skip
    slow["gloo"] = runs["gloo"]
    assert verdict(slow).endswith(": mixed (p50: slower, time to accuracy: faster)")
    same = {**runs, "ring": [None if r is None else {**r, "iter_p50_s": g["iter_p50_s"] * 1.02,  # type: ignore[index]
                                                     "accuracy_curve": g["accuracy_curve"]}  # type: ignore[index]
                             for r, g in zip(runs["ring"], runs["gloo"], strict=True)]}  # fmt: skip
    assert verdict(same).endswith(": no clear difference")  # within 10% of gloo's in every repeat
    worse = {**runs, "gloo": [{**r, "iter_p50_s": 0.1, "accuracy_curve": [[1.0, 5, 0.9]]} for r in runs["gloo"]]}  # type: ignore[dict-item]
    assert "DLCP slower" in verdict(worse)
    assert verdict({"gloo": runs["gloo"]}).startswith("verdict: none")
    for rows in runs.values():
        for r in rows:
            if r is not None:
                r["cpu"] = {"other_share": LOADED_SHARE + 0.1}
    note = load_note(runs)
    assert "the machine was loaded" in note and "35%" in note
    assert verdict(runs, note).endswith("DLCP faster; " + note)
    for rows in runs.values():
        for r in rows:
            if r is not None:
                r["cpu"] = {"other_share": 0.05}
    assert load_note(runs) == ""


def test_bmv2_rates_scale_the_scenarios_and_refuse_what_bmv2_cannot_run(tmp_path: Path) -> None:
    """--rates bmv2: incast and leaf-spine at rates BMv2 carries, the same on both switches; loss is refused (BMv2
    cannot drop at random), and so is BMv2 at full rates; the fabric files BMv2 gets pass its checks."""
    import dataclasses

    from dlcp.apps.bench import testbed as bench
    from dlcp.testbed import spec as spec_mod
    from dlcp.units import parse_rate

    assert bench.default_scenarios("bmv2") == ("incast", "leaf-spine")
    assert bench.default_scenarios("full") == bench.DEFAULT_SCENARIOS
    for name in bench.BMV2_RATES:
        on_dlcp, ways = bench.scenario_named(name, "bmv2", "dlcp")
        on_bmv2, same_ways = bench.scenario_named(name, "bmv2", "bmv2")
        full, _ = bench.scenario_named(name)
        assert ways == same_ways == bench.SCENARIOS[name][1]
        assert on_bmv2 == dataclasses.replace(on_dlcp, switch="bmv2") and on_dlcp.switch == full.switch == "dlcp"
        assert parse_rate(on_bmv2.host_rate) <= parse_rate(full.host_rate) / 5
        s = spec_mod.load(on_bmv2.write(tmp_path), switch="bmv2")
        assert s.settings.switch == "bmv2"
        assert max(link.rate_bps or 0 for link in s.fabric.links.values()) <= 200_000_000
    incast, _ = bench.scenario_named("incast", "bmv2", "bmv2")
    assert (incast.bottleneck_rate, incast.incast, incast.incast_bytes) == ("10mbit", 1, 16_000)
    # The smaller incast bursts reach the traffic generator through the fabric file; the full-rate file is unchanged.
    assert spec_mod.load(incast.write(tmp_path), switch="bmv2").settings.traffic.incast_bytes == 16_000
    full_incast, _ = bench.scenario_named("incast")
    assert "incast_bytes" not in full_incast.fabric_doc()["testbed"]["traffic"]
    assert spec_mod.load(full_incast.write(tmp_path)).settings.traffic.incast_bytes == 128_000
    for name in ("loss", "loss-200mbit"):
        with pytest.raises(ValueError, match=f"scenario '{name}' has no BMv2 rates: BMv2 cannot drop at random"):
            bench.scenario_named(name, "bmv2", "bmv2")
    with pytest.raises(ValueError, match="--switch bmv2 runs at --rates bmv2 only"):
        bench.scenario_named("incast", "full", "bmv2")
    with pytest.raises(ValueError, match="unknown rates 'slow'"):
        bench.scenario_named("incast", "slow")


def test_bench_refuses_a_bmv2_loss_scenario_before_anything_is_made(capsys: pytest.CaptureFixture) -> None:
    assert main(["testbed", "bench", "--switch", "bmv2", "--scenario", "loss"]) == 2
    assert "scenario 'loss' has no BMv2 rates" in capsys.readouterr().err
