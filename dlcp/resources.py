"""What this machine can give a run (usable CPUs, available memory), and the checks that use it.

A value can be valid and still too costly here: 64 worker processes on 2 CPUs,
or a tensor whose copies do not fit in memory. :func:`check_workers` and
:func:`check_memory` log what such a value will cost when it can still work,
and refuse it (:class:`~dlcp.checks.BadValue`, before anything starts) when it
cannot.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from dlcp.checks import BadValue

log = logging.getLogger(__name__)

MAX_WORKERS_PER_CPU = 16
"""Most worker processes per usable CPU a run may start. Measured on 2 CPUs
(``dlcp bench allreduce --size 4096``): 16 workers ran in 34 s and 32 in 85 s,
while 64 ran 99 s and then failed with peer timeouts (each process sits idle
for seconds while the others take the CPUs, and the rendezvous store waits at
most 60 s for the last one to start)."""

WORKER_START_CPU_S = 2.0
"""CPU seconds one worker process takes to start (Python, numpy, torch, gloo and
DLCP set up), measured: 32 CPU-s for 16 workers."""

WORKER_BASE_BYTES = 300 << 20
"""Resident memory of one worker process before its data: Python, torch, gloo and
a DLCP session (290 MB measured)."""

_MEMINFO = Path("/proc/meminfo")


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask), else the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes of memory available to new work (``MemAvailable``), or None where the kernel does not say."""
    try:
        text = _MEMINFO.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def gbytes(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def check_workers(name: str, workers: int) -> None:
    """Refuse more worker processes than the usable CPUs can run; warn when they must share CPUs."""
    cpus = usable_cpus()
    most = MAX_WORKERS_PER_CPU * cpus
    if workers > most:
        raise BadValue(
            name, workers,
            f"must be at most {most} here: {cpus} usable CPU(s), at most {MAX_WORKERS_PER_CPU} worker processes"
            f" per CPU (more starve each other into peer and rendezvous timeouts)",
        )  # fmt: skip
    if workers > cpus:
        log.warning(
            "%s %d: %d worker processes share %d usable CPU(s); each computes about %.1fx slower than on a CPU"
            " of its own, so timings measure CPU contention, and starting them takes about %.0f s",
            name, workers, workers, cpus, workers / cpus, workers * WORKER_START_CPU_S / cpus,
        )  # fmt: skip


def check_memory(name: str, value: object, need: int, breakdown: str, most: str = "") -> None:
    """Refuse a run whose estimated memory ``need`` exceeds what is available; warn above half of it.

    ``breakdown`` says how ``need`` was estimated; ``most`` (optional) the largest value that fits.
    """
    avail = available_memory()
    if avail is None:
        log.debug("available memory unknown: %s needs about %s (%s)", name, gbytes(need), breakdown)
        return
    if need > avail:
        fits = f"; {most}" if most else ""
        raise BadValue(
            name, value, f"needs about {gbytes(need)} of memory ({breakdown}), {gbytes(avail)} available{fits}"
        )
    if need > avail // 2:
        log.warning(
            "%s %s: needs about %s of memory (%s), %s of the %s available; the machine may start swapping",
            name, value, gbytes(need), breakdown, f"{need / avail:.0%}", gbytes(avail),
        )  # fmt: skip
