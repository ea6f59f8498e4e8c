"""Test support for the P4Runtime server: a recording backend (a test double of the data plane) and clients.

``RecordingBackend`` implements ``TableBackend`` with dictionaries and records
every call. It also checks the contract the server promises the data plane:
no INSERT of an existing key, no MODIFY or DELETE of a missing one, no member
or group referenced before it exists; a breach is recorded in ``violations``.
``fail_when`` makes it refuse chosen calls, as a full C table would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import finsy as fy
import grpc
import pytest
from finsy import P4Schema
from finsy.proto import U128, p4r, p4r_grpc, rpc_status

from dlcp.p4 import sizes
from dlcp.p4.paths import COMMITTED_P4INFO
from dlcp.testbed.switch.entries import (
    Action,
    BackendError,
    Op,
    ProfileGroup,
    ProfileMember,
    TableEntry,
)

COUNTER_SIZE = sizes.PORT_CLASS_SLOTS


@dataclass
class RecordingBackend:
    calls: list[tuple[str, Any, ...]] = field(default_factory=list)
    entries: dict[tuple[Any, ...], TableEntry] = field(default_factory=dict)
    defaults: dict[str, Action] = field(default_factory=dict)
    members: dict[tuple[str, int], ProfileMember] = field(default_factory=dict)
    groups: dict[tuple[str, int], ProfileGroup] = field(default_factory=dict)
    counters: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    fail_when: Callable[[str, Any], bool] | None = None
    resets: int = 0

    def _maybe_fail(self, what: str, arg: Any) -> None:
        if self.fail_when is not None and self.fail_when(what, arg):
            raise BackendError(f"refused {what}", resource_exhausted=True)

    def _apply(self, kind: str, store: dict[Any, Any], key: Any, op: Op, value: Any) -> None:
        self._maybe_fail(kind, (op, value))
        present = key in store
        if op is Op.INSERT and present:
            self.violations.append(f"{kind} INSERT of existing {key}")
        if op is not Op.INSERT and not present:
            self.violations.append(f"{kind} {op.value} of missing {key}")
        self.calls.append((kind, op, value))
        if op is Op.DELETE:
            store.pop(key, None)
        else:
            store[key] = value

    def write_entry(self, op: Op, entry: TableEntry) -> None:
        if op is not Op.DELETE:
            if entry.member_id is not None and not any(k[1] == entry.member_id for k in self.members):
                self.violations.append(f"entry refers to missing member {entry.member_id}")
            if entry.group_id is not None and not any(k[1] == entry.group_id for k in self.groups):
                self.violations.append(f"entry refers to missing group {entry.group_id}")
        self._apply("entry", self.entries, entry.key(), op, entry)

    def set_default_action(self, table: str, action: Action) -> None:
        self._maybe_fail("default", (table, action))
        self.calls.append(("default", table, action))
        self.defaults[table] = action

    def write_member(self, op: Op, member: ProfileMember) -> None:
        self._apply("member", self.members, (member.profile, member.member_id), op, member)

    def write_group(self, op: Op, group: ProfileGroup) -> None:
        if op is not Op.DELETE:
            for mid, _ in group.members:
                if (group.profile, mid) not in self.members:
                    self.violations.append(f"group {group.group_id} refers to missing member {mid}")
        self._apply("group", self.groups, (group.profile, group.group_id), op, group)

    def read_counter(self, counter: str, index: int) -> tuple[int, int]:
        assert 0 <= index < COUNTER_SIZE
        return self.counters.get((counter, index), (0, 0))

    def write_counter(self, counter: str, index: int, packets: int, byte_count: int) -> None:
        assert 0 <= index < COUNTER_SIZE
        self._maybe_fail("counter", (counter, index))
        self.calls.append(("counter", counter, index, packets, byte_count))
        self.counters[(counter, index)] = (packets, byte_count)

    def counter_size(self, counter: str) -> int:
        return COUNTER_SIZE

    def reset(self) -> None:
        self.resets += 1
        self.calls.append(("reset",))
        self.entries.clear()
        self.defaults.clear()
        self.members.clear()
        self.groups.clear()
        self.counters.clear()


def p4info_text() -> str:
    return COMMITTED_P4INFO.read_text()


def dlcp_config() -> p4r.ForwardingPipelineConfig:
    from google.protobuf import text_format

    config = p4r.ForwardingPipelineConfig(p4_device_config=b"opaque-blob")
    text_format.Parse(p4info_text(), config.p4info)
    config.cookie.cookie = 0x1234
    return config


class RawClient:
    """A plain p4r_grpc client for requests finsy would not send (malformed ones) and for arbitration."""

    def __init__(self, port: int, device_id: int = 1) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = p4r_grpc.P4RuntimeStub(self.channel)
        self.device_id = device_id

    def close(self) -> None:
        self.channel.close()

    def write(
        self, updates: list[p4r.Update], election_id: int | None = 1, atomicity: int = 0, device_id: int | None = None
    ) -> p4r.WriteResponse:
        req = p4r.WriteRequest(
            device_id=self.device_id if device_id is None else device_id, updates=updates, atomicity=atomicity
        )
        if election_id is not None:
            req.election_id.CopyFrom(U128.encode(election_id))
        return self.stub.Write(req, timeout=10)

    def read(self, *entities: p4r.Entity) -> list[p4r.Entity]:
        out: list[p4r.Entity] = []
        for reply in self.stub.Read(p4r.ReadRequest(device_id=self.device_id, entities=entities), timeout=10):
            out.extend(reply.entities)
        return out

    def set_pipeline(
        self, config: p4r.ForwardingPipelineConfig | None = None, election_id: int = 1, action: int = 3
    ) -> None:
        req = p4r.SetForwardingPipelineConfigRequest(
            device_id=self.device_id, action=action, election_id=U128.encode(election_id)
        )
        if config is not None:
            req.config.CopyFrom(config)
        self.stub.SetForwardingPipelineConfig(req, timeout=10)


def details(err: grpc.RpcError) -> list[p4r.Error]:
    """The p4.v1.Error list of a failed batch."""
    for key, value in err.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            status = rpc_status.Status.FromString(value)
            out = []
            for d in status.details:
                e = p4r.Error()
                assert d.Unpack(e)
                out.append(e)
            return out
    raise AssertionError("no status details")


class Stream:
    """A StreamChannel opened with the raw stub; messages from the switch land in ``received``."""

    def __init__(self, client: RawClient) -> None:
        import queue
        import threading

        self._out: queue.Queue[p4r.StreamMessageRequest | None] = queue.Queue()
        self.received: queue.Queue[p4r.StreamMessageResponse | grpc.RpcError] = queue.Queue()
        self.device_id = client.device_id

        def requests() -> Any:
            while (msg := self._out.get()) is not None:
                yield msg

        self._call = client.stub.StreamChannel(requests())

        def receive() -> None:
            try:
                for msg in self._call:
                    self.received.put(msg)
            except grpc.RpcError as exc:
                self.received.put(exc)

        self._thread = threading.Thread(target=receive, daemon=True)
        self._thread.start()

    def arbitrate(self, election_id: int | None, device_id: int | None = None) -> None:
        update = p4r.MasterArbitrationUpdate(device_id=self.device_id if device_id is None else device_id)
        if election_id is not None:
            update.election_id.CopyFrom(U128.encode(election_id))
        self._out.put(p4r.StreamMessageRequest(arbitration=update))

    def send(self, msg: p4r.StreamMessageRequest) -> None:
        self._out.put(msg)

    def next(self, timeout: float = 10.0) -> p4r.StreamMessageResponse | grpc.RpcError:
        return self.received.get(timeout=timeout)

    def next_arbitration(self, timeout: float = 10.0) -> p4r.MasterArbitrationUpdate:
        msg = self.next(timeout)
        assert isinstance(msg, p4r.StreamMessageResponse), msg
        assert msg.HasField("arbitration"), msg
        return msg.arbitration

    def close(self) -> None:
        self._out.put(None)
        self._call.cancel()
        self._thread.join(10)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---------------------------------------------------------------- entities, built by name with finsy

INSERT, MODIFY, DELETE = p4r.Update.INSERT, p4r.Update.MODIFY, p4r.Update.DELETE
SELECTOR = "ecmp_selector"
MACS = {"src_mac": "02:dc:00:00:00:01", "dst_mac": "02:dc:00:00:00:02"}


def route(prefix: str = "10.1.0.0/16", group: int = 1) -> fy.P4TableEntry:
    return fy.P4TableEntry(
        "ipv4_routes", match=fy.Match(dst_addr=prefix), action=fy.Action("set_next_hop_group", group=group)
    )


def klass(priority: int = 10, job: tuple[int, int] = (7, 0xFFFF), queue: int = 3) -> fy.P4TableEntry:
    return fy.P4TableEntry(
        "dlcp_classes",
        match=fy.Match(job_id=job),
        priority=priority,
        action=fy.Action("set_queue", queue=queue),
    )


def member(mid: int, port: int) -> fy.P4ActionProfileMember:
    return fy.P4ActionProfileMember(SELECTOR, member_id=mid, action=fy.Action("set_next_hop", port=port, **MACS))


def update(kind: int, entity: object, schema: P4Schema) -> p4r.Update:
    return p4r.Update(type=kind, entity=entity.encode(schema))  # type: ignore[attr-defined]


def codes(exc: grpc.RpcError) -> list[str]:
    return [
        grpc.StatusCode(next(c for c in grpc.StatusCode if c.value[0] == e.canonical_code)).name for e in details(exc)
    ]


def fails(raw: RawClient, *updates: p4r.Update, atomicity: int = 0) -> list[str]:
    with pytest.raises(grpc.RpcError) as info:
        raw.write(list(updates), atomicity=atomicity)
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    return codes(info.value)


def one_error(raw: RawClient, upd: p4r.Update) -> p4r.Error:
    with pytest.raises(grpc.RpcError) as info:
        raw.write([upd])
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    (err,) = details(info.value)
    return err


def code_of(err: p4r.Error) -> str:
    return next(c.name for c in grpc.StatusCode if c.value[0] == err.canonical_code)
