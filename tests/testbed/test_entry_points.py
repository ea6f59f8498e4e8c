"""The testbed's processes start from their own module entry points, never through the CLI.

The switch reads the configuration file the testbed writes for it; the controller (configuring, reading
BMv2's counters, staying to reconcile) and the traffic generator read the fabric file; a training rank
reads its launch environment. Bad arguments are refused with exit status 2 before anything starts.
No root needed: nothing here brings a fabric up.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from testbed_support import star

from dlcp.apps.launch import free_tcp_port
from dlcp.apps.train import node
from dlcp.testbed import controlplane, p4counters, reconciler, spec, tomlout, traffic
from dlcp.testbed.layout import plan
from dlcp.testbed.switch import config
from dlcp.testbed.switch import process as switch_process

LINKS = (
    '[[link]]\nname = "h1-s1"\nrate = "200mbit"\nbuffer = "256KiB"\ndelay = "2ms"\nloss = 0.01\n'
    '[[link]]\nname = "h2-s1"\nrate = "1gbit"\n'
)


def test_the_switch_config_carries_every_link_setting(tmp_path: Path) -> None:
    s = spec.load(star(tmp_path, "entry", hosts=3, extra=LINKS))
    (sw,) = plan(s)
    text = tomlout.dumps(sw.switch_config(tmp_path / "stats"))
    cfg = config.from_dict(tomllib.loads(text), "sw.toml")
    assert (cfg.device_id, cfg.grpc, cfg.stats_dir) == (sw.device_id, sw.grpc, tmp_path / "stats")
    assert [(p.port, p.interface) for p in cfg.ports] == [(p.port, p.interface) for p in sw.ports]
    for want, got in zip(sw.ports, cfg.ports, strict=True):
        link = want.link
        assert (got.rate_bps, got.buffer_bytes, got.delay_ns) == (link.rate_bps, link.buffer_bytes, link.delay_ns)
        assert got.loss == (link.loss,) * len(got.loss)
    h1 = cfg.ports[0]
    assert (h1.rate_bps, h1.buffer_bytes, h1.delay_ns, h1.loss[0]) == (200_000_000, 256 << 10, 2_000_000, 0.01)


@pytest.mark.parametrize(
    ("main", "args", "message"),
    [
        (controlplane.main, ["only-one"], "usage: dlcp.testbed.controlplane FABRIC {dlcp,bmv2}"),
        (controlplane.main, ["fabric.toml", "tofino"], "usage:"),
        (traffic.main, [], "usage: dlcp.testbed.traffic FABRIC DURATION_S"),
        (switch_process.main, [], "usage: dlcp.testbed.switch.process CONFIG"),
        (p4counters.main, [], "usage: dlcp.testbed.p4counters FABRIC"),
        (p4counters.main, ["a.toml", "b.toml"], "usage:"),
        (reconciler.main, ["fabric.toml"], "usage: dlcp.testbed.reconciler FABRIC INTERVAL_S"),
        (reconciler.main, ["fabric.toml", "0"], "usage:"),
        (reconciler.main, ["fabric.toml", "nan"], "usage:"),
    ],
)
def test_bad_arguments_are_refused(
    main: Callable[[list[str] | None], int], args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_the_command_lines_run_their_modules(tmp_path: Path) -> None:
    """Each argv starts its module as a process: a missing file is refused by name, exit status 2."""
    missing = tmp_path / "missing.toml"
    for argv in (
        switch_process.argv(missing),
        controlplane.argv(missing, "dlcp"),
        traffic.argv(missing, 1.5),
        p4counters.argv(missing),
        reconciler.argv(missing, 5.0),
    ):
        assert "dlcp.cli.main" not in argv
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 2, proc.stderr
        assert str(missing) in proc.stderr
    assert traffic.argv(missing, 1.5)[-2:] == [str(missing), "1.5"]
    assert reconciler.argv(missing, 5.0)[-2:] == [str(missing), "5"]


LAUNCH = ("RANK", "WORLD_SIZE", "DLCP_STORE_PORT", "MASTER_PORT", "MASTER_ADDR", "DLCP_CONFIG")


def rank_env(**launch: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in LAUNCH}, "OMP_NUM_THREADS": "1", **launch}


def test_a_training_rank_refuses_a_missing_launch_environment_and_bad_flags() -> None:
    argv = node.argv("dlcp", "ring", ["--epochs", "1"])
    assert argv[-6:] == ["--backend", "dlcp", "--mode", "ring", "--epochs", "1"]
    assert "dlcp.cli.main" not in argv and "train" not in argv
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=rank_env())
    assert proc.returncode == 2 and "RANK, WORLD_SIZE, DLCP_STORE_PORT not set" in proc.stderr, proc.stderr
    env = rank_env(RANK="0", WORLD_SIZE="1", DLCP_STORE_PORT=str(free_tcp_port()))
    bad = node.argv("dlcp", "ring", ["--epochs", "0"])
    proc = subprocess.run(bad, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "--epochs" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_training_rank_trains_and_prints_its_result() -> None:
    """One rank, a job of one: it trains every iteration and prints the rank's result as its last line."""
    env = rank_env(RANK="0", WORLD_SIZE="1", DLCP_STORE_PORT=str(free_tcp_port()))
    argv = node.argv("gloo", "ring", ["--model", "mlp", "--epochs", "1", "--samples", "256", "--batch-size", "64"])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rank"] == 0 and len(result["times"]) == 256 // 64
