"""Write semantics and validation, driven with raw P4Runtime requests (entities encoded by finsy, then bent)."""

from __future__ import annotations

import finsy as fy
import grpc
import pytest
from finsy import P4Schema
from finsy.proto import p4r
from p4rt_support import (
    DELETE,
    INSERT,
    MACS,
    MODIFY,
    SELECTOR,
    RawClient,
    RecordingBackend,
    Stream,
    code_of,
    fails,
    klass,
    member,
    one_error,
    route,
    update,
)

from dlcp.p4 import sizes
from dlcp.testbed.switch.entries import MatchKind


def test_insert_modify_delete_reach_the_backend(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    raw.write([update(INSERT, route(group=1), schema)])
    ((entry,),) = [list(backend.entries.values())]
    assert entry.table == "DlcpIngress.routing.ipv4_routes"
    (fm,) = entry.match
    assert (fm.name, fm.kind, fm.value, fm.arg) == ("dst_addr", MatchKind.LPM, 0x0A010000, 16)
    assert entry.action is not None and entry.action.param("group") == 1

    raw.write([update(MODIFY, route(group=5), schema)])
    ((entry,),) = [list(backend.entries.values())]
    assert entry.action is not None and entry.action.param("group") == 5

    raw.write([update(DELETE, route(group=5), schema)])
    assert backend.entries == {}
    assert backend.violations == []


def test_already_exists_and_not_found(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    raw.write([update(INSERT, route(group=1), schema)])
    calls = len(backend.calls)
    assert code_of(one_error(raw, update(INSERT, route(group=2), schema))) == "ALREADY_EXISTS"
    assert code_of(one_error(raw, update(MODIFY, route("10.2.0.0/16"), schema))) == "NOT_FOUND"
    assert code_of(one_error(raw, update(DELETE, route("10.2.0.0/16"), schema))) == "NOT_FOUND"
    assert len(backend.calls) == calls, "refused updates must not reach the data plane"
    ((entry,),) = [list(backend.entries.values())]
    assert entry.action is not None and entry.action.param("group") == 1, "the existing entry is unchanged"


def test_batch_reports_one_error_per_update_and_applies_the_valid_ones(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    raw.write([update(INSERT, route("10.9.0.0/16", group=9), schema)])
    bad_bits = update(INSERT, route("10.3.0.0/16"), schema)
    bad_bits.entity.table_entry.match[0].lpm.value = b"\x0a\x03\x00\x01"  # bit set past the /16
    result = fails(
        raw,
        update(INSERT, route("10.1.0.0/16", group=1), schema),
        update(INSERT, route("10.9.0.0/16", group=2), schema),
        bad_bits,
        update(DELETE, route("10.8.0.0/16"), schema),
        update(INSERT, route("10.4.0.0/16", group=4), schema),
    )
    assert result == ["OK", "ALREADY_EXISTS", "INVALID_ARGUMENT", "NOT_FOUND", "OK"]
    groups = {e.match[0].value >> 16 & 0xFF: e.action.param("group") for e in backend.entries.values() if e.action}
    assert groups == {1: 1, 9: 9, 4: 4}, "valid updates applied; the existing entry untouched; the bad one absent"


def test_rollback_on_error_applies_nothing(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    raw.write([update(INSERT, route("10.9.0.0/16", group=9), schema)])
    before = dict(backend.entries)
    result = fails(
        raw,
        update(INSERT, route("10.1.0.0/16"), schema),
        update(MODIFY, route("10.9.0.0/16", group=3), schema),
        update(INSERT, route("10.9.0.0/16"), schema),
        update(INSERT, route("10.2.0.0/16"), schema),
        atomicity=p4r.WriteRequest.ROLLBACK_ON_ERROR,
    )
    assert result == ["ABORTED", "ABORTED", "ALREADY_EXISTS", "ABORTED"]
    assert backend.entries == before
    assert backend.violations == []


def test_dataplane_atomic_is_unimplemented(raw: RawClient, primary: Stream, schema: P4Schema) -> None:
    with pytest.raises(grpc.RpcError) as info:
        raw.write([update(INSERT, route(), schema)], atomicity=p4r.WriteRequest.DATAPLANE_ATOMIC)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    ("bend", "code"),
    [
        (lambda te: setattr(te.match[0].lpm, "value", b""), "OUT_OF_RANGE"),
        (lambda te: setattr(te.match[0].lpm, "value", b"\x01\x0a\x01\x00\x00"), "OUT_OF_RANGE"),
        (lambda te: setattr(te.match[0].lpm, "prefix_len", 0), "INVALID_ARGUMENT"),
        (lambda te: setattr(te.match[0].lpm, "prefix_len", 33), "INVALID_ARGUMENT"),
        (lambda te: setattr(te.match[0].lpm, "prefix_len", 8), "INVALID_ARGUMENT"),  # 10.1/8: bits past prefix
        (lambda te: setattr(te.match[0], "field_id", 9), "INVALID_ARGUMENT"),
        (lambda te: te.match.append(te.match[0]), "INVALID_ARGUMENT"),
        (lambda te: te.match[0].exact.SetInParent(), "INVALID_ARGUMENT"),  # wrong match kind
        (lambda te: setattr(te, "priority", 5), "INVALID_ARGUMENT"),
        (lambda te: setattr(te, "table_id", 1234), "INVALID_ARGUMENT"),
        (lambda te: setattr(te.action.action, "action_id", 16898208), "INVALID_ARGUMENT"),  # not this table's
        (lambda te: setattr(te.action.action.params[0], "param_id", 7), "INVALID_ARGUMENT"),
        (lambda te: te.action.action.ClearField("params"), "INVALID_ARGUMENT"),
        (lambda te: te.action.action.params.append(te.action.action.params[0]), "INVALID_ARGUMENT"),
        (lambda te: setattr(te.action.action.params[0], "value", b"\x01\x00\x00"), "OUT_OF_RANGE"),  # 17 bits
        (lambda te: setattr(te.action, "action_profile_member_id", 1), "INVALID_ARGUMENT"),  # direct table
        (lambda te: setattr(te, "is_const", True), "INVALID_ARGUMENT"),
        (lambda te: setattr(te.counter_data, "packet_count", 1), "INVALID_ARGUMENT"),
        (lambda te: te.ClearField("action"), "INVALID_ARGUMENT"),
    ],
)
def test_malformed_route_is_refused_and_changes_nothing(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema, bend: object, code: str
) -> None:
    upd = update(INSERT, route(), schema)
    bend(upd.entity.table_entry)  # type: ignore[operator]
    calls = len(backend.calls)
    assert code_of(one_error(raw, upd)) == code
    assert len(backend.calls) == calls
    assert raw.read(p4r.Entity(table_entry=p4r.TableEntry())) == []


def test_non_canonical_bytestrings_are_accepted_and_read_back_canonical(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    upd = update(INSERT, route("0.1.0.0/16", group=1), schema)
    te = upd.entity.table_entry
    te.match[0].lpm.value = b"\x00\x00\x00\x01\x00\x00"  # leading zeros beyond the width: allowed
    te.action.action.params[0].value = b"\x00\x00\x01"
    raw.write([upd])
    (got,) = raw.read(p4r.Entity(table_entry=p4r.TableEntry(table_id=te.table_id)))
    assert got.table_entry.match[0].lpm.value == b"\x01\x00\x00"
    assert got.table_entry.action.action.params[0].value == b"\x01"


def test_ternary_rules(raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema) -> None:
    raw.write([update(INSERT, klass(), schema)])
    (entry,) = backend.entries.values()
    assert entry.priority == 10 and entry.match[0].arg == 0xFFFF
    assert [f.name for f in entry.match] == ["job_id"], "don't-care fields are omitted"

    outside = update(INSERT, klass(priority=11, job=(7, 0xFFFF)), schema)
    outside.entity.table_entry.match[0].ternary.mask = b"\xff\x00"  # value 7 has bits outside the mask
    assert code_of(one_error(raw, outside)) == "INVALID_ARGUMENT"
    zero_mask = update(INSERT, klass(priority=12), schema)
    zero_mask.entity.table_entry.match[0].ternary.mask = b"\x00"
    zero_mask.entity.table_entry.match[0].ternary.value = b"\x00"
    assert code_of(one_error(raw, zero_mask)) == "INVALID_ARGUMENT"
    no_priority = update(INSERT, klass(), schema)
    no_priority.entity.table_entry.priority = 0
    assert code_of(one_error(raw, no_priority)) == "INVALID_ARGUMENT"

    # Same match, another priority: another entry. Same match and priority: the same one.
    raw.write([update(INSERT, klass(priority=20, queue=5), schema)])
    assert code_of(one_error(raw, update(INSERT, klass(priority=20), schema))) == "ALREADY_EXISTS"
    assert len(backend.entries) == 2
    raw.write([update(DELETE, klass(priority=10), schema)])
    (left,) = backend.entries.values()
    assert left.priority == 20


def test_default_only_action_and_default_entries(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    noaction = update(
        INSERT, fy.P4TableEntry("dlcp_ports", match=fy.Match(dst_port=4791), action=fy.Action("NoAction")), schema
    )
    assert code_of(one_error(raw, noaction)) == "PERMISSION_DENIED"

    default = fy.P4TableEntry("ipv4_routes", is_default_action=True, action=fy.Action("set_next_hop_group", group=3))
    raw.write([update(MODIFY, default, schema)])
    assert backend.defaults["DlcpIngress.routing.ipv4_routes"].param("group") == 3
    (got,) = raw.read(p4r.Entity(table_entry=p4r.TableEntry(table_id=39645294, is_default_action=True)))
    assert got.table_entry.is_default_action and got.table_entry.action.action.action_id == 29674674

    reset = fy.P4TableEntry("ipv4_routes", is_default_action=True)
    raw.write([update(MODIFY, reset, schema)])
    assert backend.defaults["DlcpIngress.routing.ipv4_routes"].name == "DlcpIngress.routing.drop_packet"

    assert code_of(one_error(raw, update(INSERT, default, schema))) == "INVALID_ARGUMENT"
    assert code_of(one_error(raw, update(DELETE, default, schema))) == "INVALID_ARGUMENT"
    indirect = fy.P4TableEntry("next_hops", is_default_action=True, action=fy.Action("NoAction"))
    assert code_of(one_error(raw, update(MODIFY, indirect, schema))) == "PERMISSION_DENIED"


def test_members_groups_and_references(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    raw.write([update(INSERT, member(1, 2), schema), update(INSERT, member(2, 3), schema)])
    group = fy.P4ActionProfileGroup(SELECTOR, group_id=7, members=[fy.P4Member(1, weight=1), fy.P4Member(2, weight=2)])
    raw.write([update(INSERT, group, schema)])
    raw.write(
        [
            update(
                INSERT,
                fy.P4TableEntry("next_hops", match=fy.Match(group=1), action=fy.IndirectAction(group_id=7)),
                schema,
            )
        ]
    )
    raw.write(
        [
            update(
                INSERT,
                fy.P4TableEntry("next_hops", match=fy.Match(group=2), action=fy.IndirectAction(member_id=2)),
                schema,
            )
        ]
    )
    assert backend.violations == []
    (g,) = backend.groups.values()
    assert g.members == ((1, 1), (2, 2))

    missing = fy.P4TableEntry("next_hops", match=fy.Match(group=3), action=fy.IndirectAction(member_id=99))
    assert code_of(one_error(raw, update(INSERT, missing, schema))) == "NOT_FOUND"
    assert code_of(one_error(raw, update(DELETE, member(1, 2), schema))) == "FAILED_PRECONDITION"  # in group 7
    assert code_of(one_error(raw, update(DELETE, group, schema))) == "FAILED_PRECONDITION"  # used by an entry
    assert code_of(one_error(raw, update(INSERT, member(1, 4), schema))) == "ALREADY_EXISTS"
    dup = fy.P4ActionProfileGroup(SELECTOR, group_id=8, members=[fy.P4Member(1, weight=1), fy.P4Member(1, weight=1)])
    assert code_of(one_error(raw, update(INSERT, dup, schema))) == "INVALID_ARGUMENT"
    zero = fy.P4ActionProfileGroup(SELECTOR, group_id=8, members=[fy.P4Member(1, weight=0)])
    assert code_of(one_error(raw, update(INSERT, zero, schema))) == "INVALID_ARGUMENT"
    watch = fy.P4ActionProfileGroup(SELECTOR, group_id=8, members=[fy.P4Member(1, weight=(1, 5))])
    assert code_of(one_error(raw, update(INSERT, watch, schema))) == "UNIMPLEMENTED"
    one_shot = fy.P4TableEntry(
        "next_hops", match=fy.Match(group=4), action=fy.IndirectAction([1 * fy.Action("ecmp.drop_packet")])
    )
    assert code_of(one_error(raw, update(INSERT, one_shot, schema))) == "INVALID_ARGUMENT"  # no mixing

    raw.write([update(INSERT, member(5, 5), schema)])
    direct = fy.P4TableEntry("next_hops", match=fy.Match(group=5), action=fy.IndirectAction(member_id=5))
    raw.write([update(INSERT, direct, schema)])
    assert code_of(one_error(raw, update(DELETE, member(5, 5), schema))) == "FAILED_PRECONDITION"  # used by an entry
    raw.write([update(DELETE, direct, schema)])
    raw.write([update(DELETE, member(5, 5), schema)])

    raw.write([update(MODIFY, member(2, 6), schema)])
    assert backend.members[("DlcpIngress.ecmp.ecmp_selector", 2)].action.param("port") == 6
    shrink = fy.P4ActionProfileGroup(SELECTOR, group_id=7, members=[fy.P4Member(2, weight=1)])
    raw.write([update(MODIFY, shrink, schema)])
    raw.write([update(DELETE, member(1, 2), schema)])  # no longer referenced
    assert ("DlcpIngress.ecmp.ecmp_selector", 1) not in backend.members
    assert backend.violations == []


def test_one_shot_installs_hidden_members_and_group_and_cleans_up(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    def entry(*ports: int) -> fy.P4TableEntry:
        actions = [1 * fy.Action("set_next_hop", port=p, **MACS) for p in ports]
        return fy.P4TableEntry("next_hops", match=fy.Match(group=1), action=fy.IndirectAction(actions))

    raw.write([update(INSERT, entry(2, 3, 4), schema)])
    assert len(backend.members) == 3 and len(backend.groups) == 1
    (e,) = backend.entries.values()
    (g,) = backend.groups.values()
    assert e.group_id == g.group_id and len(g.members) == 3
    assert raw.read(p4r.Entity(action_profile_member=p4r.ActionProfileMember())) == [], "one-shot members are hidden"
    (got,) = raw.read(p4r.Entity(table_entry=p4r.TableEntry(table_id=38065050)))
    ports = [a.action.params[0].value for a in got.table_entry.action.action_profile_action_set.action_profile_actions]
    assert ports == [b"\x02", b"\x03", b"\x04"]
    assert code_of(one_error(raw, update(INSERT, member(1, 2), schema))) == "INVALID_ARGUMENT"  # no mixing

    raw.write([update(MODIFY, entry(5), schema)])
    assert len(backend.members) == 1 and len(backend.groups) == 1
    raw.write([update(DELETE, entry(5), schema)])
    assert backend.members == {} and backend.groups == {} and backend.entries == {}
    assert backend.violations == []


def test_a_backend_failure_half_way_undoes_the_update(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    actions = [1 * fy.Action("set_next_hop", port=p, **MACS) for p in (2, 3, 4)]
    entry = fy.P4TableEntry("next_hops", match=fy.Match(group=1), action=fy.IndirectAction(actions))
    backend.fail_when = lambda kind, arg: kind == "group"  # the members go in, then the group is refused
    assert code_of(one_error(raw, update(INSERT, entry, schema))) == "RESOURCE_EXHAUSTED"
    assert backend.members == {} and backend.groups == {} and backend.entries == {}
    assert raw.read(p4r.Entity(table_entry=p4r.TableEntry())) == []
    backend.fail_when = None
    raw.write([update(INSERT, entry, schema)])
    assert len(backend.members) == 3
    assert backend.violations == []


def test_table_full_is_resource_exhausted(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    size = 32  # dlcp_drop_thresholds
    ups = [
        update(
            INSERT,
            fy.P4TableEntry(
                "dlcp_drop_thresholds",
                match=fy.Match(queue=q, drop_class=c),
                action=fy.Action("drop_above", threshold=8),
            ),
            schema,
        )
        for q in range(8)
        for c in range(size // 8 + 1)
    ]
    result = fails(raw, *ups)
    assert result.count("OK") == size and set(result[size:]) == {"RESOURCE_EXHAUSTED"}


def test_counters_are_modify_only_and_indexed(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    data = fy.P4CounterData(packet_count=5, byte_count=500)
    raw.write([update(MODIFY, fy.P4CounterEntry("dropped", index=17, data=data), schema)])
    assert backend.counters[("DlcpIngress.drop_counters.dropped", 17)] == (5, 500)
    assert (
        code_of(one_error(raw, update(INSERT, fy.P4CounterEntry("dropped", index=1, data=data), schema)))
        == "INVALID_ARGUMENT"
    )
    past_the_end = fy.P4CounterEntry("dropped", index=sizes.PORT_CLASS_SLOTS, data=data)
    assert code_of(one_error(raw, update(MODIFY, past_the_end, schema))) == "OUT_OF_RANGE"
    assert (
        code_of(one_error(raw, update(MODIFY, fy.P4CounterEntry("dropped", index=-1, data=data), schema)))
        == "INVALID_ARGUMENT"
    )
    raw.write(
        [update(MODIFY, fy.P4CounterEntry("trimmed", data=fy.P4CounterData(packet_count=1, byte_count=2)), schema)]
    )
    cells = range(sizes.PORT_CLASS_SLOTS)
    assert all(backend.counters[("DlcpIngress.drop_counters.trimmed", i)] == (1, 2) for i in cells)


def test_request_level_errors(raw: RawClient, primary: Stream, schema: P4Schema) -> None:
    upd = update(INSERT, route(), schema)
    with pytest.raises(grpc.RpcError) as info:
        raw.write([upd], device_id=2)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as info:
        raw.stub.Write(p4r.WriteRequest(device_id=1, role="spine", updates=[upd]), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as info:
        raw.write([upd], election_id=None)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert code_of(one_error(raw, p4r.Update(type=INSERT))) == "INVALID_ARGUMENT"
    assert code_of(one_error(raw, p4r.Update(type=p4r.Update.UNSPECIFIED, entity=upd.entity))) == "INVALID_ARGUMENT"
    register = p4r.Update(type=MODIFY, entity=p4r.Entity(register_entry=p4r.RegisterEntry(register_id=371306005)))
    assert code_of(one_error(raw, register)) == "UNIMPLEMENTED"


def test_write_before_a_pipeline_is_failed_precondition(raw: RawClient, schema: P4Schema) -> None:
    stream = Stream(raw)
    try:
        stream.arbitrate(1)
        stream.next_arbitration()
        with pytest.raises(grpc.RpcError) as info:
            raw.write([update(INSERT, route(), schema)])
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.RpcError) as info:
            raw.read(p4r.Entity(table_entry=p4r.TableEntry()))
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        stream.close()


def test_modify_without_action_is_a_no_op(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    raw.write([update(INSERT, route(group=1), schema)])
    calls = len(backend.calls)
    bare = update(MODIFY, route(group=9), schema)
    bare.entity.table_entry.ClearField("action")
    raw.write([bare])
    assert len(backend.calls) == calls
    (got,) = raw.read(p4r.Entity(table_entry=p4r.TableEntry(table_id=bare.entity.table_entry.table_id)))
    assert got.table_entry.action.action.params[0].value == b"\x01"
    bare.entity.table_entry.match[0].lpm.value = b"\x0b\x00\x00\x00"
    bare.entity.table_entry.match[0].lpm.prefix_len = 8
    assert code_of(one_error(raw, bare)) == "NOT_FOUND"


def test_concurrent_writers_and_readers_agree_with_the_data_plane(
    raw: RawClient, primary: Stream, backend: RecordingBackend, schema: P4Schema
) -> None:
    import threading

    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(25):
                raw.write([update(INSERT, route(f"10.{k}.{i}.0/24", group=k), schema)])
                if i % 5 == 0:
                    raw.write([update(DELETE, route(f"10.{k}.{i}.0/24"), schema)])
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(20):
                n = len(raw.read(p4r.Entity(table_entry=p4r.TableEntry())))
                assert 0 <= n <= 8 * 25
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert len(raw.read(p4r.Entity(table_entry=p4r.TableEntry()))) == 8 * 20 == len(backend.entries)
    assert backend.violations == []
