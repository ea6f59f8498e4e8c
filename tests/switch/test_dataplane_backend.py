"""DataPlane as a TableBackend: each write applied whole or refused (BackendError) leaving the tables as they were."""

from __future__ import annotations

import pytest
from switch_support import dlcp_frame, entry, exact, route_to, udp_frame, virtual_switch

from dlcp.p4 import names, sizes
from dlcp.testbed.switch.dataplane import DataPlane
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


def lpm(prefix: int, plen: int, group: int) -> TableEntry:
    return entry(
        names.IPV4_ROUTES, [FieldMatch("dst_addr", MatchKind.LPM, prefix, plen)], names.SET_NEXT_HOP_GROUP, group=group
    )


@pytest.fixture
def dp() -> DataPlane:
    d = virtual_switch([1, 2, 3])
    route_to(d, [2], group=1)
    route_to(d, [3], group=2, prefix=0x0A030000)
    return d


def out(d: DataPlane, frame: bytes) -> int | str:
    v = d.inject(1, frame)
    if v.dropped:
        return v.reason
    return d.drain()[0][0]


def test_routes_insert_modify_delete_and_longest_prefix(dp: DataPlane) -> None:
    f = udp_frame(dst="10.2.7.1")
    assert out(dp, f) == 2
    dp.write_entry(Op.INSERT, lpm(0x0A020700, 24, 2))
    assert out(dp, f) == 3
    dp.write_entry(Op.MODIFY, lpm(0x0A020700, 24, 1))
    assert out(dp, f) == 2
    dp.write_entry(Op.DELETE, lpm(0x0A020000, 16, 0))
    assert out(dp, udp_frame(dst="10.2.8.1")) == "no_route"
    assert out(dp, f) == 2  # the /24 is still there after its parent went


def test_refused_writes_change_nothing(dp: DataPlane) -> None:
    with pytest.raises(BackendError):
        dp.write_entry(Op.INSERT, lpm(0x0A020000, 16, 2))  # exists
    with pytest.raises(BackendError):
        dp.write_entry(Op.DELETE, lpm(0x0B000000, 8, 0))  # missing
    with pytest.raises(BackendError):
        dp.write_member(Op.DELETE, ProfileMember(names.ECMP_SELECTOR, 102, Action(names.ECMP_DROP)))  # in use
    with pytest.raises(BackendError):
        dp.write_group(Op.DELETE, ProfileGroup(names.ECMP_SELECTOR, 1))  # referenced by next_hops
    with pytest.raises(BackendError):
        dp.write_group(Op.INSERT, ProfileGroup(names.ECMP_SELECTOR, 9, ((999, 1),)))  # no such member
    with pytest.raises(BackendError):
        dp.set_default_action(names.NEXT_HOPS, Action(names.ECMP_DROP))
    with pytest.raises(BackendError):
        dp.read_counter(names.FORWARDED, sizes.PORT_CLASS_SLOTS)
    assert out(dp, udp_frame(dst="10.2.0.1")) == 2 and out(dp, udp_frame(dst="10.3.0.1")) == 3


def test_a_full_table_is_resource_exhausted() -> None:
    d = virtual_switch([1])
    size = sizes.TABLE_SIZES["IPV4_ROUTES_SIZE"]
    for i in range(size):
        d.write_entry(Op.INSERT, lpm(i << 8, 24, 1))
    with pytest.raises(BackendError) as info:
        d.write_entry(Op.INSERT, lpm(0x0B000000, 24, 1))
    assert info.value.resource_exhausted
    d.write_entry(Op.DELETE, lpm(0, 24, 1))
    d.write_entry(Op.INSERT, lpm(0x0B000000, 24, 1))


def test_a_group_whose_weights_overflow_its_slots_is_refused_before_they_are_laid_out(dp: DataPlane) -> None:
    """A member of weight 2**31 - 1 (a fuzzed P4Runtime write) is RESOURCE_EXHAUSTED at once: the slots are not
    laid out to be counted (that took the server 16 GB), and the group keeps its members."""
    import resource
    import time

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.monotonic()
    with pytest.raises(BackendError, match="weights add up to 2147483647") as info:
        dp.write_group(Op.MODIFY, ProfileGroup(names.ECMP_SELECTOR, 1, ((102, 0x7FFFFFFF),)))
    assert info.value.resource_exhausted
    assert time.monotonic() - t < 5.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000, "kB: nothing the size of the sum"
    assert out(dp, udp_frame(dst="10.2.0.9")) == 2, "the group still forwards over its one member"


def test_default_actions(dp: DataPlane) -> None:
    f = udp_frame(dst="192.168.0.1")
    assert out(dp, f) == "no_route"
    dp.set_default_action(names.IPV4_ROUTES, Action(names.SET_NEXT_HOP_GROUP, (("group", 2),)))
    assert out(dp, f) == 3
    dp.set_default_action(names.DLCP_CLASSES, Action(names.SET_QUEUE, (("queue", 4),)))
    assert dp.inject(1, dlcp_frame(300, priority=1)).queue == 4


def test_counters_read_write_and_reset(dp: DataPlane) -> None:
    for _ in range(3):
        out(dp, dlcp_frame(300, priority=5))
    index = 2 << sizes.CLASS_BITS | 5
    assert dp.read_counter(names.FORWARDED, index) == (3, 900)
    dp.write_counter(names.FORWARDED, index, 10, 20)
    assert dp.read_counter(names.FORWARDED, index) == (10, 20)
    assert dp.counter_size(names.DROPPED) == sizes.PORT_CLASS_SLOTS
    dp.reset()
    assert dp.read_counter(names.FORWARDED, index) == (0, 0)
    assert out(dp, udp_frame(dst="10.2.0.1")) == "no_route"
    route_to(dp, [2])  # ids are free again after a reset
    assert out(dp, udp_frame(dst="10.2.0.1")) == 2


def test_dlcp_ports_and_ternary_priorities(dp: DataPlane) -> None:
    f = dlcp_frame(300, priority=1)
    other = f[:36] + (4791).to_bytes(2, "big") + f[38:]  # same datagram to another UDP port
    assert dp.inject(1, other).queue == 0  # not DLCP: default queue
    dp.write_entry(Op.INSERT, entry(names.DLCP_PORTS, [exact("dst_port", 4791)], names.MARK_DLCP))
    assert dp.inject(1, other).queue == 1
    low = entry(names.DLCP_CLASSES, [FieldMatch("priority", MatchKind.TERNARY, 1, 0xFF)], names.SET_QUEUE, 5, queue=2)
    high = entry(names.DLCP_CLASSES, [FieldMatch("job_id", MatchKind.TERNARY, 1, 0xFFFF)], names.SET_QUEUE, 9, queue=6)
    dp.write_entry(Op.INSERT, low)
    assert dp.inject(1, f).queue == 2
    dp.write_entry(Op.INSERT, high)
    assert dp.inject(1, f).queue == 6  # the higher P4Runtime priority wins
    dp.write_entry(Op.DELETE, high)
    assert dp.inject(1, f).queue == 2
    dp.drain()
