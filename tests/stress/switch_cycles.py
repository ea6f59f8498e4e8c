"""Start and stop ``dlcp switch run --grpc`` many times under CPU load, and count the switches that died.

    python tests/stress/switch_cycles.py [--cycles 1000] [--load N] [--max-seconds S] [--json]

Needs root (a network namespace with a veth pair). Each cycle starts the switch
in the namespace (:meth:`Namespace.popen`, as the tests and the testbed do),
waits for its statistics socket (the switch is up, its P4Runtime server too),
sends SIGTERM and waits for it. Meanwhile this process runs a P4Runtime server
and a client polling it, as a test run or the testbed's controller does, and
``--load`` busy loops (default: the cores) keep the CPUs busy. A cycle passes
when the switch came up and exited 0; the report counts the others by exit
status (-6: an abort, -11: a crash) with what they printed last. Exit status 1
when any cycle failed. ``--max-seconds`` bounds the run: the cycles done by then
are reported (the run is then incomplete, exit status 3).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
from cpu_load import busy_loops
from finsy.proto import p4r, p4r_grpc

from dlcp.testbed.netns import Namespace
from dlcp.testbed.switch import stats
from dlcp.testbed.switch.dataplane import DataPlane
from dlcp.testbed.switch.p4rt.server import start_server

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def _poll_grpc(port: int, stop: threading.Event) -> None:
    """A client keeping this process's gRPC busy (a controller reading its switch)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = p4r_grpc.P4RuntimeStub(channel)
        while not stop.is_set():
            try:
                stub.Capabilities(p4r.CapabilitiesRequest(), timeout=5)
            except grpc.RpcError:
                pass
            stop.wait(0.005)


def _cycle(ns: Namespace, folder: Path, device_id: int) -> tuple[int | None, str]:
    """One start and stop; (exit status, last output), status None when it hung."""
    argv = [sys.executable, "-m", "dlcp.cli.main", "switch", "run", "--port", "1=dlcpS1", "--grpc", "127.0.0.1:0"]
    argv += ["--device-id", str(device_id), "--stats-dir", str(folder)]
    path = stats.socket_path(folder, device_id)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # SIGABRT to a hung switch prints every thread's stack
    with tempfile.TemporaryFile() as out:
        proc = ns.popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=folder, env=env)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            if proc.poll() is None:
                if not path.exists():
                    proc.kill()
                    proc.wait()
                    return None, "did not come up"
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGABRT)
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                    out.seek(0)
                    stacks = "\n".join(out.read().decode(errors="replace").strip().splitlines()[-60:])
                    sys.stderr.write(f"a switch did not stop on SIGTERM; its threads:\n{stacks}\n")
                    return None, "did not stop on SIGTERM"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        text = out.read().decode(errors="replace").strip()
    code = proc.returncode
    if code == 0 and path.exists():
        return 1, "exited 0 but left its statistics socket"
    last = text.splitlines()[-1] if text else ""
    # one line per kind of failure: without glog's date, time and thread id, and without addresses
    last = re.sub(r"0x[0-9a-f]+", "0x...", re.sub(r"^[IWEF]\d{4} [\d:.]+\s+\d+ ", "", last))
    return code, last[:200]


def run(cycles: int, load: int, max_seconds: float, progress: bool) -> dict[str, Any]:
    codes: Counter[str] = Counter()
    said: Counter[str] = Counter()
    done = 0
    t0 = time.monotonic()
    # The namespace and the load first: pyroute2 makes a namespace in a forked child of this process, which
    # is best done before gRPC runs here (the hazard the cycles measure is the switch's start, not that).
    with (
        Namespace("cyc") as ns,
        tempfile.TemporaryDirectory(prefix="dlcp-cycles-") as tmp,
        busy_loops(load, max_seconds + 60),
    ):
        ns.add_veth("dlcpS1", "dlcpH1")
        dp = DataPlane(virtual_clock=True)
        server = start_server(dp, "127.0.0.1:0", 1)
        stop = threading.Event()
        poller = threading.Thread(target=_poll_grpc, args=(server.port, stop), name="grpc-poller", daemon=True)
        poller.start()
        try:
            while done < cycles and time.monotonic() - t0 < max_seconds:
                code, last = _cycle(ns, Path(tmp), 1 + done % 1000)
                done += 1
                codes["hung" if code is None else str(code)] += 1
                if code != 0:
                    said[last] += 1
                if progress and done % 50 == 0:
                    failed = done - codes["0"]
                    sys.stderr.write(f"  {done}/{cycles} cycles, {failed} failed, {time.monotonic() - t0:.0f} s\n")
        finally:
            stop.set()
            poller.join(10)
            server.stop()
            dp.close()
    return {
        "cycles": done,
        "asked": cycles,
        "load_processes": load,
        "cpus": os.cpu_count(),
        "seconds": round(time.monotonic() - t0, 1),
        "failed": done - codes["0"],
        "aborted": codes["-6"],
        "exit_status": dict(codes),
        "last_output_of_failures": dict(said.most_common(10)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=1000, help="start/stop cycles (default 1000)")
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1, help="busy loops (default: the cores)")
    parser.add_argument("--max-seconds", type=float, default=540.0, help="stop starting cycles after (default 540)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if not 1 <= args.cycles <= 100_000:
        parser.error(f"--cycles {args.cycles}: out of range 1..100000")
    if not 0 <= args.load <= 64:
        parser.error(f"--load {args.load}: out of range 0..64")
    if not 1 <= args.max_seconds <= 3600:
        parser.error(f"--max-seconds {args.max_seconds}: out of range 1..3600")
    if os.geteuid() != 0:
        sys.stderr.write("switch_cycles: needs root (a network namespace)\n")
        return 2
    report = run(args.cycles, args.load, args.max_seconds, not args.json)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=1) + "\n")
    else:
        sys.stdout.write(
            f"{report['cycles']} of {report['asked']} cycles in {report['seconds']} s beside {args.load} busy loops "
            f"({report['cpus']} CPUs): {report['failed']} failed, {report['aborted']} aborted; exit status "
            f"{report['exit_status']}\n"
        )
        for line, n in report["last_output_of_failures"].items():
            sys.stdout.write(f"  {n} x {line!r}\n")
    if report["failed"]:
        return 1
    return 0 if report["cycles"] == report["asked"] else 3


if __name__ == "__main__":
    raise SystemExit(main())
