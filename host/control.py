"""An endpoint's control packets: the PROBE, BITMAP, STOP and NACK it sends, and its answers to those it receives.

A mixin of :class:`~dlcp.host.endpoint.Endpoint`, which holds the state (set in its ``__init__``) and the send
side; the receive thread (:mod:`dlcp.host.receiver`) hands it the control packets of each batch, with the lock
held. A PROBE gets a STOP (complete) or a BITMAP (what arrived); a message that completes gets a STOP at once.
A BITMAP for one of this endpoint's sends is answered by retransmitting what exceeds the bound, a STOP ends the
send. Replies go to the rank's registered address, never to a datagram's source address. See
``docs/transport.md``.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
from typing import TYPE_CHECKING

import numpy as np

from dlcp.assembler import Assembler
from dlcp.config import TransportConfig
from dlcp.host.fastpath import FastReceiver
from dlcp.host.pacing import AimdPacer
from dlcp.host.timeline import Timeline, label
from dlcp.message import Message, MessageKey, MessageSpec
from dlcp.protocol import NUM_DROP_CLASSES, DType, Flag, MessageKind, PacketType, tos_for
from dlcp.rate_control import first_pass_loss
from dlcp.wire import Header

if TYPE_CHECKING:
    from dlcp.host.endpoint import SendStats, _Out
    from dlcp.host.receiver import RecvHandle

log = logging.getLogger(__name__)

_EARLY_PROBES = 1024
"""Probes of messages not posted yet that a receiver remembers (the oldest is forgotten first)."""


class ControlPackets:
    """The control packets of :class:`~dlcp.host.endpoint.Endpoint` (a mixin: the endpoint holds the state)."""

    if TYPE_CHECKING:  # what this part reads of the endpoint (host/endpoint.py)
        rank: int
        token: int
        addresses: dict[int, tuple[str, int]]
        cfg: TransportConfig
        control_class: int
        initial_rto_s: float
        asm: Assembler
        sock: socket.socket
        timeline: Timeline | None
        send_stats: SendStats
        stops_saved: int
        early_nacks: int
        _cond: threading.Condition
        _control_tos: int
        _control_cmsg: list[tuple[int, int, bytes]]
        _tos_cmsgs: dict[int, list[tuple[int, int, bytes]]]
        _fast: FastReceiver | None
        _handles: dict[MessageKey, RecvHandle]
        _out: dict[MessageKey, _Out]
        _nack_cut: dict[MessageKey, int]
        _stopped_in_batch: set[MessageKey]
        _early_probes: dict[MessageKey, int]
        _heard: dict[int, float]

        def pacer(self, dst: int) -> AimdPacer: ...
        def _per_call(self, dst: int) -> int: ...
        def _probe(self, out: _Out) -> None: ...
        def _retransmit(self, out: _Out, missing: np.ndarray, from_rx: bool = False) -> None: ...

    # -- sent -----------------------------------------------------------------
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

    # -- received -------------------------------------------------------------
    def _on_probe(self, hdr: Header, now: float) -> None:
        if hdr.src not in self.addresses:
            return
        key = MessageKey(hdr.job_id, hdr.src, hdr.msg_id, hdr.round)
        self._probe_arrived(key, hdr.seq, MessageKind(hdr.kind), DType(hdr.dtype), hdr.layer, now)

    def _probe_arrived(
        self, key: MessageKey, probe_id: int, kind: MessageKind, dtype: DType, layer: int, now: float
    ) -> None:
        """A PROBE ``probe_id`` of ``key`` (decoded here, or seen by the C path): answer, or complete."""
        # A receive posted ahead that meets another message under its key: that one's sender is early.
        msg = self.asm.on_probe(key, now) if self.asm.describes(key, kind, dtype, layer) else None
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
            self.pacer(out.dst).on_feedback(first_pass_loss(missing.tolist(), out.spec.pkt_count), out.sent_at)
        missing = self._choose_retransmit(out, missing)
        # One send call's worth goes at once; the rest is owed to the waiting sender thread, which paces it
        # (this thread holds the lock and must not sleep). Unpaced, a controller-paced host's retransmissions
        # of a badly hit message went out at the top priority back to back, overflowed the bottleneck's
        # buffer, and every drop cost another round (docs/results.md). On loopback one call takes all.
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
                self.pacer(out.dst).on_feedback(0.0, out.sent_at)
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
