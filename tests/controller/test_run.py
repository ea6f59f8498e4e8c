"""``dlcp controller run``: primacy between two controllers, and reconcile after a switch restarts."""

from __future__ import annotations

import asyncio
import time

import pytest
from controller_support import PS_JOB, Switches, dlcp_frame, star, until

from dlcp.controller import apply, reconcile
from dlcp.controller.reconcile import Event


def test_arbitration_between_two_controllers(switches: Switches) -> None:
    sw = switches()
    fab = star(sw, PS_JOB)
    events: list[Event] = []

    def kinds() -> list[str]:
        return [e.kind for e in events]

    async def main() -> None:
        stop = asyncio.Event()
        first = asyncio.create_task(reconcile.run(fab, events.append, election_id=10, timeout=20, interval=0.5,
                                                  stop=stop))  # fmt: skip
        await until(lambda: "applied" in kinds(), "the first controller to configure the switch")
        writes = sw.dp.writes

        # A lower election id cannot write: refused before anything is sent.
        (low,) = await apply.configure(star(sw), election_id=5, timeout=20)
        assert low.status == "not-primary" and "switch s1" in low.error and "nothing written" in low.error
        assert sw.dp.writes == writes

        # A higher one takes over: it writes, and the first says so and stops writing.
        events.clear()
        (high,) = await apply.configure(star(sw), election_id=20, timeout=20)  # no job: removes job 7's entries
        assert high.status == "ok" and high.summary["deleted"] > 0
        await until(lambda: "backup" in kinds(), "the first controller to report it lost primacy")
        backup = next(e for e in events if e.kind == "backup")
        assert "lost primacy to election id 20" in backup.message and "stopped writing" in backup.message
        # The second controller left; the first becomes primary again and puts job 7 back.
        await until(lambda: "primary" in kinds(), "the first controller to regain primacy")
        await until(lambda: kinds().count("applied") >= 1 and kinds().index("applied") > kinds().index("primary"),
                    "the first controller to reconcile")  # fmt: skip
        stop.set()
        await first

    asyncio.run(asyncio.wait_for(main(), 120))
    assert sw.dp.inject(1, dlcp_frame(fab, "h1", "h4", priority=6)).queue == 3  # job 7's push rule is back


def test_backup_controller_does_not_write_while_another_is_primary(switches: Switches) -> None:
    sw = switches()
    fab = star(sw, PS_JOB)
    events: list[Event] = []

    async def main() -> None:
        stop = asyncio.Event()
        primary = asyncio.create_task(reconcile.run(star(sw), events.append, election_id=50, interval=0.5, stop=stop))
        await until(lambda: any(e.kind in ("applied", "unchanged") for e in events), "the primary to start")
        backup_events: list[Event] = []
        backup = asyncio.create_task(reconcile.run(fab, backup_events.append, election_id=10, interval=0.5, stop=stop))
        await until(lambda: any(e.kind == "backup" for e in backup_events), "the backup to say it is a backup")
        writes = sw.dp.writes
        await asyncio.sleep(1.5)  # three intervals
        assert sw.dp.writes == writes
        assert not any(e.kind == "applied" for e in backup_events)
        stop.set()
        await asyncio.gather(primary, backup)

    asyncio.run(asyncio.wait_for(main(), 120))


def test_reconcile_after_the_switch_restarts(switches: Switches) -> None:
    sw = switches()
    fab = star(sw, PS_JOB)
    events: list[Event] = []
    frame = dlcp_frame(fab, "h1", "h4", priority=6)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(reconcile.run(fab, events.append, timeout=20, interval=30, stop=stop))
        await until(lambda: any(e.kind == "applied" for e in events), "the first apply")
        assert not sw.dp.inject(1, frame).dropped
        await asyncio.sleep(2.5)  # finsy retries at once only after a session of 2 s or more
        address = sw.address
        sw.stop()  # the switch goes away ...
        await until(lambda: any(e.kind == "down" for e in events), "the controller to notice")
        events.clear()
        again = switches(address=address)  # ... and comes back empty on the same address
        assert again.dp.inject(1, frame).dropped
        await until(lambda: any(e.kind == "applied" for e in events), "the controller to reconfigure it", 90)
        assert not again.dp.inject(1, frame).dropped
        applied = next(e for e in events if e.kind == "applied")
        assert applied.report is not None and applied.report.summary["inserted"] == 43
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(main(), 150))


def test_run_puts_back_what_changed_on_the_switch_within_an_interval(switches: Switches) -> None:
    """An entry deleted behind the running controller's back (a write with its election id from another
    client) is inserted again at the next check, without a restart or a change of primacy."""
    from finsy.proto import p4r
    from p4rt_support import RawClient

    sw = switches()
    fab = star(sw, PS_JOB)
    events: list[Event] = []

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(reconcile.run(fab, events.append, election_id=10, timeout=20, interval=0.5,
                                                 stop=stop))  # fmt: skip
        await until(lambda: any(e.kind == "applied" for e in events), "the first apply")
        raw = RawClient(sw.server.port)
        try:
            entries = raw.read(p4r.Entity(table_entry=p4r.TableEntry()))
            victim = next(e for e in entries if not e.table_entry.is_default_action)
            raw.write([p4r.Update(type=p4r.Update.DELETE, entity=victim)], election_id=10)
        finally:
            raw.close()
        events.clear()
        await until(
            lambda: any(e.kind == "applied" and e.report and e.report.summary["inserted"] == 1 for e in events),
            "the controller to put the entry back",
        )
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(main(), 120))


@pytest.mark.timing
def test_a_switch_back_within_seconds_is_reconfigured_within_seconds(switches: Switches) -> None:
    """The switch is away for 1 s, during which every attempt to reach it fails at once. finsy's own life cycle
    then waits 10 s before the next attempt; the controller tries again every RECONNECT_S."""
    sw = switches()
    fab = star(sw, PS_JOB)
    events: list[Event] = []
    frame = dlcp_frame(fab, "h1", "h4", priority=6)

    async def main() -> float:
        stop = asyncio.Event()
        task = asyncio.create_task(reconcile.run(fab, events.append, timeout=20, interval=30, stop=stop))
        await until(lambda: any(e.kind == "applied" for e in events), "the first apply")
        address = sw.address
        sw.stop()
        await until(lambda: any(e.kind == "down" for e in events), "the controller to notice")
        events.clear()
        await asyncio.sleep(1.0)  # attempts fail meanwhile: nothing listens at the address
        again = switches(address=address)
        back = time.monotonic()
        await until(lambda: any(e.kind == "applied" for e in events), "the controller to reconfigure it", 60)
        took = time.monotonic() - back
        assert not again.dp.inject(1, frame).dropped
        stop.set()
        await task
        return took

    took = asyncio.run(asyncio.wait_for(main(), 120))
    assert took < 6.0, f"reconfigured {took:.1f} s after the switch came back (finsy's throttle is 10 s)"
