"""Every verb refuses every bad value before any work starts: exit code 2, the flag named, no traceback.

The machine is pinned to what the issue describes (2 usable CPUs, 24 GB available),
so the resource checks give the same answer on any host. Every way a verb could
start work (a process, a subprocess, the in-process benchmark and demo loops) is
replaced by a trap that records the call and fails the test.
"""

from __future__ import annotations

import logging
import multiprocessing.process
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dlcp import resources
from dlcp.cli.main import main

CPUS, MEMORY = 2, 24 * 10**9


class WorkStarted(AssertionError):
    """A verb started work that a bad value should have prevented."""


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """This machine as the issue saw it, and traps on every way to start work; returns what was started."""
    started: list[str] = []

    def trap(what: str) -> Any:
        def fail(*args: object, **kwargs: object) -> None:
            started.append(what)
            raise WorkStarted(f"{what} was called")

        return fail

    monkeypatch.setattr(resources, "usable_cpus", lambda: CPUS)
    monkeypatch.setattr(resources, "available_memory", lambda: MEMORY)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", trap("a worker process"))
    monkeypatch.setattr(subprocess, "Popen", trap("a subprocess"))
    import dlcp.bench.core
    import dlcp.cli.demo_cmd
    import dlcp.host.bench
    import dlcp.host.train

    monkeypatch.setattr(dlcp.host.bench, "spawn", trap("dlcp bench allreduce's workers"))
    monkeypatch.setattr(dlcp.host.train, "spawn", trap("a training"))
    monkeypatch.setattr(dlcp.bench.core, "_best", trap("dlcp bench core's timing loop"))
    monkeypatch.setattr(dlcp.cli.demo_cmd, "_one_strategy", trap("dlcp demo --core's link"))
    return started


def job_file(folder: Path, name: str, text: str) -> str:
    path = folder / f"{name}.toml"
    path.write_text(text)
    return str(path)


# (command line, the name its error must give). "{tmp}" is a fresh folder; "{file}" a regular file.
BAD: list[tuple[str, str]] = [
    # dlcp bench allreduce: the cases, then the rest of its flags
    ("bench allreduce --inject-loss 1.5", "--inject-loss"),
    ("bench allreduce --inject-loss -0.1", "--inject-loss"),
    ("bench allreduce --inject-loss nan", "--inject-loss"),
    ("bench allreduce --payload 0", "--payload"),
    ("bench allreduce --payload 5", "--payload"),
    ("bench allreduce --payload 100000", "--payload"),
    ("bench allreduce --payload 65000", "--payload"),
    ("bench allreduce --workers 64", "--workers"),
    ("bench allreduce --workers 1", "--workers"),
    ("bench allreduce --size 4000000000", "--size"),
    ("bench allreduce --size 0", "--size"),
    ("bench allreduce --size 1001", "--size"),
    ("bench allreduce --repeat 0", "--repeat"),
    ("bench allreduce --warmup -1", "--warmup"),
    ("bench allreduce --reorder-window -1", "--reorder-window"),
    ("bench allreduce --seed -1", "--seed"),
    ("bench allreduce --mode mesh", "--mode"),
    ("bench allreduce --loss-pattern periodic", "--loss-pattern"),
    ("bench allreduce --baseline nccl", "--baseline"),
    ("bench allreduce --workers two", "--workers"),
    ("bench allreduce --config {tmp}/missing.toml", "--config"),
    ("bench allreduce --config {max_message}", "limits.max_message_bytes"),
    ("bench allreduce --config {max_job}", "limits.max_job_bytes"),
    ("bench allreduce --config {bound}", "policy.reduce_scatter.loss_bound"),
    ("bench allreduce --config {limits}", "limits.max_message_bytes"),
    # dlcp bench core
    ("bench core --size 100000000000", "--size"),
    ("bench core --size 0", "--size"),
    ("bench core --size 6", "--size"),
    ("bench core --payload 0", "--payload"),
    ("bench core --payload 100000", "--payload"),
    ("bench core --gro 0", "--gro"),
    ("bench core --repeat 0", "--repeat"),
    # dlcp train
    ("train --lr -1", "--lr"),
    ("train --lr 0", "--lr"),
    ("train --lr inf", "--lr"),
    ("train --workers 0", "--workers"),
    ("train --workers 64", "--workers"),
    ("train --epochs 0", "--epochs"),
    ("train --batch-size 0", "--batch-size"),
    ("train --batch-size 100000", "--samples"),
    ("train --samples 10", "--samples"),
    ("train --samples 1000000000", "--samples"),
    ("train --loss-bound 1", "--loss-bound"),
    ("train --inject-loss 2", "--inject-loss"),
    ("train --inject-loss 0.01 --backend gloo", "--inject-loss"),
    ("train --seed -5", "--seed"),
    ("train --model resnet", "--model"),
    # dlcp demo (training): every run's values are checked before the first run
    ("demo --samples 0", "--samples"),
    ("demo --inject-loss 1.5", "--inject-loss"),
    ("demo --inject-loss -1", "--inject-loss"),
    ("demo --loss-bound 1", "--loss-bound"),
    ("demo --workers 0", "--workers"),
    ("demo --workers 64", "--workers"),
    ("demo --epochs 0", "--epochs"),
    ("demo --seed -1", "--seed"),
    ("demo --out {file}", "--out"),
    # dlcp demo --core
    ("demo --core --layers 0", "--layers"),
    ("demo --core --elems 0", "--elems"),
    ("demo --core --elems 100000000000", "--elems"),
    ("demo --core --congestion-loss 0.01 1", "--congestion-loss"),
    ("demo --core --loss-bound 1.5", "--loss-bound"),
    ("demo --core --seed -1", "--seed"),
    # other areas' flags, refused by argparse before their verbs run
    ("protocol decode --port x 00", "--port"),
    ("p4 build --target tofino9", "--target"),
]

FILES = {
    "max_message": "[limits]\nmax_message_bytes = 1024\n",
    "max_job": "[limits]\nmax_message_bytes = 33554432\nmax_job_bytes = 40000000\n",
    "bound": "[policy.reduce_scatter]\nloss_bound = 3.5\n",
    "limits": "[limits]\nmax_message_bytes = -1\n",
}


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code) if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("line", "name"), BAD, ids=[line for line, _ in BAD])
def test_bad_value_is_refused_before_work_starts(
    line: str, name: str, machine: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    subs = {"tmp": str(tmp_path), "file": str(a_file)}
    subs |= {key: job_file(tmp_path, key, text) for key, text in FILES.items() if "{" + key + "}" in line}
    argv = [part.format(**subs) for part in line.split()]
    code, out, err = run_cli(argv, capsys)
    assert machine == [], f"work started: {machine}"
    assert code == 2, err
    assert "Traceback" not in err and "Traceback" not in out
    assert name in err, err
    value = argv[-1] if not line.startswith(("bench allreduce --config", "demo --out")) else None
    if value is not None and not err.startswith("usage"):  # the value itself is named as well
        assert value in err, err


class Reached(Exception):
    """The run got as far as starting its workers."""


@pytest.fixture
def reached(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Pins the machine; the launchers record that they were reached and stop the run there."""
    hits: list[str] = []

    def stop(*args: object, **kwargs: object) -> None:
        hits.append("spawn")
        raise Reached

    import dlcp.host.bench
    import dlcp.host.train

    monkeypatch.setattr(resources, "usable_cpus", lambda: CPUS)
    monkeypatch.setattr(resources, "available_memory", lambda: MEMORY)
    monkeypatch.setattr(dlcp.host.bench, "spawn", stop)
    monkeypatch.setattr(dlcp.host.train, "spawn", stop)
    return hits


@pytest.mark.parametrize(
    ("line", "warning"),
    [
        ("bench allreduce --workers 4 --size 4096", "4 worker processes share 2 usable CPU(s)"),
        ("bench allreduce --size 2000000000", "GB of memory"),
        ("train --workers 3", "3 worker processes share 2 usable CPU(s)"),
    ],
)
def test_costly_values_are_announced_and_run(
    line: str, warning: str, reached: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A valid but costly value gets a warning that says what it costs, and the run goes ahead."""
    caplog.set_level(logging.WARNING)
    with pytest.raises(Reached):
        main(line.split())
    assert reached == ["spawn"]
    assert warning in caplog.text


@pytest.mark.parametrize(
    "line",
    [
        "bench allreduce --workers 32 --size 4096 --payload 8 --inject-loss 0.99 --repeat 1 --warmup 0",
        "bench allreduce --payload 64960 --seed 4294967295 --mode ps",
        "train --workers 1 --samples 64 --lr 1e-9 --model mlp-large",
    ],
)
def test_values_at_the_edges_of_their_range_are_accepted(line: str, reached: list[str]) -> None:
    with pytest.raises(Reached):
        main(line.split())
    assert reached == ["spawn"]


def test_too_many_processes_for_the_memory_name_the_workers(
    monkeypatch: pytest.MonkeyPatch, machine: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Eight workers' interpreters alone exceed 2 GB, whatever the tensor: it is --workers that must shrink."""
    monkeypatch.setattr(resources, "available_memory", lambda: 2 * 10**9)
    code, _, err = run_cli("bench allreduce --workers 8 --size 4096".split(), capsys)
    assert (code, machine) == (2, [])
    assert err.startswith("dlcp: error: --workers: got 8, needs about") and "at most 6 fit" in err, err
