"""Run a command beside busy loops that load every core, at normal priority; the loops end with it.

    python tests/stress/cpu_load.py [--procs N] [--max-seconds S] -- COMMAND...

``--procs`` defaults to the machine's core count. Each loop is a child process of
this one, started here and killed here by its pid when COMMAND ends (or after
``--max-seconds``, whichever comes first; COMMAND is then killed too). The exit
status is COMMAND's (124 when it ran out of time). ``make test-stress`` runs the
timing-sensitive tests this way; ``switch_cycles.py`` loads the machine with
:func:`busy_loops`.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator


def _spin(deadline: float) -> None:
    while time.monotonic() < deadline:
        pass


@contextlib.contextmanager
def busy_loops(procs: int, max_seconds: float) -> Iterator[list[int]]:
    """``procs`` busy-loop processes for the body (each also ends by itself after ``max_seconds``)."""
    if procs < 0 or max_seconds <= 0:
        raise ValueError(f"--procs {procs} must be >= 0 and --max-seconds {max_seconds} above 0")
    ctx = mp.get_context("spawn")  # no fork of a parent that may run threads (gRPC, the switch)
    deadline = time.monotonic() + max_seconds
    loops = [ctx.Process(target=_spin, args=(deadline,), daemon=True) for _ in range(procs)]
    try:
        for p in loops:
            p.start()
        yield [p.pid for p in loops if p.pid is not None]
    finally:
        for p in loops:
            if p.pid is not None and p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
        for p in loops:
            if p.pid is not None:
                p.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--procs", type=int, default=os.cpu_count() or 1, help="busy loops (default: the cores)")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="limit of the whole run (default 600)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    if args.procs < 0 or not 0 < args.max_seconds <= 3600:
        parser.error("--procs must be >= 0 and --max-seconds in (0, 3600]")
    with busy_loops(args.procs, args.max_seconds) as pids:
        loops = " ".join(map(str, pids))
        sys.stderr.write(f"cpu_load: {len(pids)} busy loops (pids {loops}) beside: {' '.join(command)}\n")
        proc = subprocess.Popen(command)
        try:
            return proc.wait(timeout=args.max_seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            sys.stderr.write(f"cpu_load: {command[0]} ran past {args.max_seconds:.0f} s and was killed\n")
            return 124
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            proc.wait()
            return 130


if __name__ == "__main__":
    raise SystemExit(main())
