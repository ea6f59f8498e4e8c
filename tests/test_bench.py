"""``dlcp bench allreduce``: the JSON it promises, and a job file's policy reaching DLCP."""

from pathlib import Path

import pytest

from dlcp.cli.main import main
from dlcp.host.bench import BenchConfig, run

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


def test_cpu_seconds_counts_every_thread_of_the_process() -> None:
    """The CPU a helper thread burns shows up though the caller only waits (a receive thread's, gloo's)."""
    import threading
    import time

    from dlcp.host.bench import cpu_seconds

    def burn() -> None:
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass

    before = cpu_seconds()
    worker = threading.Thread(target=burn)
    worker.start()
    worker.join()
    assert cpu_seconds() - before >= 0.25


def test_cpu_per_gbyte_is_reported_for_both_systems_and_grows_with_the_work() -> None:
    """Positive figures and their ratio; 16 times the bytes cost more CPU (beyond a fixed cost per call)."""
    small, large = (
        run(BenchConfig(workers=2, size=size, repeat=3, warmup=1, payload_bytes=8192)) for size in (1 << 19, 1 << 23)
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
    """Every scenario ``dlcp testbed bench --scenario`` accepts exists; the default run carries every goal;
    ``loss`` runs at the hosts' rate, ``loss-200mbit`` at the incast scenario's bottleneck."""
    import argparse

    from dlcp.bench import testbed as bench
    from dlcp.cli.main import build_parser

    parser = build_parser()
    area = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["testbed"]
    verbs = next(a for a in area._actions if isinstance(a, argparse._SubParsersAction)).choices
    (option,) = [a for a in verbs["bench"]._actions if "--scenario" in a.option_strings]
    assert set(option.choices) == set(bench.SCENARIOS)
    assert set(bench.DEFAULT_SCENARIOS) <= set(bench.SCENARIOS)
    assert {s for s, _ in bench.GOALS} <= set(bench.DEFAULT_SCENARIOS)
    loss, slow, incast = (bench.SCENARIOS[n][0] for n in ("loss", "loss-200mbit", "incast"))
    assert loss.bottleneck_rate == loss.host_rate and loss.bottleneck_loss == slow.bottleneck_loss == 0.01
    assert slow.bottleneck_rate == incast.bottleneck_rate != loss.bottleneck_rate
