"""``dlcp switch bench``: forwarding speed of the software switch, against baselines measured in the same run.

An application on top of the testbed: the switch and the sender come from
``dlcp.testbed.switch``, its veth rig from ``dlcp.testbed.rig`` and BMv2's from
``dlcp.testbed.bmv2`` (imported when a benchmark runs).

A 2-port switch on veth pairs in a namespace of its own (``dlcpS1``/``dlcpH1``,
``dlcpS2``/``dlcpH2``); a C sender (AF_PACKET, ``sendmmsg`` batches) sends into
``dlcpH1``, and what comes out is read off ``dlcpH2``'s kernel counters (no
receiver costs CPU). Systems:

* ``dlcp``: the full pipeline with tables loaded (routes, an ECMP group, DLCP
  ports, classification marking the traffic drop-eligible, thresholds above
  what the queues reach), egress queues and all;
* ``plain``: the same rings and sends, no pipeline and no queues: every frame
  received on port 1 is sent out of port 2 straight from the receive ring (the
  limit of this design on this machine);
* ``bmv2``: ``simple_switch`` with the DLCP program and the same entries, when
  p4c and BMv2 are installed.

Two ways to offer load, because on a small machine the sender can be slower
than the switch it measures:

* ``drain``: with the switch stopped, the sender fills the switch's receive
  ring; then the switch starts and its rate is the frames it sent over the
  time from its first frame taken to its last frame sent. The sender cannot
  be the limit. (Not for BMv2, whose receive path has no such ring.)
* ``stream``: sender and switch run together for a fixed time; the result is
  frames out per second, with the sender's own rate shown beside it.

Frames are IPv4/UDP to the DLCP port with a DLCP DATA header (sequence numbers
vary); a 64-byte frame is too short for a DLCP header (82 bytes with it) and
goes through the pipeline as ordinary UDP. Gbit/s counts Ethernet frame bytes
(no preamble, FCS or gap).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import TYPE_CHECKING, Any

from dlcp.frames import ETH_HEADER, IPV4_HEADER, UDP_HEADER, build_udp_frame
from dlcp.p4 import names, vectors
from dlcp.protocol import NUM_DROP_CLASSES, NUM_PRIORITY_CLASSES, UDP_PORT, PacketType
from dlcp.testbed.toolchain import tools
from dlcp.wire import Header

if TYPE_CHECKING:
    from dlcp.testbed.rig import VethSwitch

log = logging.getLogger(__name__)

SIZES = (64, 1500, 9000)
BENCH_DLCP_PORTS = 8
"""DLCP port entries of the loaded table set, besides the default port."""
SYSTEMS = ("dlcp", "plain", "bmv2")
MODES = ("drain", "stream")
SEND_BATCH = 64
TEMPLATES = 64
_BLOCK = 1 << 20
DRAIN_BLOCK_TIMEOUT_MS = 200
"""Drain mode fills the ring with the switch stopped: blocks must close when full, not on a 1 ms timer."""
_TPACKET3_FRAME_OVERHEAD = 96 - ETH_HEADER.size  # header + sockaddr_ll, aligned; the frame starts at its MAC header


@dataclass
class BenchResult:
    system: str
    mode: str
    frame_bytes: int
    frames: int
    seconds: float
    pps: float
    gbit_per_s: float
    """Ethernet frame bytes x 8 per second, in 10^9 bits."""
    offered_pps: float
    cpu_pps: float = 0.0
    """Frames per second of the data-plane thread's own CPU time (first frame taken to last sent): what
    the switch would forward with a core to itself. Far steadier than ``pps`` on a shared machine."""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def frames_of(size: int, count: int = TEMPLATES) -> list[bytes]:
    """``count`` frames of ``size`` bytes to 10.2.0.1, DLCP DATA when big enough, sequence numbers 0..count-1."""
    out = []
    for i in range(count):
        hdr = Header(type=PacketType.DATA, seq=i, priority=1, drop_class=1, job_id=1).pack()
        room = size - ETH_HEADER.size - IPV4_HEADER.size - UDP_HEADER.size
        payload = hdr + bytes(room - len(hdr)) if room >= len(hdr) else bytes(max(0, room))
        out.append(
            build_udp_frame(
                eth_src="02:dc:00:00:01:01",
                eth_dst="02:dc:00:00:00:01",
                src_ip="10.1.0.1",
                dst_ip="10.2.0.1",
                sport=40000 + i % 4,
                dport=UDP_PORT,
                payload=payload,
            )
        )
    return out


def bench_entries() -> list[vectors.Entry]:
    """A loaded table set: 64 routes, an ECMP group to port 2, DLCP ports, classes and thresholds."""
    A = vectors.Action
    entries = [
        vectors.Entry(
            names.IPV4_ROUTES,
            {"dst_addr": {"lpm": [f"10.{100 + i}.0.0", 16]}},
            A(names.SET_NEXT_HOP_GROUP, {"group": 2}),
        )
        for i in range(63)
    ]
    entries.append(
        vectors.Entry(
            names.IPV4_ROUTES, {"dst_addr": {"lpm": ["10.2.0.0", 16]}}, A(names.SET_NEXT_HOP_GROUP, {"group": 1})
        )
    )
    hop = A(names.SET_NEXT_HOP, {"port": 2, "src_mac": "02:dc:00:00:00:02", "dst_mac": "02:dc:00:00:02:01"})
    entries.append(vectors.Entry(names.NEXT_HOPS, {"group": {"exact": 1}}, action_set=(hop,)))
    entries.append(vectors.Entry(names.NEXT_HOPS, {"group": {"exact": 2}}, action_set=(hop,)))
    entries += [
        vectors.Entry(names.DLCP_PORTS, {"dst_port": {"exact": 20000 + i}}, A(names.MARK_DLCP, {}))
        for i in range(BENCH_DLCP_PORTS)
    ]
    for prio in range(NUM_PRIORITY_CLASSES):
        m = {k: {"ternary": [0, 0]} for k in ("job_id", "packet_type", "drop_class", "kind")}
        m["priority"] = {"ternary": [prio, 255]}
        entries.append(
            vectors.Entry(names.DLCP_CLASSES, m, A(names.MARK_DROP_ELIGIBLE, {"queue": prio}), priority=10 + prio)
        )
    for q in range(NUM_PRIORITY_CLASSES):  # one egress queue per priority class
        for d in range(1, NUM_DROP_CLASSES):
            entries.append(
                vectors.Entry(
                    names.DLCP_DROP_THRESHOLDS,
                    {"queue": {"exact": q}, "drop_class": {"exact": d}},
                    A(names.DROP_ABOVE, {"threshold": 1 << 20}),
                )
            )
    return entries


def ring_frames(size: int, blocks: int) -> int:
    """How many frames of ``size`` bytes a TPACKET_V3 ring of ``blocks`` 1 MiB blocks holds (a margin kept)."""
    per = (_TPACKET3_FRAME_OVERHEAD + size + 15) & ~15
    return ((_BLOCK - 64) // per) * max(1, blocks - 2)


def _blast(
    ns_enter: Callable[[], Any], ifname: str, frames: list[bytes], count: int, seconds: float
) -> tuple[int, float]:
    from dlcp.testbed.switch import _dataplane as _c  # type: ignore[attr-defined]

    t0 = time.monotonic()
    with ns_enter():
        sent = int(_c.blast(ifname, frames, count, seconds, SEND_BATCH))
    return sent, time.monotonic() - t0


class DlcpTarget:
    """The software switch (``plain``: the plain forwarder) on a veth rig."""

    def __init__(self, plain: bool, ring_blocks: int) -> None:
        self.plain = plain
        self.ring_blocks = ring_blocks

    @contextmanager
    def open(self) -> Iterator[VethSwitch]:
        from dlcp.testbed.rig import VethSwitch
        from dlcp.testbed.switch import vector_run

        with VethSwitch(
            [1, 2],
            host_sockets=False,
            start=False,
            rx_blocks=self.ring_blocks,
            rx_block_timeout_ms=DRAIN_BLOCK_TIMEOUT_MS,
            tag="bench",
        ) as rig:
            ids = vector_run.IdAllocator()
            for e in bench_entries():
                vector_run.install(rig.switch, e, ids)
            if self.plain:
                rig.switch.set_plain_forwarding(1, 2)
            yield rig

    def drain(self, rig: VethSwitch, size: int) -> BenchResult:
        from dlcp.testbed.rig import host_if

        dp = rig.switch
        dp.stop()
        count = ring_frames(size, self.ring_blocks)
        frames = frames_of(size)
        before = rig.ns.link_stats(host_if(2))["rx_packets"]
        ring0 = rig.switch.stats()["ports"][1]["ring_dropped"]
        sent, blast_s = _blast(rig.ns.entered, host_if(1), frames, count, 60.0)
        time.sleep(1.5 * DRAIN_BLOCK_TIMEOUT_MS / 1000)  # the kernel closes the last block on its timer
        dp.reset_timing()
        dp.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.02)
            st = dp.stats()
            if st["last_tx_ns"] and time.monotonic_ns() - st["last_tx_ns"] > 50_000_000:
                break
        st = dp.stats()
        out = rig.ns.link_stats(host_if(2))["rx_packets"] - before
        secs = max(1e-9, (st["last_tx_ns"] - st["first_rx_ns"]) / 1e9)
        ring_dropped = st["ports"][1]["ring_dropped"] - ring0
        note = f"{ring_dropped} of {sent} frames did not fit the ring" if ring_dropped else ""
        return _result(self.name, "drain", size, out, secs, sent / blast_s, note, _cpu_s(st))

    def stream(self, rig: VethSwitch, size: int, seconds: float) -> BenchResult:
        from dlcp.testbed.rig import host_if

        dp = rig.switch
        if not dp.running:
            dp.start()
        frames = frames_of(size)
        before = rig.ns.link_stats(host_if(2))["rx_packets"]
        dp.reset_timing()
        sent, secs = _blast(rig.ns.entered, host_if(1), frames, 1 << 62, seconds)
        time.sleep(0.05)
        out = rig.ns.link_stats(host_if(2))["rx_packets"] - before
        note = "sender-limited" if out >= 0.95 * sent else ""
        return _result(self.name, "stream", size, out, secs, sent / secs, note, _cpu_s(dp.stats()))

    @property
    def name(self) -> str:
        return "plain" if self.plain else "dlcp"


def _cpu_s(st: dict[str, Any]) -> float:
    return max(0, st["last_tx_cpu_ns"] - st["first_rx_cpu_ns"]) / 1e9


def _result(
    system: str, mode: str, size: int, frames: int, secs: float, offered: float, note: str, cpu_s: float = 0.0
) -> BenchResult:
    pps = frames / secs if secs > 0 else 0.0
    cpu_pps = frames / cpu_s if cpu_s > 0 else 0.0
    return BenchResult(system, mode, size, frames, secs, pps, pps * size * 8 / 1e9, offered, cpu_pps, note)


def bmv2_missing() -> str | None:
    from dlcp.testbed import bmv2

    return tools.missing_reason(*bmv2.TOOLS)


def bench_bmv2(sizes: tuple[int, ...], seconds: float) -> list[BenchResult]:
    """simple_switch with the DLCP program and the same entries, stream mode (its own namespace)."""
    from dlcp.testbed.bmv2 import Bmv2Switch
    from dlcp.testbed.veth_ports import host_if

    out: list[BenchResult] = []
    with TemporaryDirectory(prefix="dlcp-bench-") as tmp:
        with Bmv2Switch.compiled(Path(tmp), [1, 2]) as sw:
            for e in bench_entries():
                sw.install(e)
            for size in sizes:
                sw.receive(0.1)
                sent, secs = _blast(sw.ns.entered, host_if(1), frames_of(size), 1 << 62, seconds)
                got = len([f for f in sw.receive(1.0) if f.port == 2])
                out.append(_result("bmv2", "stream", size, got, secs, sent / secs, ""))
    return out


def run(
    sizes: tuple[int, ...] = SIZES,
    systems: tuple[str, ...] = SYSTEMS,
    modes: tuple[str, ...] = MODES,
    seconds: float = 2.0,
    repeat: int = 3,
    ring_blocks: int = 64,
    progress: Callable[[BenchResult], None] | None = None,
) -> tuple[list[BenchResult], list[str]]:
    """Every (system, mode, size) ``repeat`` times; the median run of each is kept.

    The software switch and the plain forwarder run side by side in two namespaces and take turns
    run by run, so that a busy spell of a shared machine hits both alike. Returns the results and
    notes on what was skipped.
    """
    notes: list[str] = []
    runs: dict[tuple[str, str, int], list[BenchResult]] = {}
    targets = [DlcpTarget(s == "plain", ring_blocks) for s in systems if s in ("dlcp", "plain")]
    with ExitStack() as stack:
        rigs = [(t, stack.enter_context(t.open())) for t in targets]
        for _ in range(repeat):
            for mode in modes:
                for size in sizes:
                    for target, rig in rigs:
                        r = target.drain(rig, size) if mode == "drain" else target.stream(rig, size, seconds)
                        runs.setdefault((r.system, r.mode, size), []).append(r)
                        if progress is not None:
                            progress(r)
    if "bmv2" in systems:
        why = bmv2_missing()
        if why:
            notes.append(f"bmv2 skipped: {why}")
        else:
            for r in bench_bmv2(sizes, seconds):
                runs[(r.system, r.mode, r.frame_bytes)] = [r]
                if progress is not None:
                    progress(r)
    results = []
    for rs in runs.values():
        med = statistics.median_low(r.pps for r in rs)
        results.append(next(r for r in rs if r.pps == med))
    return results, notes


def ratios(results: list[BenchResult]) -> list[dict[str, Any]]:
    """Per mode and size: dlcp/plain and dlcp/bmv2 packet rates (bmv2 always from stream mode)."""
    by = {(r.system, r.mode, r.frame_bytes): r for r in results}
    out = []
    for (system, mode, size), r in sorted(by.items()):
        if system != "dlcp":
            continue
        row: dict[str, Any] = {"mode": mode, "frame_bytes": size, "dlcp_pps": r.pps, "dlcp_gbit_per_s": r.gbit_per_s}
        plain = by.get(("plain", mode, size))
        if plain is not None and plain.pps > 0:
            row["vs_plain"] = r.pps / plain.pps
        if plain is not None and plain.cpu_pps > 0 and r.cpu_pps > 0:
            row["dlcp_cpu_pps"] = r.cpu_pps
            row["vs_plain_cpu"] = r.cpu_pps / plain.cpu_pps
        bmv2 = by.get(("bmv2", "stream", size))
        if bmv2 is not None and bmv2.pps > 0:
            row["vs_bmv2"] = r.pps / bmv2.pps
        out.append(row)
    return out
