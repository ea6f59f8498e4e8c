"""The real path: separate processes, TCPStore rendezvous, per-job token."""

import numpy as np
from support import allreduce_worker, failing_worker

from dlcp.apps.launch import WorkerError, spawn


def test_ring_and_ps_across_processes() -> None:
    n, world = 30_000, 3
    for mode in ("ring", "ps"):
        out = spawn(allreduce_worker, world, n, mode, timeout_s=120)
        expected = np.arange(n, dtype=np.float32) * sum(range(1, world + 1))
        tokens = {tok for _, tok, _ in out}
        assert len(tokens) == 1, "every rank got the job token from the rendezvous"
        assert len({addr for _, _, addr in out}) == world
        for x, _, _ in out:
            np.testing.assert_array_equal(x, expected)


def test_launcher_reports_the_failing_rank() -> None:
    try:
        spawn(failing_worker, 2, timeout_s=60)
    except WorkerError as exc:
        assert 1 in exc.failures and "boom on rank 1" in str(exc)
    else:
        raise AssertionError("the failure was not reported")
