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
    import dlcp.apps.bench.allreduce
    import dlcp.apps.bench.core
    import dlcp.apps.train.trainer
    import dlcp.cli.demo_cmd

    monkeypatch.setattr(dlcp.apps.bench.allreduce, "spawn", trap("dlcp bench allreduce's workers"))
    monkeypatch.setattr(dlcp.apps.train.trainer, "spawn", trap("a training"))
    monkeypatch.setattr(dlcp.apps.bench.core, "_best", trap("dlcp bench core's timing loop"))
    monkeypatch.setattr(dlcp.cli.demo_cmd, "_one_strategy", trap("dlcp demo --core's link"))
    # The areas that landed later: simulations, the software switch, the controller, P4 tooling.
    import dlcp.apps.bench.sim
    import dlcp.apps.bench.switch
    import dlcp.controller.apply
    import dlcp.controller.counters
    import dlcp.controller.reconcile
    import dlcp.p4.generated
    import dlcp.simulations.figures
    import dlcp.simulations.runner
    import dlcp.testbed.switch.dataplane
    import dlcp.testbed.switch.p4rt.shell
    import dlcp.testbed.switch.stats
    import dlcp.testbed.toolchain.build

    for module, name in [
        (dlcp.simulations.runner, "run"),
        (dlcp.simulations.runner, "sweep"),
        (dlcp.apps.bench.sim, "bench"),
        (dlcp.simulations.figures, "run"),
        (dlcp.testbed.switch.dataplane.DataPlane, "from_config"),  # the switch checks its ports, then starts this
        (dlcp.testbed.switch.stats.StatsServer, "start"),
        (dlcp.testbed.switch.stats, "fetch"),
        (dlcp.testbed.switch.stats, "watch"),
        (dlcp.testbed.switch.p4rt.shell, "open_shell"),
        (dlcp.apps.bench.switch, "run"),
        (dlcp.controller.apply, "configure"),
        (dlcp.controller.counters, "read"),
        (dlcp.controller.reconcile, "run"),
        (dlcp.testbed.toolchain.build, "build"),
        (dlcp.testbed.toolchain.build, "build_v1model"),
        (dlcp.p4.generated, "write"),
    ]:
        monkeypatch.setattr(module, name, trap(f"{module.__name__}.{name}"))
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
    ("bench allreduce --rx-nice -21", "--rx-nice"),
    ("bench allreduce --rx-nice 20", "--rx-nice"),
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
    # dlcp protocol
    ("protocol decode --port x 00", "--port"),
    ("protocol decode --hex 00 --port 70000", "--port"),
    ("protocol decode --hex 00 --port 0", "--port"),
    ("protocol decode --hex zz", "--hex"),
    ("protocol decode --hex 0", "--hex"),
    ("protocol decode {tmp}/missing.pcap", "PCAP"),
    ("protocol decode", "--hex"),
    # dlcp p4
    ("p4 build --target tofino9", "--target"),
    ("p4 build --out {file}/x", "--out"),
    ("p4 gen-constants --root {tmp}", "--root"),
    ("p4 vectors --dir {tmp}/missing", "--dir"),
    ("p4 vectors -k nomatch", "-k"),
    # dlcp sim
    ("sim run {tmp}/missing.toml", "missing.toml: no such file"),
    ("sim run {scenario} --baseline foo", "--baseline"),
    ("sim run {bad_scenario}", "baseline"),
    ("sim bench --leaves 0", "--leaves"),
    ("sim bench --hosts-per-leaf -1", "--hosts-per-leaf"),
    ("sim bench --spines 0", "--spines"),
    ("sim bench --kb 0", "--kb"),
    ("sim bench --kb x", "--kb"),
    ("sim figure nofig", "figure"),
    ("sim figure incast_tail --parallel 0", "--parallel"),
    ("sim figure incast_tail --scale huge", "--scale"),
    # dlcp switch ("lo" exists on every Linux machine; nothing is attached to it)
    ("switch run", "--port"),
    ("switch run --port x=lo", "--port"),
    ("switch run --port 1=dlcpnosuch0", "--port"),
    ("switch run --port 1=lo --port 1=lo", "--port"),
    ("switch run --port 1=lo --buffer 10", "--buffer"),
    ("switch run --port 1=lo --buffer 2=1MiB", "--buffer"),
    ("switch run --port 1=lo --rate 1=fast", "--rate"),
    ("switch run --port 1=lo --rate 1=0bit", "--rate"),
    ("switch run --port 1=lo --loss 1=2", "--loss"),
    ("switch run --port 1=lo --loss 1=nan", "--loss"),
    ("switch run --port 1=lo --loss 1:9=0.1", "--loss"),
    ("switch run --port 1=lo --delay 1=-5ms", "--delay"),
    ("switch run --port 1=lo --grpc nohost:99999", "--grpc"),
    ("switch run --port 1=lo --device-id 0", "--device-id"),
    ("switch run --config {tmp}/missing.toml", "--config"),
    ("switch stats --watch 0", "--watch"),
    ("switch stats --watch nan", "--watch"),
    ("switch shell 127.0.0.1:0", "ADDR"),
    ("switch shell 127.0.0.1:1 --device-id 0", "--device-id"),
    ("switch shell 127.0.0.1:1 --election-id x", "--election-id"),
    ("switch bench --sizes 10", "--sizes"),
    ("switch bench --sizes 100000", "--sizes"),
    ("switch bench --systems foo", "--systems"),
    ("switch bench --modes foo", "--modes"),
    ("switch bench --seconds 0", "--seconds"),
    ("switch bench --seconds nan", "--seconds"),
    ("switch bench --repeat 0", "--repeat"),
    ("switch bench --ring-mib 0", "--ring-mib"),
    # dlcp controller
    ("controller apply {tmp}/missing.toml", "missing.toml"),
    ("controller apply {bad_fabric}", "job[0].id"),
    ("controller apply {star} --timeout 0", "--timeout"),
    ("controller apply {star} --timeout nan", "--timeout"),
    ("controller apply {star} --election-id 0", "--election-id"),
    ("controller apply {star} --switch nosuch", "--switch"),
    ("controller stats {star} --watch 0", "--watch"),
    ("controller stats {star} --watch nan", "--watch"),
    ("controller stats {star} --count -1", "--count"),
    ("controller stats {star} --count 3", "--count"),
    ("controller clear {star} --job 99", "--job"),
    ("controller run {star} --interval nan", "--interval"),
    ("controller run {star} --interval 0", "--interval"),
    # dlcp testbed faults
    ("testbed faults --scenarios switch-restart,nope", "--scenarios"),
    ("testbed faults --scenarios ,", "--scenarios"),
    ("testbed faults --ways ring,foo", "--ways"),
    ("testbed faults --repeat 0", "--repeat"),
    ("testbed faults --fault-at 0", "--fault-at"),
    ("testbed faults --hang-after 0", "--hang-after"),
    ("testbed faults --samples 100", "--samples"),
    ("testbed apply --down nolink {tbstar}", "--down"),
    # dlcp demo: a flag of the other demo is refused, not ignored unchecked
    ("demo --elems -1", "--elems"),
    ("demo --layers 3", "--layers"),
    ("demo --congestion-loss 0.01", "--congestion-loss"),
    ("demo --core --inject-loss 5", "--inject-loss"),
    ("demo --core --workers 0", "--workers"),
    ("demo --core --out x", "--out"),
]

# Lines whose error names the flag but not the value as the last word gives it.
NAMED_ONLY = {
    "testbed apply --down nolink {tbstar}",
    "protocol decode",
    "switch run",
    "sim run {bad_scenario}",
    "controller apply {bad_fabric}",
}

ROOT = Path(__file__).resolve().parents[1]

FILES = {
    "max_message": "[limits]\nmax_message_bytes = 1024\n",
    "max_job": "[limits]\nmax_message_bytes = 33554432\nmax_job_bytes = 40000000\n",
    "bound": "[policy.reduce_scatter]\nloss_bound = 3.5\n",
    "limits": "[limits]\nmax_message_bytes = -1\n",
    "bad_scenario": 'baseline = "nope"\n' + (ROOT / "simulations/figures/incast_tail/small.toml").read_text(),
    "bad_fabric": (ROOT / "docs/examples/star.toml").read_text().replace("\nid = 7\n", "\nid = 70000\n"),
}
PATHS = {
    "star": ROOT / "docs/examples/star.toml",
    "tbstar": ROOT / "docs/examples/testbed/star.toml",
    "scenario": ROOT / "simulations/figures/incast_tail/small.toml",
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
    subs = {"tmp": str(tmp_path), "file": str(a_file)} | {key: str(path) for key, path in PATHS.items()}
    subs |= {key: job_file(tmp_path, key, text) for key, text in FILES.items() if "{" + key + "}" in line}
    argv = [part.format(**subs) for part in line.split()]
    code, out, err = run_cli(argv, capsys)
    assert machine == [], f"work started: {machine}"
    assert code == 2, err
    assert "Traceback" not in err and "Traceback" not in out
    assert name in err, err
    named_only = line in NAMED_ONLY or line.startswith(("bench allreduce --config", "demo --out"))
    value = None if named_only else argv[-1]
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

    import dlcp.apps.bench.allreduce
    import dlcp.apps.train.trainer

    monkeypatch.setattr(resources, "usable_cpus", lambda: CPUS)
    monkeypatch.setattr(resources, "available_memory", lambda: MEMORY)
    monkeypatch.setattr(dlcp.apps.bench.allreduce, "spawn", stop)
    monkeypatch.setattr(dlcp.apps.train.trainer, "spawn", stop)
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


@pytest.mark.parametrize(
    ("line", "names"),
    [
        ("sim bench --hosts-per-leaf 100000", "--hosts-per-leaf 100000"),
        ("sim run {scenario}", "small.toml"),
    ],
)
def test_a_simulation_the_memory_cannot_hold_is_refused_with_exit_2(
    line: str, names: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The simulator refuses a run its memory estimate says will not fit: a bad value, not a traceback."""
    from dlcp.simulations import runner, simulate

    def refuse(table: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        raise simulate.MemoryRefused(
            f"scenario {table['name']!r} needs about 5127053 MB by estimate, over the 16763 MB"
        )

    monkeypatch.setattr(runner, "run", refuse)
    code, out, err = run_cli([part.format(**PATHS) for part in line.split()], capsys)
    assert code == 2, err
    assert "Traceback" not in err + out
    assert names in err and "MB by estimate" in err, err
