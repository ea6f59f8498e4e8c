"""One process's DLCP endpoint: sockets, a receive thread, and the probe/bitmap/stop exchange.

Receive side. A daemon thread takes datagrams in batches (recvmmsg + GRO),
applies optional loss injection, feeds the core assembler, and answers control
packets: a PROBE gets a STOP (complete) or a BITMAP (what arrived); a message
that completes gets a STOP at once, one whose gap exceeds its bound once the
sender is done gets a BITMAP at once. Replies go to the rank's registered
address, never to a datagram's source address.

Send side (the caller's thread). ``send`` packetises the tensor per drop
class, sends the batches with GSO at the message's priority (DSCP/ECN marked),
paced by AIMD, flags the last packet of the first pass LAST, then waits for the
receiver's verdict: STOP ends the message; a BITMAP is answered by
retransmitting the missing packets at the top priority; silence is answered by
a PROBE after a retransmission timeout that doubles up to ``max_rto``. After
``peer_timeout_s`` without any reply the send raises :class:`PeerTimeoutError`
naming the peer; a receive raises it once its sender has sent no data packet
(of any message) for as long. Control packets carry the TOS byte of the control
class, a PROBE that of its data (it must queue behind its data). Waiting threads
sleep until the next probe deadline, timeout or packet.
See ``docs/transport.md``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from dlcp import rate_control
from dlcp.assembler import Assembler, IngestResult
from dlcp.config import TransportConfig
from dlcp.host.errors import PeerTimeoutError, TransportError
from dlcp.host.fastpath import DEFAULT_BUDGET_S, FastReceiver, FastSender, available
from dlcp.host.loss import LossInjector, LossSpec
from dlcp.host.pacing import AimdPacer, PacingConfig
from dlcp.host.timeline import Timeline, label
from dlcp.host.udp import MAX_GSO_BYTES, MAX_GSO_SEGMENTS, MmsgSender, PacketSender, RecvRing, open_socket
from dlcp.limits import Limits
from dlcp.message import Message, MessageKey, MessageSpec
from dlcp.packetizer import HeaderTemplate
from dlcp.protocol import CONTROL_PRIORITY, HEADER_SIZE, NUM_DROP_CLASSES, DType, Flag, MessageKind, PacketType, tos_for
from dlcp.rate_control import first_pass_loss
from dlcp.wire import Header

log = logging.getLogger(__name__)


@dataclass
class SendStats:
    """Sender-side accounting, from the receivers' final bitmaps."""

    messages: int = 0
    packets: int = 0
    retransmitted: int = 0
    probes: int = 0
    lost_by_drop_class: dict[int, list[int]] = field(default_factory=dict)
    """drop class -> [packets accepted as lost, packets sent]."""

    def as_dict(self) -> dict[str, object]:
        return {
            "messages": self.messages,
            "packets": self.packets,
            "retransmitted": self.retransmitted,
            "probes": self.probes,
            "loss_fraction_by_drop_class": {
                str(c): (lost / total if total else 0.0) for c, (lost, total) in sorted(self.lost_by_drop_class.items())
            },
        }


_NO_SEQS = np.zeros(0, dtype=np.int64)

_PACED_CALL_S = 0.05
"""The most pacing one C send call does (a message alone, paced below the line): the rate the
receivers' verdicts set is read again between calls."""

_EARLY_PROBES = 1024
"""Probes of messages not posted yet that a receiver remembers (the oldest is forgotten first)."""


class _Out:
    """State of one message being sent."""

    __slots__ = (
        "drop_classes",
        "dst",
        "failed",
        "fed_back",
        "graded",
        "passed",
        "pending",
        "priority",
        "last_reply",
        "deadline",
        "probe_id",
        "retx",
        "rto",
        "slept",
        "spec",
        "stopped",
        "template",
        "values",
    )

    def __init__(
        self, spec: MessageSpec, values: np.ndarray, dst: int, drop_classes: np.ndarray, now: float, token: int
    ) -> None:
        self.spec = spec
        self.template = HeaderTemplate(spec, token)
        self.values = values
        self.dst = dst
        self.priority = 0  # the first pass's class: its probes travel in it (send_start sets it)
        self.drop_classes = drop_classes
        self.graded = False  # some packet is drop-eligible (_register sets it)
        self.stopped = False
        self.pending: list[tuple[int, bytes]] = []  # chunks of the current reply, until its FINAL one
        self.passed = False  # the first pass is over (before that a probe would say it is)
        self.probe_id = 0
        self.last_reply = now
        self.fed_back = False
        self.rto = 0.0
        self.deadline = math.inf  # no probe before the first pass is over (send_start sets it then)
        self.retx = _NO_SEQS  # retransmissions the waiting sender thread still owes, paced (see _on_bitmap)
        self.slept = 0.0  # the pacer's sleep total when the first pass began (the timeline's pacing stall)
        self.failed: PeerTimeoutError | None = None  # its receiver went silent while no thread waited on it


class RecvHandle:
    """A posted receive: wait on it with :meth:`Endpoint.wait`."""

    __slots__ = ("msg", "event", "src")

    def __init__(self, msg: Message, src: int) -> None:
        self.msg = msg
        self.event = threading.Event()
        self.src = src
        if msg.done:
            self.event.set()


class Endpoint:
    """A rank's DLCP endpoint for one job."""

    def __init__(
        self,
        *,
        rank: int,
        job_id: int,
        token: int,
        addresses: dict[int, tuple[str, int]],
        transport: TransportConfig | None = None,
        limits: Limits | None = None,
        loss: LossSpec | None = None,
        pacing: PacingConfig | None = None,
        control_class: int = CONTROL_PRIORITY,
        initial_rto_s: float = 0.01,
        max_rto_s: float = 0.2,
        sock: socket.socket | None = None,
    ) -> None:
        if rank not in addresses:
            raise ValueError(f"rank {rank} has no address in the rendezvous table")
        self.rank = rank
        self.job_id = job_id
        self.token = token
        self.addresses = dict(addresses)
        self.cfg = transport or TransportConfig()
        self.seg_size = HEADER_SIZE + self.cfg.payload_bytes
        self.control_class = control_class
        # Control packets go out with the TOS of their class, never drop-eligible (docs/transport.md §2).
        self._control_tos = tos_for(control_class, 0)
        self._control_cmsg = [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", self._control_tos))]
        self._tos_cmsgs: dict[int, list[tuple[int, int, bytes]]] = {control_class: self._control_cmsg}
        self._tos: dict[tuple[int, int], int] = {}  # (priority, drop class) -> the data packets' TOS byte
        self.initial_rto_s = initial_rto_s
        self.max_rto_s = max_rto_s
        self.asm = Assembler(limits)
        self.asm.add_job(job_id, token)
        self.loss = LossInjector(loss) if loss is not None and loss.rate > 0 else None
        self.pacing = pacing or PacingConfig()
        # One pacer per destination: the controller's rate is a host's share of the narrowest port on its way
        # to a receiver, and receivers behind different ports do not share it (a server's pulls to two workers
        # go out side by side, each at the rate, :meth:`send_start_many`). Loss reported by one receiver slows
        # only the sends to it.
        self._pacers: dict[int, AimdPacer] = {}
        self.send_stats = SendStats()
        self.timeline: Timeline | None = None
        """Where this endpoint records its events (:mod:`dlcp.host.timeline`), if anywhere."""
        self._waiting = 0  # threads in wait or send_wait: while none is, the receive thread serves the sends
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._handles: dict[MessageKey, RecvHandle] = {}
        self._out: dict[MessageKey, _Out] = {}
        self._out_generation = 0  # bumped whenever _out changes: the C path's table of sends follows it
        self._nack_cut: dict[MessageKey, int] = {}  # reliable messages: gaps below this were NACKed
        self.early_nacks = 0
        # Messages completed (and STOPped) while handling the current receive batch; a
        # probe for one of them in the same batch was sent before that STOP, which
        # answers it, so it gets no second STOP (if that STOP is lost, the probe is
        # repeated and answered then).
        self._stopped_in_batch: set[MessageKey] = set()
        self.stops_saved = 0
        # Probes of messages not posted yet, and the id of the latest: that probe got an empty BITMAP, and
        # its sender waits a retransmission timeout before it asks again. When the receive is posted
        # incomplete (its first pass arrived early, with loss above the bound), post_recv answers that
        # probe at once with the real BITMAP (docs/transport.md §2). Oldest first, at most _EARLY_PROBES.
        self._early_probes: dict[MessageKey, int] = {}
        # When each rank was last heard from (any packet): on a timeout, the peer silent
        # longest among those we wait on is named, not a live peer blocked behind it.
        self._heard: dict[int, float] = {r: time.monotonic() for r in addresses}
        # When each rank's last data packet (of any message) arrived: what keeps a receive alive.
        self._data_heard: dict[int, float] = {}
        host, port = self.addresses[rank]
        self.sock = sock if sock is not None else open_socket(host, port)
        self.addresses[rank] = self.sock.getsockname()
        self._spray = [self.sock] + [
            open_socket(host, 0, rcvbuf=1 << 16, gro=False) for _ in range(self.cfg.spray_ports - 1)
        ]
        self._spray_next = itertools.cycle(range(len(self._spray)))
        # The numpy sender's preallocated batch (about 4 MB); the C sender takes whatever the pacer allows.
        self._per_build = min(MAX_GSO_BYTES // self.seg_size, MAX_GSO_SEGMENTS) * 64
        # The C data path, or the same in numpy. The receive thread retransmits too (on
        # BITMAP), with a sender of its own.
        self._fast: FastReceiver | None = None
        self._ring: RecvRing | None = None
        self._tx: PacketSender
        self._rx_tx: PacketSender
        if self.cfg.fast_path and available():
            # Early NACKs look at every batch's progress, so C then returns after each one.
            budget = 0.0 if self.cfg.reorder_window else DEFAULT_BUDGET_S
            self._fast = FastReceiver(self.sock, self.seg_size, budget_s=budget)
            self._fast.set_replies(self.addresses, self._control_tos, self.control_class)
            self._tx, self._rx_tx = FastSender(self.seg_size), FastSender(self.seg_size)
        else:
            self._ring = RecvRing(self.sock, self.seg_size)
            self._tx, self._rx_tx = (MmsgSender(self.seg_size, self._per_build) for _ in range(2))
        self._stop = threading.Event()
        self._rx_error: BaseException | None = None
        self.rx_nice: int | None = None
        """The receive thread's nice value once it set ``transport.rx_nice`` (None: inherited, unchanged)."""
        self._rx_nice_set = threading.Event()
        self._thread = threading.Thread(target=self._rx_loop, name=f"dlcp-rx-{rank}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.addresses[self.rank]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        for s in self._spray:
            s.close()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- receive ----------------------------------------------------------
    def post_recv(self, spec: MessageSpec, buffer: np.ndarray, accumulate: bool = False) -> RecvHandle:
        """Expect a message into ``buffer`` (for STALE fill it must hold the previous values).

        With ``accumulate`` the payload is added to ``buffer`` (reduce-on-receive).
        """
        now = time.monotonic()
        if (tl := self.timeline) is not None:
            tl.at("post", now, label(spec), spec.key.src, buffer.nbytes)
        with self._lock:
            msg = self.asm.expect(spec, buffer, now, accumulate)
            handle = RecvHandle(msg, spec.key.src)
            probe_id = self._early_probes.pop(spec.key, None)
            if msg.done:  # completed from early packets: tell the sender now, not at its next probe
                self._send_bitmap(msg, PacketType.STOP, probe_id=0)
            else:
                self._handles[spec.key] = handle
                if probe_id is not None:  # its sender asked before the post: what is missing, now
                    self._send_bitmap(msg, PacketType.BITMAP, probe_id)
        return handle

    def wait(self, handle: RecvHandle) -> Message:
        """Block until the message completes; raises PeerTimeoutError if its sender goes silent.

        While waiting it also probes for started sends whose receivers went quiet,
        so a rank waiting on one peer never holds up another.
        """
        timeout = self.cfg.peer_timeout_s
        if (tl := self.timeline) is not None and not handle.event.is_set():
            t0 = time.monotonic()
            try:
                return self._wait(handle, timeout)
            finally:
                tl.at("wait", t0, label(handle.msg.spec), time.monotonic())
        return self._wait(handle, timeout)

    def _wait(self, handle: RecvHandle, timeout: float) -> Message:
        with self._cond, self._watching():
            while not handle.event.is_set():
                self._serve_sends()
                if handle.event.is_set():
                    break
                # Silence counts from the sender's last data packet (of any message: a peer
                # still busy with earlier messages is alive), and at the earliest from the
                # post or this message's last progress. Probes and replies do not count: a
                # peer's receive thread answers them even while its application is stuck.
                heard = max(handle.msg.last_progress, self._data_heard.get(handle.src, 0.0))
                now = time.monotonic()
                if now - heard > timeout:
                    self.asm.cancel(handle.msg.key)
                    self._handles.pop(handle.msg.key, None)
                    self._nack_cut.pop(handle.msg.key, None)
                    raise self._timeout_error(handle.src, f"receiving {handle.msg.key}", silent_s=now - heard)
                self._cond.wait(max(0.0, min(heard + timeout, self._next_deadline(now)) - now))
        return handle.msg

    # -- send -------------------------------------------------------------
    def send(
        self,
        spec: MessageSpec,
        values: np.ndarray,
        dst: int,
        priority: int,
        drop_classes: np.ndarray | None = None,
    ) -> None:
        """Send a message and return once the receiver has it within its bound."""
        self.send_wait(self.send_start(spec, values, dst, priority, drop_classes))

    def send_start(
        self,
        spec: MessageSpec,
        values: np.ndarray,
        dst: int,
        priority: int,
        drop_classes: np.ndarray | None = None,
    ) -> _Out:
        """Transmit a message's first pass and return without waiting for the receiver.

        ``values`` must not change until :meth:`send_wait` returns for it: a
        retransmission reads them again. Retransmissions are sent by the receive
        thread as BITMAPs arrive, one send call's worth; any wait on this endpoint
        (``send_wait``, ``wait``) sends the rest, paced, and probes for every
        started send whose receiver went quiet.
        """
        (out,) = self.send_start_many([(spec, values, dst, priority, drop_classes)])
        return out

    def send_start_many(self, sends: list[tuple[MessageSpec, np.ndarray, int, int, np.ndarray | None]]) -> list[_Out]:
        """:meth:`send_start` of several messages (spec, values, dst, priority, drop_classes), first passes
        interleaved: one send call's worth of each in turn, each paced by its destination's pacer.

        A server's pulls to its workers leave by different ports: sent one after the other at one
        host rate they took twice as long as side by side, each at its destination's rate.
        """
        outs: list[_Out] = []
        try:
            for s in sends:
                outs.append(self._register(*s))
            # One send alone is paced in C, a call per drop class; several take turns, a burst each.
            passes = [(out, self._first_pass(out, alone=len(outs) == 1)) for out in outs]
            while passes:
                for item in list(passes):
                    if not next(item[1], False):
                        passes.remove(item)
                        self._passed(item[0])
        except BaseException:
            with self._lock:
                for out in outs:
                    if not out.passed:
                        self._out.pop(out.spec.key, None)
                self._out_generation += 1
            raise
        return outs

    def _register(
        self, spec: MessageSpec, values: np.ndarray, dst: int, priority: int, drop_classes: np.ndarray | None
    ) -> _Out:
        """A send's state, checked and entered in the table of sends (before its first packet)."""
        if dst not in self.addresses:
            raise ValueError(f"no address for rank {dst}")
        n = spec.pkt_count
        top = 0  # the highest drop class
        if drop_classes is None:
            classes = np.zeros(n, dtype=np.uint8)
        else:
            classes = np.asarray(drop_classes, dtype=np.uint8)
            if classes.shape != (n,) or (top := int(classes.max())) >= NUM_DROP_CLASSES:
                raise ValueError(f"drop_classes must be {n} values in 0..{NUM_DROP_CLASSES - 1}")
            if spec.max_missing_elems == 0 and top:
                # A message that completes only whole gains nothing from drop-eligible packets
                # (each drop costs a retransmission), and one class keeps its first pass in
                # sequence order, which the receiver's early NACKs rely on.
                classes, top = np.zeros(n, dtype=np.uint8), 0
        flat = np.ascontiguousarray(values).reshape(-1)
        out = _Out(spec, flat, dst, classes, time.monotonic(), self.token)
        out.priority = priority
        out.graded = top > 0
        out.slept = self.pacer(dst).slept
        if (tl := self.timeline) is not None:
            tl.add("send", label(spec), dst, flat.nbytes)
        with self._lock:
            if spec.key in self._out:
                raise ValueError(f"message {spec.key} is already being sent")
            self._out[spec.key] = out
            self._out_generation += 1
        return out

    def _passed(self, out: _Out) -> None:
        """``out``'s first pass is out: probe, and arm the retransmission timer."""
        # Probe at once: if the LAST packet was lost the receiver cannot know the first
        # pass is over, and waiting a whole RTO for that would lengthen the tail. Nor may it
        # wait a short while for the STOP to make it useless (tried: about 5 of 7.6 probes per
        # rank and iteration saved at 4 workers): a receiver reports a gap over its bound only
        # when probed, so every lossy message's retransmission would wait too (docs/results.md, #16).
        out.passed = True
        if (tl := self.timeline) is not None:
            tl.add("pass", label(out.spec), self.pacer(out.dst).slept - out.slept)
        self._probe(out)
        out.rto = self.initial_rto_s
        out.deadline = time.monotonic() + out.rto
        self.send_stats.messages += 1
        self.send_stats.packets += out.spec.pkt_count

    def send_wait(self, out: _Out) -> None:
        """Block until the receiver has ``out`` within its bound (STOP)."""
        with self._cond, self._watching():
            try:
                while not out.stopped:
                    if out.failed is not None:
                        raise out.failed
                    self._serve_sends()
                    if not out.stopped:
                        now = time.monotonic()
                        self._cond.wait(max(0.0, self._next_deadline(now) - now))
            finally:
                self._out.pop(out.spec.key, None)
                self._out_generation += 1

    @contextlib.contextmanager
    def _watching(self) -> Iterator[None]:
        """A thread waits on this endpoint (lock held): it serves the started sends (:meth:`_serve_sends`)."""
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1

    def _serve_unwatched(self) -> None:
        """The receive thread's part while no thread waits on the endpoint: probe the started sends whose
        receivers went quiet, and send the retransmissions they are owed.

        A collective with deferred acknowledgements (``Collectives.defer_acks``) returns while its last sends
        may still need a probe or a retransmission round; its thread may then block elsewhere for long (DDP
        rebuilding its buckets over gloo, an evaluation, a checkpoint), and a peer waiting for those packets
        would time out. Owed retransmissions go out one send call's worth per round of this thread, charged to
        the pacer (this thread never sleeps); a receiver silent past ``peer_timeout_s`` fails the send, which
        the next wait on it raises.
        """
        with self._lock:
            if self._waiting or not self._out:
                return
            now = time.monotonic()
            for out in list(self._out.values()):
                if out.stopped or not out.passed or out.failed is not None:
                    continue
                owed = out.retx.size > 0
                if owed:  # one send call's worth per round of this thread, as a waiting sender would pace it
                    per_call = self._per_call(out.dst)
                    chunk, out.retx = out.retx[:per_call], out.retx[per_call:]
                    self._retransmit(out, chunk, from_rx=True)
                    if out.retx.size:
                        continue
                elif now < out.deadline:
                    continue
                elif now - out.last_reply > self.cfg.peer_timeout_s:
                    out.failed = self._timeout_error(out.dst, f"sending {out.spec.key}")
                    self._cond.notify_all()
                    continue
                self._probe(out)
                out.rto = self.initial_rto_s if owed else min(out.rto * 2, self.max_rto_s)
                out.deadline = time.monotonic() + out.rto

    def _next_deadline(self, now: float) -> float:
        """When the next started send still waiting for its STOP must probe (lock held).

        Sends that a STOP already ended keep their last deadline until their own
        ``send_wait`` collects them; waiting on it would spin.
        """
        return min(
            (now if o.retx.size else o.deadline for o in self._out.values() if not o.stopped),
            default=now + self.cfg.peer_timeout_s,
        )

    def _serve_sends(self) -> None:
        """Probe on silence, for every started send (lock held); BITMAPs are served by the receive thread."""
        self._check_rx()
        for out in list(self._out.values()):
            if out.stopped:
                continue
            if out.retx.size:
                self._retransmit_owed(out)
                continue
            now = time.monotonic()
            if now >= out.deadline:
                silent = now - out.last_reply
                if silent > self.cfg.peer_timeout_s:
                    self._out.pop(out.spec.key, None)
                    self._out_generation += 1
                    raise self._timeout_error(out.dst, f"sending {out.spec.key}")
                self._cond.release()
                try:
                    self._probe(out)
                finally:
                    self._cond.acquire()
                out.rto = min(out.rto * 2, self.max_rto_s)
                out.deadline = time.monotonic() + out.rto

    def _retransmit_owed(self, out: _Out) -> None:
        """Send the next batch of ``out``'s owed retransmissions, paced (lock held, released while sending);
        after the last one, probe."""
        per_call = self._per_call(out.dst)
        chunk, out.retx = out.retx[:per_call], out.retx[per_call:]
        self._cond.release()
        try:
            self._retransmit(out, chunk)
            if not out.retx.size:
                self._probe(out)
        finally:
            self._cond.acquire()
        if not out.retx.size:
            out.rto = self.initial_rto_s
            out.deadline = time.monotonic() + out.rto

    def pacer(self, dst: int) -> AimdPacer:
        """The pacer of the sends to rank ``dst``."""
        pacer = self._pacers.get(dst)
        if pacer is None:
            pacer = self._pacers[dst] = AimdPacer(self.pacing)
        return pacer

    @property
    def pacer_decreases(self) -> int:
        """Rate decreases of all the pacers."""
        return sum(p.decreases for p in self._pacers.values())

    def _per_call(self, dst: int) -> int:
        """Packets per send call: as many as the pacer lets go at once (the numpy sender: at most its batch)."""
        calls = max(1, self.pacer(dst).call_bytes() // self.seg_size)
        return calls if self._fast is not None else min(self._per_build, calls)

    def _first_pass(self, out: _Out, alone: bool = True) -> Iterator[bool]:
        """Send ``out``'s first pass, one send call per step (each yields True).

        ``alone`` (no other pass takes turns with it) and with the C sender: a call paces up to
        ``_PACED_CALL_S`` of the pass itself (C sleeps between bursts without the GIL), rather than
        Python sending a burst per call and sleeping in the pacer: at a controller's share, a few calls
        per message instead of one per burst (4 datagrams).
        """
        spec = out.spec
        priority = out.priority
        classes = out.drop_classes
        if not out.graded:  # one class (reliable messages, and lossy ones without eligible packets)
            groups = [(0, np.arange(spec.pkt_count, dtype=np.int64))]
        else:  # one stable sort splits the packets by class, each class in sequence order
            order = np.argsort(classes, kind="stable")
            groups = []
            end = 0
            for c, n in enumerate(np.bincount(classes, minlength=NUM_DROP_CLASSES).tolist()):
                if n:
                    groups.append((c, order[end : end + n]))
                    end += n
        pacer = self.pacer(out.dst)
        paced = alone and self._fast is not None and pacer.rate < rate_control.LINE_RATE
        per_call = max(1, int(pacer.rate * _PACED_CALL_S) // self.seg_size) if paced else self._per_call(out.dst)
        for gi, (cls, seqs) in enumerate(groups):
            for start in range(0, seqs.size, per_call):
                chunk = seqs[start : start + per_call]
                final = gi == len(groups) - 1 and start + per_call >= seqs.size
                self._transmit(
                    spec, out.template, out.values, out.dst, chunk, priority, cls, retransmit=False, last=final,
                    paced=paced,
                )  # fmt: skip
                yield True

    def _transmit(
        self,
        spec: MessageSpec,
        template: HeaderTemplate,
        values: np.ndarray,
        dst: int,
        seqs: np.ndarray,
        priority: int,
        drop_class: int,
        *,
        retransmit: bool,
        last: bool,
        from_rx: bool = False,
        paced: bool = False,
    ) -> None:
        """Send packets ``seqs``; ``from_rx``: called by the receive thread (its own sender and socket).

        The receive thread never sleeps for pacing, as it holds the endpoint's
        lock: its bytes are charged to the bucket, and the next first-pass batch
        waits for them instead. ``paced``: the C sender spaces the packets at the
        pacer's rate in bursts of the pacer's per-call size; the pacer admits the
        first burst and is debited the rest afterwards.
        """
        pb = spec.packet_bytes
        sock = self.sock if from_rx else self._spray[next(self._spray_next)]
        tos = self._tos.get((priority, drop_class))
        if tos is None:
            tos = self._tos[(priority, drop_class)] = tos_for(priority, drop_class)
        nbytes = (HEADER_SIZE + pb) * seqs.size
        pacer = self.pacer(dst)
        if paced and isinstance(self._tx, FastSender):
            burst = min(nbytes, self._per_call(dst) * self.seg_size)
            pacer.wait(burst)
            self._tx.send_packets(
                sock.fileno(), template, values, seqs, self.addresses[dst], priority=priority,
                drop_class=drop_class, tos=tos, retransmit=retransmit, last=last, rate=pacer.rate, burst=burst,
            )  # fmt: skip
            pacer.spaced(nbytes - burst, self._tx.last_slept)
            return
        if from_rx:
            pacer.charge(nbytes)
        else:
            pacer.wait(nbytes)
        (self._rx_tx if from_rx else self._tx).send_packets(
            sock.fileno(), template, values, seqs, self.addresses[dst], priority=priority,
            drop_class=drop_class, tos=tos, retransmit=retransmit, last=last,
        )  # fmt: skip

    def _timeout_error(self, peer: int, what: str, silent_s: float | None = None) -> PeerTimeoutError:
        """The error for a stalled operation, naming the peer silent longest among those we wait on.

        ``silent_s``: how long ``peer`` has been silent by the operation's own measure (a
        receive: no data). A peer whose receive thread still answers probes was heard from
        just now, yet it is its data silence that timed the receive out, and that is reported.
        """
        now = time.monotonic()
        waiting_on = {peer} | {o.dst for o in self._out.values() if not o.stopped}
        culprit = min(waiting_on, key=lambda r: self._heard.get(r, 0.0))
        waited = now - self._heard.get(culprit, 0.0)
        if culprit == peer and silent_s is not None:
            waited = max(waited, silent_s)
        return PeerTimeoutError(culprit, self.addresses[culprit], waited, what)

    def _missing_from(self, spec: MessageSpec, chunks: list[tuple[int, bytes]]) -> np.ndarray:
        missing: list[np.ndarray] = []
        for offset, payload in chunks:
            bits = np.unpackbits(np.frombuffer(payload, dtype=np.uint8), bitorder="little")
            bits = bits[: max(0, min(bits.size, spec.pkt_count - offset))]
            missing.append(offset + np.flatnonzero(bits == 0))
        return np.unique(np.concatenate(missing)) if missing else np.zeros(0, dtype=np.int64)

    def _choose_retransmit(self, out: _Out, missing: np.ndarray) -> np.ndarray:
        """The missing packets to send again: only the excess over the loss bound.

        The receiver completes as soon as the gap is within the bound, so
        retransmitting more is wasted. The excess, plus a margin for loss of the
        retransmissions themselves, goes out in order of importance: protected
        packets (drop class 0) first, then the other classes by increasing
        eligibility. With a bound of 0 (all-gather, broadcast) everything missing
        goes.
        """
        spec = out.spec
        allowed = spec.max_missing_elems // spec.elems_per_packet  # packets the bound may leave out
        need = missing.size - allowed
        if allowed == 0 or need >= missing.size:
            return missing
        if need <= 0:  # within the bound already: the receiver will STOP
            return missing[:0]
        need = min(missing.size, need + max(2, need // 4))
        order = np.argsort(out.drop_classes[missing], kind="stable")
        return np.sort(missing[order[:need]])

    def _retransmit(self, out: _Out, missing: np.ndarray, from_rx: bool = False) -> None:
        self.send_stats.retransmitted += int(missing.size)
        if (tl := self.timeline) is not None:
            tl.add("retx", label(out.spec), int(missing.size))
        per_call = self._per_call(out.dst)
        for start in range(0, missing.size, per_call):
            chunk = missing[start : start + per_call]
            self._transmit(
                out.spec, out.template, out.values, out.dst, chunk, self.control_class, 0, retransmit=True,
                last=False, from_rx=from_rx,
            )  # fmt: skip

    def _probe(self, out: _Out) -> None:
        """Ask the receiver what is missing, in the first pass's own class.

        A probe asks what arrived of a pass, so it must not overtake that pass; in the
        control class it would, whenever the pass is still queued at a switch (strict
        priority), and the queued packets would be reported missing. In a lower class
        than its data (the bottom of the band, before #14) it waited until every
        higher queue of the port was empty: on a port kept busy by another sender's
        push it starved for hundreds of milliseconds while its timer backed off. In
        the data's class it waits behind what is ahead of it in that queue, as its
        data does (the switch classifies it with its data, ``dlcp.controller.classification``).
        """
        out.pending = []  # chunks of replies to earlier probes are stale now
        out.probe_id += 1
        self.send_stats.probes += 1
        if (tl := self.timeline) is not None:
            tl.add("probe", label(out.spec))
        # The header from the message's template (what _send_control would pack, without building a Header).
        hdr = out.template.control(PacketType.PROBE, seq=out.probe_id, priority=out.priority)
        self._send_packet([hdr], self._tos_cmsg(out.priority), out.dst)

    # -- control packets ----------------------------------------------------
    def _send_control(
        self, spec: MessageSpec, ptype: PacketType, dst: int, *, seq: int = 0, offset: int = 0, payload: bytes = b"",
        flags: Flag = Flag.NONE, priority: int | None = None,
    ) -> None:  # fmt: skip
        """A control packet, in the control class unless ``priority`` says otherwise (a probe: its data's)."""
        key = spec.key
        if priority is None or priority == self.control_class:
            priority, cmsg = self.control_class, self._control_cmsg
        else:
            cmsg = self._tos_cmsg(priority)
        hdr = Header(
            ptype, flags, priority=priority, drop_class=0, job_id=key.job_id, src=key.src,
            token=self.token, msg_id=key.msg_id, round=key.round, layer=spec.layer, kind=spec.kind,
            dtype=spec.dtype, seq=seq, pkt_count=spec.pkt_count, offset=offset, length=len(payload),
        )  # fmt: skip
        self._send_packet([hdr.pack(), payload], cmsg, dst)

    def _send_packet(self, parts: list[bytes], cmsg: list[tuple[int, int, bytes]], dst: int) -> None:
        try:
            self.sock.sendmsg(parts, cmsg, 0, self.addresses[dst])
        except OSError as exc:  # refused or a full buffer: the peer's probe or our timer will ask again
            log.debug("control packet to rank %d not sent: %s", dst, exc)

    def _tos_cmsg(self, priority: int) -> list[tuple[int, int, bytes]]:
        """The IP_TOS control message of a control packet in class ``priority`` (never drop-eligible)."""
        cmsg = self._tos_cmsgs.get(priority)
        if cmsg is None:
            cmsg = self._tos_cmsgs[priority] = [
                (socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", tos_for(priority, 0)))
            ]
        return cmsg

    def _send_bitmap(self, msg: Message, ptype: PacketType, probe_id: int) -> None:
        """BITMAP (or STOP with the final bitmap) in chunks of at most one payload each."""
        spec = msg.spec
        dst = spec.key.src
        if ptype == PacketType.STOP and msg.lost_elems == 0:
            self._send_control(spec, ptype, dst, seq=probe_id, flags=Flag.FINAL)
            return
        bitmap = msg.bitmap()
        step = self.cfg.payload_bytes
        for start in range(0, len(bitmap), step):
            final = Flag.FINAL if start + step >= len(bitmap) else Flag.NONE
            self._send_control(
                spec, ptype, dst, seq=probe_id, offset=start * 8, payload=bitmap[start : start + step], flags=final
            )

    # -- receive thread -----------------------------------------------------
    def _check_rx(self) -> None:
        if self._rx_error is not None:
            raise TransportError(f"receive thread failed: {self._rx_error!r}") from self._rx_error

    def _apply_rx_nice(self) -> None:
        """Give the receive thread (the caller) its ``transport.rx_nice``, relative to the thread it inherited from.

        Where cores are scarce (more ranks than cores), completing a message is what
        lets the next ring step start, and a receive thread waiting behind its own
        process's sends stalls the ring (docs/results.md, #16).
        """
        try:
            if self.cfg.rx_nice:
                tid = threading.get_native_id()
                want = max(-20, min(19, os.getpriority(os.PRIO_PROCESS, tid) + self.cfg.rx_nice))
                try:
                    os.setpriority(os.PRIO_PROCESS, tid, want)
                except OSError as exc:  # lowering nice needs CAP_SYS_NICE or RLIMIT_NICE
                    log.warning("transport.rx_nice = %d not applied (%s): the receive thread keeps its priority",
                                self.cfg.rx_nice, exc)  # fmt: skip
                else:
                    self.rx_nice = os.getpriority(os.PRIO_PROCESS, tid)
        finally:
            self._rx_nice_set.set()

    def _rx_loop(self) -> None:
        self._apply_rx_nice()
        try:
            while not self._stop.is_set():
                if self._fast is not None:
                    self._rx_fast(self._fast)
                else:
                    self._rx_numpy(self._ring)  # type: ignore[arg-type]
                self._serve_unwatched()
        except BaseException as exc:  # surfaced to the caller by _check_rx
            if not self._stop.is_set():
                log.exception("DLCP receive thread failed")
                self._rx_error = exc
                with self._cond:
                    self._cond.notify_all()

    def _rx_fast(self, fast: FastReceiver) -> None:
        """One batch through the C path: it places the common case, the assembler takes the rest."""
        with self._lock:
            if fast.stale(self.asm, self._out_generation):
                fast.refresh(self.asm)
                fast.track_sends(self._out_generation, self._out)
        # No lock here: C writes only into buffers of messages in its table, which
        # only this thread completes; a message posted meanwhile goes the numpy way.
        got = fast.receive(0.02, self.loss)
        if got is None:
            self._idle()
            return
        now = time.monotonic()
        with self._cond:
            self._stopped_in_batch.clear()
            fast.account(self.asm, got, now)
            fast.place_leftovers(self.asm, got, now)  # packets of messages posted while C received
            self._handle(got.result, now)
            for start, nbytes, seg in got.runs:
                self._handle(self.asm.ingest(fast.buf[start : start + nbytes], seg_size=seg, now=now), now)
            if got.last:
                last = IngestResult()
                fast.apply_last(self.asm, got, last, now)
                self._handle(last, now)
            if got.control:  # what C saw of PROBEs and STOPs, after the data as on the Python path
                self.stops_saved += got.stops_saved
                for msg, seq in got.probed:
                    self._heard[msg.key.src] = now
                    self._probe_arrived(msg.key, seq, msg.spec.kind, msg.spec.dtype, msg.spec.layer, now)
                for key in fast.stops():
                    out = self._out.get(key)
                    if out is not None:
                        self._stopped(out, 0, b"", now)
                for src in fast.answered_sources():
                    self._heard[src] = now
                self._cond.notify_all()

    def _rx_numpy(self, ring: RecvRing) -> None:
        got = ring.receive(0.02)
        if got is None:
            self._idle()
            return
        now = time.monotonic()
        with self._cond:
            self._stopped_in_batch.clear()
        for start, nbytes, seg in got.runs:
            runs = [(start, nbytes)] if self.loss is None else self.loss.keep_runs(got.buf, start, nbytes, seg)
            for s, n in runs:
                with self._cond:
                    result = self.asm.ingest(got.buf[s : s + n], seg_size=seg, now=now)
                    self._handle(result, now)

    def _idle(self) -> None:
        """Nothing arrived for a receive timeout: return the memory of stale early packets."""
        with self._lock:
            self.asm.expire_stash(time.monotonic())

    def _handle(self, result: IngestResult, now: float) -> None:
        """React to one ingest (called with the lock held)."""
        for src in result.sources:
            self._heard[src] = now
            self._data_heard[src] = now
        for msg in result.completed:
            self._complete(msg, probe_id=0)
        if result.completed:
            self._cond.notify_all()
        if self.cfg.reorder_window:
            for msg in result.progressed:
                if msg.spec.max_missing_elems == 0:
                    self._early_nack(msg)
        for hdr, payload in result.control:
            if hdr.type == PacketType.PROBE:
                self._heard[hdr.src] = now
                self._on_probe(hdr, now)
            else:
                self._on_reply(hdr, payload, now)
        if result.control:
            self._cond.notify_all()

    def _early_nack(self, msg: Message) -> None:
        """NACK the gaps of a reliable message that fell a reordering window behind its newest packet.

        A reliable message (bound 0) completes only whole, so every loss costs a
        retransmission; asking while the first pass is still arriving hides that
        round trip behind the rest of the pass instead of adding it after the
        sender's probe. Each gap is named once (``_nack_cut`` only moves
        forward); the probe catches whatever a NACK or its retransmission lost.
        The sender sends in sequence order unless drop classes reorder its pass,
        so this only runs while the packets below the newest mostly arrived.
        """
        received = msg.received
        hi = received.size - 1 - int(np.argmax(received[::-1]))  # newest (highest) received packet
        cut = (hi + 1 - self.cfg.reorder_window) // 8 * 8  # whole bitmap bytes
        lo = self._nack_cut.get(msg.key, 0)
        if cut <= lo or msg.n_received < 0.9 * (hi + 1):
            return
        self._nack_cut[msg.key] = cut
        span = received[lo:cut]
        if span.all():
            return
        step = self.cfg.payload_bytes * 8
        for start in range(lo, cut, step):
            bits = received[start : min(cut, start + step)]
            if not bits.all():
                self.early_nacks += 1
                self._send_control(
                    msg.spec, PacketType.BITMAP, msg.key.src, offset=start,
                    payload=np.packbits(bits, bitorder="little").tobytes(), flags=Flag.NACK,
                )  # fmt: skip

    def _complete(self, msg: Message, probe_id: int) -> None:
        self._nack_cut.pop(msg.key, None)
        if (tl := self.timeline) is not None:
            tl.add("done", label(msg.spec), msg.lost_elems)
        handle = self._handles.pop(msg.key, None)
        if handle is not None:
            handle.event.set()
        self._stopped_in_batch.add(msg.key)
        if self._fast is not None and msg.key in self._fast.stopped_whole:
            return  # C sent this STOP and remembers the message for later probes (host/_fastpath_rx.c stop_whole)
        self._send_bitmap(msg, PacketType.STOP, probe_id)
        if self._fast is not None:  # later probes of it are answered in C (the same STOP as _probe_arrived's)
            src = msg.key.src
            self._fast.remember_done(msg.spec, self.token, self.addresses[src], self._control_tos, self.control_class)

    def _on_probe(self, hdr: Header, now: float) -> None:
        if hdr.src not in self.addresses:
            return
        key = MessageKey(hdr.job_id, hdr.src, hdr.msg_id, hdr.round)
        self._probe_arrived(key, hdr.seq, MessageKind(hdr.kind), DType(hdr.dtype), hdr.layer, now)

    def _probe_arrived(
        self, key: MessageKey, probe_id: int, kind: MessageKind, dtype: DType, layer: int, now: float
    ) -> None:
        """A PROBE ``probe_id`` of ``key`` (decoded here, or seen by the C path): answer, or complete."""
        msg = self.asm.on_probe(key, now)
        spec = MessageSpec(key, kind, 0, 1, dtype, layer)
        if msg is None:
            # Completed (answer STOP again) or not expected yet (an empty BITMAP: alive, keep waiting).
            if key in self._stopped_in_batch:
                self.stops_saved += 1
                return
            done = self.asm.is_completed(key)
            ptype = PacketType.STOP if done else PacketType.BITMAP
            if not done:
                self._early_probes.pop(key, None)
                self._early_probes[key] = probe_id
                if len(self._early_probes) > _EARLY_PROBES:
                    del self._early_probes[next(iter(self._early_probes))]
            self._send_control(spec, ptype, key.src, seq=probe_id, flags=Flag.FINAL if done else Flag.NONE)
        elif msg.done:
            self._complete(msg, probe_id)
            self._cond.notify_all()
        else:
            self._send_bitmap(msg, PacketType.BITMAP, probe_id)

    def _on_reply(self, hdr: Header, payload: bytes, now: float) -> None:
        out = self._out.get(MessageKey(hdr.job_id, hdr.src, hdr.msg_id, hdr.round))
        if out is None or hdr.src != self.rank:
            return
        if hdr.type == PacketType.STOP:
            self._stopped(out, hdr.offset, payload, now)
            return
        out.last_reply = now
        self._heard[out.dst] = now
        if hdr.type == PacketType.BITMAP and payload:
            self._on_bitmap(out, hdr, payload, now)

    def _stopped(self, out: _Out, offset: int, payload: bytes, now: float) -> None:
        """A STOP for ``out`` (decoded here, or seen by the C path): the send is over."""
        out.last_reply = now
        self._heard[out.dst] = now
        out.stopped = True
        if (tl := self.timeline) is not None:
            tl.at("stop", now, label(out.spec))
        self._account(out, offset, payload)

    def _on_bitmap(self, out: _Out, hdr: Header, payload: bytes, now: float) -> None:
        """Retransmit what a BITMAP chunk says is missing, at once, from the receive thread.

        Serving it here rather than in the sending thread saves a thread wakeup
        per round, which on a loaded host is most of the round's time. A reply to
        an older probe is stale (its gaps were already answered); a ``NACK``
        chunk is never stale: the receiver names each gap in one only once.
        """
        nack = bool(hdr.flags & Flag.NACK)
        if nack:
            missing = self._missing_from(out.spec, [(hdr.offset, payload)])
            if missing.size:
                self._retransmit(out, missing, from_rx=True)
            return
        if hdr.seq < out.probe_id or not out.passed:  # stale, or not asked for yet: our probe will ask
            return
        out.pending.append((hdr.offset, payload))
        if not hdr.flags & Flag.FINAL:  # a long bitmap comes in chunks: decide on the whole
            return
        chunks, out.pending = out.pending, []
        missing = self._missing_from(out.spec, chunks)
        if not out.fed_back:
            out.fed_back = True
            self.pacer(out.dst).on_feedback(first_pass_loss(missing.tolist(), out.spec.pkt_count))
        missing = self._choose_retransmit(out, missing)
        # One send call's worth goes at once; the rest is owed to the waiting sender thread, which paces it
        # (this thread holds the lock and must not sleep). Unpaced, a controller-paced host's retransmissions
        # of a badly hit message went out at the top priority back to back, overflowed the bottleneck's
        # buffer, and every drop cost another round (docs/results.md, #14). On loopback one call takes all.
        per_call = self._per_call(out.dst)
        if missing.size:
            self._retransmit(out, missing[:per_call], from_rx=True)
        if missing.size > per_call:
            out.retx = missing[per_call:]
            self._cond.notify_all()
            return
        self._probe(out)  # ask what is still missing once these had time to arrive
        out.rto = self.initial_rto_s
        out.deadline = now + out.rto

    def _account(self, out: _Out, offset: int, payload: bytes) -> None:
        n = out.spec.pkt_count
        lost = np.zeros(n if payload else 0, dtype=bool)
        if payload:
            bits = np.unpackbits(np.frombuffer(payload, dtype=np.uint8), bitorder="little")
            span = bits[: max(0, min(bits.size, n - offset))]
            lost[offset : offset + span.size] = span == 0
        if offset == 0:  # count the message once, on its first chunk
            if not out.fed_back:
                out.fed_back = True
                self.pacer(out.dst).on_feedback(0.0)
            sent = np.bincount(out.drop_classes, minlength=NUM_DROP_CLASSES).tolist()
            gone = np.bincount(out.drop_classes[lost], minlength=NUM_DROP_CLASSES).tolist() if payload else None
            for c, k in enumerate(sent):
                if k:
                    entry = self.send_stats.lost_by_drop_class.setdefault(c, [0, 0])
                    entry[0] += gone[c] if gone is not None else 0
                    entry[1] += k
        elif payload:
            for c in np.unique(out.drop_classes[lost]):
                self.send_stats.lost_by_drop_class.setdefault(int(c), [0, 0])[0] += int(
                    np.count_nonzero(lost & (out.drop_classes == c))
                )


def free_port(host: str = "127.0.0.1") -> int:
    """A UDP port that is free now (tests and single-host runs)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
