"""An endpoint's receive side: posted receives and the receive thread.

A mixin of :class:`~dlcp.host.endpoint.Endpoint`, which holds the state (set in its ``__init__``) and starts
the thread. A daemon thread takes datagrams in batches (recvmmsg + GRO, through the C path or in numpy),
applies optional loss injection, feeds the core assembler, and hands the control packets to
:class:`~dlcp.host.control.ControlPackets`; while no thread waits on the endpoint it also serves the started
sends. A receive raises :class:`~dlcp.host.errors.PeerTimeoutError` once its sender has sent no data packet
(of any message) for ``peer_timeout_s``. See ``docs/transport.md``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import numpy as np

from dlcp.assembler import IngestResult
from dlcp.host.control import ControlPackets
from dlcp.host.errors import PeerTimeoutError, TransportError
from dlcp.host.fastpath import FastReceiver
from dlcp.host.loss import LossInjector
from dlcp.host.timeline import label
from dlcp.host.udp import RecvRing
from dlcp.message import Message, MessageSpec
from dlcp.protocol import PacketType

log = logging.getLogger(__name__)


class RecvHandle:
    """A posted receive: wait on it with :meth:`Endpoint.wait`."""

    __slots__ = ("msg", "event", "src")

    def __init__(self, msg: Message, src: int) -> None:
        self.msg = msg
        self.event = threading.Event()
        self.src = src
        if msg.done:
            self.event.set()


class Receiver(ControlPackets):
    """The receive side of :class:`~dlcp.host.endpoint.Endpoint` (a mixin: the endpoint holds the state)."""

    if TYPE_CHECKING:  # what this part reads of the endpoint (host/endpoint.py)
        loss: LossInjector | None
        rx_nice: int | None
        _lock: threading.Lock
        _ring: RecvRing | None
        _stop: threading.Event
        _rx_error: BaseException | None
        _rx_nice_set: threading.Event
        _out_generation: int
        _data_heard: dict[int, float]

        def _watching(self) -> AbstractContextManager[None]: ...
        def _serve_sends(self) -> None: ...
        def _serve_unwatched(self) -> None: ...
        def _next_deadline(self, now: float) -> float: ...
        def _timeout_error(self, peer: int, what: str, silent_s: float | None = None) -> PeerTimeoutError: ...

    # -- posted receives (the caller's thread) ---------------------------------
    def post_recv(
        self, spec: MessageSpec, buffer: np.ndarray, accumulate: bool = False, ahead: bool = False
    ) -> RecvHandle:
        """Expect a message into ``buffer`` (for STALE fill it must hold the previous values).

        With ``accumulate`` the payload is added to ``buffer`` (reduce-on-receive). ``ahead``: posted before its
        call, on a guess of its round (:meth:`dlcp.assembler.Assembler.expect`).
        """
        now = time.monotonic()
        if (tl := self.timeline) is not None:
            tl.at("post", now, label(spec), spec.key.src, buffer.nbytes)
        with self._lock:
            msg = self.asm.expect(spec, buffer, now, accumulate, ahead)
            handle = RecvHandle(msg, spec.key.src)
            probe_id = self._early_probes.pop(spec.key, None)
            if msg.done:  # completed from early packets: tell the sender now, not at its next probe
                self._send_bitmap(msg, PacketType.STOP, probe_id=0)
            else:
                self._handles[spec.key] = handle
                if probe_id is not None:  # its sender asked before the post: what is missing, now
                    self._send_bitmap(msg, PacketType.BITMAP, probe_id)
        return handle

    def renew(self, handle: RecvHandle) -> None:
        """A receive posted ahead of the call that waits for it (:attr:`Collectives.post_ahead`): its sender's
        silence counts from now, not from the post, as for a receive posted now."""
        with self._lock:
            handle.msg.last_progress = max(handle.msg.last_progress, time.monotonic())

    def cancel_recv(self, handle: RecvHandle) -> None:
        """Forget a posted receive nobody will wait for; its buffer may still take packets the receive thread
        is placing now (it is not reused for another receive). A completed one is left as it is."""
        with self._lock:
            if handle.msg.done:
                return
            self.asm.cancel(handle.msg.key)
            self._handles.pop(handle.msg.key, None)
            self._nack_cut.pop(handle.msg.key, None)

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

    # -- the receive thread ----------------------------------------------------
    def _check_rx(self) -> None:
        if self._rx_error is not None:
            raise TransportError(f"receive thread failed: {self._rx_error!r}") from self._rx_error

    def _apply_rx_nice(self) -> None:
        """Give the receive thread (the caller) its ``transport.rx_nice``, relative to the thread it inherited from.

        Where cores are scarce (more ranks than cores), completing a message is what
        lets the next ring step start, and a receive thread waiting behind its own
        process's sends stalls the ring (docs/results.md).
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
