"""Run scenarios, each in a simulation process of its own.

ns-3's simulator is a process-wide singleton, so every run gets a process of its
own: :func:`run` starts the simulation process (:mod:`dlcp.simulations.child`,
which runs :func:`dlcp.simulations.simulate.simulate`) with the scenario table on
stdin and reads the summary (JSON) from its stdout. Sweeps call :func:`run` from
local threads, or as tasks on a Dask cluster when given its address; each task
still runs its simulation in a fresh process, so both paths are the same code.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dlcp.simulations import child, scenario
from dlcp.simulations.scenario import ScenarioError
from dlcp.simulations.simulate import MemoryRefused, check_memory


def run(table: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
    """Run one scenario (its TOML table) in a fresh process; returns its summary.

    The table is validated, and its memory estimate checked against this machine
    (:func:`check_memory`), before any process starts.
    """
    check_memory([scenario.from_table(table)])
    env = dict(os.environ)
    proc = subprocess.run(
        child.argv(),
        input=json.dumps(table),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        if proc.returncode == 3:
            raise MemoryRefused(tail[0])
        raise RuntimeError(f"simulation {table.get('name', '?')!r} failed: {proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def sweep(
    tables: Iterable[dict[str, Any]],
    parallel: int = 1,
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Run many scenarios: local processes (``parallel`` at a time), or a Dask cluster at ``address``."""
    todo = list(tables)
    parsed = [scenario.from_table(t) for t in todo]  # refuse a bad sweep before anything starts
    if not address:  # a cluster's workers check their own memory (run)
        check_memory(parsed, parallel=min(max(1, parallel), len(parsed)))
    results: list[dict[str, Any]] = [{} for _ in todo]
    if address:
        try:
            from distributed import Client, as_completed
        except ImportError:
            raise ScenarioError("--address needs Dask's `distributed` (pip install distributed)") from None
        with Client(address) as client:
            futures = {client.submit(run, t, pure=False): i for i, t in enumerate(todo)}
            for done, fut in enumerate(as_completed(futures), start=1):
                results[futures[fut]] = fut.result()
                if progress:
                    progress(done, len(todo))
        return results
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futs = [pool.submit(run, t) for t in todo]
        for i, f in enumerate(futs):
            results[i] = f.result()
            if progress:
                progress(i + 1, len(todo))
    return results
