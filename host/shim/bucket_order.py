"""The order in which the DDP hook's thread exchanges an iteration's buckets: front layers early.

DDP hands the buckets over in the order their gradients are ready, the last layers first, so the bucket holding
the front layers (DDP's last, ``GradBucket.is_last()``) comes last, and in that order it waits behind every other
bucket's exchange, although the next forward pass needs it first. :class:`BucketOrder` runs the exchanges on one
thread (they must run in the same order on every rank) and moves the front layers' bucket up: with ``front_after
= k`` it goes right after the iteration's first ``k`` buckets, the others keeping DDP's order. The order depends
only on DDP's bucket order, which every rank shares, never on timing, so every rank runs the same sequence.

``k`` trades the front layers' wait against idle time: the thread waits for the front layers' bucket once the
first ``k`` exchanges are done, so ``k`` must cover the rest of the backward pass. ``k = 2``: on the testbed's
incast star with ``resnet18`` (5 buckets) the front layers' bucket then waited 29-47% less, and the thread
waited for it in few iterations but 10.5-11.5 ms per ring iteration on average, which put the ring's p50 3-7%
above DDP's order (docs/results.md). ``k = 0`` keeps DDP's order (what a job with one priority class runs: all
layers equal).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["DEFAULT_FRONT_AFTER", "BucketOrder"]

log = logging.getLogger(__name__)

DEFAULT_FRONT_AFTER = 2
"""The buckets an iteration exchanges before its front layers' (0: DDP's order)."""


class BucketOrder:
    """One thread running each iteration's exchanges, the front layers' bucket after the first ``front_after``.

    Example::

        >>> order = BucketOrder(front_after=1)
        >>> ran = []
        >>> for i in range(4):
        ...     order.submit(lambda i=i: ran.append(i), last=i == 3)
        >>> order.shutdown()
        >>> ran
        [0, 3, 1, 2]
    """

    __slots__ = (
        "_arrived",
        "_arrived_last",
        "_closed",
        "_cond",
        "_later",
        "_ran",
        "_ran_last",
        "_thread",
        "front_after",
    )

    def __init__(self, front_after: int = DEFAULT_FRONT_AFTER, name: str = "dlcp-hook") -> None:
        if front_after < 0:
            raise ValueError(f"front_after must be >= 0, got {front_after}")
        self.front_after = front_after
        self._cond = threading.Condition()
        self._arrived: list[tuple[Callable[[], None], bool]] = []
        """This iteration's buckets in the order DDP handed them over (job, whether it is the last)."""
        self._arrived_last = False
        """This iteration's last bucket was handed over: what comes next belongs to the next iteration."""
        self._later: list[tuple[Callable[[], None], bool]] = []
        """Buckets handed over after this iteration's last, before its exchanges are done: the next iteration's."""
        self._ran: set[int] = set()
        self._ran_last = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None], last: bool = True) -> None:
        """Run ``job`` (one bucket's exchange; it reports its own errors) in its turn; ``last``: it is the
        iteration's last bucket (``GradBucket.is_last()``), the front layers'. A job submitted alone with
        ``last`` true runs at once, in submission order."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the hook's thread is shut down")
            if self._arrived_last:
                self._later.append((job, last))  # the iteration is still running: this one waits its turn
            else:
                self._arrived.append((job, last))
                self._arrived_last = last
            self._cond.notify()

    def _next(self) -> int | None:
        """Index (in ``_arrived``) of the job to run now, or None to wait for more."""
        pending = [i for i in range(len(self._arrived)) if i not in self._ran]
        if not pending:
            return None
        first = pending[0]
        if self.front_after == 0 or self._ran_last:
            return first
        last = next((i for i in pending if self._arrived[i][1]), None)
        if len(self._ran) >= self.front_after:
            # None: wait for the front layers' bucket; shut down, it will not come: the rest in arrival order.
            return first if last is None and self._closed else last
        # Before the front layers' turn: DDP's order; an iteration of few buckets reaches its last one here.
        return first

    def _loop(self) -> None:
        while True:
            with self._cond:
                while (i := self._next()) is None and not self._closed:
                    self._cond.wait()
                if i is None:
                    return
                job, last = self._arrived[i]
                self._ran.add(i)
                self._ran_last |= last
            try:
                job()
            except Exception:  # a job reports its own errors (the hook's future); this thread must go on
                log.exception("a bucket's exchange raised")
            with self._cond:
                if self._ran_last and len(self._ran) == len(self._arrived):
                    self._arrived.clear()  # the iteration is over: every bucket up to its last ran
                    self._ran.clear()
                    self._ran_last = self._arrived_last = False
                    while self._later and not self._arrived_last:  # the next iteration's, handed over early
                        job, last = self._later.pop(0)
                        self._arrived.append((job, last))
                        self._arrived_last = last
                self._cond.notify_all()

    def shutdown(self, wait: bool = True) -> None:
        """Run what was submitted (an unfinished iteration's jobs in arrival order), then end the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if wait:
            self._thread.join()
