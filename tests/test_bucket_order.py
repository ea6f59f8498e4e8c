"""The DDP hook's exchange order (dlcp.host.shim.bucket_order): the front layers' bucket moved up, the same on
every rank whatever the timing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from dlcp.host.shim.bucket_order import BucketOrder


def _iteration(order: BucketOrder, buckets: int, ran: list[int], gaps: float = 0.0) -> None:
    for i in range(buckets):
        order.submit(lambda i=i: ran.append(i), last=i == buckets - 1)
        time.sleep(gaps)


@pytest.mark.parametrize(
    ("front_after", "buckets", "expected"),
    [
        (2, 5, [0, 1, 4, 2, 3]),
        (1, 5, [0, 4, 1, 2, 3]),
        (0, 5, [0, 1, 2, 3, 4]),  # DDP's order
        (2, 2, [0, 1]),
        (2, 3, [0, 1, 2]),
        (3, 2, [0, 1]),  # fewer buckets than front_after: the last one comes in its place
        (2, 1, [0]),
    ],
)
@pytest.mark.parametrize("gaps", [0.0, 0.002])
def test_the_front_layers_bucket_goes_after_the_first_ones_whenever_it_is_handed_over(
    front_after: int, buckets: int, expected: list[int], gaps: float
) -> None:
    """Handed over all at once or one by one (the thread then waits for the front layers' bucket): one order."""
    order = BucketOrder(front_after)
    ran: list[int] = []
    try:
        for _ in range(3):  # each iteration starts afresh
            _iteration(order, buckets, ran, gaps)
            deadline = time.monotonic() + 5
            while len(ran) % buckets and time.monotonic() < deadline:
                time.sleep(0.001)
    finally:
        order.shutdown()
    assert ran == expected * 3


def test_the_next_iterations_buckets_handed_over_before_this_one_is_done_keep_their_order() -> None:
    """DDP's next backward pass may hand buckets over while the thread still finishes this iteration (a job
    completes the future before the thread books the job as run): they wait, and run in the moved order."""
    order = BucketOrder(2)
    ran: list[int] = []

    def job(i: int, then: Callable[[], None] | None = None) -> Callable[[], None]:
        def run() -> None:
            ran.append(i)
            if then is not None:
                then()  # inside the job: the thread has not yet seen this iteration end

        return run

    def next_iteration() -> None:
        for i in range(5):
            order.submit(job(10 + i), last=i == 4)

    for i in range(5):  # 0, 1, 4, 2, 3: bucket 3 runs last and hands the next iteration over
        order.submit(job(i, next_iteration if i == 3 else None), last=i == 4)
    deadline = time.monotonic() + 5
    while len(ran) < 10 and time.monotonic() < deadline:
        time.sleep(0.001)
    order.shutdown()
    assert ran == [0, 1, 4, 2, 3, 10, 11, 14, 12, 13]


def test_the_thread_waits_for_the_front_layers_bucket_and_runs_the_rest_at_shutdown() -> None:
    order = BucketOrder(1)
    ran: list[int] = []
    started = threading.Event()
    order.submit(lambda: (ran.append(0), started.set()), last=False)
    order.submit(lambda: ran.append(1), last=False)
    assert started.wait(5)
    time.sleep(0.05)
    assert ran == [0], "bucket 1 waits: the front layers' bucket goes second"
    order.shutdown()  # it will not come: the rest run in arrival order
    assert ran == [0, 1]
    with pytest.raises(RuntimeError, match="shut down"):
        order.submit(lambda: None)
    with pytest.raises(ValueError, match="front_after"):
        BucketOrder(-1)


def test_a_job_that_raises_does_not_stop_the_thread() -> None:
    order = BucketOrder(0)
    ran: list[int] = []

    def bad() -> None:
        raise RuntimeError("boom")

    order.submit(bad)
    order.submit(lambda: ran.append(1))
    order.shutdown()
    assert ran == [1]


@pytest.mark.parametrize(("classes", "expected"), [(8, [50, 40, 0, 30, 20]), (2, [50, 40, 30, 20, 0])])
def test_the_hook_exchanges_the_front_layers_bucket_third_unless_the_policy_has_one_class(
    classes: int, expected: list[int]
) -> None:
    """Two ranks hand five buckets over in DDP's order (the last layers first); each bucket's sum is right, and
    the hook's thread starts them in the moved order, or in DDP's with one data class (all layers equal)."""
    import torch

    from dlcp.config import TransportConfig
    from dlcp.host.collectives import Collectives
    from dlcp.host.local import local_endpoints, run_ranks
    from dlcp.host.session import Session
    from dlcp.host.shim.torch import DLCPState
    from dlcp.host.timeline import Timeline
    from dlcp.policy import Policy

    world, layers = 2, [50, 40, 30, 20, 0]
    eps = local_endpoints(world, transport=TransportConfig(port=0, payload_bytes=1024))
    sessions = [Session(None, ep, Collectives(ep, world, Policy(num_classes=classes))) for ep in eps]  # type: ignore[arg-type]
    states = [DLCPState(s) for s in sessions]
    for st in states:
        st.num_layers, st.timeline = 64, Timeline()

    def rank(r: int) -> list[torch.Tensor]:
        futures = [
            states[r].submit(torch.full((3000,), float(r + 1 + i)), layer, ("bucket", i), last=i == len(layers) - 1)
            for i, layer in enumerate(layers)
        ]
        return [f.wait() for f in futures]

    try:
        out = run_ranks(rank, world)
    finally:
        for st, s in zip(states, sessions, strict=True):
            st.close()  # the thread records a bucket after its future completes: closed, all are recorded
            s.close()
    for r in range(world):
        for i in range(len(layers)):
            assert torch.equal(out[r][i], torch.full((3000,), 1.5 + i)), "the mean of 1+i and 2+i"
    for st in states:
        buckets = [e for e in st.timeline.events if e[0] == "bucket"]  # type: ignore[union-attr]
        assert [e[5] for e in sorted(buckets, key=lambda e: e[2])] == expected
