"""Send the software switch's P4Runtime server malformed requests and churn its streams; count what it answers.

    python tests/stress/p4rt_fuzz.py [--malformed 100000] [--churns 10000] [--seed 1] [--json]

Needs root (a network namespace with a veth pair). The switch is the real
process, ``dlcp switch run --grpc 127.0.0.1:0`` in the namespace, and the client
is this script again (``client`` mode), started inside the namespace too. The
client first arbitrates as primary (the highest election id) and commits DLCP's
pipeline, so malformed writes reach the checks past the request's header. Then:

* ``--malformed`` requests, each one of: random bytes to a P4Runtime method (or
  an unknown one), a valid request with bytes flipped, cut or inserted, a
  parseable request with one thing wrong (an id the P4Info lacks, a value wider
  than its field, a match field missing or given twice, a wrong match kind or
  priority, an unknown update type or atomicity, an unset or unsupported
  entity, a role, a device id or election id that is not the switch's), an
  over-long field of 1 KiB to 4 MiB (a role name, a match value with or
  without leading zeros, an action parameter, metadata), a pipeline config
  that is not DLCP's (or has no P4Info and a 1 MiB device config); and one
  request in 500 a huge one: a Write of 100,000 updates, a Read of 100,000
  every-counter entities, a one-shot of 10,000 actions, a 65 MiB message
  (above the server's size limit);
* ``--churns`` StreamChannels opened and dropped: cancelled at once, after an
  arbitration (before or after its answer), with a bad arbitration, with
  random bytes, half-closed, by closing the whole connection, and flooding
  PacketOuts without reading the answers; up to 24 at a time (above the
  server's 16, so some are refused).

Every request must end with a gRPC status, any code but DEADLINE_EXCEEDED (the
client's "no answer" in 60 s), UNAVAILABLE ("no server") and INTERNAL (an
exception in the server), and the switch must keep serving. Afterwards the client checks that the server
still answers a valid write and read, that 16 streams can be opened at once (no
stream slot leaked), and the switch must stop cleanly on SIGTERM (exit 0).
The resident memory of the switch (``VmRSS`` in ``/proc/PID/status``) is read
after the pipeline is committed and a warm-up of ``--warmup`` requests of the
same mix, and again after the storm; the growth must stay below ``--rss-limit-mb``.
Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

SERVICE = "/p4.v1.P4Runtime/"
METHODS = ("Write", "Read", "SetForwardingPipelineConfig", "GetForwardingPipelineConfig", "Capabilities")
STREAM = SERVICE + "StreamChannel"
PRIMARY_ELECTION_ID = (1 << 128) - 1
"""The client's own election id: the highest, so no churned stream takes the primary from it."""
DEVICE_ID = 1
CALL_TIMEOUT_S = 60.0
"""A call not answered in this time counts as a hang (DEADLINE_EXCEEDED)."""
MAX_STREAMS = 16
"""The server's limit of open streams (dlcp.testbed.switch.p4rt.server.MAX_STREAMS; checked below)."""
CHURN_PARALLEL = 24
SLOW_S = 5.0
"""A request answered after this long is listed in the report (kind, method, size, first bytes)."""
FAILED_CODES = ("DEADLINE_EXCEEDED", "UNAVAILABLE", "INTERNAL")
"""Answers that mean the server failed: no answer, no server, an exception inside it."""


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` in KiB, from ``/proc/PID/status`` (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no VmRSS line")


# ------------------------------------------------------------------------------------------ requests


class Requests:
    """Malformed requests, as ``(method, serialized request)``: drawn from ``rng``."""

    def __init__(self, rng: random.Random) -> None:
        import finsy as fy
        from finsy.proto import U128, p4r

        from dlcp.p4.paths import COMMITTED_P4INFO

        self.rng = rng
        self.p4r = p4r
        self.schema = fy.P4Schema(COMMITTED_P4INFO)
        self.election = U128.encode(PRIMARY_ELECTION_ID)
        s = self.schema
        macs = {"src_mac": "02:dc:00:00:00:01", "dst_mac": "02:dc:00:00:00:02"}
        entities = [
            fy.P4TableEntry(
                "ipv4_routes", match=fy.Match(dst_addr="10.1.0.0/16"), action=fy.Action("set_next_hop_group", group=1)
            ),
            fy.P4TableEntry(
                "dlcp_classes", match=fy.Match(job_id=(7, 0xFFFF)), priority=10, action=fy.Action("set_queue", queue=3)
            ),
            fy.P4ActionProfileMember("ecmp_selector", member_id=1, action=fy.Action("set_next_hop", port=2, **macs)),
            fy.P4ActionProfileGroup("ecmp_selector", group_id=1, members=[fy.P4Member(1, weight=1)]),
            fy.P4TableEntry("next_hops", match=fy.Match(group=1), action=fy.P4IndirectAction(group_id=1)),
            fy.P4CounterEntry("dropped", index=5, data=fy.P4CounterData(packet_count=1, byte_count=2)),
        ]
        self.entities = [e.encode(s) for e in entities]
        self.valid_route = p4r.Update(type=p4r.Update.INSERT, entity=self.entities[0])
        self.p4info = s.p4info
        self.kinds: list[tuple[str, Callable[[], tuple[str, bytes]]]] = [
            ("random_bytes", self.random_bytes),
            ("mutated_bytes", self.mutated_bytes),
            ("bad_update", self.bad_update),
            ("bad_header", self.bad_header),
            ("long_field", self.long_field),
            ("bad_read", self.bad_read),
            ("bad_pipeline", self.bad_pipeline),
        ]
        self.rare: list[tuple[str, Callable[[], tuple[str, bytes]]]] = [
            ("huge_write", self.huge_write),
            ("huge_read", self.huge_read),
            ("huge_one_shot", self.huge_one_shot),
            ("over_limit", self.over_limit),
        ]

    def draw(self, rare_every: int = 500) -> tuple[str, str, bytes]:
        """(kind, method, request); one request in ``rare_every`` is a huge one."""
        if self.rng.randrange(rare_every) == 0:
            kind, make = self.rng.choice(self.rare)
        else:
            kind, make = self.rng.choice(self.kinds)
        method, data = make()
        return kind, method, data

    # -- helpers

    def _bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def _write(self, *updates: Any, **fields: Any) -> bytes:
        p4r = self.p4r
        req = p4r.WriteRequest(device_id=DEVICE_ID, updates=list(updates))
        req.election_id.CopyFrom(self.election)
        for k, v in fields.items():
            setattr(req, k, v)
        return bytes(req.SerializeToString())

    def _valid(self) -> tuple[str, bytes]:
        """A valid request of a random method (the seed of the byte mutations)."""
        p4r = self.p4r
        method = self.rng.choice(METHODS)
        if method == "Write":
            upd = p4r.Update(type=self.rng.choice([1, 2, 3]), entity=self.rng.choice(self.entities))
            return method, self._write(upd)
        if method == "Read":
            return method, p4r.ReadRequest(
                device_id=DEVICE_ID, entities=[self.rng.choice(self.entities)]
            ).SerializeToString()
        if method == "SetForwardingPipelineConfig":
            req = p4r.SetForwardingPipelineConfigRequest(
                device_id=DEVICE_ID, action=p4r.SetForwardingPipelineConfigRequest.VERIFY
            )
            req.election_id.CopyFrom(self.election)
            req.config.p4info.CopyFrom(self.p4info)
            return method, req.SerializeToString()
        if method == "GetForwardingPipelineConfig":
            return method, p4r.GetForwardingPipelineConfigRequest(device_id=DEVICE_ID).SerializeToString()
        return method, p4r.CapabilitiesRequest().SerializeToString()

    # -- the kinds

    def random_bytes(self) -> tuple[str, bytes]:
        n = self.rng.choice([0, 1, 2, 5, 16, 100, 1000, 4000, self.rng.randrange(1 << 16)])
        method = self.rng.choice([*METHODS, "NoSuchMethod", "Write" * 40])
        return method, self._bytes(n)

    def mutated_bytes(self) -> tuple[str, bytes]:
        method, data = self._valid()
        buf = bytearray(data)
        for _ in range(self.rng.randint(1, 8)):
            op = self.rng.randrange(4)
            pos = self.rng.randrange(len(buf) + 1)
            if op == 0 and buf:
                buf[min(pos, len(buf) - 1)] ^= 1 << self.rng.randrange(8)
            elif op == 1:
                buf[pos:pos] = self._bytes(self.rng.randint(1, 16))
            elif op == 2:
                del buf[pos : pos + self.rng.randint(1, 16)]
            else:
                buf = buf[:pos]
        return method, bytes(buf)

    def bad_update(self) -> tuple[str, bytes]:
        p4r, rng = self.p4r, self.rng
        upd = p4r.Update(type=rng.choice([1, 2, 3]))
        upd.entity.CopyFrom(rng.choice(self.entities))
        kind = upd.entity.WhichOneof("entity")
        big = rng.choice([0, 1, 2, 3, 0x7FFFFFFF, 0xFFFFFFFF, rng.randrange(1 << 32)])
        r = rng.randrange(12)
        if r == 0:
            upd.type = rng.choice([0, 4, 99, -1, 0x7FFFFFFF])
        elif r == 1:
            upd.ClearField("entity")
        elif r == 2:
            other = rng.choice(["register_entry", "meter_entry", "direct_counter_entry", "value_set_entry",
                                "digest_entry", "packet_replication_engine_entry", "extern_entry"])  # fmt: skip
            upd.entity.Clear()
            getattr(upd.entity, other).SetInParent()
        elif kind == "table_entry":
            te = upd.entity.table_entry
            if r == 3:
                te.table_id = big
            elif r == 4 and te.match:
                te.match[0].field_id = big
            elif r == 5:
                del te.match[:]  # a missing match field (or all of them)
            elif r == 6 and te.match:
                te.match.append(te.match[0])  # a field given twice
            elif r == 7 and te.match:
                fm = te.match[0]
                which = fm.WhichOneof("field_match_type")
                value = self._bytes(rng.choice([0, 5, 17, 100]))
                if which == "lpm":
                    fm.lpm.value, fm.lpm.prefix_len = value, rng.choice([0, 33, -1, 1 << 30, 8])
                elif which == "ternary":
                    fm.ternary.value, fm.ternary.mask = value, rng.choice([b"", b"\0", value])
                elif which == "exact":
                    fm.exact.value = value
                else:
                    fm.ClearField(which)
                    fm.range.low, fm.range.high = value, value  # a match kind the table does not have
            elif r == 8:
                te.priority = rng.choice([-1, 0, 1, 0x7FFFFFFF])
            elif r == 9 and te.action.HasField("action"):
                a = te.action.action
                if rng.random() < 0.5:
                    a.action_id = big
                elif a.params:
                    p = rng.choice(a.params)
                    p.param_id, p.value = rng.choice([p.param_id, big]), self._bytes(rng.choice([0, 9, 64]))
                else:
                    a.params.add(param_id=big, value=b"\1")
            elif r == 10:
                te.is_const = True
                te.idle_timeout_ns = rng.choice([0, 1])
                te.counter_data.packet_count = 1
            else:
                te.is_default_action = True
        elif kind == "action_profile_member":
            m = upd.entity.action_profile_member
            m.action_profile_id, m.member_id = rng.choice([m.action_profile_id, big]), rng.choice([0, big, 1])
            m.action.action_id = rng.choice([m.action.action_id, big])
        elif kind == "action_profile_group":
            g = upd.entity.action_profile_group
            g.group_id = rng.choice([0, big, 1])
            g.max_size = rng.choice([-1, 0, 1, 0x7FFFFFFF, -(1 << 31)])  # int32
            g.members.add(member_id=big, weight=rng.choice([-1, 0, 0x7FFFFFFF]))
        else:
            c = upd.entity.counter_entry
            c.counter_id = rng.choice([c.counter_id, big])
            c.index.index = rng.choice([-1, 4096, 1 << 62, 0])
            c.data.packet_count = rng.choice([-1, 0, 1 << 62])
        return "Write", self._write(upd)

    def bad_header(self) -> tuple[str, bytes]:
        p4r, rng = self.p4r, self.rng
        req = p4r.WriteRequest(device_id=DEVICE_ID, updates=[self.valid_route])
        req.election_id.CopyFrom(self.election)
        r = rng.randrange(5)
        if r == 0:
            req.device_id = rng.choice([0, 2, (1 << 64) - 1])
        elif r == 1:
            req.ClearField("election_id")
        elif r == 2:
            req.election_id.high, req.election_id.low = rng.randrange(1 << 64), rng.randrange(1 << 64)
        elif r == 3:
            req.role = rng.choice(["x", "sdn", "\u00e9" * 10])
        else:
            req.atomicity = rng.choice([2, 3, 99, -5])
        return "Write", req.SerializeToString()

    def long_field(self) -> tuple[str, bytes]:
        p4r, rng = self.p4r, self.rng
        n = rng.choice([1 << 10, 1 << 16, 1 << 20, 4 << 20])
        upd = p4r.Update(type=p4r.Update.INSERT)
        upd.entity.CopyFrom(self.entities[0])
        te = upd.entity.table_entry
        r = rng.randrange(5)
        if r == 0:
            return "Write", self._write(self.valid_route, role="r" * n)
        if r == 1:
            te.match[0].lpm.value = b"\xff" * n
        elif r == 2:
            te.match[0].lpm.value = b"\0" * (n - 4) + bytes([10, 1, 0, 0])  # leading zeros: a valid value, long
        elif r == 3:
            te.metadata = self._bytes(n)
        else:
            te.action.action.params[0].value = b"\x7f" * n
        return "Write", self._write(upd)

    def bad_read(self) -> tuple[str, bytes]:
        p4r, rng = self.p4r, self.rng
        req = p4r.ReadRequest(device_id=rng.choice([DEVICE_ID, DEVICE_ID, 0, 77]))
        for _ in range(rng.randint(0, 4)):
            e = req.entities.add()
            r = rng.randrange(5)
            if r == 0:
                e.CopyFrom(rng.choice(self.entities))
                if e.HasField("table_entry"):
                    e.table_entry.table_id = rng.randrange(1 << 32)
            elif r == 1:
                e.table_entry.SetInParent()  # every table
            elif r == 2:
                e.counter_entry.counter_id = rng.choice([0, rng.randrange(1 << 32)])
            elif r == 3:
                e.register_entry.SetInParent()
            # r == 4: an entity with nothing set
        return "Read", req.SerializeToString()

    def bad_pipeline(self) -> tuple[str, bytes]:
        p4r, rng = self.p4r, self.rng
        if rng.random() < 0.3:
            req_g = p4r.GetForwardingPipelineConfigRequest(
                device_id=rng.choice([DEVICE_ID, 0, 9]), response_type=rng.choice([0, 1, 2, 3, 99])
            )
            return "GetForwardingPipelineConfig", req_g.SerializeToString()
        req = p4r.SetForwardingPipelineConfigRequest(device_id=DEVICE_ID, action=rng.choice([0, 1, 4, 5, 6, 77]))
        req.election_id.CopyFrom(self.election)
        r = rng.randrange(4)
        if r == 0:
            req.config.p4info.CopyFrom(self.p4info)
            t = rng.choice(req.config.p4info.tables)
            t.preamble.id, t.size = rng.randrange(1 << 32), rng.randrange(1 << 20)
        elif r == 1:
            req.config.p4info.tables.add().preamble.name = "x" * rng.choice([10, 10000])
        elif r == 2:
            req.config.p4_device_config = self._bytes(rng.choice([0, 100, 1 << 20]))  # no p4info
        # r == 3: no config at all
        if req.action in (1, 2) and rng.random() < 0.5:
            req.action = 1  # VERIFY only: never replace the committed pipeline with a broken one
        return "SetForwardingPipelineConfig", req.SerializeToString()

    def huge_write(self) -> tuple[str, bytes]:
        p4r = self.p4r
        bad = p4r.Update(type=p4r.Update.MODIFY)
        bad.entity.table_entry.table_id = 1
        return "Write", self._write(*([bad] * 100_000))

    def huge_read(self) -> tuple[str, bytes]:
        p4r = self.p4r
        every_counter = p4r.Entity(counter_entry=p4r.CounterEntry())
        return "Read", p4r.ReadRequest(device_id=DEVICE_ID, entities=[every_counter] * 100_000).SerializeToString()

    def huge_one_shot(self) -> tuple[str, bytes]:
        p4r = self.p4r
        upd = p4r.Update(type=p4r.Update.INSERT)
        upd.entity.CopyFrom(self.entities[4])
        te = upd.entity.table_entry
        action = self.entities[2].action_profile_member.action
        aset = te.action.action_profile_action_set
        aset.action_profile_actions.extend([p4r.ActionProfileAction(action=action, weight=1)] * 10_000)
        return "Write", self._write(upd)

    def over_limit(self) -> tuple[str, bytes]:
        upd = self.p4r.Update(type=self.p4r.Update.INSERT)
        upd.entity.CopyFrom(self.entities[0])
        upd.entity.table_entry.metadata = b"\0" * (65 << 20)
        return "Write", self._write(upd)


# -------------------------------------------------------------------------------------------- client


def _code(exc: Exception) -> str:
    import grpc

    if isinstance(exc, grpc.RpcError):
        return str(exc.code().name)  # type: ignore[attr-defined]
    return f"client exception {type(exc).__name__}"


class Client:
    """A raw client of the server at ``127.0.0.1:port``: serialized bytes in and out (identity serializers)."""

    def __init__(self, port: int) -> None:
        import grpc

        self.grpc = grpc
        self.address = f"127.0.0.1:{port}"
        self.channel = grpc.insecure_channel(self.address, options=[("grpc.max_receive_message_length", 64 << 20)])

    def call(self, method: str, data: bytes, timeout: float = CALL_TIMEOUT_S) -> str:
        """The status code name of one call (``OK`` when it succeeded)."""
        try:
            if method == "Read":
                for _ in self.channel.unary_stream(SERVICE + method)(data, timeout=timeout):
                    pass
            else:
                self.channel.unary_unary(SERVICE + method)(data, timeout=timeout)
        except Exception as exc:
            return _code(exc)
        return "OK"

    def close(self) -> None:
        self.channel.close()


class _Outgoing:
    """The request side of a StreamChannel: what ``put`` gives is sent; ``None`` half-closes."""

    def __init__(self) -> None:
        self.q: queue.Queue[bytes | None] = queue.Queue()

    def __iter__(self) -> Iterator[bytes]:
        while (item := self.q.get()) is not None:
            yield item

    def put(self, item: bytes | None) -> None:
        self.q.put(item)


class Churner:
    """StreamChannels opened and dropped in the ways a careless or dying controller does."""

    KINDS = ("cancel_at_once", "arbitrate_then_cancel", "arbitrate_answered_then_cancel", "bad_arbitration",
             "random_bytes", "half_close", "drop_connection", "flood_without_reading")  # fmt: skip

    def __init__(self, client: Client, rng: random.Random) -> None:
        from finsy.proto import U128, p4r

        self.client = client
        self.rng = rng
        self.p4r = p4r
        self.u128 = U128
        self.lock = threading.Lock()

    def arbitration(self, election_id: int | None, device_id: int = DEVICE_ID) -> bytes:
        update = self.p4r.MasterArbitrationUpdate(device_id=device_id)
        if election_id is not None:
            update.election_id.CopyFrom(self.u128.encode(election_id))
        return bytes(self.p4r.StreamMessageRequest(arbitration=update).SerializeToString())

    def one(self, kind: str, seed: int) -> str:
        """One churn; the end it saw: ``dropped`` (by us), or the status the server ended it with."""
        rng = random.Random(seed)
        grpc = self.client.grpc
        channel = self.client.channel
        own = None
        if kind == "drop_connection":
            own = grpc.insecure_channel(self.client.address, options=[("grpc.use_local_subchannel_pool", 1)])
            channel = own
        out = _Outgoing()
        call = channel.stream_stream(STREAM)(iter(out), timeout=CALL_TIMEOUT_S)
        result = "dropped"
        try:
            if kind == "cancel_at_once":
                pass
            elif kind in ("arbitrate_then_cancel", "drop_connection"):
                out.put(self.arbitration(rng.randrange(1, 1 << 64)))
                if rng.random() < 0.5:
                    time.sleep(rng.random() * 0.002)
            elif kind == "arbitrate_answered_then_cancel":
                out.put(self.arbitration(rng.choice([None, rng.randrange(1, 1 << 64)])))
                next(call)
            elif kind == "bad_arbitration":  # the server ends the stream with an error
                out.put(self.arbitration(rng.randrange(1, 1 << 64), device_id=rng.choice([0, 2, 99])))
                for _ in call:
                    pass
                result = "OK"
            elif kind == "random_bytes":  # ends the stream, or (bytes that parse) is answered with an error
                out.put(rng.randbytes(rng.randrange(1, 200)))
                next(call)
                result = "answered"
            elif kind == "half_close":  # answered, then the server ends the stream
                out.put(self.arbitration(rng.randrange(1, 1 << 64)))
                out.put(None)
                for _ in call:
                    pass
                result = "OK"
            else:  # flood_without_reading: PacketOuts the switch answers with errors, none read
                packet = self.p4r.StreamMessageRequest(packet=self.p4r.PacketOut(payload=bytes(1000)))
                data = packet.SerializeToString()
                for _ in range(2000):
                    out.put(data)
                time.sleep(0.2)
        except grpc.RpcError as exc:
            result = _code(exc)
        except StopIteration:
            result = "OK"  # ended by the server with status OK
        finally:
            if own is not None:
                own.close()
            else:
                call.cancel()
            out.put(None)
        return result


# -------------------------------------------------------------------------------------- client run


def _valid_round(client: Client, reqs: Requests, prefix_byte: int) -> None:
    """A valid write, read back and deleted: the server serves; raises AssertionError otherwise."""
    p4r = reqs.p4r
    upd = p4r.Update(type=p4r.Update.INSERT)
    upd.entity.CopyFrom(reqs.entities[0])
    upd.entity.table_entry.match[0].lpm.value = bytes([10, prefix_byte, 0, 0])
    stub = client.channel
    stub.unary_unary(SERVICE + "Write")(reqs._write(upd), timeout=CALL_TIMEOUT_S)
    read = p4r.ReadRequest(device_id=DEVICE_ID, entities=[p4r.Entity(table_entry=upd.entity.table_entry)])
    got = [p4r.ReadResponse.FromString(r) for r in stub.unary_stream(SERVICE + "Read")(read.SerializeToString())]
    n = sum(len(r.entities) for r in got)
    assert n == 1, f"a valid entry written is read back once, got {n}"
    upd.type = p4r.Update.DELETE
    stub.unary_unary(SERVICE + "Write")(reqs._write(upd), timeout=CALL_TIMEOUT_S)


def _open_streams(client: Client, churner: Churner, n: int) -> int:
    """How many of ``n`` streams opened at once the server keeps (each answers an arbitration)."""
    outs, calls, kept = [], [], 0
    try:
        for i in range(n):
            out = _Outgoing()
            outs.append(out)
            calls.append(client.channel.stream_stream(STREAM)(iter(out), timeout=CALL_TIMEOUT_S))
            out.put(churner.arbitration(1000 + i))
        for call in calls:
            try:
                next(call)
                kept += 1
            except Exception:
                pass
    finally:
        for out, call in zip(outs, calls, strict=True):
            out.put(None)
            call.cancel()
    return kept


def _storm(
    client: Client, reqs: Requests, count: int, workers: int, codes: Counter[str], by_kind: dict[str, Counter[str]],
    progress: Callable[[int], None], deadline: float, slow: list[dict[str, Any]],
) -> int:  # fmt: skip
    """Send ``count`` drawn requests from ``workers`` threads; slow or failed ones are listed in ``slow``."""
    lock = threading.Lock()
    done = 0
    start = time.monotonic()

    def one(_: int) -> None:
        nonlocal done
        if time.monotonic() > deadline:
            return
        with lock:
            kind, method, data = reqs.draw()
        t = time.monotonic()
        code = client.call(method, data)
        took = time.monotonic() - t
        with lock:
            if took > SLOW_S or code in FAILED_CODES:
                slow.append({"kind": kind, "method": method, "code": code, "seconds": round(took, 2),
                             "at_s": round(t - start, 1), "bytes": len(data), "head": data[:48].hex()})  # fmt: skip
            codes[code] += 1
            by_kind.setdefault(kind, Counter())[code] += 1
            done += 1
            if done % 5000 == 0:
                progress(done)

    with ThreadPoolExecutor(workers, thread_name_prefix="fuzz") as pool:
        list(pool.map(one, range(count)))
    return done


def client_main(args: argparse.Namespace) -> int:
    """Inside the namespace: the storm, the churn and the checks; prints the report as JSON."""
    from finsy.proto import p4r

    rng = random.Random(args.seed)
    reqs = Requests(rng)
    client = Client(args.port)
    churner = Churner(client, rng)
    report: dict[str, Any] = {"malformed_asked": args.malformed, "churns_asked": args.churns, "seed": args.seed}
    failures: list[str] = []
    t0 = time.monotonic()
    deadline = t0 + args.max_seconds

    def progress(what: str) -> Callable[[int], None]:
        def say(n: int) -> None:
            sys.stderr.write(f"  {what}: {n}, {time.monotonic() - t0:.0f} s, switch RSS {rss_kib(args.pid)} KiB\n")

        return say

    # Primary and pipeline: the malformed writes then reach the checks past the request's header.
    out = _Outgoing()
    primary = client.channel.stream_stream(STREAM)(iter(out))
    out.put(churner.arbitration(PRIMARY_ELECTION_ID))
    first = p4r.StreamMessageResponse.FromString(next(primary))
    assert first.arbitration.status.code == 0, f"the client is not primary: {first}"
    cfg = p4r.SetForwardingPipelineConfigRequest(
        device_id=DEVICE_ID, action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    )
    cfg.election_id.CopyFrom(reqs.election)
    cfg.config.p4info.CopyFrom(reqs.p4info)
    client.channel.unary_unary(SERVICE + "SetForwardingPipelineConfig")(cfg.SerializeToString(), timeout=30)
    _valid_round(client, reqs, 200)
    report["rss_kib_start"] = rss_kib(args.pid)

    codes: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {}
    warm: Counter[str] = Counter()
    slow: list[dict[str, Any]] = []
    _storm(client, reqs, args.warmup, args.workers, warm, {}, progress("warm-up"), deadline, slow)
    report["warmup_requests"] = sum(warm.values())
    report["rss_kib_before"] = rss_kib(args.pid)

    done = _storm(client, reqs, args.malformed, args.workers, codes, by_kind, progress("malformed"), deadline, slow)
    report["slow_or_failed_requests"] = slow[:20]
    report["malformed"] = done
    report["codes"] = dict(codes.most_common())
    report["codes_by_kind"] = {k: dict(v.most_common()) for k, v in sorted(by_kind.items())}
    report["rss_kib_after_malformed"] = rss_kib(args.pid)
    bad = {c: n for c, n in codes.items() if c in FAILED_CODES or c.startswith("client")}
    if bad:
        failures.append(f"malformed requests answered {bad}")

    churn_codes: Counter[str] = Counter()
    lock = threading.Lock()
    churned = 0
    say = progress("churns")

    def churn(i: int) -> None:
        nonlocal churned
        if time.monotonic() > deadline:
            return
        kind = Churner.KINDS[i % len(Churner.KINDS)]
        end = churner.one(kind, args.seed * 1_000_003 + i)
        with lock:
            churn_codes[f"{kind}: {end}"] += 1
            churned += 1
            if churned % 1000 == 0:
                say(churned)

    with ThreadPoolExecutor(CHURN_PARALLEL, thread_name_prefix="churn") as pool:
        list(pool.map(churn, range(args.churns)))
    report["churns"] = churned
    report["churn_ends"] = dict(sorted(churn_codes.items()))
    bad_churn = {k: n for k, n in churn_codes.items() if k.rsplit(": ", 1)[1] in FAILED_CODES}
    if bad_churn:
        failures.append(f"streams ended with {bad_churn}")

    # Still serving: a valid write and read; every stream slot free again.
    try:
        _valid_round(client, reqs, 201)
        report["still_serving"] = True
    except Exception as exc:
        report["still_serving"] = False
        failures.append(f"a valid request after the storm failed: {exc!r}")
    out.put(None)
    primary.cancel()
    time.sleep(0.5)  # the server ends the primary's stream on its own threads
    slots = 0
    for _ in range(20):  # streams the churn left are closed by the server's threads: give them time
        slots = _open_streams(client, churner, MAX_STREAMS)
        if slots == MAX_STREAMS:
            break
        time.sleep(0.5)
    report["streams_open_at_once_after"] = slots
    if slots != MAX_STREAMS:
        failures.append(f"only {slots} of {MAX_STREAMS} streams open after the churn: stream slots leaked")
    time.sleep(1.0)  # let the server free what the last calls held before the last reading
    report["rss_kib_after"] = rss_kib(args.pid)
    report["rss_growth_mb"] = round((report["rss_kib_after"] - report["rss_kib_before"]) / 1024, 1)
    if report["rss_growth_mb"] >= args.rss_limit_mb:
        failures.append(f"switch RSS grew by {report['rss_growth_mb']} MB (limit {args.rss_limit_mb} MB)")
    if report["malformed"] < args.malformed or report["churns"] < args.churns:
        report["incomplete"] = f"stopped at --max-seconds {args.max_seconds:.0f}"
    report["seconds"] = round(time.monotonic() - t0, 1)
    report["failures"] = failures
    client.close()
    sys.stdout.write(json.dumps(report) + "\n")
    return 1 if failures else 0


# ----------------------------------------------------------------------------------- the switch


def run(args: argparse.Namespace) -> dict[str, Any]:
    from dlcp.testbed.netns import Namespace
    from dlcp.testbed.switch import stats
    from dlcp.testbed.switch.p4rt import server

    if server.MAX_STREAMS != MAX_STREAMS:
        raise RuntimeError(f"MAX_STREAMS here ({MAX_STREAMS}) is not the server's ({server.MAX_STREAMS})")
    with (
        Namespace("fz") as ns,
        tempfile.TemporaryDirectory(prefix="dlcp-fuzz-") as tmp,
        tempfile.TemporaryFile() as log,
    ):
        folder = Path(tmp)
        ns.add_veth("dlcpS1", "dlcpH1")
        argv = [sys.executable, "-m", "dlcp.cli.main", "switch", "run", "--port", "1=dlcpS1"]
        argv += ["--grpc", "127.0.0.1:0", "--device-id", str(DEVICE_ID), "--stats-dir", str(folder)]
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
        switch = ns.popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=folder, env=env)
        report: dict[str, Any] = {}
        stacks = False
        try:
            path = stats.socket_path(folder, DEVICE_ID)
            deadline = time.monotonic() + 60
            while not path.exists():
                if switch.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the switch did not come up (exit status {switch.poll()})")
                time.sleep(0.05)
            port = stats.fetch(path)["grpc_port"]
            client_argv = [sys.executable, __file__, "client", "--port", str(port), "--pid", str(switch.pid)]
            for opt in ("malformed", "churns", "warmup", "seed", "workers", "rss_limit_mb", "max_seconds"):
                client_argv += [f"--{opt.replace('_', '-')}", str(getattr(args, opt))]
            client = ns.popen(client_argv, stdout=subprocess.PIPE, stderr=None if args.progress else subprocess.DEVNULL)
            text, _ = client.communicate(timeout=args.max_seconds + 300)
            lines = text.decode(errors="replace").strip().splitlines()
            try:
                report = json.loads(lines[-1])
            except (IndexError, json.JSONDecodeError):
                report = {"failures": [f"the client exited {client.returncode} without a report: {lines[-5:]}"]}
            alive = switch.poll() is None
            report["switch_alive_after"] = alive
            if not alive:
                report["failures"].append(f"the switch died: exit status {switch.returncode}")
            else:
                switch.send_signal(signal.SIGTERM)
                try:
                    report["switch_exit_status"] = switch.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    report["switch_exit_status"] = None
                    switch.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack to its output
                    try:
                        switch.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
                    stacks = True
                if report["switch_exit_status"] != 0:
                    report["failures"].append(f"the switch did not stop cleanly: {report['switch_exit_status']}")
        finally:
            if switch.poll() is None:
                switch.kill()
                switch.wait()
            log.seek(0)
            lines = log.read().decode(errors="replace").splitlines()
            report["switch_output_lines"] = len(lines)
            report["switch_output_tail"] = lines[-200 if stacks else -5 :]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", choices=["run", "client"], default="run", help=argparse.SUPPRESS)
    parser.add_argument("--malformed", type=int, default=100_000, help="malformed requests (default 100000)")
    parser.add_argument("--churns", type=int, default=10_000, help="streams opened and dropped (default 10000)")
    parser.add_argument("--warmup", type=int, default=2000, help="requests before the first RSS reading (default 2000)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the draws (default 1)")
    parser.add_argument("--workers", type=int, default=4, help="client threads sending requests (default 4)")
    parser.add_argument("--rss-limit-mb", type=float, default=20.0, help="allowed RSS growth (default 20)")
    parser.add_argument("--max-seconds", type=float, default=540.0, help="stop sending after (default 540)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 0 <= args.malformed <= 10_000_000 or not 0 <= args.churns <= 1_000_000 or args.warmup < 0:
        parser.error("--malformed 0..10000000, --churns 0..1000000, --warmup >= 0")
    if not 1 <= args.workers <= 64 or not 1 <= args.max_seconds <= 3600 or args.rss_limit_mb <= 0:
        parser.error("--workers 1..64, --max-seconds 1..3600, --rss-limit-mb > 0")
    if args.mode == "client":
        return client_main(args)
    if os.geteuid() != 0:
        sys.stderr.write("p4rt_fuzz: needs root (a network namespace)\n")
        return 2
    args.progress = not args.json
    report = run(args)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=1) + "\n")
    else:
        for key, value in report.items():
            sys.stdout.write(f"{key}: {value}\n")
    if report.get("failures"):
        return 1
    return 3 if report.get("incomplete") else 0


if __name__ == "__main__":
    raise SystemExit(main())
