"""Bad input to the P4Runtime server: bytes that do not parse, requests above its limits, over-long values,
and a stream whose client does not read. Each gets a named gRPC error, and the server goes on serving."""

from __future__ import annotations

import time

import finsy as fy
import grpc
import pytest
from finsy import P4Schema
from finsy.proto import p4r
from p4rt_support import INSERT, MODIFY, RawClient, Stream, code_of, dlcp_config, one_error, route, update

from dlcp import switch_limits as limits
from dlcp.testbed.switch.p4rt import server as p4rt_server
from dlcp.testbed.switch.p4rt.server import P4RuntimeServer

SERVICE = "/p4.v1.P4Runtime/"
GARBAGE = b"\xff\xff\xff\xff\x0f"  # a field tag whose varint never ends: no protobuf parses it


def raw_call(raw: RawClient, method: str, data: bytes) -> grpc.RpcError:
    """The error of a call sending ``data`` as it is (identity serializers)."""
    with pytest.raises(grpc.RpcError) as info:
        if method == "Read":
            list(raw.channel.unary_stream(SERVICE + method)(data, timeout=10))
        else:
            raw.channel.unary_unary(SERVICE + method)(data, timeout=10)
    return info.value


def still_serves(raw: RawClient, schema: P4Schema) -> None:
    raw.write([update(INSERT, route("10.77.0.0/16"), schema)])
    assert len(raw.read(p4r.Entity(table_entry=update(INSERT, route("10.77.0.0/16"), schema).entity.table_entry))) == 1


@pytest.mark.parametrize(
    ("method", "message"),
    [
        ("Write", "p4.v1.WriteRequest"),
        ("Read", "p4.v1.ReadRequest"),
        ("SetForwardingPipelineConfig", "p4.v1.SetForwardingPipelineConfigRequest"),
        ("GetForwardingPipelineConfig", "p4.v1.GetForwardingPipelineConfigRequest"),
        ("Capabilities", "p4.v1.CapabilitiesRequest"),
    ],
)
def test_bytes_that_do_not_parse_are_invalid_argument_naming_the_message(
    raw: RawClient, primary: Stream, schema: P4Schema, method: str, message: str
) -> None:
    err = raw_call(raw, method, GARBAGE)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err  # gRPC's own answer would be INTERNAL
    assert f"not a valid {message} (5 bytes)" in (err.details() or "")
    still_serves(raw, schema)


def test_a_stream_message_that_does_not_parse_ends_the_stream(raw: RawClient, server: P4RuntimeServer) -> None:
    call = raw.channel.stream_stream(SERVICE + "StreamChannel")(iter([GARBAGE]), timeout=10)
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid p4.v1.StreamMessageRequest" in (info.value.details() or "")
    deadline = time.monotonic() + 10
    while server.servicer.streams and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not server.servicer.streams, "the refused stream is dropped"


def test_a_write_above_the_batch_limit_is_refused_whole(raw: RawClient, primary: Stream, schema: P4Schema) -> None:
    # A counter update without an index writes every cell: it counts as the counter's size.
    every_cell = update(MODIFY, fy.P4CounterEntry("dropped", data=fy.P4CounterData(packet_count=1)), schema)
    cells = schema.counters["dropped"].size
    fits = limits.P4RT_MAX_WRITE_UPDATES // cells
    with pytest.raises(grpc.RpcError) as info:
        raw.write([every_cell] * (fits + 1))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"at most {limits.P4RT_MAX_WRITE_UPDATES} per Write" in (info.value.details() or "")
    raw.write([update(INSERT, route(), schema), every_cell])  # a batch within the limit applies
    with pytest.raises(grpc.RpcError) as info:
        raw.write([update(INSERT, route("10.2.0.0/16"), schema)] * (limits.P4RT_MAX_WRITE_UPDATES + 1))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(raw.read(p4r.Entity(table_entry=p4r.TableEntry()))) == 1, "nothing of the refused batch applied"


def test_reads_above_the_limit_are_refused(raw: RawClient, primary: Stream, schema: P4Schema) -> None:
    every_counter = p4r.Entity(counter_entry=p4r.CounterEntry())
    cells = sum(c.size for c in schema.counters)
    per_read = limits.P4RT_MAX_READ_ENTITIES // cells
    assert len(raw.read(*[every_counter] * per_read)) == per_read * cells
    with pytest.raises(grpc.RpcError) as info:
        raw.read(*[every_counter] * (per_read + 1))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "answers more than" in (info.value.details() or "")
    with pytest.raises(grpc.RpcError) as info:
        raw.read(*[p4r.Entity(table_entry=p4r.TableEntry(table_id=1))] * (limits.P4RT_MAX_READ_ENTITIES + 1))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "asks for" in (info.value.details() or "")


def test_over_long_values_get_short_messages(raw: RawClient, primary: Stream, schema: P4Schema) -> None:
    wide = update(INSERT, route(), schema)
    wide.entity.table_entry.match[0].lpm.value = b"\xff" * (1 << 20)
    err = one_error(raw, wide)
    assert code_of(err) == "OUT_OF_RANGE"
    assert "1048576-byte value does not fit in 32 bits" in err.message and len(err.message) < 200
    padded = update(INSERT, route(), schema)  # leading zeros: a long bytestring of a value that fits
    padded.entity.table_entry.match[0].lpm.value = b"\0" * (1 << 20) + bytes([10, 1, 0, 0])
    raw.write([padded])
    with pytest.raises(grpc.RpcError) as info:
        req = p4r.WriteRequest(device_id=1, role="r" * (1 << 20), updates=[update(INSERT, route(), schema)])
        raw.stub.Write(req, timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert "(1048576 chars)" in (info.value.details() or "") and len(info.value.details() or "") < 200


def test_entry_metadata_is_bounded(raw: RawClient, primary: Stream, schema: P4Schema) -> None:
    most = update(INSERT, route(), schema)
    most.entity.table_entry.metadata = b"m" * limits.P4RT_MAX_ENTRY_METADATA_BYTES
    raw.write([most])
    over = update(INSERT, route("10.2.0.0/16"), schema)
    over.entity.table_entry.metadata = b"m" * (limits.P4RT_MAX_ENTRY_METADATA_BYTES + 1)
    err = one_error(raw, over)
    assert code_of(err) == "INVALID_ARGUMENT" and "at most 4096" in err.message


def test_writes_waiting_for_a_commit_are_bounded(
    raw: RawClient, primary: Stream, schema: P4Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(p4rt_server, "MAX_WRITE_UPDATES", 3)
    raw.set_pipeline(dlcp_config(), action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_SAVE)
    raw.write([update(INSERT, route(f"10.{i}.0.0/16"), schema) for i in range(3)])
    with pytest.raises(grpc.RpcError) as info:
        raw.write([update(INSERT, route("10.9.0.0/16"), schema)])
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "COMMIT first" in (info.value.details() or "")
    raw.set_pipeline(None, action=p4r.SetForwardingPipelineConfigRequest.COMMIT)
    raw.write([update(INSERT, route("10.9.0.0/16"), schema)])
    assert len(raw.read(p4r.Entity(table_entry=p4r.TableEntry()))) == 4


def test_a_stream_that_reads_nothing_is_bounded(raw: RawClient, server: P4RuntimeServer) -> None:
    """PacketOuts are refused with StreamErrors that carry the packet back; unread, they stop the reading."""
    packet = p4r.StreamMessageRequest(packet=p4r.PacketOut(payload=bytes(10_000))).SerializeToString()
    sent = 2000  # 20 MB asked back; gRPC's flow-control window holds a few MB of it on the way
    call = raw.channel.stream_stream(SERVICE + "StreamChannel")(iter([packet] * sent), timeout=30)
    deadline = time.monotonic() + 10
    while not server.servicer.streams and time.monotonic() < deadline:
        time.sleep(0.01)
    (stream,) = server.servicer.streams
    time.sleep(1.0)  # the reader would answer every packet by now, were it not bounded
    with stream.cond:
        queued, pending = len(stream.items), stream.pending_bytes
    assert pending <= limits.P4RT_MAX_PENDING_STREAM_BYTES + len(packet) + 100, pending
    assert queued < sent // 10, queued
    got = 0
    for msg in call:  # reading lets the rest come: every packet is answered
        assert p4r.StreamMessageResponse.FromString(msg).error.canonical_code == grpc.StatusCode.UNIMPLEMENTED.value[0]
        got += 1
        if got == sent:
            break
    assert got == sent
    call.cancel()


def test_a_stream_with_too_many_unread_notices_is_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "P4RT_MAX_PENDING_STREAM_MESSAGES", 4)
    cancelled: list[bool] = []
    stream = p4rt_server._Stream("peer", lambda: cancelled.append(True))
    for _ in range(6):
        stream.put(p4r.StreamMessageResponse())
    assert cancelled == [True]
    items = list(stream.items)
    assert len(items) == 5 and isinstance(items[-1], p4rt_server.P4RuntimeError)
    assert items[-1].code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert not stream.wait_for_room(), "the reader stops"
