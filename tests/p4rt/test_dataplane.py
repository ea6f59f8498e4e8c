"""The P4Runtime server over the real C data plane (DataPlane on virtual ports, virtual clock).

Entries are written through P4Runtime with finsy, by name; then frames go through
the C pipeline. The shared switch vectors pass when programmed this way, and the
write semantics (errors, batches, defaults, members and groups, commits) show in
what the data plane forwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import finsy as fy
import pytest
from p4rt_support import MACS

from dlcp.p4 import vectors
from dlcp.p4.paths import COMMITTED_P4INFO
from dlcp.testbed.switch.config import PortConfig
from dlcp.testbed.switch.dataplane import DataPlane
from dlcp.testbed.switch.p4rt.server import P4RuntimeServer, start_server
from dlcp.testbed.switch.vector_run import counter_deltas

ROOT = Path(__file__).resolve().parents[2]
CASES = vectors.load_dir(ROOT / "tests/vectors/switch")
ROUTING = next(c for c in CASES if c.name.startswith("routing"))


def entity(e: vectors.Entry) -> fy.P4TableEntry:
    """A vector entry as finsy builds it by name (an ``action_set`` becomes a one-shot)."""
    match = fy.Match({k: tuple(v) if kind != "exact" else v for k, spec in e.match.items() for kind, v in spec.items()})
    if e.action is not None:
        action: fy.P4TableAction | fy.P4IndirectAction = fy.Action(e.action.name, **e.action.params)
    else:
        action = fy.IndirectAction([1 * fy.Action(a.name, **a.params) for a in e.action_set])
    return fy.P4TableEntry(e.table, match=match, priority=e.priority or 0, action=action)


def switch(server: P4RuntimeServer, election_id: int = 10, force: bool = False) -> fy.Switch:
    opts = fy.SwitchOptions(
        p4info=COMMITTED_P4INFO, p4blob=b"", device_id=1, initial_election_id=election_id, p4force=force
    )
    return fy.Switch("dlcp", f"127.0.0.1:{server.port}", opts)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 120))  # type: ignore[arg-type]


@contextmanager
def dlcp_switch(ports: Iterable[int]) -> Iterator[tuple[DataPlane, P4RuntimeServer]]:
    """A C data plane with virtual ports and its P4Runtime server on a free port."""
    dp = DataPlane(virtual_clock=True)
    try:
        for port in ports:
            dp.add_port(PortConfig(port=port, interface=None))
        srv = start_server(dp, "127.0.0.1:0", device_id=1)
        try:
            yield dp, srv
        finally:
            srv.stop(0)
    finally:
        dp.close()


@pytest.fixture
def dataplane_and_server() -> Iterator[tuple[DataPlane, P4RuntimeServer]]:
    with dlcp_switch(range(4)) as both:
        yield both


@pytest.fixture
def dataplane(dataplane_and_server: tuple[DataPlane, P4RuntimeServer]) -> DataPlane:
    return dataplane_and_server[0]


@pytest.fixture
def server(dataplane_and_server: tuple[DataPlane, P4RuntimeServer]) -> P4RuntimeServer:
    return dataplane_and_server[1]


def send(dp: DataPlane, packet: vectors.PacketIn) -> list[tuple[int, bytes]]:
    dp.inject(packet.frame.port, packet.frame.data)
    return dp.drain()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vectors_programmed_through_p4runtime(case: vectors.Case) -> None:
    with dlcp_switch(sorted(case.ports())) as (dataplane, server):
        run_case(case, dataplane, server)


def run_case(case: vectors.Case, dataplane: DataPlane, server: P4RuntimeServer) -> None:
    async def program() -> None:
        async with switch(server) as sw:
            await sw.insert([entity(e) for e in case.entries])

    run(program())
    before, _ = counter_deltas(dataplane, case, None)
    last_settle = max((i for i, pkt in enumerate(case.packets) if pkt.settle), default=-1)

    def stall(on: bool) -> None:
        for port, queue in case.stalled_queues:
            dataplane.pause(port, queue, on)

    seen: list[vectors.Frame] = []
    if last_settle < 0:
        stall(True)
    for i, pkt in enumerate(case.packets):
        seen += [vectors.Frame(p, d) for p, d in send(dataplane, pkt)]
        if i == last_settle:
            stall(True)
    stall(False)
    seen += [vectors.Frame(p, d) for p, d in dataplane.drain()]
    failures = vectors.check_outputs(case, seen)
    _, counter_failures = counter_deltas(dataplane, case, before)
    assert not failures + counter_failures, "\n".join(failures + counter_failures)

    async def read_counters() -> None:
        async with switch(server, election_id=5) as sw:
            for name in case.counter_names:
                cells = [c async for c in sw.read(fy.P4CounterEntry(name.rsplit(".", 1)[-1]))]
                packets = dataplane.counters(name)[0]
                assert len(cells) == len(packets)
                assert [c.packet_count for c in cells] == [int(x) for x in packets]  # type: ignore[attr-defined]

    run(read_counters())


def test_writes_show_in_forwarding(dataplane: DataPlane, server: P4RuntimeServer) -> None:
    """One routed frame, followed through inserts, refused writes, deletes, default actions and a commit."""
    routed = next(p for p in ROUTING.packets if p.expect and p.frame.data[30:33] == bytes([10, 2, 0]))
    out_port = routed.expect[0].port

    def ports() -> list[int]:
        return [p for p, _ in send(dataplane, routed)]

    async def main() -> None:
        async with switch(server) as sw:
            assert ports() == []
            await sw.insert([entity(e) for e in ROUTING.entries])
            assert ports() == [out_port]

            # A batch with a duplicate and a missing entry: the valid update applies, the rest is untouched.
            dup = entity(ROUTING.entries[1])
            missing = fy.P4TableEntry(
                "ipv4_routes", match=fy.Match(dst_addr="10.9.0.0/16"), action=fy.Action("routing.drop_packet")
            )
            extra = fy.P4TableEntry(
                "ipv4_routes", match=fy.Match(dst_addr="10.8.0.0/16"), action=fy.Action("set_next_hop_group", group=3)
            )
            with pytest.raises(fy.P4ClientError) as info:
                await sw.write([+dup, ~missing, +extra])
            got = {i: e.canonical_code for i, e in info.value.details.items()}
            assert got == {0: fy.GRPCStatusCode.ALREADY_EXISTS, 1: fy.GRPCStatusCode.NOT_FOUND}
            assert ports() == [out_port]
            assert len([e async for e in sw.read(fy.P4TableEntry("ipv4_routes"))]) == 3

            # Delete the routes; the frame takes the default action (drop), then a modified default.
            await sw.delete([entity(e) for e in ROUTING.entries if e.table.endswith("ipv4_routes")])
            assert ports() == []
            await sw.modify(
                [
                    fy.P4TableEntry(
                        "ipv4_routes", is_default_action=True, action=fy.Action("set_next_hop_group", group=2)
                    )
                ]
            )
            assert ports() == [out_port]
            await sw.modify([fy.P4TableEntry("ipv4_routes", is_default_action=True)])
            assert ports() == []

            # next_hops holds one-shots: P4Runtime forbids mixing explicit members into their selector.
            with pytest.raises(fy.P4ClientError) as info:
                await sw.insert(
                    [fy.P4ActionProfileMember("ecmp_selector", member_id=3, action=fy.Action("ecmp.drop_packet"))]
                )
            assert info.value.details[0].canonical_code == fy.GRPCStatusCode.INVALID_ARGUMENT
            assert ports() == []

    run(main())


def test_members_groups_and_commit_on_the_data_plane(dataplane: DataPlane, server: P4RuntimeServer) -> None:
    routed = next(p for p in ROUTING.packets if p.expect and p.frame.data[30:33] == bytes([10, 2, 0]))
    route = fy.P4TableEntry(
        "ipv4_routes", match=fy.Match(dst_addr="10.2.0.0/24"), action=fy.Action("set_next_hop_group", group=2)
    )

    def ports() -> list[int]:
        return [p for p, _ in send(dataplane, routed)]

    async def main() -> None:
        async with switch(server) as sw:
            members = [
                fy.P4ActionProfileMember("ecmp_selector", member_id=m, action=fy.Action("set_next_hop", port=m, **MACS))
                for m in (1, 3)
            ]
            await sw.insert(members)
            await sw.insert([fy.P4ActionProfileGroup("ecmp_selector", group_id=7, members=[fy.P4Member(3, weight=1)])])
            await sw.insert(
                [route, fy.P4TableEntry("next_hops", match=fy.Match(group=2), action=fy.IndirectAction(group_id=7))]
            )
            assert ports() == [3]
            await sw.modify([fy.P4ActionProfileGroup("ecmp_selector", group_id=7, members=[fy.P4Member(1, weight=1)])])
            assert ports() == [1]
            await sw.modify(
                [fy.P4TableEntry("next_hops", match=fy.Match(group=2), action=fy.IndirectAction(member_id=3))]
            )
            assert ports() == [3]
            with pytest.raises(fy.P4ClientError) as info:
                await sw.delete([members[1]])
            assert info.value.details[0].canonical_code == fy.GRPCStatusCode.FAILED_PRECONDITION
            assert ports() == [3]

        # A controller that pushes the pipeline again (p4force): everything is cleared.
        async with switch(server, election_id=11, force=True) as sw:
            assert [e async for e in sw.read(fy.P4TableEntry())] == []
            assert ports() == []
            await sw.insert([*members])  # ids are free again

    run(main())
