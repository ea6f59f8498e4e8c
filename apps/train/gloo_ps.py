"""The gloo baseline of parameter-server mode: a DDP communication hook over gloo's TCP point-to-point.

``dlcp train --backend gloo --mode ps``. Every worker sends its gradient bucket to rank 0, which sums
them and sends the mean back: the traffic of DLCP's PS mode with one server, over TCP, so that the
two transports are compared on the same pattern (gloo's own all-reduce, ``--mode ring``, moves a
third less into the server's link with 3 ranks).

No ``from __future__ import annotations`` here: DDP checks the hook's ``bucket`` annotation at
registration, and a postponed (string) annotation fails that check.
"""

import torch
import torch.distributed as dist


def gloo_ps_hook(_state: None, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Sum ``bucket`` at rank 0 from every rank, and hand every rank the mean."""
    t = bucket.buffer()
    world, rank = dist.get_world_size(), dist.get_rank()
    tag = bucket.index()
    if rank == 0:
        parts = [torch.empty_like(t) for _ in range(1, world)]
        _wait_all([dist.irecv(b, src=r, tag=tag) for r, b in enumerate(parts, 1)])
        for b in parts:
            t += b
        t /= world
        _wait_all([dist.isend(t, dst=r, tag=tag) for r in range(1, world)])
    else:
        dist.send(t, dst=0, tag=tag)
        dist.recv(t, src=0, tag=tag)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(t)
    return fut


def _wait_all(works: list[dist.Work | None]) -> None:
    for work in works:
        if work is not None:  # None only for a rank outside the group, which rank 0 never sends to
            work.wait()
