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
