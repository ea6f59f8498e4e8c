"""``dlcp controller apply / stats / clear / run`` against the software switch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from controller_support import PS_JOB, STAR, Switches, dlcp_frame, star

from dlcp.cli.main import main


def write_config(tmp_path: Path, port: int, *extra: str) -> Path:
    path = tmp_path / "fabric.toml"
    path.write_text(STAR.format(port=port) + PS_JOB + "".join(extra))
    return path


def dlcp(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["controller", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_apply_json_twice_then_clear(switches: Switches, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sw = switches()
    cfg = str(write_config(tmp_path, sw.server.port))
    rc, out, _ = dlcp(capsys, "apply", cfg, "--json")
    assert rc == 0
    (s1,) = json.loads(out)["switches"]
    assert (s1["switch"], s1["status"], s1["inserted"]) == ("s1", "ok", 43)
    rc, out, _ = dlcp(capsys, "apply", cfg)
    assert rc == 0
    assert out.splitlines()[1].split() == ["s1", "ok", "0", "0", "0", "43"]
    rc, out, _ = dlcp(capsys, "clear", cfg, "--job", "7", "--json")
    assert rc == 0 and json.loads(out)["switches"][0]["deleted"] == 35
    rc, out, _ = dlcp(capsys, "apply", cfg, "--dry-run")
    assert rc == 0 and "(not written)" in out and "insert job 7 PULL priority 6 -> queue 6" in out
    assert "deleted" not in out.splitlines()[2]
    rc, out, _ = dlcp(capsys, "clear", cfg)
    assert rc == 0 and out.splitlines()[1].split()[:5] == ["s1", "ok", "0", "0", "8"]


def test_invalid_config_exits_2_naming_the_field_and_writes_nothing(
    switches: Switches, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sw = switches()
    bad = '[[job]]\nid = 8\nmode = "ring"\nworkers = ["h1", "h2"]\n[job.transport]\nport = 19111\n'
    cfg = str(write_config(tmp_path, sw.server.port, bad))
    for verb in ("apply", "run", "clear", "stats"):
        rc, _, err = dlcp(capsys, verb, cfg)
        assert rc == 2, verb
        assert "job.8.transport.port: UDP port 19111 is also job 7's" in err
    assert sw.dp.writes == 0
    assert sw.server.servicer.config is None, "not even the pipeline was pushed"
    rc, _, err = dlcp(capsys, "apply", str(tmp_path / "missing.toml"))
    assert rc == 2 and "missing.toml: no such file" in err
    rc, _, err = dlcp(capsys, "apply", cfg.replace("fabric", "x"), "--timeout", "0")
    assert rc == 2 and "--timeout" in err


def test_unreachable_switch_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cfg = str(write_config(tmp_path, port))
    rc, out, err = dlcp(capsys, "apply", cfg, "--timeout", "3")
    assert rc == 1
    assert "unreachable" in out and f"switch s1 (127.0.0.1:{port}, device 1)" in err


def test_stats_json_and_watch(switches: Switches, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sw = switches()
    cfg = str(write_config(tmp_path, sw.server.port))
    assert dlcp(capsys, "apply", cfg)[0] == 0
    fab = star(sw, PS_JOB)
    for seq in range(5):
        sw.dp.inject(2, dlcp_frame(fab, "h2", "h4", priority=1, seq=seq))
    sw.dp.drain()
    rc, out, _ = dlcp(capsys, "stats", cfg, "--json")
    assert rc == 0
    stats = json.loads(out)
    assert stats["jobs"]["7"]["delivered"]["packets"] == 5
    (cell,) = stats["cells"]
    assert (cell["port"], cell["jobs"], cell["forwarded"]["packets"]) == (4, [7], 5)
    rc, out, _ = dlcp(capsys, "stats", cfg)
    assert "job 7: delivered 5 packets" in out
    rc, out, _ = dlcp(capsys, "stats", cfg, "--json", "--watch", "0.2", "--count", "2")
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 2 and "rates" not in lines[0] and lines[1]["rates"]["7"]["delivered_pps"] == 0.0


def test_run_reports_and_stops_on_sigterm(switches: Switches, tmp_path: Path) -> None:
    sw = switches()
    cfg = write_config(tmp_path, sw.server.port)
    dlcp_bin = Path(sys.executable).parent / "dlcp"
    proc = subprocess.Popen(
        [str(dlcp_bin), "controller", "run", str(cfg), "--json", "--interval", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        event = json.loads(line)
        assert (event["switch"], event["event"]) == ("s1", "applied"), line
        assert event["report"]["inserted"] == 43
        deadline = time.monotonic() + 30
        while sw.dp.writes < 43 and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sw.dp.writes == 43


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["apply", "--timeout", "nan"], "--timeout: got nan, must be a finite number"),
        (["apply", "--timeout", "-1"], "--timeout: got -1, must be above 0"),
        (["apply", "--election-id", "0"], "--election-id: got 0, must be in 1.."),
        (["apply", "--election-id", str(1 << 128)], f"--election-id: got {1 << 128}, must be in 1.."),
        (["clear", "--election-id", "-3"], "--election-id: got -3"),
        (["stats", "--watch", "nan"], "--watch: got nan, must be a finite number"),
        (["stats", "--watch", "0"], "--watch: got 0, must be above 0"),
        (["stats", "--count", "-1"], "--count: got -1, must be at least 0"),
        (["run", "--interval", "nan"], "--interval: got nan, must be a finite number"),
        (["run", "--interval", "inf"], "--interval: got inf, must be a finite number"),
    ],
)
def test_bad_arguments_exit_2_naming_them_before_any_switch_is_reached(
    argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(write_config(tmp_path, 1))  # port 1: nothing answers there, and nothing may be tried
    verb, *rest = argv
    if verb == "run":  # a process with a time limit: were the check missing, `run` would run on
        r = subprocess.run(
            [sys.executable, "-m", "dlcp.cli.main", "controller", verb, cfg, *rest],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        rc, out, err = r.returncode, r.stdout, r.stderr
    else:
        rc, out, err = dlcp(capsys, verb, cfg, *rest)
    assert rc == 2 and named in err, err
    assert "Traceback" not in err and not out
