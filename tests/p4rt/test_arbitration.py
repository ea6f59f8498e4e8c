"""Primary election over StreamChannel (P4Runtime spec, client arbitration), with raw streams."""

from __future__ import annotations

import time

import grpc
import pytest
from finsy import P4Schema
from finsy.proto import U128, p4r
from p4rt_support import INSERT, RawClient, Stream, dlcp_config, route, update

from dlcp.testbed.switch.p4rt.arbitration import Arbiter
from dlcp.testbed.switch.p4rt.server import P4RuntimeServer

OK, NOT_FOUND, ALREADY_EXISTS = 0, 5, 6


def status(update: p4r.MasterArbitrationUpdate) -> tuple[int, int | None]:
    eid = U128.decode(update.election_id) if update.HasField("election_id") else None
    return update.status.code, eid


def ended(stream: Stream) -> grpc.StatusCode:
    msg = stream.next()
    assert isinstance(msg, grpc.RpcError), msg
    return msg.code()  # type: ignore[no-any-return]


@pytest.fixture
def streams(raw: RawClient) -> list[Stream]:
    out: list[Stream] = []
    yield out  # type: ignore[misc]
    for s in out:
        s.close()


def open_stream(raw: RawClient, streams: list[Stream], election_id: int | None, device_id: int | None = None) -> Stream:
    s = Stream(raw)
    streams.append(s)
    s.arbitrate(election_id, device_id)
    return s


def test_highest_election_id_is_primary_and_everyone_is_told(raw: RawClient, streams: list[Stream]) -> None:
    a = open_stream(raw, streams, 5)
    assert status(a.next_arbitration()) == (OK, 5)
    b = open_stream(raw, streams, 3)
    assert status(b.next_arbitration()) == (ALREADY_EXISTS, 5)  # a backup; only it is told
    c = open_stream(raw, streams, 9)
    assert status(a.next_arbitration()) == (ALREADY_EXISTS, 9)
    assert status(b.next_arbitration()) == (ALREADY_EXISTS, 9)
    assert status(c.next_arbitration()) == (OK, 9)
    assert a.received.empty() and b.received.empty()


def test_writes_from_a_backup_are_permission_denied(raw: RawClient, streams: list[Stream], schema: P4Schema) -> None:
    first = open_stream(raw, streams, 1)
    assert status(first.next_arbitration()) == (OK, 1)
    raw.set_pipeline(dlcp_config(), election_id=1)
    raw.write([update(INSERT, route("10.1.0.0/16"), schema)], election_id=1)
    second = open_stream(raw, streams, 2)
    assert status(second.next_arbitration()) == (OK, 2)
    assert status(first.next_arbitration()) == (ALREADY_EXISTS, 2), "the old primary is told it lost"
    with pytest.raises(grpc.RpcError) as info:
        raw.write([update(INSERT, route("10.2.0.0/16"), schema)], election_id=1)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as info:
        raw.write([update(INSERT, route("10.2.0.0/16"), schema)], election_id=3)  # nobody's
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    raw.write([update(INSERT, route("10.2.0.0/16"), schema)], election_id=2)
    assert len(raw.read(p4r.Entity(table_entry=p4r.TableEntry()))) == 2


def test_primary_leaving_is_announced_and_tables_stay(raw: RawClient, streams: list[Stream], schema: P4Schema) -> None:
    primary = open_stream(raw, streams, 10)
    primary.next_arbitration()
    raw.set_pipeline(dlcp_config(), election_id=10)
    raw.write([update(INSERT, route(), schema)], election_id=10)
    backup = open_stream(raw, streams, 4)
    assert status(backup.next_arbitration()) == (ALREADY_EXISTS, 10)
    primary.close()
    assert status(backup.next_arbitration()) == (NOT_FOUND, 10), "no primary now; the highest id is announced"
    with pytest.raises(grpc.RpcError) as info:
        raw.write([update(INSERT, route("10.2.0.0/16"), schema)], election_id=10)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, "a closed stream's id no longer writes"
    assert len(raw.read(p4r.Entity(table_entry=p4r.TableEntry()))) == 1, "tables stay"
    backup.arbitrate(10)  # a backup takes over by bidding the highest id (what finsy does)
    assert status(backup.next_arbitration()) == (OK, 10)


def test_lower_id_than_ever_seen_gets_no_primacy(raw: RawClient, streams: list[Stream]) -> None:
    first = open_stream(raw, streams, 8)
    first.next_arbitration()
    first.close()
    late = open_stream(raw, streams, 5)
    assert status(late.next_arbitration()) == (NOT_FOUND, 8)


def test_primary_downgrading_itself(raw: RawClient, streams: list[Stream]) -> None:
    a = open_stream(raw, streams, 6)
    a.next_arbitration()
    b = open_stream(raw, streams, 2)
    b.next_arbitration()
    a.arbitrate(1)
    assert status(b.next_arbitration()) == (NOT_FOUND, 6)
    assert status(a.next_arbitration()) == (NOT_FOUND, 6)


def test_unset_election_id_is_never_primary(raw: RawClient, streams: list[Stream]) -> None:
    s = open_stream(raw, streams, None)
    update = s.next_arbitration()
    assert status(update) == (NOT_FOUND, None), "no primary ever: the election id stays unset"


def test_streams_refused(raw: RawClient, streams: list[Stream]) -> None:
    assert ended(open_stream(raw, streams, 1, device_id=2)) == grpc.StatusCode.NOT_FOUND
    first = open_stream(raw, streams, 4)
    first.next_arbitration()
    assert ended(open_stream(raw, streams, 4)) == grpc.StatusCode.INVALID_ARGUMENT
    first.arbitrate(4, device_id=3)
    assert ended(first) == grpc.StatusCode.FAILED_PRECONDITION


def test_packet_out_gets_a_stream_error(raw: RawClient, streams: list[Stream]) -> None:
    s = open_stream(raw, streams, 1)
    s.next_arbitration()
    s.send(p4r.StreamMessageRequest(packet=p4r.PacketOut(payload=b"x")))
    msg = s.next()
    assert isinstance(msg, p4r.StreamMessageResponse)
    assert msg.error.canonical_code == 12 and msg.error.packet_out.packet_out.payload == b"x"


def test_stop_ends_open_streams(server: P4RuntimeServer, raw: RawClient, streams: list[Stream]) -> None:
    s = open_stream(raw, streams, 1)
    s.next_arbitration()
    server.stop(0)
    assert isinstance(s.next(), grpc.RpcError)


def test_arbiter_bookkeeping() -> None:
    arb = Arbiter(device_id=1)

    def msg(eid: int | None) -> p4r.MasterArbitrationUpdate:
        m = p4r.MasterArbitrationUpdate(device_id=1)
        if eid is not None:
            m.election_id.CopyFrom(U128.encode(eid))
        return m

    sent = arb.update("a", msg(3))
    assert [(s, status(m.arbitration)) for s, m in sent] == [("a", (OK, 3))]
    sent = arb.update("b", msg(7))
    assert [(s, status(m.arbitration)) for s, m in sent] == [("a", (ALREADY_EXISTS, 7)), ("b", (OK, 7))]
    assert arb.is_primary(7) and not arb.is_primary(3) and not arb.is_primary(None)
    assert arb.remove("a") == []
    sent = arb.remove("b")
    assert sent == [] and arb.primary is None and not arb.is_primary(7)


def test_too_many_streams(raw: RawClient, streams: list[Stream]) -> None:
    from dlcp.testbed.switch.p4rt.server import MAX_STREAMS

    for i in range(MAX_STREAMS):
        open_stream(raw, streams, i + 1).next_arbitration()
    assert ended(open_stream(raw, streams, 100)) == grpc.StatusCode.RESOURCE_EXHAUSTED
    streams.pop(0).close()
    # The server notices the cancelled stream asynchronously: retry, with a generous deadline.
    deadline = time.monotonic() + 30
    while True:
        extra = open_stream(raw, streams, 200)
        msg = extra.next()
        if isinstance(msg, p4r.StreamMessageResponse) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert isinstance(msg, p4r.StreamMessageResponse), "a closed stream frees its place"
    assert status(msg.arbitration) == (OK, 200)
