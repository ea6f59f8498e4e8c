"""Bounded-loss collectives over DLCP endpoints: ring all-reduce, parameter server, broadcast.

Consistency between workers' replicas (``docs/transport.md`` §4):

* **Ring all-reduce.** The reduce-scatter steps are lossy within their bound;
  the all-gather steps use their own bound, 0 by default (reliable), so every
  worker ends with the same result and replicas never drift.
* **Parameter server.** Pushes are lossy within the push bound. The pull has its
  own, lower bound; a pulled range that does not arrive keeps the previous
  round's value for the same tag (STALE fill), so workers can differ on those
  ranges. With a pull bound of 0 they never do; otherwise the caller
  re-synchronises at a configured period with :meth:`Collectives.broadcast`,
  which is always reliable.
* Every call has a round number; all ranks must call collectives in the same
  order (as with NCCL or gloo).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from dlcp.host.endpoint import Endpoint, RecvHandle
from dlcp.host.fastpath import FastClassifier, available
from dlcp.message import NUMPY_DTYPE, MessageKey, MessageSpec, dtype_code, elems_per_packet
from dlcp.policy import Policy
from dlcp.protocol import DType, MessageKind
from dlcp.ring_shares import chunk_bounds, chunk_weights

log = logging.getLogger(__name__)

# A sender never reuses a message identity (msg_id, round) for two receivers:
# replies are matched to sends by identity alone. Pulls and broadcasts, which
# go to many receivers, therefore carry the receiver's rank in their msg_id.
_PULL_ID = 1 << 16

_UNEVEN_SEGMENTS = 4
"""Segments a ring with uneven chunks (:attr:`Collectives.ring_weights`) cuts a tensor into at least, so that a
slow hop waits for a quarter of another rank's chunk, not all of it, before it has something to send."""
_MIN_SEGMENT_BYTES = 256 << 10
"""No segment smaller than this for that (each message costs a probe and a STOP)."""

Mode = Literal["ring", "ps"]
"""How a job all-reduces: ring all-reduce, or through parameter servers."""


@dataclass
class CollectiveStats:
    calls: int = 0
    lost_elems: int = 0
    total_elems: int = 0
    by_kind: dict[str, list[int]] = field(default_factory=dict)
    ahead_posted: int = 0
    """Receives posted ahead of their call (:attr:`Collectives.post_ahead`) ..."""
    ahead_adopted: int = 0
    """... taken by the call they were posted for ..."""
    ahead_dropped: int = 0
    """... and forgotten because the call did not come as foreseen."""

    def record(self, kind: MessageKind, lost: int, total: int) -> None:
        self.lost_elems += lost
        self.total_elems += total
        entry = self.by_kind.setdefault(kind.name.lower(), [0, 0])
        entry[0] += lost
        entry[1] += total

    @property
    def loss_fraction(self) -> float:
        return self.lost_elems / self.total_elems if self.total_elems else 0.0


def split_bounds(n: int, parts: int) -> np.ndarray:
    """Chunk boundaries ``[b0=0, b1, ..., b_parts=n]`` as even as possible."""
    return (np.arange(parts + 1) * n) // parts


@dataclass
class _Ahead:
    """A reduce-on-receive posted before its call, into a buffer of its own (:attr:`Collectives.post_ahead`)."""

    spec: MessageSpec
    handle: RecvHandle
    slot: object


@dataclass
class _Adopted:
    """A call's receive that was posted ahead: once complete, its buffer is added into the call's chunk."""

    handle: RecvHandle
    into: np.ndarray
    scratch: np.ndarray


@dataclass
class _Seen:
    """The last call with a tag: its round, what it reduced on receive, and the rounds since the one before."""

    round: int
    plan: tuple[MessageSpec, ...]
    period: int


class Collectives:
    """Collective operations of one rank of one job.

    ``ranks`` are the participants (workers); PS servers are ``server_ranks``,
    which may be workers too (co-located) or extra ranks (dedicated).
    """

    def __init__(
        self,
        endpoint: Endpoint,
        world: int,
        policy: Policy | None = None,
        server_ranks: tuple[int, ...] = (0,),
        worker_ranks: tuple[int, ...] | None = None,
    ) -> None:
        self.ep = endpoint
        self.rank = endpoint.rank
        self.world = world
        self.policy = policy or Policy()
        self.workers = tuple(range(world)) if worker_ranks is None else tuple(worker_ranks)
        self.servers = tuple(server_ranks)
        for r in (*self.workers, *self.servers):
            if r not in endpoint.addresses:
                raise ValueError(f"rank {r} has no address")
        self.round = 0
        self.stats = CollectiveStats()
        self._last_pull: dict[object, np.ndarray] = {}
        # Drop classes per packet: in C with the C data path (the same classes, host/fastpath.py), else numpy.
        self._drop_classes = (
            FastClassifier(self.policy).message_drop_classes
            if endpoint.cfg.fast_path and available()
            else self.policy.message_drop_classes
        )
        self._buffers: dict[object, np.ndarray] = {}
        self._packing: dict[np.dtype, tuple[DType, int]] = {}
        self.defer_acks = False
        """A collective returns once its receives are complete, not also its sends' acknowledgements: those are
        collected by the next call with the same ``tag`` (or :meth:`settle`; a broadcast settles them all).
        What such a send may still read for a retransmission is its own: a ring's all-gather sends go out
        from copies, and a PS worker's pushes are complete once every pull has arrived (a server pulls only
        what it completed). The round trip of a bucket's last STOPs then overlaps the next bucket's exchange
        and the next forward pass, instead of delaying the iteration (the DDP hook sets it)."""
        self._unacked: dict[object, list[Any]] = {}
        self._ring_weights: tuple[float, ...] | None = None
        self.post_ahead = False
        """At the end of a call, post the receives that the next call with the same ``tag`` will reduce on
        (reduce-scatter steps, a server's pushes), for that call's round, each into a zeroed buffer of its own:
        when this rank starts that call after its peers (it computed longer), their data is placed as it
        arrives, instead of being held as early packets and replayed at the post. Only once a tag's calls
        repeat (the same receives, the same number of rounds apart, twice); the call adds each buffer into its
        chunk once complete, bit for bit the sum it would have received into (the buffers start at -0.0). A
        receive posted ahead that its call does not take is forgotten at the next call (the DDP hook sets it)."""
        self._ahead: dict[MessageKey, _Ahead] = {}
        self._seen: dict[object, _Seen] = {}

    @property
    def ring_weights(self) -> tuple[float, ...]:
        """The fraction of a ring all-reduce's tensor in each worker's chunk (:func:`dlcp.ring_shares.chunk_weights`),
        from the rate each worker is paced to toward the next (``[transport] send_rate_bps``; a worker not named
        there is taken to be as fast as the fastest named one). Even where no worker is paced (loopback)."""
        if self._ring_weights is None:
            rates = self.ep.cfg.send_rate_bps
            named = [rates.get(self.ep.addresses[w][0]) for w in self.workers]
            known = [r for r in named if r is not None]
            if not known:
                self._ring_weights = tuple(1.0 / len(self.workers) for _ in self.workers)
            else:
                self._ring_weights = chunk_weights([r if r is not None else max(known) for r in named])
        return self._ring_weights

    def _ring_bounds(self, n: int) -> np.ndarray:
        """Chunk boundaries of ``n`` elements over the ring's workers (even, bit for bit as :func:`split_bounds`,
        unless the hops' rates differ)."""
        weights = self.ring_weights
        if len(set(weights)) == 1:
            return split_bounds(n, len(weights))
        return np.asarray(chunk_bounds(n, weights), dtype=np.int64)

    def _scratch(self, slot: object, n: int, dtype: np.dtype) -> np.ndarray:
        """A receive buffer kept between calls (fresh memory costs a page fault per 4 KiB)."""
        buf = self._buffers.get(slot)
        if buf is None or buf.dtype != dtype or buf.size < n:
            buf = self._buffers[slot] = np.empty(n, dtype=dtype)
        return buf[:n]

    # -- helpers ------------------------------------------------------------
    def _spec(self, src: int, msg_id: int, kind: MessageKind, n: int, dtype: np.dtype, layer: int) -> MessageSpec:
        packing = self._packing.get(dtype)
        if packing is None:  # the wire dtype and elements per packet, once per dtype
            code = dtype_code(dtype)
            packing = self._packing[dtype] = (code, elems_per_packet(self.ep.cfg.payload_bytes, code))
        code, epp = packing
        return MessageSpec(
            MessageKey(self.ep.job_id, src, msg_id, self.round), kind, n, epp, code, layer,
            self.policy.loss_bound(kind, layer),
        )  # fmt: skip

    def _send(self, spec: MessageSpec, values: np.ndarray, dst: int, priority: int) -> None:
        self.ep.send(spec, values, dst, priority, self._drop_classes(spec, values))

    def _wait(self, handle: RecvHandle | _Adopted) -> None:
        if isinstance(handle, _Adopted):
            msg = self.ep.wait(handle.handle)
            np.add(handle.into, handle.scratch, out=handle.into)
        else:
            msg = self.ep.wait(handle)
        self.stats.record(msg.spec.kind, msg.lost_elems, msg.spec.num_elems)

    # -- receives posted ahead (post_ahead) -----------------------------------------
    def _post(
        self, spec: MessageSpec, into: np.ndarray, plan: list[MessageSpec] | None = None
    ) -> RecvHandle | _Adopted:
        """Post a receive; with ``plan`` (a list the call keeps) one that reduces on receive, taken over from a
        receive posted ahead for it where there is one."""
        ahead = self._ahead.pop(spec.key, None)
        if plan is not None:
            plan.append(spec)
            if ahead is not None and ahead.spec == spec:
                self.stats.ahead_adopted += 1
                self.ep.renew(ahead.handle)
                return _Adopted(ahead.handle, into, self._buffers[ahead.slot][: spec.num_elems])
        if ahead is not None:
            self._drop_ahead(ahead)
        return self.ep.post_recv(spec, into, accumulate=plan is not None)

    def _drop_ahead(self, ahead: _Ahead) -> None:
        self.ep.cancel_recv(ahead.handle)
        # The receive thread may be placing a packet into it right now: the next receive gets fresh memory.
        self._buffers.pop(ahead.slot, None)
        self.stats.ahead_dropped += 1

    def _drop_stale_ahead(self) -> None:
        """Forget receives posted ahead for rounds that have passed: no call will take them."""
        for key in [k for k in self._ahead if k.round < self.round]:
            self._drop_ahead(self._ahead.pop(key))

    def _plan_ahead(self, tag: object, plan: list[MessageSpec]) -> None:
        """After a call with ``tag`` that reduced on ``plan``'s receives: post them ahead for the next such call
        (:attr:`post_ahead`) once the tag's calls repeat."""
        if not plan:
            return
        same = tuple(dataclasses.replace(s, key=s.key._replace(round=0)) for s in plan)
        last = self._seen.get(tag)
        period = self.round - last.round if last is not None else 0
        steady = last is not None and last.plan == same and last.period == period
        self._seen[tag] = _Seen(self.round, same, period)
        if not (self.post_ahead and steady):
            return
        nxt = self.round + period
        for i, spec in enumerate(same):
            spec = dataclasses.replace(spec, key=spec.key._replace(round=nxt))
            dtype = NUMPY_DTYPE[spec.dtype]
            if spec.key in self._ahead or spec.dtype == DType.BFLOAT16:  # bfloat16 travels as raw words
                continue
            slot = ("ahead", tag, i)
            for key in [k for k, a in self._ahead.items() if a.slot == slot]:  # an older guess still on it
                self._drop_ahead(self._ahead.pop(key))
            buf = self._scratch(slot, spec.num_elems, dtype)
            buf.fill(-0.0)  # -0.0 + x is x bit for bit, +0.0 included; a packet that never comes adds -0.0
            try:
                handle = self.ep.post_recv(spec, buf, accumulate=True, ahead=True)
            except ValueError as exc:  # over the assembler's limits (limits.max_job_bytes): posted at the call
                log.debug("not posted ahead: %s", exc)
                return
            self._ahead[spec.key] = _Ahead(spec, handle, slot)
            self.stats.ahead_posted += 1

    def _priority(self, layer: int, num_layers: int, priority: int | None) -> int:
        return int(self.policy.priority_of_layers(layer, num_layers)) if priority is None else priority

    def settle(self, tag: object = None) -> None:
        """Wait for the acknowledgements of sends that earlier collectives (those with ``tag``; None: all) left
        outstanding (:attr:`defer_acks`)."""
        tags = list(self._unacked) if tag is None else [tag]
        for t in tags:
            for o in self._unacked.pop(t, ()):
                self.ep.send_wait(o)

    def _finish(self, sends: list[Any], tag: object) -> None:
        """The end of a collective: wait for its sends' acknowledgements, or leave them to the next call."""
        if self.defer_acks:
            self._unacked.setdefault(tag, []).extend(sends)
            return
        for o in sends:
            self.ep.send_wait(o)

    def allreduce(self, x: np.ndarray, *, mode: Mode, tag: object = 0, **kwargs: Any) -> np.ndarray:
        """:meth:`allreduce_ring` or :meth:`allreduce_ps` (with ``tag``), by ``mode``."""
        if mode == "ring":
            return self.allreduce_ring(x, tag=tag, **kwargs)
        if mode == "ps":
            return self.allreduce_ps(x, tag=tag, **kwargs)
        raise ValueError(f"mode must be 'ring' or 'ps', got {mode!r}")

    # -- ring all-reduce ------------------------------------------------------
    def allreduce_ring(
        self,
        x: np.ndarray,
        *,
        tag: object = 0,
        layer: int = 0,
        num_layers: int = 1,
        priority: int | None = None,
        average: bool = False,
        segment_bytes: int = 64 << 20,
    ) -> np.ndarray:
        """In-place sum (or mean) of ``x`` over the workers: reduce-scatter, then all-gather.

        The tensor is cut into segments of about ``segment_bytes``, each reduced by
        its own ring, pipelined: a segment's all-gather starts as soon as its
        reduce-scatter is done, while later segments are still being reduced, and
        sends do not wait for the receiver's STOP before the next one starts.
        """
        flat = _flat_view(x)
        n_ranks = len(self.workers)
        self.settle(tag)  # its all-gather copies are reused now
        self.round += 1
        self.stats.calls += 1
        self._drop_stale_ahead()
        plan: list[MessageSpec] = []
        if n_ranks > 1:
            idx = self.workers.index(self.rank)
            nxt, prv = self.workers[(idx + 1) % n_ranks], self.workers[(idx - 1) % n_ranks]
            prio = self._priority(layer, num_layers, priority)
            n_seg = max(1, min(64, flat.nbytes // max(1, segment_bytes)))
            if len(set(self.ring_weights)) > 1:
                # A slow hop's first bytes to send are another rank's reduced data (its own chunk is the smallest):
                # in segments, it forwards the first one while the others are still on their way to it.
                n_seg = max(n_seg, min(_UNEVEN_SEGMENTS, flat.nbytes // _MIN_SEGMENT_BYTES))
            seg_bounds = split_bounds(flat.size, n_seg)
            chunks = [seg_bounds[g] + self._ring_bounds(int(seg_bounds[g + 1] - seg_bounds[g])) for g in range(n_seg)]
            steps = n_ranks - 1

            def part(g: int, c: int) -> np.ndarray:
                b = chunks[g]
                return flat[b[c % n_ranks] : b[c % n_ranks + 1]]

            def msg_id(phase: int, g: int, step: int) -> int:
                return (phase * steps + step) * n_seg + g

            def spec(src: int, phase: int, g: int, step: int, n: int) -> MessageSpec:
                kind = MessageKind.REDUCE_SCATTER if phase == 0 else MessageKind.ALL_GATHER
                return self._spec(src, msg_id(phase, g, step), kind, n, flat.dtype, layer)

            started: list[Any] = []

            def post(phase: int, g: int, s: int, into: np.ndarray) -> RecvHandle | _Adopted | None:
                """An empty chunk (:attr:`ring_weights`) has no message: neither side sends or waits for one."""
                if not into.size:
                    return None
                return self._post(spec(prv, phase, g, s, into.size), into, plan if phase == 0 else None)

            def wait(handle: RecvHandle | _Adopted | None) -> None:
                if handle is not None:
                    self._wait(handle)

            def send(phase: int, g: int, s: int, chunk: np.ndarray) -> None:
                if chunk.size:
                    started.append(self._send_start(spec(self.rank, phase, g, s, chunk.size), chunk, nxt, prio))

            # Every reduce-scatter receive is posted first and adds straight into its
            # chunk (reduce-on-receive). A chunk is received into in one step only.
            rs_in = [[post(0, g, s, part(g, idx - s - 1)) for s in range(steps)] for g in range(n_seg)]
            # All-gather receives store straight into place and are posted up front too.
            # Safe: all-gather data for chunk c reaches this rank only after the next
            # rank has completed this rank's reduce-scatter message that read chunk c
            # (ring order), so that message is never retransmitted again; and every
            # reduce-scatter write into c happened before (docs/transport.md §4).
            ag_in = [[post(1, g, s, part(g, idx - s)) for s in range(steps)] for g in range(n_seg)]
            for s in range(steps):
                for g in range(n_seg):
                    if s > 0:
                        wait(rs_in[g][s - 1])
                    send(0, g, s, part(g, idx - s))
            for s in range(steps):
                for g in range(n_seg):
                    wait(rs_in[g][steps - 1] if s == 0 else ag_in[g][s - 1])
                    chunk = part(g, idx + 1 - s)
                    if s == 0 and average:  # this rank's reduced chunk: the mean is gathered, not divided after
                        chunk /= n_ranks
                    if self.defer_acks and chunk.size:  # it may be read after this call returns: from a copy
                        copy = self._scratch(("all_gather", tag, g, s), chunk.size, chunk.dtype)
                        copy[:] = chunk
                        chunk = copy
                    send(1, g, s, chunk)
            for g in range(n_seg):
                wait(ag_in[g][steps - 1])
            self._finish(started, tag)
            self._plan_ahead(tag, plan)
        return x

    def _send_start(self, spec: MessageSpec, values: np.ndarray, dst: int, priority: int) -> Any:
        return self.ep.send_start(spec, values, dst, priority, self._drop_classes(spec, values))

    # -- parameter server -------------------------------------------------------
    def allreduce_ps(
        self,
        x: np.ndarray,
        *,
        tag: object = 0,
        layer: int = 0,
        num_layers: int = 1,
        priority: int | None = None,
        average: bool = False,
    ) -> np.ndarray:
        """Sum (or mean) of ``x`` over the workers through the parameter servers.

        Workers push shard ``s`` of their tensor to server ``s``; each server
        aggregates what arrived (bounded loss, gaps zero) and sends the result
        back to every worker (pull, its own bound; gaps keep the previous
        round's value for this ``tag``). A dedicated server passes a zero
        tensor of the right size and gets the aggregate back as well.
        """
        flat = _flat_view(x)
        self.settle(tag)
        self.round += 1
        self.stats.calls += 1
        self._drop_stale_ahead()
        plan: list[MessageSpec] = []
        prio = self._priority(layer, num_layers, priority)
        bounds = split_bounds(flat.size, len(self.servers))
        is_worker = self.rank in self.workers
        my_shard = self.servers.index(self.rank) if self.rank in self.servers else None
        previous = self._last_pull.get(tag)
        if previous is None or previous.shape != flat.shape:
            previous = flat.copy()  # before any pull: a gap keeps this worker's own values
        # Post every receive before the first blocking send. A server adds each
        # worker's push straight into its aggregate (reduce-on-receive).
        push_in: list[RecvHandle | _Adopted] = []
        agg = np.zeros(0, dtype=flat.dtype)
        if my_shard is not None:
            lo, hi = bounds[my_shard], bounds[my_shard + 1]
            agg = flat[lo:hi].copy() if is_worker else np.zeros(hi - lo, dtype=flat.dtype)
            for w in self.workers:
                if w != self.rank:
                    spec = self._spec(w, my_shard, MessageKind.PUSH, hi - lo, flat.dtype, layer)
                    push_in.append(self._post(spec, agg, plan))
        result = previous.copy()
        pull_in: list[RecvHandle | _Adopted] = []
        # Sends do not wait for their STOP one by one: a push's STOP and the pull it leads to are both a round
        # trip away, and a server's pulls to different workers go out side by side. Every send is collected
        # (send_wait) before its values change.
        pushes: list[Any] = []
        if is_worker:
            for s, server in enumerate(self.servers):
                if server != self.rank:
                    lo, hi = bounds[s], bounds[s + 1]
                    spec = self._spec(server, _PULL_ID + self.rank, MessageKind.PULL, hi - lo, flat.dtype, layer)
                    pull_in.append(self._post(spec, result[lo:hi]))
            for s, server in enumerate(self.servers):
                if server != self.rank:
                    lo, hi = bounds[s], bounds[s + 1]
                    spec = self._spec(self.rank, s, MessageKind.PUSH, hi - lo, flat.dtype, layer)
                    pushes.append(self._send_start(spec, flat[lo:hi], server, prio))
        if my_shard is not None:
            lo, hi = bounds[my_shard], bounds[my_shard + 1]
            for handle in push_in:
                self._wait(handle)
            if average:
                agg /= len(self.workers)
            result[lo:hi] = agg
            # The pulls go to different workers, each behind its own port: side by side, not one after the other.
            sends = []
            for w in self.workers:
                if w != self.rank:
                    spec = self._spec(self.rank, _PULL_ID + w, MessageKind.PULL, hi - lo, flat.dtype, layer)
                    sends.append((spec, agg, w, prio, self._drop_classes(spec, agg)))
            pushes += self.ep.send_start_many(sends)
        for handle in pull_in:
            self._wait(handle)
        # A push is read for retransmissions only until its server completes it, which comes before the pull.
        self._finish(pushes, tag)
        flat[:] = result
        self._last_pull[tag] = result
        self._plan_ahead(tag, plan)
        return x

    # -- broadcast ------------------------------------------------------------------
    def broadcast(self, x: np.ndarray, root: int = 0) -> np.ndarray:
        """Reliable broadcast of ``x`` from ``root`` to every worker (re-synchronises replicas)."""
        flat = _flat_view(x)
        self.settle()
        self.round += 1
        self.stats.calls += 1
        self._drop_stale_ahead()
        code = dtype_code(flat.dtype)
        epp = elems_per_packet(self.ep.cfg.payload_bytes, code)

        def spec(dst: int) -> MessageSpec:
            return MessageSpec(
                MessageKey(self.ep.job_id, root, dst, self.round), MessageKind.PULL, flat.size, epp, code
            )

        if self.rank == root:
            for w in self.workers:
                if w != root:
                    self.ep.send(spec(w), flat, w, self.policy.control_class)
        else:
            self._wait(self._post(spec(self.rank), flat))
        return x


def _flat_view(x: np.ndarray) -> np.ndarray:
    if not isinstance(x, np.ndarray) or not x.flags.c_contiguous or not x.flags.writeable:
        raise ValueError("collectives work in place on a writeable, C-contiguous numpy array")
    return x.reshape(-1)
