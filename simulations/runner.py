"""Run scenarios, each in a simulation process of its own.

ns-3's simulator is a process-wide singleton, so every run gets a process of its
own: :func:`run` starts the simulation process (:mod:`dlcp.simulations.child`,
which runs :func:`dlcp.simulations.simulate.simulate`) with the scenario table on
stdin and reads the summary (JSON) from its stdout. Sweeps call :func:`run` from
local threads, or as tasks on a Dask cluster when given its address; each task
still runs its simulation in a fresh process, so both paths are the same code.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import as_completed as as_completed_local
from pathlib import Path
from typing import Any

from dlcp.simulations import child, scenario
from dlcp.simulations.scenario import ScenarioError
from dlcp.simulations.simulate import MemoryRefused, check_memory

log = logging.getLogger(__name__)


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
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        raise RuntimeError(f"simulation {table.get('name', '?')!r} failed ({how}): {proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


FAILED = "failed"
"""Key of a failed sweep point's entry (its error); the entry also holds the point's ``table``."""


def point_key(table: dict[str, Any]) -> str:
    """A sweep point's name on disk: the hash of its scenario table (a changed point is run again)."""
    blob = json.dumps(table, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def sweep(
    tables: Iterable[dict[str, Any]],
    parallel: int = 1,
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    points_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """Run many scenarios: local processes (``parallel`` at a time), or a Dask cluster at ``address``.

    A point that fails does not stop the others: its entry is ``{FAILED: the error, "table": its table}``.
    With ``points_dir`` every finished point is saved there as it completes (``<point_key>.json``), and a point
    already saved there is not run again: a killed sweep resumes from its saved points.
    """
    todo = list(tables)
    parsed = [scenario.from_table(t) for t in todo]  # refuse a bad sweep before anything starts
    results: list[dict[str, Any]] = [{} for _ in todo]
    pending = list(range(len(todo)))
    if points_dir is not None:
        points_dir.mkdir(parents=True, exist_ok=True)
        for i in list(pending):
            saved = points_dir / f"{point_key(todo[i])}.json"
            if saved.exists():
                results[i] = json.loads(saved.read_text())
                pending.remove(i)
        if len(pending) < len(todo):
            log.info("sweep: %d of %d points already saved in %s", len(todo) - len(pending), len(todo), points_dir)
    if not address and pending:  # a cluster's workers check their own memory (run)
        check_memory([parsed[i] for i in pending], parallel=min(max(1, parallel), len(pending)))
    done = len(todo) - len(pending)

    def finish(i: int, result: dict[str, Any] | None, error: BaseException | None) -> None:
        nonlocal done
        if error is not None:
            log.warning("sweep point %s failed: %s", todo[i].get("name", i), error)
            results[i] = {FAILED: f"{type(error).__name__}: {error}", "table": todo[i]}
        else:
            assert result is not None
            results[i] = result
            if points_dir is not None:
                tmp = points_dir / f".{point_key(todo[i])}.tmp"
                tmp.write_text(json.dumps(result))
                tmp.replace(points_dir / f"{point_key(todo[i])}.json")
        done += 1
        if progress:
            progress(done, len(todo))

    if address:
        try:
            from distributed import Client, as_completed
        except ImportError:
            raise ScenarioError("--address needs Dask's `distributed` (pip install distributed)") from None
        with Client(address) as client:
            futures = {client.submit(run, todo[i], pure=False): i for i in pending}
            for fut in as_completed(futures):
                try:
                    finish(futures[fut], fut.result(), None)
                except Exception as e:
                    finish(futures[fut], None, e)
        return results
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futs = {pool.submit(run, todo[i]): i for i in pending}
        for f in as_completed_local(futs):
            try:
                finish(futs[f], f.result(), None)
            except Exception as e:
                finish(futs[f], None, e)
    return results
