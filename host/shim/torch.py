"""PyTorch DDP communication hook over DLCP.

Register it in one line, as with PyTorch's own hooks::

    from dlcp.host.shim.torch import DLCPState, dlcp_hook

    state = DLCPState(session, model=ddp_model, mode="ring")
    ddp_model.register_comm_hook(state, dlcp_hook)

Example::

    >>> session = open_session(rank=rank, world=world, store_host="127.0.0.1", store_port=29500)
    >>> ddp = torch.nn.parallel.DistributedDataParallel(model)  # gloo process group
    >>> ddp.register_comm_hook(DLCPState(session, model=ddp), dlcp_hook)

The hook follows ``torch.distributed.algorithms.ddp_comm_hooks``: ``hook(state,
bucket) -> Future[Tensor]``. Each bucket is summed over the workers with DLCP
(ring all-reduce or parameter server, bounded loss per message kind) and
divided by the world size, as DDP's default hook does. The exchange runs on one
background thread, in bucket order (the same on every rank, as DDP guarantees),
so DDP overlaps it with the rest of the backward pass.

**Layer priorities.** The first forward pass after the state is created records
the order in which modules use their parameters (forward pre-hooks, then
removed): layer 0 is the first module the forward pass runs. A bucket's
priority class is that of its front-most layer.

**Replica consistency** (``docs/transport.md`` §4): in ring mode the
all-gather is reliable by default, so replicas stay identical. In PS mode with
a pull bound above 0 replicas may differ on ranges lost in the pull; every
``resync_every`` iterations the state broadcasts rank 0's parameters (reliably)
before the forward pass.
"""

# No `from __future__ import annotations`: DDP checks the hook's real annotations.
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
import torch.distributed as dist

from dlcp.host.collectives import Collectives, Mode
from dlcp.host.session import Session
from dlcp.host.timeline import Timeline

log = logging.getLogger(__name__)


class DLCPState:
    """State of the DLCP DDP hook: the session, the mode, layer order and statistics."""

    __slots__ = (
        "_executor",
        "_handles",
        "_lock",
        "_param_layer",
        "average",
        "bytes_sent",
        "collectives",
        "error",
        "iteration",
        "mode",
        "model",
        "num_layers",
        "resync_every",
        "session",
        "timeline",
    )

    def __init__(
        self,
        session: Session,
        *,
        model: torch.nn.Module | None = None,
        mode: Mode | None = None,
        average: bool = True,
        resync_every: int = 100,
    ) -> None:
        if mode not in (None, "ring", "ps"):
            raise ValueError(f"mode must be 'ring' or 'ps', got {mode!r}")
        if resync_every < 0:
            raise ValueError(f"resync_every must be >= 0, got {resync_every}")
        if not isinstance(session, Session):
            raise TypeError(f"session must be a dlcp.host.session.Session, got {type(session).__name__}")
        self.session = session
        self.collectives: Collectives = session.collectives
        # A bucket's last acknowledgements arrive during the next bucket's exchange (Collectives.defer_acks).
        self.collectives.defer_acks = True
        self.error: BaseException | None = None
        """The first exception a bucket's exchange raised (a :class:`dlcp.host.errors.PeerTimeoutError` when a peer
        went silent): DDP re-raises it in ``backward`` only as a ``RuntimeError`` that quotes it."""
        self.mode: Mode = mode or session.mode
        self.average = average
        self.resync_every = resync_every
        self.model = model
        self.iteration = 0
        self.bytes_sent = 0
        self.num_layers = 1
        self._param_layer: dict[int, int] = {}
        self._lock = threading.Lock()
        # One thread: collectives must run in bucket order, the same on every rank.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dlcp-hook")
        self._handles: list[Any] = []
        self.timeline: Timeline | None = session.endpoint.timeline
        """Where each bucket's exchange is recorded (the endpoint's timeline by default; None: nowhere)."""
        if model is not None:
            self._watch_layer_order(model)
            self._handles.append(model.register_forward_pre_hook(self._before_forward))

    # -- layer order ---------------------------------------------------------------
    def _watch_layer_order(self, model: torch.nn.Module) -> None:
        order: list[int] = []
        seen: set[int] = set()

        def record(module: torch.nn.Module, _inputs: Any) -> None:
            for p in module.parameters(recurse=False):
                if id(p) not in seen:
                    seen.add(id(p))
                    order.append(id(p))

        hooks = [m.register_forward_pre_hook(record) for m in model.modules()]

        def done(_module: torch.nn.Module, _inputs: Any, _output: Any) -> None:
            for h in hooks:
                h.remove()
            finish.remove()
            self._param_layer = {pid: i for i, pid in enumerate(order)}
            self.num_layers = max(1, len(order))
            log.debug("layer order recorded: %d parameter tensors", len(order))

        finish = model.register_forward_hook(done)

    def layer_of(self, params: list[torch.Tensor]) -> int:
        """The front-most layer among ``params`` (0 if the order is not known yet)."""
        layers = [self._param_layer[id(p)] for p in params if id(p) in self._param_layer]
        return min(layers) if layers else 0

    # -- re-synchronisation -----------------------------------------------------------
    def _before_forward(self, module: torch.nn.Module, _inputs: Any) -> None:
        self.iteration += 1
        if self.mode == "ps" and self.resync_every and self.iteration % self.resync_every == 0:
            self.resync(module)

    def resync(self, module: torch.nn.Module) -> None:
        """Broadcast rank 0's parameters to every worker, reliably (outside backward)."""
        with torch.no_grad():
            params = [p for p in module.parameters()]
            flat = torch.cat([p.detach().reshape(-1).cpu() for p in params]).contiguous()
            with self._lock:
                self.collectives.broadcast(flat.numpy(), root=0)
            offset = 0
            for p in params:
                n = p.numel()
                p.copy_(flat[offset : offset + n].view_as(p))
                offset += n

    # -- the exchange ---------------------------------------------------------------------
    def allreduce(self, tensor: torch.Tensor, layer: int, tag: object) -> torch.Tensor:
        """Sum ``tensor`` (or mean, with ``average``) over the workers; blocking."""
        host = tensor.detach().to("cpu", copy=False).contiguous()
        x = host.numpy()
        with self._lock:
            self.collectives.allreduce(
                x, mode=self.mode, tag=tag, layer=layer, num_layers=self.num_layers, average=self.average
            )
        self.bytes_sent += x.nbytes
        if host.data_ptr() != tensor.data_ptr():
            tensor.copy_(host)
        return tensor

    def submit(self, tensor: torch.Tensor, layer: int, tag: object) -> "torch.futures.Future[torch.Tensor]":
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        handed = time.monotonic()

        def run() -> None:
            if self.error is not None:  # an earlier bucket's exchange failed: this one cannot complete either,
                fut.set_result(_Failed(self.error))  # type: ignore[arg-type]  # and must not wait out a timeout again
                return
            start = time.monotonic()
            try:
                result = self.allreduce(tensor, layer, tag)
            except BaseException as exc:  # surfaced to DDP through the future
                if self.error is None:
                    self.error = exc
                fut.set_result(_Failed(exc))  # type: ignore[arg-type]
            else:
                fut.set_result(result)
                if (tl := self.timeline) is not None:
                    tl.at("bucket", handed, start, time.monotonic(), tensor.numel() * tensor.element_size(), layer)

        self._executor.submit(run)
        # A future completed with set_exception reaches DDP's C++ reducer as a Python object it cannot cast to a
        # tensor ("Unable to cast <message> to Tensor"); an exception raised in a callback reaches it as an error
        # that names the exception's class ("... PeerTimeoutError: peer rank 2 ... silent for 5.0 s ...").
        return fut.then(_unwrap)

    def loss_stats(self) -> dict[str, object]:
        """Received loss per layer and per priority class, and sender-side loss per drop class."""
        asm = self.session.endpoint.asm.stats.as_dict()
        return {
            "loss_fraction": self.collectives.stats.loss_fraction,
            "loss_fraction_by_kind": {
                k: (v[0] / v[1] if v[1] else 0.0) for k, v in self.collectives.stats.by_kind.items()
            },
            "loss_fraction_by_class": asm["loss_fraction_by_class"],
            "loss_fraction_by_layer": asm["loss_fraction_by_layer"],
            "sender": self.session.endpoint.send_stats.as_dict(),
        }

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.collectives.settle()
        for h in self._handles:
            h.remove()


class _Failed:
    """What a bucket's future holds when its exchange raised: :func:`_unwrap` raises it."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _unwrap(fut: torch.futures.Future[Any]) -> torch.Tensor:
    value = fut.value()
    if isinstance(value, _Failed):
        raise value.exc
    return value  # type: ignore[no-any-return]


def dlcp_hook(state: DLCPState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: bounded-loss, priority-tagged all-reduce of one gradient bucket."""
    layer = state.layer_of(list(bucket.parameters()))
    return state.submit(bucket.buffer(), layer, tag=("bucket", bucket.index()))


__all__ = ["DLCPState", "dlcp_hook"]
