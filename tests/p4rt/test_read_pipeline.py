"""Reads (wildcards, canonical values), the pipeline config RPCs and Capabilities, with raw requests."""

from __future__ import annotations

import finsy as fy
import grpc
import pytest
from finsy import P4Schema
from finsy.proto import p4r
from p4rt_support import (
    INSERT,
    MODIFY,
    RawClient,
    RecordingBackend,
    Stream,
    details,
    dlcp_config,
    klass,
    member,
    route,
    update,
)

from dlcp.p4 import sizes
from dlcp.testbed.switch.p4rt.server import P4RUNTIME_API_VERSION

GET = p4r.GetForwardingPipelineConfigRequest
SET = p4r.SetForwardingPipelineConfigRequest
ROUTES, CLASSES = 39645294, 47468225


def table(table_id: int = 0, **kw: object) -> p4r.Entity:
    return p4r.Entity(table_entry=p4r.TableEntry(table_id=table_id, **kw))  # type: ignore[arg-type]


def test_wildcard_reads(raw: RawClient, primary: Stream, schema: P4Schema) -> None:
    raw.write([update(INSERT, route(f"10.{i}.0.0/16", group=i), schema) for i in range(1, 4)])
    raw.write([update(INSERT, klass(priority=p), schema) for p in (10, 20)])
    raw.write([update(INSERT, member(1, 2), schema)])

    assert len(raw.read(table())) == 5
    assert len(raw.read(table(ROUTES))) == 3
    assert len(raw.read(table(CLASSES))) == 2
    assert [e.table_entry.priority for e in raw.read(table(CLASSES, priority=20))] == [20]
    one = update(INSERT, route("10.2.0.0/16"), schema).entity.table_entry
    (got,) = raw.read(p4r.Entity(table_entry=p4r.TableEntry(table_id=ROUTES, match=one.match)))
    assert got.table_entry.action.action.params[0].value == b"\x02"
    by_action = p4r.TableEntry(table_id=ROUTES)
    by_action.action.action.action_id = 22359828  # drop_packet: none installed
    assert raw.read(p4r.Entity(table_entry=by_action)) == []
    # Several requests in one batch; members with the all-profiles wildcard.
    both = raw.read(table(ROUTES), p4r.Entity(action_profile_member=p4r.ActionProfileMember()))
    assert len(both) == 4
    assert both[-1].action_profile_member.member_id == 1


def test_read_returns_what_was_written(raw: RawClient, primary: Stream, schema: P4Schema) -> None:
    written = [update(INSERT, route("10.7.0.0/16", group=7), schema), update(INSERT, klass(priority=9), schema)]
    written[0].entity.table_entry.metadata = b"cookie"
    written[0].entity.table_entry.controller_metadata = 77
    raw.write(written)
    got = {e.table_entry.table_id: e for e in raw.read(table())}
    for u in written:
        assert got[u.entity.table_entry.table_id] == u.entity


def test_counter_reads(raw: RawClient, primary: Stream, schema: P4Schema, backend: RecordingBackend) -> None:
    backend.counters[("DlcpIngress.drop_counters.dropped", 17)] = (3, 300)
    (one,) = raw.read(p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=307371492, index=p4r.Index(index=17))))
    assert (one.counter_entry.data.packet_count, one.counter_entry.data.byte_count) == (3, 300)
    whole = raw.read(p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=307371492)))
    assert len(whole) == sizes.PORT_CLASS_SLOTS and sum(e.counter_entry.data.packet_count for e in whole) == 3
    assert len(raw.read(p4r.Entity(counter_entry=p4r.CounterEntry()))) == 3 * sizes.PORT_CLASS_SLOTS


def test_bad_read_requests_report_per_request_errors(raw: RawClient, primary: Stream, schema: P4Schema) -> None:
    raw.write([update(INSERT, route(), schema)])
    with pytest.raises(grpc.RpcError) as info:
        raw.read(table(ROUTES), table(1234), p4r.Entity(), table(0, priority=3))
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    assert [e.canonical_code for e in details(info.value)] == [0, 3, 3, 3]
    with pytest.raises(grpc.RpcError) as info:
        raw.stub.Read(p4r.ReadRequest(device_id=9, entities=[table()])).__next__()
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_pipeline_verify_commit_and_refuse_another(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    raw.write([update(INSERT, route(), schema)])
    resets = backend.resets

    raw.set_pipeline(dlcp_config(), action=SET.VERIFY)
    assert backend.resets == resets and len(raw.read(table())) == 1, "VERIFY changes nothing"

    other = dlcp_config()
    other.p4info.tables[0].size = 2048
    other.p4info.actions[1].preamble.id = 1
    for action in (SET.VERIFY, SET.VERIFY_AND_COMMIT, SET.RECONCILE_AND_COMMIT):
        with pytest.raises(grpc.RpcError) as info:
            raw.set_pipeline(other, action=action)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "DLCP's program only" in info.value.details() and "ipv4_routes" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        raw.set_pipeline(None, action=SET.VERIFY_AND_COMMIT)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(raw.read(table())) == 1, "a refused config leaves the tables"

    raw.set_pipeline(dlcp_config(), action=SET.RECONCILE_AND_COMMIT)
    assert backend.resets == resets and len(raw.read(table())) == 1, "RECONCILE keeps the state"

    raw.set_pipeline(dlcp_config(), action=SET.VERIFY_AND_COMMIT)
    assert backend.resets == resets + 1 and backend.entries == {} and raw.read(table()) == []


def test_save_then_commit_replays_the_writes_since_the_save(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    raw.write([update(INSERT, route("10.1.0.0/16"), schema)])
    with pytest.raises(grpc.RpcError) as info:
        raw.set_pipeline(None, action=SET.COMMIT)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    raw.set_pipeline(dlcp_config(), action=SET.VERIFY_AND_SAVE)
    raw.write([update(INSERT, route("10.3.0.0/16"), schema)])
    raw.set_pipeline(dlcp_config(), action=SET.VERIFY_AND_SAVE)  # a new save: the journal starts again
    raw.write([update(INSERT, route("10.2.0.0/16"), schema), update(MODIFY, route("10.1.0.0/16", group=4), schema)])
    assert len(raw.read(table())) == 3, "writes after a save apply at once (the program is the same)"
    with pytest.raises(grpc.RpcError) as info:
        raw.set_pipeline(dlcp_config(), action=SET.COMMIT)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, "COMMIT takes no config"
    raw.set_pipeline(None, action=SET.COMMIT)
    got = sorted(e.table_entry.match[0].lpm.value for e in raw.read(table()))
    assert got == [b"\x0a\x02\x00\x00"], "state = the writes since the save (the MODIFY found nothing to modify)"


def test_get_pipeline_config(raw: RawClient, primary: Stream) -> None:
    def get(kind: int) -> p4r.ForwardingPipelineConfig:
        return raw.stub.GetForwardingPipelineConfig(GET(device_id=1, response_type=kind), timeout=10).config

    config = dlcp_config()
    assert get(GET.ALL) == config
    cookie = get(GET.COOKIE_ONLY)
    assert cookie.cookie.cookie == 0x1234 and not cookie.HasField("p4info") and not cookie.p4_device_config
    assert get(GET.P4INFO_AND_COOKIE).p4info == config.p4info
    assert get(GET.DEVICE_CONFIG_AND_COOKIE).p4_device_config == b"opaque-blob"
    with pytest.raises(grpc.RpcError) as info:
        raw.stub.GetForwardingPipelineConfig(GET(device_id=5), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_no_pipeline_yet_and_capabilities(raw: RawClient) -> None:
    reply = raw.stub.GetForwardingPipelineConfig(GET(device_id=1), timeout=10)
    assert not reply.HasField("config")
    caps = raw.stub.Capabilities(p4r.CapabilitiesRequest(), timeout=10)
    assert caps.p4runtime_api_version == P4RUNTIME_API_VERSION
    with pytest.raises(grpc.RpcError) as info:
        raw.stub.Capabilities(p4r.CapabilitiesRequest(device_id=3), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_only_the_primary_sets_the_pipeline(raw: RawClient, primary: Stream) -> None:
    with pytest.raises(grpc.RpcError) as info:
        raw.set_pipeline(dlcp_config(), election_id=0)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_read_write_symmetry_through_finsy_decoding(raw: RawClient, primary: Stream, schema: P4Schema) -> None:
    entry = fy.P4TableEntry(
        "dlcp_classes",
        match=fy.Match(job_id=(7, 0xFF), priority=(1, 0xFF)),
        priority=3,
        action=fy.Action("mark_drop_eligible", queue=1),
    )
    raw.write([update(INSERT, entry, schema)])
    (got,) = raw.read(table(CLASSES))
    assert fy.P4TableEntry.decode(got, schema) == entry
