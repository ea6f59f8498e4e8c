"""The server driven by finsy, DLCP's controller library: entities by name, pipeline, arbitration, reconnects."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import finsy as fy
import pytest
from p4rt_support import MACS, RecordingBackend, member

from dlcp.p4.paths import COMMITTED_P4INFO
from dlcp.testbed.switch.p4rt.server import P4RuntimeServer

BLOB = b"dlcp-software-switch"


def switch(server: P4RuntimeServer, election_id: int = 10, name: str = "s1") -> fy.Switch:
    opts = fy.SwitchOptions(p4info=COMMITTED_P4INFO, p4blob=BLOB, device_id=1, initial_election_id=election_id)
    return fy.Switch(name, f"127.0.0.1:{server.port}", opts)


async def until(pred: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll ``pred`` (generous timeout: the machine is shared and slow)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def read_all(sw: fy.Switch, query: object) -> list[object]:
    return [e async for e in sw.read(query)]  # type: ignore[arg-type]


def wire(sw: fy.Switch, entities: list[object]) -> list[bytes]:
    """Entities as P4Runtime encodes them (finsy decodes values to numbers, so compare on the wire)."""
    return sorted(e.encode(sw.p4info).SerializeToString(deterministic=True) for e in entities)  # type: ignore[attr-defined]


def route(prefix: str, group: int) -> fy.P4TableEntry:
    return fy.P4TableEntry(
        "ipv4_routes", match=fy.Match(dst_addr=prefix), action=fy.Action("set_next_hop_group", group=group)
    )


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 120))  # type: ignore[arg-type]


def test_finsy_programs_and_reads_the_switch(server: P4RuntimeServer, backend: RecordingBackend) -> None:
    async def main() -> None:
        async with switch(server) as sw:
            assert sw.is_primary
            assert backend.resets == 1, "finsy pushed DLCP's pipeline (VERIFY_AND_COMMIT)"
            await sw.insert([route("10.1.0.0/16", 1), route("10.2.0.0/16", 2)])
            await sw.modify([route("10.2.0.0/16", 5)])
            got = await read_all(sw, fy.P4TableEntry("ipv4_routes"))
            assert wire(sw, got) == wire(sw, [route("10.1.0.0/16", 1), route("10.2.0.0/16", 5)])

            with pytest.raises(fy.P4ClientError) as info:
                await sw.insert([route("10.1.0.0/16", 3), route("10.3.0.0/16", 3)])
            assert info.value.code == fy.GRPCStatusCode.UNKNOWN
            assert {i: e.canonical_code for i, e in info.value.details.items()} == {0: fy.GRPCStatusCode.ALREADY_EXISTS}
            with pytest.raises(fy.P4ClientError) as info:
                await sw.delete([route("10.9.0.0/16", 1)])
            assert info.value.details[0].canonical_code == fy.GRPCStatusCode.NOT_FOUND
            assert len(await read_all(sw, fy.P4TableEntry())) == 3

            await sw.delete([route("10.1.0.0/16", 1)])
            assert len(await read_all(sw, fy.P4TableEntry("ipv4_routes"))) == 2

            # Default entry, ECMP by members and a group, counters.
            await sw.modify(
                [
                    fy.P4TableEntry(
                        "ipv4_routes", is_default_action=True, action=fy.Action("set_next_hop_group", group=9)
                    )
                ]
            )
            (default,) = await read_all(sw, fy.P4TableEntry("ipv4_routes", is_default_action=True))
            assert default.action == fy.Action("set_next_hop_group", group=9)  # type: ignore[attr-defined]
            await sw.modify([fy.P4TableEntry("ipv4_routes", is_default_action=True)])  # back to the P4 program's
            (default,) = await read_all(sw, fy.P4TableEntry("ipv4_routes", is_default_action=True))
            assert default.action == fy.Action("routing.drop_packet")  # type: ignore[attr-defined]
            await sw.insert([member(1, 2), member(2, 3)])
            group = fy.P4ActionProfileGroup(
                "ecmp_selector", group_id=4, members=[fy.P4Member(1, weight=1), fy.P4Member(2, weight=1)]
            )
            await sw.insert([group])
            await sw.insert(
                [fy.P4TableEntry("next_hops", match=fy.Match(group=1), action=fy.IndirectAction(group_id=4))]
            )
            assert wire(sw, await read_all(sw, fy.P4ActionProfileGroup("ecmp_selector"))) == wire(sw, [group])
            assert len(await read_all(sw, fy.P4ActionProfileMember())) == 2
            await sw.modify(
                [fy.P4CounterEntry("forwarded", index=19, data=fy.P4CounterData(packet_count=4, byte_count=64))]
            )
            (cell,) = await read_all(sw, fy.P4CounterEntry("forwarded", index=19))
            assert (cell.packet_count, cell.byte_count) == (4, 64)  # type: ignore[attr-defined]
            assert backend.violations == []

    run(main())


def test_one_shot_round_trip(server: P4RuntimeServer) -> None:
    async def main() -> None:
        async with switch(server) as sw:
            ecmp = fy.P4TableEntry(
                "next_hops",
                match=fy.Match(group=2),
                action=fy.IndirectAction(
                    [1 * fy.Action("set_next_hop", port=p, **MACS) for p in (1, 2)]
                    + [3 * fy.Action("ecmp.drop_packet")]
                ),
            )
            await sw.insert([ecmp])
            assert wire(sw, await read_all(sw, fy.P4TableEntry("next_hops"))) == wire(sw, [ecmp])

    run(main())


def test_two_controllers_arbitration(server: P4RuntimeServer) -> None:
    async def main() -> None:
        async with switch(server, election_id=10, name="low") as low:
            assert low.is_primary
            await low.insert([route("10.1.0.0/16", 1)])
            async with switch(server, election_id=20, name="high") as high:
                assert high.is_primary
                await until(lambda: not low.is_primary, "the first controller to learn it lost")
                with pytest.raises(fy.P4ClientError) as info:
                    await low.insert([route("10.2.0.0/16", 2)])
                assert info.value.code == fy.GRPCStatusCode.PERMISSION_DENIED
                await high.insert([route("10.3.0.0/16", 3)])
                assert len(await read_all(low, fy.P4TableEntry())) == 2, "a backup may read"
            # high left: finsy's backup bids the highest id and takes over.
            await until(lambda: low.is_primary, "the backup to become primary again")
            await low.insert([route("10.4.0.0/16", 4)])

    run(main())


def test_disconnect_keeps_tables_and_a_restarted_switch_is_empty(
    server: P4RuntimeServer, backend: RecordingBackend
) -> None:
    async def first() -> None:
        async with switch(server) as sw:
            await sw.insert([route("10.1.0.0/16", 1)])

    async def second() -> None:
        async with switch(server, election_id=5) as sw:
            assert sw.is_primary
            assert len(await read_all(sw, fy.P4TableEntry())) == 1
        assert backend.resets == 1, "the same pipeline (cookie) is not pushed again, so nothing is cleared"

    run(first())
    run(second())
