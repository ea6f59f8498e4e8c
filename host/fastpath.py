"""The C data path (``dlcp.host._fastpath``): receive with placement, and send.

:class:`FastReceiver` keeps a table of the assembler's expected messages
(rebuilt whenever :attr:`Assembler.generation` changes) and calls
``_fastpath.rx_batch``, which receives one ``recvmmsg`` batch and, without the GIL,
stores or adds every ordinary full-size DATA packet of a message in the table
straight into its buffer. It then books those packets in the assembler
(:meth:`Assembler.account_placed`: one completion rule) and returns the rest
of the batch as runs for :meth:`Assembler.ingest`, which validates and counts
them as if the fast path did not exist. Loss injection draws one decision per
segment in the same way as :class:`~dlcp.host.loss.LossInjector` does on the
numpy path.

The module is optional (built from ``host/_fastpath*.c`` at install time);
:func:`available` says whether it was, and whether it was compiled with :mod:`dlcp.protocol`'s header layout.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Protocol

import numpy as np

from dlcp.assembler import Assembler, IngestResult
from dlcp.drops import DropReason
from dlcp.host.loss import LossInjector
from dlcp.host.udp import MAX_GSO_BYTES, MAX_GSO_SEGMENTS
from dlcp.message import Message, MessageKey, MessageSpec
from dlcp.packetizer import HeaderTemplate
from dlcp.policy import Policy
from dlcp.protocol import HEADER_FIELDS, HEADER_SIZE, INVARIANT_BYTES, VERSION, DType, Flag, MessageKind, PacketType
from dlcp.wire import Header

log = logging.getLogger(__name__)

ENTRY_DTYPE = np.dtype(
    {
        "names": [
            "inv", "full_rows", "dst", "received", "pb", "epp", "op", "tail_bytes", "inv_tail",
            "placed", "last_seen", "priority", "placed_elems", "need", "probed", "probe_seq",
            "stop_ip", "stop_port", "stop_tos", "stop_prio", "stop_sent",
        ],
        "formats": [
            ("u1", 28), "<u4", "<u8", "<u8", "<u4", "<u4", "<u4", "<u4", ("u1", 28), "<u4", "<u4", "<u4", "<u8", "<u4",
            "<u4", "<u4", "<u4", "<u2", "u1", "u1", "<u4",
        ],
        "offsets": [0, 28, 32, 40, 48, 52, 56, 60, 64, 92, 96, 100, 104, 112, 116, 120, 124, 128, 130, 131, 132],
        "itemsize": 144,
    }
)  # fmt: skip
"""One expected message, as ``entry_t`` in host/_fastpath_rx.c."""
_FULL_ROWS_AT: int = ENTRY_DTYPE.fields["full_rows"][1]  # type: ignore[index]
_INV_TAIL_AT: int = ENTRY_DTYPE.fields["inv_tail"][1]  # type: ignore[index]
_ENTRY_STRUCT = struct.Struct("<28sIQQIIII28s32xIHBB12x")
"""The input fields of ENTRY_DTYPE, packed (the output fields between and after them start zero)."""
NEED_WHOLE = 1 << 31
"""Flag in an entry's ``need``: that many packets are every one still missing (the sender is not done), so C
completes the message whole once it placed them and sends its STOP itself (host/_fastpath_rx.c ``stop_whole``)."""
_DONE_STRUCT = struct.Struct("<20sIHBB4x")
"""A DONE_DTYPE row, packed (``answered`` starts zero)."""

_KEY_ROW = 20
"""Header bytes a control table row keeps: kind and dtype, and the message key (job, src, token, msg_id, round)."""
DONE_DTYPE = np.dtype(
    {
        "names": ["hdr", "ip", "port", "tos", "priority", "answered"],
        "formats": [("u1", _KEY_ROW), "<u4", "<u2", "u1", "u1", "<u4"],
        "offsets": [0, 20, 24, 26, 27, 28],
        "itemsize": 32,
    }
)
"""A completed message whose probes C answers with a STOP, as ``done_t`` in host/_fastpath_rx.c."""
SEND_DTYPE = np.dtype(
    {
        "names": ["hdr", "stopped", "stop_seq"],
        "formats": [("u1", _KEY_ROW), "<u4", "<u4"],
        "offsets": [0, 20, 24],
        "itemsize": 32,
    }
)
"""A message being sent whose STOP C takes, as ``send_t`` in host/_fastpath_rx.c."""
DONE_ROWS = 64
"""Completed messages remembered in C (a ring): a probe for an older one goes the Python way, with the same answer."""

MAX_SLOTS = 64
RING_SLOTS = 16
"""GRO slots a receive call fills by default: about 0.9 MB (16 datagrams of 57.6 KB at 8 KiB payloads), so the
ring the kernel copies into stays in a core's L2 cache until C places it. 64 slots (3.7 MB) cost 4-5% more CPU
per rank at 4 workers here (docs/results.md)."""
_SEGS_PER_SLOT = 64  # UDP GRO coalesces at most 64 segments
_DRAW_BATCHES = 8  # loss-injection draws are refilled for this many batches at a time
DEFAULT_BUDGET_S = 0.005
"""How long one receive call may keep placing in C before Python books what it placed.

C returns earlier whenever Python has something to do (leftover packets, a
message that may complete, a LAST flag, a new expected message), so the budget
only bounds how stale the bookkeeping may get: liveness (a peer heard from)
and statistics lag by at most this much."""
_STORE, _STORE_RELIABLE = 0, 4
_OPS = {DType.FLOAT32: 1, DType.FLOAT64: 2, DType.INT32: 3}  # reduce-on-receive ops in C
_FIELD = {f.name: f for f in HEADER_FIELDS}
_LEN_AT = _FIELD["length"].offset
_RETX = int(Flag.RETX)
_SRC_AT = _FIELD["src"].offset
_HEADER_LAYOUT = (
    HEADER_SIZE, INVARIANT_BYTES, _FIELD["flags"].offset, _FIELD["priority"].offset, _FIELD["drop_class"].offset,
    _FIELD["seq"].offset, _FIELD["offset"].offset, _LEN_AT, _FIELD["job_id"].offset,
    _FIELD["round"].offset + _FIELD["round"].size, _FIELD["kind"].offset, int(Flag.LAST), int(Flag.FINAL),
    (VERSION << 4) | PacketType.DATA, (VERSION << 4) | PacketType.PROBE, (VERSION << 4) | PacketType.STOP,
)  # fmt: skip
"""The header layout as the C module reads it (its ``HEADER_LAYOUT``, compiled in from ``dlcp_constants.h``, which
``dlcp p4 gen-constants`` renders from :mod:`dlcp.protocol`): offsets, flags and first header bytes."""
_module: ModuleType | None = None
_tried = False
_load_error = ""


def _load() -> ModuleType | None:
    global _module, _tried, _load_error
    if not _tried:
        _tried = True
        try:
            from dlcp.host import _fastpath  # type: ignore[attr-defined]
        except ImportError as exc:
            _load_error = str(exc)
            log.info("C data path not built (%s): using the numpy path", exc)
        else:
            if tuple(_fastpath.HEADER_LAYOUT) == _HEADER_LAYOUT:
                _module = _fastpath
            else:  # compiled from an older dlcp_constants.h
                _load_error = "compiled with another header layout than dlcp.protocol's: rebuild it (make venv)"
                log.warning("C data path %s: using the numpy path", _load_error)
    return _module


def available() -> bool:
    """Whether the C data path was built and loads."""
    return _load() is not None


def _require() -> ModuleType:
    """The C data path's module, or RuntimeError if it is not built (the classes below need it)."""
    mod = _load()
    if mod is None:
        raise RuntimeError(f"the C data path (dlcp.host._fastpath) is not built: {_load_error}")
    return mod


def unavailable_reason() -> str:
    """Why the C data path does not load (the import error), or ``""`` when it does."""
    _load()
    return _load_error


class _Send(Protocol):
    """What :meth:`FastReceiver.track_sends` reads of a send: its packets' header template."""

    @property
    def template(self) -> HeaderTemplate: ...


@dataclass
class FastBatch:
    """What one receive call left for the assembler, and what it did itself."""

    result: IngestResult
    runs: list[tuple[int, int, int]]
    """(start, nbytes, seg_size) of the ring buffer for :meth:`Assembler.ingest`."""
    datagrams: int
    control: int = 0
    """Control packets C handled (PROBEs answered or reported, STOPs reported)."""
    answered: int = 0
    """Of those, PROBEs of completed messages that C answered with a STOP itself."""
    placed: list[tuple[Message, int, int, int, bool]] = field(default_factory=list)
    """(message, packets, elements, priority of the last one, STOP sent by C) of each message C placed into,
    from lists C builds, so that booking reads no numpy table; resolved to messages at once, so the table
    may be rebuilt before they are booked."""
    lasts: list[Message] = field(default_factory=list)
    """Messages C saw a LAST flag for (:meth:`FastReceiver.apply_last` applies them)."""
    probed: list[tuple[Message, int]] = field(default_factory=list)
    """(message, newest probe id) of each expected message C saw a PROBE for."""
    stops_saved: int = 0
    """PROBEs of messages C completed whole in the same call: the STOP C sent answers them."""

    @property
    def last(self) -> bool:
        """Some message saw a LAST flag (:meth:`FastReceiver.apply_last` has work)."""
        return bool(self.lasts)


class FastReceiver:
    """recvmmsg + placement in C for one socket and one assembler (used by one thread)."""

    def __init__(
        self, sock: socket.socket, seg_size: int, slots: int = RING_SLOTS, budget_s: float = DEFAULT_BUDGET_S
    ) -> None:
        mod = self._c = _require()
        self.fd = sock.fileno()
        per = max(1, min(MAX_GSO_BYTES // seg_size, MAX_GSO_SEGMENTS))
        self.seg_size = seg_size
        if budget_s < 0:
            raise ValueError(f"budget_s must be >= 0, got {budget_s}")
        self.budget_us = int(budget_s * 1e6)
        self.slot_bytes = per * seg_size
        self.slots = min(slots, MAX_SLOTS)
        self.buf = np.zeros(self.slots * self.slot_bytes, dtype=np.uint8)
        self._runs = np.zeros((self.slots * mod.runs_capacity(self.slot_bytes), 3), dtype=np.int64)
        self._entries = np.zeros(0, dtype=ENTRY_DTYPE)
        self._need = self._entries["need"]
        self._msgs: list[Message] = []
        self._rows: dict[MessageKey, tuple[Message, bytes]] = {}
        # Where each rank's STOPs go (set_replies): C sends a whole message's STOP itself.
        self._reply: dict[int, tuple[int, int]] = {}
        self._stop_tos = 0
        self._stop_prio = 0
        self.stopped_whole: set[MessageKey] = set()
        """Messages C completed whole in the last call and sent the STOP of (Python sends none)."""
        self.whole_stops = 0
        """STOPs of messages C completed whole and sent itself."""
        self._index: dict[MessageKey, int] = {}
        # Where the next packets probably go (direct placement of reliable stored messages).
        self._hint_key: MessageKey | None = None
        self._hint_seq = 0
        self._generation = -1
        self._gen_cell = np.full(1, -2, dtype=np.int64)  # never equal: refresh() must run first
        self._draws = np.zeros(0, dtype=np.uint8)
        self._draw_pos = 0
        self.truncated = 0
        self.direct = 0
        """Packets the kernel wrote straight into their message buffer (no copy)."""
        self.calls = 0
        self.datagrams = 0
        # Control tables (host/_fastpath_rx.c `control`): completed messages, a ring whose
        # rows C answers probes for, and the sends awaiting a STOP. Only the receive
        # thread writes them, between calls; other threads queue changes under the lock.
        self._done = np.zeros(DONE_ROWS, dtype=DONE_DTYPE)
        self._done_state = np.zeros(2, dtype=np.int64)
        """[next row to write, rows in use] of the ring: C adds the rows of the messages it STOPs itself."""
        self._done_queue: list[tuple[bytes, tuple[str, int], int, int]] = []
        self._sends = np.zeros(0, dtype=SEND_DTYPE)
        self._send_keys: list[MessageKey] = []
        self._send_index: set[MessageKey] = set()
        self._sends_generation = -1
        self._probed: list[tuple[Message, int]] = []
        self.replaced = 0
        """Leftover runs placed again in C after a table rebuild (:meth:`place_leftovers`)."""
        self._stopped: list[int] = []
        self._answered_rows: list[int] = []
        self.control = 0
        """Control packets handled in C."""
        self.answered = 0
        """PROBEs of completed messages answered with a STOP in C."""

    def set_replies(self, addresses: dict[int, tuple[str, int]], tos: int, priority: int) -> None:
        """Where C sends the STOP of a message it completed whole: each rank's address, the control class."""
        self._reply = {r: (_ip(a[0]), a[1]) for r, a in addresses.items()}
        self._stop_tos, self._stop_prio = tos, priority
        self._rows.clear()
        self._generation = -1

    def stale(self, asm: Assembler, sends_generation: int) -> bool:
        """Whether :meth:`refresh` or :meth:`track_sends` has work (one check per call when nothing changed)."""
        return (
            int(asm.generation_cell[0]) != self._generation
            or sends_generation != self._sends_generation
            or bool(self._done_queue)
        )

    def refresh(self, asm: Assembler) -> None:
        """Rebuild the message table if the assembler's expected messages changed (caller holds its lock).

        A message's entry is packed once (:func:`_entry`) and reused by every rebuild while it is expected.
        """
        generation = asm.generation
        if generation == self._generation:
            return
        msgs = [m for m in asm.pending if _placeable(m)]
        old = self._rows
        rows = {}
        for m in msgs:
            cached = old.get(m.key)
            if cached is None or cached[0] is not m:
                ip, port = self._reply.get(m.key.src, (0, 0))
                cached = (m, _entry(m, asm.token_of(m.key.job_id) or 0, ip, port, self._stop_tos, self._stop_prio))
            rows[m.key] = cached
        self._rows = rows
        self._entries = np.frombuffer(bytearray(b"".join(r for _, r in rows.values())), dtype=ENTRY_DTYPE)
        self._need = self._entries["need"]
        self._msgs, self._generation = msgs, generation
        self._gen_cell = asm.generation_cell
        self._index = {m.key: i for i, m in enumerate(msgs)}

    def remember_done(self, spec: MessageSpec, token: int, addr: tuple[str, int], tos: int, priority: int) -> None:
        """Let C answer later probes of this completed message with a STOP (caller holds the endpoint's lock).

        Applied by the next :meth:`track_sends` (the receive thread, between calls).
        """
        if spec.num_elems == 0:
            return
        cached = self._rows.get(spec.key)  # the message's table entry holds those header bytes already
        if cached is not None:
            row = cached[1]
            # The full packets' invariant header if the message has any (full_rows != 0), else the short last one's.
            full_rows = row[_FULL_ROWS_AT : _FULL_ROWS_AT + 4] != bytes(4)
            hdr = row[:_KEY_ROW] if full_rows else row[_INV_TAIL_AT : _INV_TAIL_AT + _KEY_ROW]
        else:
            hdr = _header(spec, 0, token)[:_KEY_ROW].tobytes()
        self._done_queue.append((hdr, addr, tos, priority))

    def track_sends(self, generation: int, sends: Mapping[MessageKey, _Send]) -> None:
        """The sends whose STOP C takes, and the queued completed messages (receive thread, lock held).

        ``sends``: every started send by key (its ``template.row`` holds its header bytes), looked at only
        when ``generation`` changed since the last call. The table is rebuilt only when a send is new to
        it: a row left by a send that ended costs nothing but a STOP taken in C for a key Python no longer
        knows, which it then ignores, as it ignores such a STOP decoded by the assembler.
        """
        if self._done_queue:
            raw = self._done.view(np.uint8)
            state = self._done_state
            for hdr, addr, tos, priority in self._done_queue:
                at = int(state[0]) * DONE_DTYPE.itemsize
                raw[at : at + DONE_DTYPE.itemsize] = np.frombuffer(
                    _DONE_STRUCT.pack(hdr, _ip(addr[0]), addr[1], tos, priority), dtype=np.uint8
                )
                state[0] = (state[0] + 1) % DONE_ROWS
                state[1] = min(DONE_ROWS, state[1] + 1)
            self._done_queue.clear()
        if generation != self._sends_generation:
            self._sends_generation = generation
            known = self._send_index
            if all(key in known for key in sends):
                return
            pad = bytes(SEND_DTYPE.itemsize - _KEY_ROW)
            self._sends = np.frombuffer(
                bytearray(b"".join(s.template.row[:_KEY_ROW].tobytes() + pad for s in sends.values())),
                dtype=SEND_DTYPE,
            )
            self._send_keys = list(sends)
            self._send_index = set(self._send_keys)

    def probes(self) -> list[tuple[Message, int]]:
        """(message, probe id) of each expected message C saw a PROBE for in the last call."""
        return self._probed

    def stops(self) -> list[MessageKey]:
        """Sends C saw a STOP (no bitmap) for in the last call."""
        return [self._send_keys[i] for i in self._stopped]

    def answered_sources(self) -> list[int]:
        """Ranks whose probes C answered in the last call (they are alive)."""
        raw = self._done.view(np.uint8).reshape(DONE_ROWS, DONE_DTYPE.itemsize)
        return [int.from_bytes(raw[i, _SRC_AT : _SRC_AT + 2].tobytes(), "big") for i in self._answered_rows]

    def receive(self, timeout_s: float, loss: LossInjector | None) -> FastBatch | None:
        """Wait up to ``timeout_s`` for data and take one batch; ``None`` if nothing came."""
        need = self.slots * _SEGS_PER_SLOT  # draws one batch may consume; C runs another only with as many left
        if loss is not None and self._draws.size - self._draw_pos < need:
            fresh = loss.draw(need * _DRAW_BATCHES).astype(np.uint8)
            self._draws = np.concatenate((self._draws[self._draw_pos :], fresh))
            self._draw_pos = 0
        if self._msgs:  # C returns early once a message may complete (racy reads only move that moment)
            self._need[:] = [m.packets_before_ready | (0 if m.sender_done else NEED_WHOLE) for m in self._msgs]
        hint = self._index.get(self._hint_key, -1) if self._hint_key is not None else -1
        got = self._c.rx_batch(
            self.fd, self.buf, self.slot_bytes, self.seg_size, self.slots, max(0, int(timeout_s * 1000)),
            self._entries, len(self._entries), self._runs, self._draws if loss is not None else None,
            self._draw_pos, hint, self._hint_seq, self._gen_cell, self._generation, self.budget_us,
            self._done, self._done_state, self._sends, len(self._sends),
        )  # fmt: skip
        n, nruns, pos, injected, truncated, direct, hint, self._hint_seq, control, answered, stops = got[:11]
        touched, self._stopped, self._answered_rows = got[11:]
        self._hint_key = self._msgs[hint].key if 0 <= hint < len(self._msgs) else None
        if n == 0:
            self._probed = []
            return None
        self.calls += 1
        self.datagrams += n
        self.truncated += truncated
        self.direct += direct
        self.control += control
        self.answered += answered
        self.whole_stops += stops
        if loss is not None:
            self._draw_pos = pos
            loss.dropped += injected
        runs: list[tuple[int, int, int]] = self._runs[:nruns].tolist() if nruns else []
        batch = FastBatch(IngestResult(), runs, n, control, answered)
        self._resolve(batch, touched)
        self._probed = batch.probed
        return batch

    def _resolve(self, batch: FastBatch, touched: list[tuple[int, int, int, int, bool, bool, int, bool]]) -> None:
        """C's touched entries (index, packets, elements, priority, LAST, PROBE, probe id, STOP sent) as messages."""
        msgs = self._msgs
        for i, placed, elems, priority, last, probed, probe_id, stop_sent in touched:
            msg = msgs[i]
            if placed:
                batch.placed.append((msg, placed, elems, priority, stop_sent))
            if last:
                batch.lasts.append(msg)
            if probed:
                if stop_sent:  # completed in this call: its STOP answers the probe (Endpoint._stopped_in_batch)
                    batch.stops_saved += 1
                else:
                    batch.probed.append((msg, probe_id))

    def place_leftovers(self, asm: Assembler, batch: FastBatch, now: float) -> None:
        """Place ``batch``'s leftover runs in C once more if messages were posted meanwhile (lock held).

        The table is rebuilt only between calls, so packets of a message posted while C was receiving
        were left in the ring, and the assembler would place them in numpy. After :meth:`account`:
        rebuilds the table, places what now matches (same checks as the receive call), books it, and
        leaves in ``batch.runs`` only what the assembler must still see. LAST flags join
        ``batch.lasts``, applied after those runs as usual.
        """
        if not batch.runs or asm.generation == self._generation:
            return
        self.refresh(asm)
        if not self._msgs:
            return
        runs_in = np.array(batch.runs, dtype=np.int64)
        out = np.empty((int((runs_in[:, 1] // runs_in[:, 2] // 2 + 2).sum()), 3), dtype=np.int64)
        nruns, touched = self._c.place_runs(self.buf, runs_in, len(runs_in), self._entries, len(self._entries), out)
        self.replaced += len(runs_in)
        again = FastBatch(batch.result, [], 0)
        self._resolve(again, touched)
        for msg, placed, elems, priority, _ in again.placed:
            asm.account_placed(batch.result, msg, placed, priority, False, now, elems)
        batch.lasts += again.lasts
        batch.runs = out[:nruns].tolist()

    def account(self, asm: Assembler, batch: FastBatch, now: float) -> None:
        """Book what C placed in the last batch (caller holds the assembler's lock).

        A LAST flag is not applied here but by :meth:`apply_last`, after the
        batch's other packets went through the assembler: C placed packets out of
        their arrival order, and a packet that arrived before the LAST one must
        count before the sender is taken to be done.
        """
        if batch.control:  # accepted, as the assembler counts a control packet it decodes
            asm.counters.counts[DropReason.OK] += batch.control
            batch.result.accepted += batch.control
        self.stopped_whole.clear()
        for msg, placed, elems, priority, stop_sent in batch.placed:
            if stop_sent:
                self.stopped_whole.add(msg.key)
            if asm.message(msg.key) is msg:  # not completed or cancelled meanwhile
                asm.account_placed(batch.result, msg, placed, priority, False, now, elems)

    def apply_last(self, asm: Assembler, batch: FastBatch, result: IngestResult, now: float) -> None:
        """The LAST flags C saw in ``batch`` (after :meth:`account` and the leftover runs)."""
        for msg in batch.lasts:
            if asm.message(msg.key) is msg:
                asm.account_placed(result, msg, 0, msg.priority, True, now)


class FastSender:
    """Sends packets of a message with one C call: headers from a template, GSO, sendmmsg, no GIL."""

    def __init__(self, seg_size: int) -> None:
        self._c = _require()
        self.seg_size = seg_size
        self.refused = 0
        self.calls = 0
        """Calls of ``tx_send`` (each one a transition into C and one or more ``sendmmsg``)."""
        self.last_slept = 0.0
        """Seconds the last call slept between its bursts (paced calls only)."""
        self._ips: dict[str, int] = {}

    def send_packets(
        self,
        fd: int,
        template: HeaderTemplate,
        values: np.ndarray,
        seqs: np.ndarray,
        addr: tuple[str, int],
        *,
        priority: int,
        drop_class: int,
        tos: int,
        retransmit: bool = False,
        last: bool = False,
        rate: float = 0.0,
        burst: int = 0,
    ) -> int:
        """Send packets ``seqs`` (sorted) of ``template.spec`` read from ``values`` (:class:`PacketSender`).

        ``rate`` > 0 (bytes/s of header + payload): C paces the packets itself, in bursts of at most
        ``burst`` bytes (at least one packet) spaced at the rate, sleeping without the GIL in between
        (:attr:`last_slept`); 0: all at once.
        """
        pb, epp, n, last_bytes = template.sizes
        ip = self._ips.get(addr[0])
        if ip is None:
            ip = self._ips[addr[0]] = struct.unpack("!I", socket.inet_aton(addr[0]))[0]
        sent, refused, self.last_slept = self._c.tx_send(
            fd, template.row, values, np.ascontiguousarray(seqs, dtype=np.int64), pb, epp, n, last_bytes,
            _RETX if retransmit else 0, priority, drop_class, last, ip, addr[1], tos, self.seg_size, rate, burst,
        )  # fmt: skip
        self.refused += refused
        self.calls += 1
        return int(sent)


class FastClassifier:
    """:meth:`Policy.message_drop_classes` in one C pass: the sampled statistic, the quantile cuts and the
    classes, equal to the numpy reference bit for bit (``host/_fastpath_drop_classes.c``, ``drop_classes``).

    C takes the ``mean_abs`` and ``max_abs`` statistics of float32 and float64 tensors (the gradients the
    policy ranks); anything else (``rms``, other dtypes, samples over the C module's ``MAX_SAMPLE`` of 4,096
    elements) goes to the policy's numpy code, which is what C reproduces.
    """

    _DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

    def __init__(self, policy: Policy) -> None:
        self._c = _require()
        self.policy = policy
        self._cuts = {k: np.asarray(p.drop_quantiles, dtype=np.float64) for k, p in policy.kinds.items()}
        self._samples: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._max_abs = policy.statistic == "max_abs"
        self._in_c = policy.statistic in ("mean_abs", "max_abs")
        self.fallbacks = 0
        """Calls that went to the numpy reference."""

    def message_drop_classes(self, spec: MessageSpec, values: np.ndarray) -> np.ndarray | None:
        """Per-packet drop classes of one message, or None when it may lose no packet at all (as the policy)."""
        if not values.size or spec.max_missing_elems < spec.elems_per_packet:
            return None
        return self.drop_classes(values, spec.elems_per_packet, spec.kind)

    def drop_classes(self, values: np.ndarray, epp: int, kind: MessageKind) -> np.ndarray:
        """Drop class per packet of a tensor for a message of ``kind`` (:meth:`Policy.drop_classes`)."""
        cuts = self._cuts[kind]
        flat = np.asarray(values).reshape(-1)
        if (
            not cuts.size or not flat.size or epp <= 0 or not self._in_c or flat.dtype not in self._DTYPES
            or not flat.flags.c_contiguous
        ):  # fmt: skip
            self.fallbacks += 1
            return self.policy.drop_classes(values, epp, kind)
        tail = flat.size % epp
        sample = self._samples.get((epp, tail))
        if sample is None:
            sample = self._samples[(epp, tail)] = self.policy.sampled_elements(epp, tail)
        if sample[0].size > self._c.MAX_SAMPLE or sample[1].size > self._c.MAX_SAMPLE:
            self.fallbacks += 1
            return self.policy.drop_classes(values, epp, kind)
        out = np.empty(-(-flat.size // epp), dtype=np.uint8)
        self._c.drop_classes(flat, flat.dtype.itemsize == 8, epp, self._max_abs, sample[0], sample[1], cuts, out)
        return out


def _entry(msg: Message, token: int, stop_ip: int, stop_port: int, stop_tos: int, stop_prio: int) -> bytes:
    """The table entry of one message, packed (numpy's field-by-field writes cost ten times as much).

    ``stop_*``: where and in which class C sends the message's STOP once it completed it whole (ip 0: never).
    """
    spec = msg.spec
    full_rows = spec.num_elems // spec.elems_per_packet
    hdr = bytearray(_header(spec, 0, token)[:INVARIANT_BYTES])  # the short last packet's differs in its length
    inv = bytes(hdr) if full_rows else bytes(INVARIANT_BYTES)
    tail_bytes = 0
    inv_tail = bytes(INVARIANT_BYTES)
    if full_rows < spec.pkt_count:  # a short last packet
        tail_bytes = int(spec.last_packet_bytes)
        hdr[_LEN_AT : _LEN_AT + 2] = tail_bytes.to_bytes(2, "big")
        inv_tail = bytes(hdr)
    if msg.accumulate:
        op = _OPS[spec.dtype]
    else:  # a message that completes only whole may be received straight into place (host/_fastpath_rx.c)
        op = _STORE_RELIABLE if spec.max_missing_elems == 0 else _STORE
    return _ENTRY_STRUCT.pack(
        inv, full_rows, msg.view.ctypes.data, msg.received.ctypes.data, spec.packet_bytes, spec.elems_per_packet,
        op, tail_bytes, inv_tail, stop_ip, stop_port, stop_tos, stop_prio,
    )  # fmt: skip


def _ip(host: str) -> int:
    """An IPv4 address as the C tables keep it (host byte order)."""
    return int(struct.unpack("!I", socket.inet_aton(host))[0])


def _header(spec: MessageSpec, seq: int, token: int) -> np.ndarray:
    """Packet ``seq``'s header with flags, priority and drop class zero (one struct pack, not the batch builder)."""
    key = spec.key
    hdr = Header(
        PacketType.DATA, job_id=key.job_id, src=key.src, token=token, msg_id=key.msg_id, round=key.round,
        layer=spec.layer, kind=spec.kind, dtype=spec.dtype, seq=seq, pkt_count=spec.pkt_count,
        offset=seq * spec.elems_per_packet,
        length=spec.last_packet_bytes if seq == spec.pkt_count - 1 else spec.packet_bytes,
    )  # fmt: skip
    return np.frombuffer(hdr.pack(), dtype=np.uint8).copy()


def _placeable(msg: Message) -> bool:
    """Messages the C path can place: not empty, and with a reduce op in C if accumulating."""
    return msg.spec.num_elems > 0 and (not msg.accumulate or msg.spec.dtype in _OPS)
