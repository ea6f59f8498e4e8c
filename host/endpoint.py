"""One process's DLCP endpoint: sockets, a receive thread, and the probe/bitmap/stop exchange.

One object, :class:`Endpoint`, in three modules: this one holds its state and its send side,
:mod:`dlcp.host.receiver` its posted receives and its receive thread, :mod:`dlcp.host.control` its
control packets.

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
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from dlcp import rate_control
from dlcp.assembler import Assembler
from dlcp.config import TransportConfig
from dlcp.host.errors import PeerTimeoutError
from dlcp.host.fastpath import DEFAULT_BUDGET_S, FastReceiver, FastSender, available
from dlcp.host.loss import LossInjector, LossSpec
from dlcp.host.pacing import AimdPacer, PacingConfig
from dlcp.host.receiver import Receiver, RecvHandle
from dlcp.host.timeline import Timeline, label
from dlcp.host.udp import MAX_GSO_BYTES, MAX_GSO_SEGMENTS, MmsgSender, PacketSender, RecvRing, open_socket
from dlcp.limits import Limits
from dlcp.message import MessageKey, MessageSpec
from dlcp.packetizer import HeaderTemplate
from dlcp.protocol import CONTROL_PRIORITY, HEADER_SIZE, NUM_DROP_CLASSES, PacketType, tos_for

__all__ = ["Endpoint", "RecvHandle", "SendStats", "free_port"]

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
        "sent_at",
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
        self.sent_at = 0.0  # the pacer's rate when it was handed over (its verdict's base, RateRule.next_rate)
        self.failed: PeerTimeoutError | None = None  # its receiver went silent while no thread waited on it


class Endpoint(Receiver):
    """A rank's DLCP endpoint for one job: its state and send side here, its receive side and receive thread in
    :class:`~dlcp.host.receiver.Receiver`, its control packets in :class:`~dlcp.host.control.ControlPackets`."""

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
        out.sent_at = self.pacer(dst).rate
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
        # when probed, so every lossy message's retransmission would wait too (docs/results.md).
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
        than its data (the bottom of the band) it would wait until every
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


def free_port(host: str = "127.0.0.1") -> int:
    """A UDP port that is free now (tests and single-host runs)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
