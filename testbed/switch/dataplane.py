"""The C data plane (``dlcp.testbed.switch._dataplane``) behind the :class:`TableBackend` interface.

:class:`DataPlane` owns one C switch: its ports, its tables and counters, and its
data-plane thread. The P4Runtime server hands it canonical entries
(:mod:`dlcp.testbed.switch.entries`); it translates each into one C call, made
under the data plane's lock, so the data-plane thread sees every update whole or
not at all.

Action-profile members and groups have P4Runtime ids (any 32-bit number); C keeps
them in fixed slots, and this class maps ids to slots. A group's members are
selected in the order the members were created, each repeated by its weight
(BMv2 orders a group's members by handle, i.e. by creation).

Example::

    dp = DataPlane(virtual_clock=True)
    dp.add_port(PortConfig(port=1, interface=None))
    dp.write_entry(Op.INSERT, TableEntry(names.IPV4_ROUTES, (FieldMatch("dst_addr", MatchKind.LPM, 0x0A000000, 8),),
                                         action=Action(names.SET_NEXT_HOP_GROUP, (("group", 1),))))
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlcp.p4 import names, p4info, sizes
from dlcp.p4.paths import COMMITTED_P4INFO
from dlcp.testbed.switch import _dataplane as _c  # type: ignore[attr-defined]
from dlcp.testbed.switch.config import DEFAULT_MAX_FRAME, PortConfig, SwitchConfig, burst_for
from dlcp.testbed.switch.entries import (
    Action,
    BackendError,
    FieldMatch,
    MatchKind,
    Op,
    ProfileGroup,
    ProfileMember,
    TableEntry,
)

log = logging.getLogger(__name__)

# Key and parameter names of the P4Info that this backend reads (tests/switch check them against it).
KEYS: dict[str, tuple[str, ...]] = {
    names.IPV4_ROUTES: ("dst_addr",),
    names.NEXT_HOPS: ("group",),
    names.DLCP_PORTS: ("dst_port",),
    names.DLCP_CLASSES: ("job_id", "packet_type", "priority", "drop_class", "kind"),
    names.DLCP_DROP_THRESHOLDS: ("queue", "drop_class"),
}
PARAMS: dict[str, tuple[str, ...]] = {
    names.SET_NEXT_HOP_GROUP: ("group",),
    names.SET_NEXT_HOP: ("port", "src_mac", "dst_mac"),
    names.SET_QUEUE: ("queue",),
    names.MARK_DROP_ELIGIBLE: ("queue",),
    names.DROP_ABOVE: ("threshold",),
    names.TRIM_ABOVE: ("threshold",),
}
NO_ACTION = "NoAction"
_COUNTERS = {names.FORWARDED: _c.CTR_FORWARDED, names.DROPPED: _c.CTR_DROPPED, names.TRIMMED: _c.CTR_TRIMMED}
_OPS = {Op.INSERT: _c.OP_INSERT, Op.MODIFY: _c.OP_MODIFY, Op.DELETE: _c.OP_DELETE}
_CLASS_ACTIONS = {
    names.USE_PACKET_PRIORITY: _c.CLASS_USE_PRIORITY,
    names.SET_QUEUE: _c.CLASS_SET_QUEUE,
    names.MARK_DROP_ELIGIBLE: _c.CLASS_MARK_ELIGIBLE,
}
_CONGESTION_ACTIONS = {
    names.ADMIT_ALL: _c.CONGESTION_ADMIT,
    names.DROP_ABOVE: _c.CONGESTION_DROP,
    names.TRIM_ABOVE: _c.CONGESTION_TRIM,
}
REASONS: tuple[str, ...] = tuple(_c.reasons())
"""Drop reasons by code, as the C data plane names them (``stats()``)."""
LOSS_ONE = 1 << 32
"""C draws 32-bit numbers: a loss threshold of this drops every frame."""


@functools.cache
def class_key_layout() -> tuple[tuple[str, int, int], ...]:
    """``(key, width, shift)`` of every ``dlcp_classes`` key: widths from the P4Info, shifts from C."""
    fields = p4info.load(COMMITTED_P4INFO).tables[names.DLCP_CLASSES].match_fields
    keys = KEYS[names.DLCP_CLASSES]
    widths = {f.name: f.bitwidth for f in fields}
    return tuple((k, widths[k], shift) for k, shift in zip(keys, _c.CLASS_KEY_SHIFTS, strict=True))


@dataclass(frozen=True)
class Verdict:
    """What the switch did with one injected frame (virtual ports)."""

    dropped: bool
    reason: str
    port: int
    queue: int
    trimmed: bool
    length: int


def _code(rc: int, what: str) -> None:
    if rc == _c.E_OK:
        return
    if rc == _c.E_FULL:
        raise BackendError(f"{what}: table full", resource_exhausted=True)
    if rc == _c.E_EXISTS:
        raise BackendError(f"{what}: already installed")
    if rc == _c.E_MISSING:
        raise BackendError(f"{what}: not installed")
    raise BackendError(f"{what}: invalid")


def _fields(entry: TableEntry) -> dict[str, FieldMatch]:
    keys = KEYS.get(entry.table)
    if keys is None:
        raise BackendError(f"no table {entry.table!r}")
    out = {m.name: m for m in entry.match}
    extra = set(out) - set(keys)
    if extra:
        raise BackendError(f"{entry.table}: no key field(s) {sorted(extra)}")
    return out


def _exact(fields: dict[str, FieldMatch], name: str, table: str) -> int:
    m = fields.get(name)
    if m is None or m.kind is not MatchKind.EXACT:
        raise BackendError(f"{table}: key {name!r} needs an exact match")
    return m.value


def _ternary(fields: dict[str, FieldMatch], name: str, width: int) -> tuple[int, int]:
    m = fields.get(name)
    full = (1 << width) - 1
    if m is None:
        return 0, 0
    if m.kind is MatchKind.TERNARY:
        return m.value & m.arg, m.arg & full
    if m.kind is MatchKind.OPTIONAL:
        return m.value, full
    if m.kind is MatchKind.EXACT:
        return m.value, full
    raise BackendError(f"key {name!r} is ternary, not {m.kind.value}")


def _param(action: Action, name: str) -> int:
    try:
        return action.param(name)
    except KeyError:
        raise BackendError(f"{action.name}: missing parameter {name!r}") from None


class DataPlane:
    """One C software switch: ports, tables, counters, statistics, and its data-plane thread.

    Implements :class:`dlcp.testbed.switch.entries.TableBackend`. Thread-safe: table
    calls may come from any thread (C serialises them with the data plane).
    """

    def __init__(self, *, max_frame: int = DEFAULT_MAX_FRAME, virtual_clock: bool = False, seed: int = 0) -> None:
        self._sw = _c.Switch(max_frame=max_frame, virtual_clock=virtual_clock)
        self.max_frame = max_frame
        self.virtual_clock = virtual_clock
        self.seed = seed
        self._lock = threading.Lock()
        self._ports: dict[int, PortConfig] = {}
        self._paused: dict[int, int] = {}
        self._member_slot: dict[int, int] = {}
        self._member_order: dict[int, int] = {}
        self._member_seq = 0
        self._group_slot: dict[int, int] = {}
        self._group_members: dict[int, tuple[tuple[int, int], ...]] = {}
        self._next_hop_refs: dict[int, tuple[str, int]] = {}
        self._free_members = list(range(_c.MAX_MEMBERS - 1, -1, -1))
        self._free_groups = list(range(sizes.TABLE_SIZES["ECMP_GROUPS"] - 1, -1, -1))

    @classmethod
    def from_config(cls, cfg: SwitchConfig) -> DataPlane:
        dp = cls(max_frame=cfg.max_frame, seed=cfg.seed)
        try:
            for p in cfg.ports:
                dp.add_port(p, rx_block_bytes=cfg.rx_block_bytes, rx_blocks=cfg.rx_blocks)
        except BaseException:
            dp.close()
            raise
        return dp

    # ---- ports ----

    def add_port(
        self, cfg: PortConfig, *, rx_block_bytes: int = 1 << 20, rx_blocks: int = 16, rx_block_timeout_ms: int = 1
    ) -> None:
        """Attach a port (opens its AF_PACKET socket in the calling thread's network namespace).

        The receive ring has ``rx_blocks`` blocks of ``rx_block_bytes``; the kernel hands a block
        over when it is full or ``rx_block_timeout_ms`` after its first frame.
        """
        self._sw.add_port(cfg.port, cfg.interface, cfg.buffer_bytes, rx_block_bytes, rx_blocks, rx_block_timeout_ms)
        self._ports[cfg.port] = cfg
        self._paused[cfg.port] = 0
        self.configure_port(cfg)

    def configure_port(self, cfg: PortConfig) -> None:
        """Change a port's shaper and impairments (its buffer and interface stay)."""
        if cfg.port not in self._ports:
            raise ValueError(f"no port {cfg.port}")
        burst = cfg.burst_bytes or (burst_for(cfg.rate_bps, self.max_frame) if cfg.rate_bps else 0)
        loss = [min(LOSS_ONE, round(p * LOSS_ONE)) for p in cfg.loss]
        seed = self.seed * 1_000_003 + cfg.port if self.seed else 0
        with self._lock:  # the paused mask is read here and changed by pause(), maybe from another thread
            self._sw.set_port(cfg.port, cfg.rate_bps, burst, cfg.delay_ns, loss, seed, self._paused[cfg.port])
            self._ports[cfg.port] = cfg

    @property
    def ports(self) -> dict[int, PortConfig]:
        return dict(self._ports)

    def pause(self, port: int, queue: int, paused: bool = True) -> None:
        """Stop (or resume) serving one egress queue: it keeps filling; a test's stalled queue."""
        with self._lock:
            mask = self._paused[port]
            mask = mask | (1 << queue) if paused else mask & ~(1 << queue)
            self._paused[port] = mask
            self._sw.set_paused(port, mask)

    def set_plain_forwarding(self, port: int, peer: int | None) -> None:
        """Benchmark baseline: frames from ``port`` go straight out of ``peer``, no pipeline, no queues."""
        self._sw.set_plain_peer(port, -1 if peer is None else peer)

    def start(self) -> None:
        self._sw.start()

    def stop(self) -> None:
        self._sw.stop()

    @property
    def running(self) -> bool:
        return bool(self._sw.running())

    def close(self) -> None:
        """Stop the thread and close every port's socket and ring now (not when the object goes, which
        may be in whichever thread drops the last reference: a gRPC worker's, say). Tables, counters and
        statistics stay readable; ports cannot be added nor the thread started again."""
        self._sw.close()

    def __enter__(self) -> DataPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- TableBackend ----

    def write_entry(self, op: Op, entry: TableEntry) -> None:
        with self._lock:
            fields = _fields(entry)
            table = entry.table
            if table == names.NEXT_HOPS:
                self._write_next_hop(op, entry, fields)
                return
            if op is not Op.DELETE and entry.action is None:
                raise BackendError(f"{table}: an entry of this table takes an action, not a profile member or group")
            if table == names.IPV4_ROUTES:
                m = fields.get("dst_addr")
                prefix, plen = (0, 0) if m is None else (m.value, m.arg)
                if m is not None and m.kind is not MatchKind.LPM:
                    raise BackendError(f"{table}: dst_addr is an LPM key")
                action, group = self._route_action(entry.action) if entry.action else (0, 0)
                _code(self._sw.route(_OPS[op], prefix, plen, action, group), f"{table} {prefix:#010x}/{plen}")
            elif table == names.DLCP_PORTS:
                port = _exact(fields, "dst_port", table)
                if entry.action is not None and entry.action.name != names.MARK_DLCP:
                    raise BackendError(f"{table}: entries take {names.MARK_DLCP}")
                if op is Op.MODIFY:
                    return  # mark_dlcp has no parameters: nothing changes
                _code(self._sw.dlcp_port(port, op is Op.INSERT), f"{table} {port}")
            elif table == names.DLCP_CLASSES:
                value = mask = 0
                for key, width, shift in class_key_layout():
                    v, mk = _ternary(fields, key, width)
                    value |= v << shift
                    mask |= mk << shift
                action, queue = self._class_action(entry.action) if entry.action else (0, 0)
                _code(
                    self._sw.dlcp_class(_OPS[op], value, mask, entry.priority, action, queue),
                    f"{table} priority {entry.priority}",
                )
            elif table == names.DLCP_DROP_THRESHOLDS:
                queue = _exact(fields, "queue", table)
                drop_class = _exact(fields, "drop_class", table)
                action, threshold = self._congestion_action(entry.action) if entry.action else (0, 0)
                _code(
                    self._sw.threshold(_OPS[op], queue, drop_class, action, threshold),
                    f"{table} ({queue}, {drop_class})",
                )
            else:  # pragma: no cover - _fields refused it
                raise BackendError(f"no table {table!r}")

    def _write_next_hop(self, op: Op, entry: TableEntry, fields: dict[str, FieldMatch]) -> None:
        group = _exact(fields, "group", names.NEXT_HOPS)
        what = f"{names.NEXT_HOPS} {group}"
        if op is Op.DELETE:
            _code(self._sw.next_hop(_c.OP_DELETE, group, _c.NH_MEMBER, 0), what)
            self._next_hop_refs.pop(group, None)
            return
        if entry.member_id is not None:
            slot = self._member_slot.get(entry.member_id)
            if slot is None:
                raise BackendError(f"{what}: no member {entry.member_id}")
            kind, ref, target = _c.NH_MEMBER, slot, ("member", entry.member_id)
        elif entry.group_id is not None:
            slot = self._group_slot.get(entry.group_id)
            if slot is None:
                raise BackendError(f"{what}: no group {entry.group_id}")
            kind, ref, target = _c.NH_GROUP, slot, ("group", entry.group_id)
        else:
            raise BackendError(f"{what}: a table with an action selector takes a member or a group")
        _code(self._sw.next_hop(_OPS[op], group, kind, ref), what)
        self._next_hop_refs[group] = target

    @staticmethod
    def _route_action(action: Action) -> tuple[int, int]:
        if action.name == names.SET_NEXT_HOP_GROUP:
            return _c.ROUTE_GROUP, _param(action, "group")
        if action.name == names.ROUTING_DROP:
            return _c.ROUTE_DROP, 0
        raise BackendError(f"{names.IPV4_ROUTES}: no action {action.name!r}")

    @staticmethod
    def _class_action(action: Action) -> tuple[int, int]:
        code = _CLASS_ACTIONS.get(action.name)
        if code is None:
            raise BackendError(f"{names.DLCP_CLASSES}: no action {action.name!r}")
        return code, (_param(action, "queue") if code != _c.CLASS_USE_PRIORITY else 0)

    @staticmethod
    def _congestion_action(action: Action) -> tuple[int, int]:
        code = _CONGESTION_ACTIONS.get(action.name)
        if code is None:
            raise BackendError(f"{names.DLCP_DROP_THRESHOLDS}: no action {action.name!r}")
        return code, (_param(action, "threshold") if code != _c.CONGESTION_ADMIT else 0)

    def set_default_action(self, table: str, action: Action) -> None:
        with self._lock:
            if table == names.IPV4_ROUTES:
                code, group = self._route_action(action)
                _code(self._sw.route_default(code, group), f"{table} default")
            elif table == names.DLCP_CLASSES:
                code, queue = self._class_action(action)
                _code(self._sw.class_default(code, queue), f"{table} default")
            elif table == names.DLCP_DROP_THRESHOLDS:
                code, threshold = self._congestion_action(action)
                _code(self._sw.threshold_default(code, threshold), f"{table} default")
            elif table == names.DLCP_PORTS:
                if action.name not in (NO_ACTION, names.MARK_DLCP):
                    raise BackendError(f"{table}: no action {action.name!r}")
                _code(self._sw.dlcp_port_default(action.name == names.MARK_DLCP), f"{table} default")
            elif table == names.NEXT_HOPS:
                raise BackendError(f"{table} has an action selector: it has no default action")
            else:
                raise BackendError(f"no table {table!r}")

    def write_member(self, op: Op, member: ProfileMember) -> None:
        with self._lock:
            if member.profile != names.ECMP_SELECTOR:
                raise BackendError(f"no action profile {member.profile!r}")
            mid = member.member_id
            what = f"{member.profile} member {mid}"
            if op is Op.DELETE:
                slot = self._member_slot.get(mid)
                if slot is None:
                    raise BackendError(f"{what}: not installed")
                users = [f"group {g}" for g, ms in self._group_members.items() if any(m == mid for m, _ in ms)]
                users += [f"entry {g}" for g, t in self._next_hop_refs.items() if t == ("member", mid)]
                if users:
                    raise BackendError(f"{what}: still used by {users}")
                _code(self._sw.member_clear(slot), what)
                del self._member_slot[mid], self._member_order[mid]
                self._free_members.append(slot)
                return
            a = member.action
            if a.name == names.SET_NEXT_HOP:
                port = _param(a, "port")
                smac = _param(a, "src_mac").to_bytes(6, "big")
                dmac = _param(a, "dst_mac").to_bytes(6, "big")
                code = _c.MEMBER_SET_NEXT_HOP
            elif a.name == names.ECMP_DROP:
                port, smac, dmac, code = 0, bytes(6), bytes(6), _c.MEMBER_DROP
            else:
                raise BackendError(f"{what}: no action {a.name!r} in {names.NEXT_HOPS}")
            if op is Op.INSERT:
                if mid in self._member_slot:
                    raise BackendError(f"{what}: already installed")
                if not self._free_members:
                    raise BackendError(f"{what}: action selector full", resource_exhausted=True)
                slot = self._free_members.pop()
                rc = self._sw.member(slot, code, port, smac, dmac)
                if rc != _c.E_OK:
                    self._free_members.append(slot)
                    _code(rc, what)
                self._member_slot[mid] = slot
                self._member_order[mid] = self._member_seq
                self._member_seq += 1
            else:
                slot = self._member_slot.get(mid)
                if slot is None:
                    raise BackendError(f"{what}: not installed")
                _code(self._sw.member(slot, code, port, smac, dmac), what)

    def write_group(self, op: Op, group: ProfileGroup) -> None:
        with self._lock:
            if group.profile != names.ECMP_SELECTOR:
                raise BackendError(f"no action profile {group.profile!r}")
            gid = group.group_id
            what = f"{group.profile} group {gid}"
            if op is Op.DELETE:
                slot = self._group_slot.get(gid)
                if slot is None:
                    raise BackendError(f"{what}: not installed")
                users = [g for g, t in self._next_hop_refs.items() if t == ("group", gid)]
                if users:
                    raise BackendError(f"{what}: still used by {names.NEXT_HOPS} entries {users}")
                _code(self._sw.group_clear(slot), what)
                del self._group_slot[gid], self._group_members[gid]
                self._free_groups.append(slot)
                return
            slots = self._selection(group, what)
            if op is Op.INSERT:
                if gid in self._group_slot:
                    raise BackendError(f"{what}: already installed")
                if not self._free_groups:
                    raise BackendError(f"{what}: no free group", resource_exhausted=True)
                slot = self._free_groups.pop()
                rc = self._sw.group(slot, slots)
                if rc != _c.E_OK:
                    self._free_groups.append(slot)
                    _code(rc, what)
                self._group_slot[gid] = slot
            else:
                slot = self._group_slot.get(gid)
                if slot is None:
                    raise BackendError(f"{what}: not installed")
                _code(self._sw.group(slot, slots), what)
            self._group_members[gid] = tuple(group.members)

    def _selection(self, group: ProfileGroup, what: str) -> list[int]:
        if group.max_size and len(group.members) > group.max_size:
            raise BackendError(f"{what}: {len(group.members)} members, max_size {group.max_size}")
        seen = set()
        for mid, weight in group.members:
            if mid not in self._member_slot:
                raise BackendError(f"{what}: no member {mid}")
            if weight < 1:
                raise BackendError(f"{what}: member {mid} has weight {weight} (at least 1)")
            if mid in seen:
                raise BackendError(f"{what}: member {mid} given twice")
            seen.add(mid)
        # Checked before the slots are laid out: one member of weight 2**31 - 1 would otherwise take gigabytes.
        total = sum(weight for _, weight in group.members)
        if total > _c.MAX_GROUP_SLOTS:
            raise BackendError(
                f"{what}: weights add up to {total}, at most {_c.MAX_GROUP_SLOTS}", resource_exhausted=True
            )
        ordered = sorted(group.members, key=lambda mw: self._member_order[mw[0]])
        return [self._member_slot[mid] for mid, weight in ordered for _ in range(weight)]

    def read_counter(self, counter: str, index: int) -> tuple[int, int]:
        which = self._counter(counter, index)
        packets, nbytes = self._sw.counter_cell(which, index)
        return int(packets), int(nbytes)

    def write_counter(self, counter: str, index: int, packets: int, byte_count: int) -> None:
        self._sw.counter_write(self._counter(counter, index), index, packets, byte_count)

    def counter_size(self, counter: str) -> int:
        if counter not in _COUNTERS:
            raise BackendError(f"no counter {counter!r}")
        return sizes.PORT_CLASS_SLOTS

    @staticmethod
    def _counter(counter: str, index: int) -> int:
        which = _COUNTERS.get(counter)
        if which is None:
            raise BackendError(f"no counter {counter!r}")
        if not 0 <= index < sizes.PORT_CLASS_SLOTS:
            raise BackendError(f"{counter}: index {index} out of range 0..{sizes.PORT_CLASS_SLOTS - 1}")
        return int(which)

    def reset(self) -> None:
        with self._lock:
            self._sw.reset_tables()
            self._member_slot.clear()
            self._member_order.clear()
            self._group_slot.clear()
            self._group_members.clear()
            self._next_hop_refs.clear()
            self._free_members = list(range(_c.MAX_MEMBERS - 1, -1, -1))
            self._free_groups = list(range(sizes.TABLE_SIZES["ECMP_GROUPS"] - 1, -1, -1))

    # ---- counters and statistics in bulk ----

    def counters(self, counter: str) -> tuple[np.ndarray, np.ndarray]:
        """(packets, bytes) of every cell of one P4 counter, index ``port << CLASS_BITS | class``."""
        packets, nbytes = self._sw.counter(self._counter(counter, 0))
        return np.frombuffer(packets, dtype=np.uint64), np.frombuffer(nbytes, dtype=np.uint64)

    def reset_timing(self) -> None:
        """Forget ``first_rx_ns``/``last_tx_ns`` of :meth:`stats` (benchmarks time a run with them)."""
        self._sw.reset_timing()

    def thread_times(self) -> tuple[float, float] | None:
        """The data-plane thread's seconds on a CPU and seconds runnable but waiting for one (the
        kernel's scheduler statistics); None while no thread runs. The second grows when the machine
        is loaded: the thread then forwards late, in bursts, and whatever a test assumes of its timing
        holds only if this stayed small."""
        tid = self._sw.stats()["thread_id"]
        if not tid:
            return None
        try:
            fields = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
        except OSError:
            return None  # the thread ended meanwhile
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9

    def stats(self) -> dict[str, Any]:
        """Per port: rx and ingress drops by reason; per class: enqueued, sent, dropped by reason,
        trimmed, bytes, depth and its high-water marks. Keys are port numbers."""
        out: dict[str, Any] = self._sw.stats()
        return out

    # ---- virtual ports (tests) ----

    def inject(self, port: int, frame: bytes) -> Verdict:
        drop, reason, out_port, queue, trimmed, length = self._sw.inject(port, frame)
        return Verdict(bool(drop), reason, out_port, queue, bool(trimmed), length)

    def set_time(self, ns: int) -> None:
        self._sw.set_time(ns)

    @property
    def now_ns(self) -> int:
        return int(self._sw.now())

    def drain(self) -> list[tuple[int, bytes]]:
        """Frames the virtual ports send at the current clock, in order: ``(port, frame)``."""
        out: list[tuple[int, bytes]] = self._sw.drain()
        return out


def ecmp_hash(src: int, dst: int, proto: int, sport: int, dport: int, entropy: int) -> int:
    """The selector's hash (CRC32 over the v1model field list), for tests and tools."""
    return int(_c.ecmp_hash(src, dst, proto, sport, dport, entropy))
