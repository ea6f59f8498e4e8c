"""The bounded-loss message assembler.

A receiver registers the messages it expects (:meth:`Assembler.expect`) with a
preallocated buffer, then feeds it raw datagrams or GRO batches
(:meth:`Assembler.ingest`). Every data packet says where its payload goes, so
arrival order does not matter; a bitmap makes duplicates harmless.

Completion rule (``docs/protocol.md`` §5): a message completes when every
packet has arrived, or when the sender has said it is done (a packet flagged
LAST, or a PROBE) and the missing fraction of elements is within the message's
loss bound. On completion gaps are filled (zeros for gradients; parameters
keep their previous value) and the loss is recorded. When the sender is done
and the gap is over the bound, the message is reported in
``IngestResult.nack`` so the transport can ask for the missing ranges; it
never completes until they arrive. A message that makes no progress for a
caller-chosen time is reported by :meth:`Assembler.stalled`.

Malformed or foreign packets are dropped and counted in
:class:`~dlcp.drops.DropCounters`; nothing on this path raises on bad input or
writes outside a message's buffer.
"""

from __future__ import annotations

import itertools
import logging
import struct
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from dlcp.drops import DropCounters, DropReason
from dlcp.limits import Limits
from dlcp.message import NUMPY_DTYPE, Message, MessageKey, MessageSpec, elem_ranges
from dlcp.protocol import HEADER_FIELDS, HEADER_SIZE, INVARIANT_BYTES, VERSION, FillMode, Flag, PacketType
from dlcp.stats import LossStats
from dlcp.wire import Header, check_headers, header_view, segment_count

log = logging.getLogger(__name__)

_IS_CONTROL = np.zeros(16, dtype=bool)
_IS_CONTROL[[PacketType.PROBE, PacketType.BITMAP, PacketType.STOP]] = True
_DATA_VT = (VERSION << 4) | PacketType.DATA
_FIELD = {f.name: f for f in HEADER_FIELDS}


def _struct_for(names: tuple[str, ...]) -> struct.Struct:
    """A Struct reading the named header fields (in offset order), skipping the rest."""
    codes = {1: "B", 2: "H", 4: "I"}
    fmt, pos = "!", 0
    for name in sorted(names, key=lambda n: _FIELD[n].offset):
        f = _FIELD[name]
        fmt += (f"{f.offset - pos}x" if f.offset > pos else "") + codes[f.size]
        pos = f.offset + f.size
    return struct.Struct(fmt)


# What the fast path reads from the first header of a batch (in offset order).
_FAST = _struct_for(
    ("ver_type", "kind", "dtype", "job_id", "src", "token", "msg_id", "round", "layer", "length", "pkt_count")
)
_INV_WORDS = INVARIANT_BYTES // 4
_MAX_STASH_VERDICTS = 1024
"""Remembered wire verdicts of early packets (:meth:`Assembler._fast_stash`); forgotten all at once beyond this."""
_SEQ_WORD = _FIELD["seq"].offset // 4
_OFF_WORD = _FIELD["offset"].offset // 4
_FLAGS_WORD = _FIELD["flags"].offset // 4
_LAST_IN_WORD = int(Flag.LAST) << (8 * (3 - _FIELD["flags"].offset % 4))
_PRIO_AT = _FIELD["priority"].offset


@dataclass
class IngestResult:
    """What one call to :meth:`Assembler.ingest` produced for the transport."""

    completed: list[Message] = field(default_factory=list)
    """Messages that completed (buffers filled, no further writes)."""
    nack: list[Message] = field(default_factory=list)
    """Messages whose gap is over the bound once the sender is done: ask for retransmission."""
    control: list[tuple[Header, bytes]] = field(default_factory=list)
    """Valid PROBE/BITMAP/STOP packets of known jobs, for the transport."""
    accepted: int = 0
    dropped: int = 0
    sources: set[int] = field(default_factory=set)
    """Sender ranks of accepted data packets (liveness evidence for the transport)."""
    progressed: list[Message] = field(default_factory=list)
    """Messages that took new data packets and are not complete yet."""


class _Stashed:
    """Early packets of one message not expected yet: (bytes, segment size) blobs, replayed in order."""

    __slots__ = ("blobs", "nbytes", "packets", "touched")

    def __init__(self) -> None:
        self.blobs: list[tuple[bytes, int]] = []
        self.nbytes = 0
        self.packets = 0
        self.touched = 0.0


class _Job:
    __slots__ = ("bytes_in_use", "stash", "stash_bytes", "stash_done", "token")

    def __init__(self, token: int) -> None:
        self.token = token
        self.bytes_in_use = 0
        # Least recently stashed into first: expiry pops from the front.
        self.stash: OrderedDict[MessageKey, _Stashed] = OrderedDict()
        self.stash_bytes = 0
        self.stash_done: set[MessageKey] = set()


class Assembler:
    """Assembles messages of one or more jobs from DLCP datagrams."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.counters = DropCounters()
        self.stats = LossStats()
        self._jobs: dict[int, _Job] = {}
        self._messages: dict[MessageKey, Message] = {}
        self._completed: OrderedDict[MessageKey, None] = OrderedDict()
        self._stash_verdicts: dict[tuple[int, int, int, int], bool] = {}
        """:meth:`_fast_stash`'s wire verdicts by (kind, dtype, length, segment size): all that
        :func:`check_headers` reads of a full-size DATA header, so one message's packets are judged once."""
        self.generation_cell = np.zeros(1, dtype=np.int64)
        """:attr:`generation` in memory a receive fast path can watch without the GIL."""

    # -- jobs and messages -------------------------------------------------
    def add_job(self, job_id: int, token: int) -> None:
        if not 0 <= job_id < 1 << 16:
            raise ValueError(f"job_id must fit 16 bits, got {job_id}")
        if not 0 <= token < 1 << 32:
            raise ValueError(f"token must fit 32 bits, got {token}")
        if job_id in self._jobs:
            raise ValueError(f"job {job_id} is already registered")
        self._jobs[job_id] = _Job(token)
        self.generation_cell[0] += 1

    def remove_job(self, job_id: int) -> None:
        self._jobs.pop(job_id, None)
        for key in [k for k in self._messages if k.job_id == job_id]:
            del self._messages[key]
        self.generation_cell[0] += 1

    def expect(
        self, spec: MessageSpec, buffer: np.ndarray, now: float = 0.0, accumulate: bool = False, ahead: bool = False
    ) -> Message:
        """Register a message and the buffer it assembles into; replays stashed early packets.

        For a STALE-fill message (parameters) the buffer must hold the previous
        values: ranges that never arrive keep them. With ``accumulate`` each
        packet's elements are *added* to the buffer instead of stored (a
        reduce-on-receive: the bitmap makes every packet count exactly once, and
        a missing packet contributes nothing, which is its zero fill).

        ``ahead``: posted before the call it is for, on a guess of that call's round (the host's
        receives posted ahead); under its key the guess may meet another message (another kind,
        layer, dtype or packet count), whose packets are then stashed as early ones, not dropped.
        """
        job = self._jobs.get(spec.key.job_id)
        if job is None:
            raise ValueError(f"job {spec.key.job_id} is not registered")
        if spec.key in self._messages:
            raise ValueError(f"message {spec.key} is already expected")
        if spec.nbytes > self.limits.max_message_bytes:
            raise ValueError(
                f"message {spec.key} has {spec.nbytes} bytes, over limits.max_message_bytes"
                f" = {self.limits.max_message_bytes}"
            )
        if job.bytes_in_use + spec.nbytes > self.limits.max_job_bytes:
            raise ValueError(
                f"job {spec.key.job_id} would hold {job.bytes_in_use + spec.nbytes} bytes in assembly,"
                f" over limits.max_job_bytes = {self.limits.max_job_bytes}"
            )
        msg = Message(spec, buffer, now, accumulate)
        msg.ahead = ahead
        self._completed.pop(spec.key, None)
        self._messages[spec.key] = msg
        self.generation_cell[0] += 1
        job.bytes_in_use += spec.nbytes
        self._expire_stash(job, now)
        stashed = job.stash.pop(spec.key, None)
        if stashed is not None:
            # Replay everything before honouring a stashed PROBE: "the sender is done"
            # must not complete the message while some of its packets are still here.
            job.stash_bytes -= stashed.nbytes
            result = IngestResult()
            # Consecutive blobs of one segment size are replayed as one batch (every blob holds whole segments),
            # so a message whose sender ran ahead costs a few vector operations, not a call per early packet.
            for seg, run in itertools.groupby(stashed.blobs, key=lambda blob: blob[1]):
                data = b"".join(blob for blob, _ in run)
                self._ingest_into(result, data, len(data), seg, now)
            if msg.done:
                job.stash_done.discard(spec.key)
                return msg
        if spec.key in job.stash_done:
            job.stash_done.discard(spec.key)
            msg.sender_done = True
        if msg.ready:
            self._finish(msg)
        return msg

    def cancel(self, key: MessageKey) -> None:
        """Forget a message without completing it (its buffer is left as it is)."""
        msg = self._messages.pop(key, None)
        if msg is not None:
            self.generation_cell[0] += 1
            self._release(msg)

    @property
    def generation(self) -> int:
        """Changes whenever the set of expected messages does (a receive fast path caches it)."""
        return int(self.generation_cell[0])

    def token_of(self, job_id: int) -> int | None:
        job = self._jobs.get(job_id)
        return None if job is None else job.token

    def message(self, key: MessageKey) -> Message | None:
        return self._messages.get(key)

    def is_completed(self, key: MessageKey) -> bool:
        return key in self._completed

    @property
    def pending(self) -> list[Message]:
        return list(self._messages.values())

    # -- control -----------------------------------------------------------
    def on_probe(self, key: MessageKey, now: float = 0.0) -> Message | None:
        """The sender says it sent everything once. Returns the message, completing it if it can.

        ``None`` means the message is not expected here (yet); if the job
        stashes early packets for it, the probe is remembered for when it is.
        """
        msg = self._messages.get(key)
        if msg is None:
            job = self._jobs.get(key.job_id)
            if job is not None and key in job.stash and key not in self._completed:
                job.stash_done.add(key)
            return None
        msg.sender_done = True
        if msg.ready:
            self._finish(msg)
        return msg

    def expire_stash(self, now: float) -> int:
        """Evict early packets older than ``limits.max_stash_age_s`` from every job's stash; returns packets evicted.

        Stashing and :meth:`expect` do this too; a receive loop calls it when idle,
        so the memory is returned even when nothing else arrives.
        """
        return sum(self._expire_stash(job, now) for job in self._jobs.values())

    def _expire_stash(self, job: _Job, now: float) -> int:
        """Evict ``job``'s stashed messages that took no packet for ``limits.max_stash_age_s``."""
        cutoff = now - self.limits.max_stash_age_s
        evicted = 0
        while job.stash:
            key, entry = next(iter(job.stash.items()))
            if entry.touched >= cutoff:
                break
            del job.stash[key]
            job.stash_bytes -= entry.nbytes
            job.stash_done.discard(key)
            evicted += entry.packets
            log.debug(
                "stash: evicted %d early packets of %s (none for %.1f s)", entry.packets, key, now - entry.touched
            )
        if evicted:
            self.counters.add(DropReason.STASH_EXPIRED, evicted)
        return evicted

    @property
    def stash_bytes(self) -> int:
        """Bytes of early packets held, all jobs together."""
        return sum(job.stash_bytes for job in self._jobs.values())

    def stalled(self, now: float, timeout: float) -> list[Message]:
        """Messages that made no progress for ``timeout`` seconds."""
        return [m for m in self._messages.values() if now - m.last_progress > timeout]

    # -- data path ---------------------------------------------------------
    def ingest(
        self,
        data: bytes | bytearray | memoryview | np.ndarray,
        nbytes: int | None = None,
        seg_size: int | None = None,
        now: float = 0.0,
    ) -> IngestResult:
        """Process one datagram, or one GRO buffer of ``nbytes`` holding segments of ``seg_size``.

        Bad input never raises: every check on packet bytes is a comparison that
        drops and counts (the one parser that raises, :meth:`Header.unpack`, is
        caught where it meets unchecked bytes). So an exception from here is a
        bug, and it propagates (the receive thread reports it to the caller).
        """
        result = IngestResult()
        total = len(data) if nbytes is None else nbytes
        if isinstance(data, np.ndarray):
            total = min(total, data.nbytes)
        else:
            total = min(total, memoryview(data).nbytes)
        self._ingest_into(result, data, total, seg_size or total, now)
        return result

    def _ingest_into(
        self,
        result: IngestResult,
        data: bytes | bytearray | memoryview | np.ndarray,
        nbytes: int,
        seg_size: int,
        now: float,
    ) -> None:
        if nbytes <= 0:
            return
        if isinstance(data, np.ndarray):
            buf = data.reshape(-1).view(np.uint8)[:nbytes]
        else:
            buf = np.frombuffer(data, dtype=np.uint8, count=nbytes)
        nseg = segment_count(nbytes, seg_size)
        if nseg == 1 and _IS_CONTROL[buf[0] & 0xF] and self._one_control(result, buf, nbytes):
            return
        if seg_size < HEADER_SIZE:  # GRO of tiny datagrams: not one segment holds a header
            self._drop(result, DropReason.TRUNCATED, nseg)
            return
        if self._fast_path(result, buf, nbytes, seg_size, nseg, now):
            return
        avail = np.full(nseg, seg_size, dtype=np.int64)
        avail[-1] = nbytes - (nseg - 1) * seg_size
        nh = nseg if avail[-1] >= HEADER_SIZE else nseg - 1
        if nh < nseg:
            self._drop(result, DropReason.TRUNCATED, 1)
        if nh == 0:
            return
        hdrs = header_view(buf, nh, seg_size)
        avail = avail[:nh]
        codes = check_headers(hdrs, avail)
        self._check_jobs(hdrs, codes)

        ptype = hdrs["ver_type"] & 0xF
        ok = codes == 0
        is_ctl = ok & _IS_CONTROL[ptype]
        if is_ctl.any():
            for i in np.flatnonzero(is_ctl):
                h = Header.unpack(buf, int(i) * seg_size)
                start = int(i) * seg_size + HEADER_SIZE
                result.control.append((h, buf[start : start + h.length].tobytes()))
            codes[is_ctl] = -1  # handled; counted as accepted below

        data_idx = np.flatnonzero(ok & ~is_ctl)
        if data_idx.size:
            self._ingest_data(result, buf, hdrs, data_idx, codes, seg_size, now)

        accepted = int(np.count_nonzero(codes <= 0))
        self.counters.add(DropReason.OK, accepted)
        result.accepted += accepted
        bad = codes[codes > 0]
        if bad.size:
            self.counters.add_codes(bad)
            result.dropped += int(bad.size)

    def _one_control(self, result: IngestResult, buf: np.ndarray, nbytes: int) -> bool:
        """A lone, valid PROBE/BITMAP/STOP of a known job, decoded without the vector machinery.

        Returns False, having changed nothing, for anything the general path
        must judge (and count): a bad header, a foreign job or token, a short payload.
        """
        try:
            h = Header.unpack(buf)
        except ValueError:
            return False
        job = self._jobs.get(h.job_id)
        if job is None or job.token != h.token or h.length > nbytes - HEADER_SIZE:
            return False
        result.control.append((h, buf[HEADER_SIZE : HEADER_SIZE + h.length].tobytes()))
        self.counters.counts[DropReason.OK] += 1
        result.accepted += 1
        return True

    def _fast_path(
        self, result: IngestResult, buf: np.ndarray, nbytes: int, seg_size: int, nseg: int, now: float
    ) -> bool:
        """The common case in a few vector operations: new full-size DATA packets of one message, in increasing order.

        Returns False, having changed nothing, whenever anything is unusual; the
        general path then handles the batch. Header bytes 0..27 are the same in
        every full-size packet of a message (protocol.INVARIANT_BYTES), so one
        comparison validates the batch against its first header.
        """
        if nbytes - (nseg - 1) * seg_size < seg_size or seg_size < HEADER_SIZE:
            return False  # a short last segment: let the general path size-check it
        vt, kind, dtype, job_id, src, token, msg_id, rnd, layer, length, pkt_count = _FAST.unpack_from(buf.data, 0)
        if vt != _DATA_VT:
            return False
        job = self._jobs.get(job_id)
        if job is None or token != job.token:
            return False
        key = MessageKey(job_id, src, msg_id, rnd)
        msg = self._messages.get(key)
        if msg is None:
            return self._fast_stash(result, buf, nbytes, seg_size, nseg, job, key, (kind, dtype, length), now)
        spec = msg.spec
        pb = spec.packet_bytes
        if (layer, kind, dtype, pkt_count, length) != (spec.layer, spec.kind, spec.dtype, spec.pkt_count, pb):
            return False
        if seg_size != HEADER_SIZE + pb:
            return False
        # One native-endian copy of the header words (nseg x 10): every check below is then cheap.
        words = np.ndarray((nseg, HEADER_SIZE // 4), dtype=">u4", buffer=buf, strides=(seg_size, 4)).astype(np.int64)
        if nseg > 1 and not (words[1:, :_INV_WORDS] == words[0, :_INV_WORDS]).all():
            return False
        seq = words[:, _SEQ_WORD]
        s0, s_last = int(seq[0]), int(seq[-1])
        if s_last >= spec.num_elems // spec.elems_per_packet:  # the short last packet goes the general way
            return False
        consecutive = s_last - s0 == nseg - 1
        if consecutive:
            if not (seq == np.arange(s0, s0 + nseg)).all():
                return False
        elif nseg > 1 and not (seq[1:] > seq[:-1]).all():  # strictly increasing: no duplicates
            return False
        if not (words[:, _OFF_WORD] == seq * spec.elems_per_packet).all():
            return False
        received = msg.received[s0 : s0 + nseg] if consecutive else msg.received[seq]
        if received.any():
            return False
        src_rows = np.ndarray((nseg, pb), dtype=np.uint8, buffer=buf, offset=HEADER_SIZE, strides=(seg_size, 1))
        if consecutive:
            _deliver(msg, msg.view[s0 * pb : (s0 + nseg) * pb].reshape(nseg, pb), src_rows)
            msg.received[s0 : s0 + nseg] = True
        else:
            full_rows = spec.num_elems // spec.elems_per_packet
            _deliver(msg, msg.view[: full_rows * pb].reshape(full_rows, pb), src_rows, seq)
            msg.received[seq] = True
        last = bool((words[:, _FLAGS_WORD] & _LAST_IN_WORD).any())
        self.account_placed(result, msg, nseg, int(buf[_PRIO_AT]), last, now)
        return True

    def _fast_stash(
        self,
        result: IngestResult,
        buf: np.ndarray,
        nbytes: int,
        seg_size: int,
        nseg: int,
        job: _Job,
        key: MessageKey,
        wire: tuple[int, int, int],
        now: float,
    ) -> bool:
        """Early full-size DATA packets of one message not expected yet, stashed as one blob without the general path.

        The general path would decide the same: the wire checks (:func:`check_headers`)
        read only header bytes ``[0, INVARIANT_BYTES)``, which are the first
        segment's in every segment here, so one check judges them all; then
        ``_no_message`` keeps such a batch as one blob. Of those bytes the checks read
        ``wire`` (kind, dtype, length) alone, with the segment size, so their verdict is
        remembered: early packets arrive a datagram at a time at a paced sender's rate,
        and the vector checks of one header cost more than the stashing. Returns False,
        having changed nothing, for anything else (a bad or mixed header, a completed
        message's late packets, a full stash): the general path judges and counts it.
        """
        if key in self._completed or nbytes != nseg * seg_size:
            return False
        self._expire_stash(job, now)
        if job.stash_bytes + nbytes > self.limits.max_stash_bytes:
            return False
        verdict = self._stash_verdicts.get((*wire, seg_size))
        if verdict is None:
            first = header_view(buf, 1, seg_size)
            verdict = bool(check_headers(first, np.array([seg_size], dtype=np.int64))[0] == 0)
            verdict = verdict and wire[2] == seg_size - HEADER_SIZE
            if len(self._stash_verdicts) >= _MAX_STASH_VERDICTS:
                self._stash_verdicts.clear()
            self._stash_verdicts[(*wire, seg_size)] = verdict
        if not verdict:
            return False
        if nseg > 1:
            words = np.ndarray((nseg, _INV_WORDS), dtype=np.uint32, buffer=buf, strides=(seg_size, 4))
            if not (words[1:] == words[0]).all():
                return False
        self._stash_blobs(job, key, [(buf[:nbytes].tobytes(), seg_size)], nbytes, nseg, now)
        result.sources.add(key.src)
        self.counters.counts[DropReason.OK] += nseg
        result.accepted += nseg
        return True

    def account_placed(
        self,
        result: IngestResult,
        msg: Message,
        n: int,
        priority: int,
        last: bool,
        now: float,
        elems: int | None = None,
    ) -> None:
        """Book ``n`` fresh packets (``elems`` elements; default all full) already written into ``msg``.

        The fast paths (the vectorised one above, and the C receive path of
        ``dlcp.host``) place the common case themselves and report it here, so
        completion and retransmission requests follow one rule. The packets
        must already be marked in ``msg.received``.
        """
        msg.n_received += n
        msg.received_elems += n * msg.spec.elems_per_packet if elems is None else elems
        msg.last_progress = now
        msg.priority = priority
        if last:
            msg.sender_done = True
        self.counters.counts[DropReason.OK] += n
        result.accepted += n
        result.sources.add(msg.key.src)
        if msg.ready:
            self._finish(msg)
            result.completed.append(msg)
        else:
            if n:
                result.progressed.append(msg)
            if msg.sender_done and msg.needs_retransmit:
                result.nack.append(msg)

    def _drop(self, result: IngestResult, reason: DropReason, n: int) -> None:
        self.counters.add(reason, n)
        result.dropped += n

    def _check_jobs(self, hdrs: np.ndarray, codes: np.ndarray) -> None:
        jobs = hdrs["job_id"]
        tokens = hdrs["token"]
        first = int(jobs[0])
        if np.all(jobs == first):
            groups = [(first, slice(None))]
        else:
            groups = [(int(j), jobs == j) for j in np.unique(jobs)]
        for job_id, sel in groups:
            job = self._jobs.get(job_id)
            sub = codes[sel]
            if job is None:
                sub[sub == 0] = DropReason.UNKNOWN_JOB
            else:
                sub[(sub == 0) & (tokens[sel] != job.token)] = DropReason.BAD_TOKEN
            codes[sel] = sub

    def _ingest_data(
        self,
        result: IngestResult,
        buf: np.ndarray,
        hdrs: np.ndarray,
        idx: np.ndarray,
        codes: np.ndarray,
        seg_size: int,
        now: float,
    ) -> None:
        sub = hdrs[idx]
        key_cols = (sub["job_id"], sub["src"], sub["msg_id"], sub["round"])
        if all(np.all(c == c[0]) for c in key_cols):
            groups: list[tuple[MessageKey, np.ndarray]] = [(MessageKey(*(int(c[0]) for c in key_cols)), idx)]
        else:
            stacked = np.stack([c.astype(np.int64) for c in key_cols], axis=1)
            uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
            groups = [(MessageKey(*(int(v) for v in uniq[g])), idx[inverse.reshape(-1) == g]) for g in range(len(uniq))]
        for key, gidx in groups:
            result.sources.add(key.src)
            msg = self._messages.get(key)
            if msg is not None and msg.ahead:
                gidx = self._other_message(msg, buf, hdrs, gidx, codes, seg_size, now)
            if msg is None:
                self._no_message(key, buf, hdrs, gidx, codes, seg_size, now)
                continue
            if gidx.size:
                self._place(result, msg, buf, hdrs, gidx, codes, seg_size, now)

    def _other_message(
        self,
        msg: Message,
        buf: np.ndarray,
        hdrs: np.ndarray,
        gidx: np.ndarray,
        codes: np.ndarray,
        seg_size: int,
        now: float,
    ) -> np.ndarray:
        """Of a message posted ahead (``expect(ahead=True)``), stash the packets that describe another message under
        its key, for the post of that one; returns the others."""
        spec, h = msg.spec, hdrs[gidx]
        other = (h["kind"] != spec.kind) | (h["layer"] != spec.layer) | (h["dtype"] != spec.dtype)
        other |= h["pkt_count"] != spec.pkt_count
        if other.any():
            self._no_message(spec.key, buf, hdrs, gidx[other], codes, seg_size, now)
        return gidx[~other]

    def describes(self, key: MessageKey, kind: int, dtype: int, layer: int) -> bool:
        """Whether a probe for ``key`` with these fields is for the message expected under it; False where a
        message posted ahead meets another (``expect(ahead=True)``): the probe is then one of an early sender."""
        msg = self._messages.get(key)
        if msg is None or not msg.ahead:
            return True
        return (msg.spec.kind, msg.spec.dtype, msg.spec.layer) == (kind, dtype, layer)

    def _no_message(
        self,
        key: MessageKey,
        buf: np.ndarray,
        hdrs: np.ndarray,
        gidx: np.ndarray,
        codes: np.ndarray,
        seg_size: int,
        now: float,
    ) -> None:
        """Stash a known job's packets for a message not expected yet (bounded by bytes and age), or count them late."""
        if key in self._completed:
            codes[gidx] = DropReason.LATE
            return
        job = self._jobs[key.job_id]
        self._expire_stash(job, now)
        lengths = hdrs["length"][gidx].astype(np.int64)
        is_data = (hdrs["ver_type"][gidx] & 0xF) == PacketType.DATA
        sizes = np.where(is_data, HEADER_SIZE + lengths, HEADER_SIZE)
        whole = bool(np.all(sizes == seg_size)) and (int(gidx[-1]) + 1) * seg_size <= buf.size
        blobs: list[tuple[bytes, int]] = []
        added = 0
        if whole and job.stash_bytes + int(sizes.sum()) <= self.limits.max_stash_bytes:
            # The common case: full-size packets kept as one batch, replayed through the fast path.
            rows = np.ndarray((int(gidx[-1]) + 1, seg_size), dtype=np.uint8, buffer=buf)
            blobs.append((rows[gidx].tobytes(), seg_size))
            added = int(sizes.sum())
            codes[gidx] = -1
        else:
            for i, size in zip(gidx, sizes, strict=True):
                if job.stash_bytes + added + int(size) > self.limits.max_stash_bytes:
                    codes[i] = DropReason.STASH_FULL
                    continue
                start = int(i) * seg_size
                raw = buf[start : start + int(size)].tobytes()
                blobs.append((raw, len(raw)))
                added += int(size)
                codes[i] = -1
        if not blobs:
            return
        self._stash_blobs(job, key, blobs, added, int(np.count_nonzero(codes[gidx] == -1)), now)

    @staticmethod
    def _stash_blobs(
        job: _Job, key: MessageKey, blobs: list[tuple[bytes, int]], nbytes: int, packets: int, now: float
    ) -> None:
        """Append early packets of ``key`` to ``job``'s stash (the caller checked the bound)."""
        entry = job.stash.get(key)
        if entry is None:
            entry = job.stash[key] = _Stashed()
        else:
            job.stash.move_to_end(key)
        entry.blobs += blobs
        entry.nbytes += nbytes
        entry.packets += packets
        entry.touched = now
        job.stash_bytes += nbytes

    def _place(
        self,
        result: IngestResult,
        msg: Message,
        buf: np.ndarray,
        hdrs: np.ndarray,
        gidx: np.ndarray,
        codes: np.ndarray,
        seg_size: int,
        now: float,
    ) -> None:
        spec = msg.spec
        h = hdrs[gidx]
        seq = h["seq"].astype(np.int64)
        offset = h["offset"].astype(np.int64)
        length = h["length"].astype(np.int64)
        esize = spec.elem_size
        bad = np.zeros(len(gidx), dtype=np.int64)

        # Message-level validation, most specific reason last so it wins.
        in_range = seq < spec.pkt_count
        safe_seq = np.where(in_range, seq, 0)
        expected_len = np.where(safe_seq == spec.pkt_count - 1, spec.last_packet_bytes, spec.packet_bytes)
        bad[(length != expected_len) | (offset != safe_seq * spec.elems_per_packet)] = DropReason.BAD_LENGTH
        bad[(h["kind"] != spec.kind) | (h["layer"] != spec.layer)] = DropReason.BAD_KIND
        bad[h["dtype"] != spec.dtype] = DropReason.BAD_DTYPE
        bad[h["pkt_count"] != spec.pkt_count] = DropReason.BAD_COUNT
        bad[~in_range | (offset * esize + length > spec.nbytes)] = DropReason.OUT_OF_RANGE
        codes[gidx] = bad

        good = bad == 0
        ptype = h["ver_type"] & 0xF
        trimmed = good & (ptype == PacketType.TRIMMED)
        if trimmed.any():
            msg.trimmed[seq[trimmed]] = True
            codes[gidx[trimmed]] = -1

        is_data = good & (ptype == PacketType.DATA)
        if np.any(good & ((h["flags"] & Flag.LAST) != 0)):
            msg.sender_done = True
        if good.any():
            msg.priority = int(h["priority"][np.flatnonzero(good)[0]])

        dseq = seq[is_data]
        if dseq.size:
            seen = msg.received[dseq]
            # Duplicates: already received, or repeated within this batch.
            _, first = np.unique(dseq, return_index=True)
            fresh = np.zeros(dseq.size, dtype=bool)
            fresh[first] = True
            fresh &= ~seen
            data_pos = gidx[is_data]
            codes[data_pos[~fresh]] = DropReason.DUPLICATE
            if fresh.any():
                self._copy(msg, buf, data_pos[fresh], dseq[fresh], length[is_data][fresh], seg_size)
                msg.last_progress = now

        if msg.ready:
            self._finish(msg)
            result.completed.append(msg)
        else:
            if dseq.size and fresh.any():
                result.progressed.append(msg)
            if msg.needs_retransmit and (msg.sender_done or trimmed.any()):
                result.nack.append(msg)

    def _copy(
        self, msg: Message, buf: np.ndarray, pos: np.ndarray, seq: np.ndarray, length: np.ndarray, seg_size: int
    ) -> None:
        """Copy validated payloads into the message buffer; bounds were checked by the caller."""
        spec = msg.spec
        pb = spec.packet_bytes
        full_rows = spec.num_elems // spec.elems_per_packet
        full = (length == pb) & (seq < full_rows)
        if full.any():
            fpos, fseq = pos[full], seq[full]
            rows = msg.view[: full_rows * pb].reshape(full_rows, pb)
            last = int(fpos[-1]) if fpos.size == 1 else int(fpos.max())
            src = np.ndarray(
                shape=(last + 1, pb), dtype=np.uint8, buffer=buf, offset=HEADER_SIZE, strides=(seg_size, 1)
            )
            k = fseq.size
            if k > 1 and fseq[-1] - fseq[0] == k - 1 and fpos[-1] - fpos[0] == k - 1 and np.all(np.diff(fseq) == 1):
                s0, p0 = int(fseq[0]), int(fpos[0])
                _deliver(msg, rows[s0 : s0 + k], src[p0 : p0 + k])
            else:
                _deliver(msg, rows, src[fpos], fseq)
        for p, s, n in zip(pos[~full], seq[~full], length[~full], strict=True):
            start = int(s) * pb
            src_start = int(p) * seg_size + HEADER_SIZE
            _deliver(msg, msg.view[start : start + int(n)], buf[src_start : src_start + int(n)])
        msg.received[seq] = True
        msg.n_received += int(seq.size)
        msg.received_elems += int(length.sum()) // spec.elem_size

    # -- completion --------------------------------------------------------
    def _finish(self, msg: Message) -> None:
        spec = msg.spec
        if spec.fill_mode == FillMode.ZERO and not msg.accumulate and msg.n_received < spec.pkt_count:
            esize = spec.elem_size
            for start, end in elem_ranges(spec, msg.missing_ranges()):
                msg.view[int(start) * esize : int(end) * esize] = 0
        msg.lost_elems = msg.missing_elems
        msg.done = True
        self.stats.record(spec.layer, msg.priority, msg.lost_elems * spec.elem_size, spec.nbytes)
        del self._messages[spec.key]
        self.generation_cell[0] += 1
        self._release(msg)
        self._completed[spec.key] = None
        while len(self._completed) > self.limits.completed_memory:
            self._completed.popitem(last=False)

    def _release(self, msg: Message) -> None:
        job = self._jobs.get(msg.key.job_id)
        if job is not None:
            job.bytes_in_use -= msg.spec.nbytes


def _deliver(msg: Message, dst: np.ndarray, src: np.ndarray, rows: np.ndarray | None = None) -> None:
    """Store (or, for an accumulating message, add) ``src`` into ``dst`` (at ``rows`` if given)."""
    if msg.accumulate:
        dtype = NUMPY_DTYPE[msg.spec.dtype]
        d, sv = dst.view(dtype), src.view(dtype)
        if rows is None:
            d += sv
        else:
            d[rows] += sv  # rows are unique: fresh packets only
    elif rows is None:
        dst[...] = src
    else:
        dst[rows] = src
