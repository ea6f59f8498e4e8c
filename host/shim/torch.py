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
priority class is that of its front-most layer. The front layers' bucket,
which DDP hands over last, is also exchanged early: right after the
iteration's first ``front_after`` buckets (:mod:`dlcp.host.shim.bucket_order`),
unless the job's policy has one data class (every layer equal: DDP's order).

**CUDA buckets.** DLCP's exchange works on host memory. For a bucket on a CUDA
device the hook, on DDP's thread, records an event on the stream that produced
the bucket (the current stream when DDP calls the hook: the gradient may still
be being written) and enqueues, on a side stream that waits for that event, the
copy into a pinned host buffer kept for that bucket (:class:`HostBuffers`,
reused every iteration: nothing is allocated per bucket once the buckets are
built). The hook's thread waits for that copy alone (its event), exchanges, and
enqueues the copy back on a second side stream, which is current when it sets
the future's result: the future records an event there, and DDP's use of the
result (``Future.wait``) makes DDP's stream wait for it. The default stream is
never synchronised. CPU buckets take the path they always took.

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
from typing import Any

import torch
import torch.distributed as dist

from dlcp.host.collectives import Collectives, Mode
from dlcp.host.session import Session
from dlcp.host.shim.bucket_order import DEFAULT_FRONT_AFTER, BucketOrder
from dlcp.host.timeline import Timeline

log = logging.getLogger(__name__)


class HostBuffers:
    """One host buffer per bucket, kept across iterations: a bucket's next copy reuses it.

    A bucket's buffer is made again only when the bucket changes size or type (DDP rebuilds its buckets once,
    after the first iteration). ``pin``: page-locked memory, which CUDA copies asynchronously.

    Example::

        >>> buffers = HostBuffers(pin=False)
        >>> a = buffers.get(0, torch.zeros(4))
        >>> buffers.get(0, torch.ones(4)) is a, buffers.allocations
        (True, 1)
    """

    __slots__ = ("_buffers", "allocations", "pin")

    def __init__(self, *, pin: bool) -> None:
        self.pin = pin
        self.allocations = 0
        self._buffers: dict[object, torch.Tensor] = {}

    def get(self, key: object, like: torch.Tensor) -> torch.Tensor:
        """The flat host buffer of bucket ``key``, of ``like``'s size and type (contents: the last copy's)."""
        buf = self._buffers.get(key)
        if buf is None or buf.numel() != like.numel() or buf.dtype != like.dtype:
            buf = torch.empty(like.numel(), dtype=like.dtype, pin_memory=self.pin)
            self._buffers[key] = buf
            self.allocations += 1
        return buf

    def __len__(self) -> int:
        return len(self._buffers)


class CudaCopies:
    """The copies of one CUDA device's buckets to the host and back: two side streams and pinned buffers."""

    __slots__ = ("buffers", "d2h", "device", "h2d", "_released")

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.d2h = torch.cuda.Stream(device)
        """Copies to the host: each waits for the event recorded on the stream that produced its bucket."""
        self.h2d = torch.cuda.Stream(device)
        """Copies back: current when the future's result is set, so DDP's next use waits for them."""
        self.buffers = HostBuffers(pin=True)
        self._released: dict[object, torch.cuda.Event] = {}
        """Bucket -> the end of the last copy back out of its buffer (the next copy in must not start before)."""

    def to_host(self, tensor: torch.Tensor, key: object) -> tuple[torch.Tensor, torch.cuda.Event]:
        """Enqueue the copy of ``tensor`` into its host buffer; on the caller's (DDP's) thread, where the current
        stream is the one that produced the bucket. Returns the buffer and the event that ends the copy."""
        producer = torch.cuda.current_stream(self.device)
        ready = torch.cuda.Event()
        ready.record(producer)  # what the producer enqueued so far writes the bucket; the copy comes after it
        host = self.buffers.get(key, tensor)
        self.d2h.wait_event(ready)
        if (released := self._released.get(key)) is not None:
            self.d2h.wait_event(released)
        with torch.cuda.stream(self.d2h):
            host.copy_(tensor.reshape(-1), non_blocking=True)
            copied = torch.cuda.Event(blocking=True)  # its waiter sleeps rather than spins a core
            copied.record(self.d2h)
        tensor.record_stream(self.d2h)  # the caching allocator must not reuse it before the copy has read it
        return host, copied

    def to_device(self, host: torch.Tensor, tensor: torch.Tensor, key: object) -> None:
        """Enqueue the copy of the result back into ``tensor`` on the copy-back stream (made current by the
        caller while it sets the future's result)."""
        with torch.cuda.stream(self.h2d):
            tensor.copy_(host.view(tensor.shape), non_blocking=True)
            released = torch.cuda.Event()
            released.record(self.h2d)
        self._released[key] = released
        tensor.record_stream(self.h2d)


class DLCPState:
    """State of the DLCP DDP hook: the session, the mode, layer order and statistics."""

    __slots__ = (
        "_cuda",
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
        front_after: int = DEFAULT_FRONT_AFTER,
    ) -> None:
        if mode not in (None, "ring", "ps"):
            raise ValueError(f"mode must be 'ring' or 'ps', got {mode!r}")
        if resync_every < 0:
            raise ValueError(f"resync_every must be >= 0, got {resync_every}")
        if front_after < 0:
            raise ValueError(f"front_after must be >= 0, got {front_after}")
        if not isinstance(session, Session):
            raise TypeError(f"session must be a dlcp.host.session.Session, got {type(session).__name__}")
        self.session = session
        self.collectives: Collectives = session.collectives
        # A bucket's last acknowledgements arrive during the next bucket's exchange (Collectives.defer_acks).
        self.collectives.defer_acks = True
        # A rank that computed longer than its peers finds the next bucket's reduce-scatter data already placed.
        self.collectives.post_ahead = True
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
        # One thread: collectives must run in the same order on every rank (DDP's, the front layers' bucket
        # moved up where the policy ranks the layers).
        one_class = self.collectives.policy.data_classes == 1
        self._executor = BucketOrder(0 if one_class else front_after)
        self._handles: list[Any] = []
        self._cuda: dict[torch.device, CudaCopies] = {}
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

    def submit(
        self, tensor: torch.Tensor, layer: int, tag: object, last: bool = True
    ) -> "torch.futures.Future[torch.Tensor]":
        """Exchange ``tensor`` in its turn (``last``: the iteration's last bucket, the front layers')."""
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

        self._executor.submit(run, last)
        # A future completed with set_exception reaches DDP's C++ reducer as a Python object it cannot cast to a
        # tensor ("Unable to cast <message> to Tensor"); an exception raised in a callback reaches it as an error
        # that names the exception's class ("... PeerTimeoutError: peer rank 2 ... silent for 5.0 s ...").
        return fut.then(_unwrap)

    def cuda_copies(self, device: torch.device) -> CudaCopies:
        """The side streams and host buffers of ``device``'s buckets (made at its first bucket)."""
        if device not in self._cuda:
            self._cuda[device] = CudaCopies(device)
        return self._cuda[device]

    def submit_cuda(
        self, tensor: torch.Tensor, layer: int, tag: object, key: object
    ) -> "torch.futures.Future[torch.Tensor]":
        """:meth:`submit` for a bucket on a CUDA device: copied to and from the pinned host buffer of bucket
        ``key`` on side streams, ordered by events, without synchronising the default stream (module docstring)."""
        copies = self.cuda_copies(tensor.device)
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future(devices=[tensor.device])
        handed = time.monotonic()
        host, copied = copies.to_host(tensor, key)

        def run() -> None:
            start = time.monotonic()
            try:
                copied.synchronize()  # this thread waits for the copy to the host, and only for it
                x = host.numpy()
                with self._lock:
                    self.collectives.allreduce(
                        x, mode=self.mode, tag=tag, layer=layer, num_layers=self.num_layers, average=self.average
                    )
                self.bytes_sent += x.nbytes
                with torch.cuda.device(tensor.device), torch.cuda.stream(copies.h2d):
                    copies.to_device(host, tensor, key)
                    fut.set_result(tensor)  # records an event on copies.h2d, which DDP's wait() waits for
            except BaseException as exc:  # surfaced to DDP through the future
                fut.set_exception(exc)  # type: ignore[arg-type]
            else:
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
    tensor = bucket.buffer()
    if tensor.is_cuda:
        return state.submit_cuda(tensor, layer, tag=("bucket", bucket.index()), key=bucket.index())
    return state.submit(tensor, layer, tag=("bucket", bucket.index()), last=bucket.is_last())


__all__ = ["CudaCopies", "DLCPState", "HostBuffers", "dlcp_hook"]
