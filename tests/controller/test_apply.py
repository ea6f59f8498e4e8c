"""The controller against DLCP's software switch (C data plane, virtual ports) over P4Runtime."""

from __future__ import annotations

import asyncio
import socket

import pytest
from controller_support import PS_JOB, RING_JOB, SECOND_JOB, Switches, dlcp_frame, run, star, until
from finsy import P4Schema

from dlcp.controller import apply, counters, session, state
from dlcp.controller.diff import canonical
from dlcp.controller.model import mac_text
from dlcp.p4.paths import COMMITTED_P4INFO
from dlcp.protocol import MessageKind, PacketType
from dlcp.testbed.switch.p4rt.server import P4RuntimeServicer


def configure(fab, **kw):  # type: ignore[no-untyped-def]
    (report,) = run(apply.configure(fab, timeout=20, **kw))
    return report


def test_apply_then_reapply_writes_nothing(switches: Switches) -> None:
    sw = switches()
    fab = star(sw, PS_JOB)
    first = configure(fab)
    assert first.status == "ok", first.error
    assert first.summary["inserted"] == 43 and first.summary["unchanged"] == 0
    writes = sw.dp.writes
    assert writes == 43
    second = configure(fab)
    assert second.status == "ok"
    assert second.summary == {"inserted": 0, "modified": 0, "deleted": 0, "unchanged": 43}
    assert sw.dp.writes == writes, "the second apply wrote to the switch"

    # The entries work: a push from h1 reaches h4's port with h4's MAC, in a push queue, and a pull
    # from the server goes to a higher queue than any push.
    v = sw.dp.inject(1, dlcp_frame(fab, "h1", "h4", kind=MessageKind.PUSH, priority=6))
    assert (v.dropped, v.port) == (False, 4)
    (port, frame), *_ = sw.dp.drain()
    assert port == 4 and frame[:6] == bytes.fromhex(mac_text(fab.hosts["h4"].mac).replace(":", ""))
    push_queues = {sw.dp.inject(1, dlcp_frame(fab, "h1", "h4", priority=p)).queue for p in range(7)}
    pull_queues = {
        sw.dp.inject(4, dlcp_frame(fab, "h4", "h2", kind=MessageKind.PULL, priority=p)).queue for p in range(7)
    }
    assert max(push_queues) < min(pull_queues)
    # A probe waits behind its message's data, in its data's queue (not below it: behind another sender's data
    # it starved there); a bitmap does not.
    for kind, src, dst, port in ((MessageKind.PUSH, "h1", "h4", 1), (MessageKind.PULL, "h4", "h2", 4)):
        for p in range(7):
            data = sw.dp.inject(port, dlcp_frame(fab, src, dst, kind=kind, priority=p)).queue
            probe = sw.dp.inject(port, dlcp_frame(fab, src, dst, kind=kind, ptype=PacketType.PROBE, priority=p))
            assert probe.queue == data, (kind, p)
    bitmap = sw.dp.inject(4, dlcp_frame(fab, "h4", "h1", ptype=PacketType.BITMAP, priority=0))
    assert bitmap.queue == 7


def test_dry_run_writes_nothing(switches: Switches) -> None:
    sw = switches()
    fab = star(sw, PS_JOB)
    report = configure(fab, dry_run=True)
    assert report.status == "planned" and report.summary["inserted"] == 43
    assert sw.dp.writes == 0
    assert configure(fab).summary["inserted"] == 43


def test_change_of_mode_modifies_only_what_differs(switches: Switches) -> None:
    sw = switches()
    ps = star(sw, PS_JOB)
    configure(ps)
    ring = star(sw, RING_JOB)
    report = configure(ring)
    assert report.status == "ok"
    s = report.summary
    # Routes and groups stay; the job's class entries change kind (keys), so old ones go and new ones come.
    assert s["unchanged"] >= 8 and s["deleted"] > 0 and s["inserted"] > 0, s
    assert {c.owner for c in report.changes if c.op != "delete"} <= {"job 7"}
    ag = sw.dp.inject(1, dlcp_frame(ring, "h1", "h2", kind=MessageKind.ALL_GATHER, priority=0))
    rs = sw.dp.inject(1, dlcp_frame(ring, "h1", "h2", kind=MessageKind.REDUCE_SCATTER, priority=6))
    assert ag.queue > rs.queue
    # A PS pull now falls to the default (its own priority): the ring job has no pull rule.
    assert configure(ring).summary["inserted"] == 0


def test_an_apply_while_the_previous_session_still_holds_its_election_id_waits_for_it(switches: Switches) -> None:
    """An apply right after another: the switch may not yet have seen the first session's stream close, so the
    election id is still in use and finsy connects as a backup. The apply waits for primacy, then writes."""
    sw = switches()
    fab = star(sw, PS_JOB)
    arbiter = sw.server.servicer.arbiter

    async def main() -> apply.SwitchReport:
        async with session.connect(fab.switches["s1"], election_id=session.DEFAULT_ELECTION_ID) as old:
            assert old.is_primary
            task = asyncio.create_task(apply.configure(fab, timeout=20))
            await until(lambda: len(arbiter.streams) == 2, "the second session's arbitration")
            assert not task.done()
        (report,) = await task
        return report

    report = run(main())
    assert report.status == "ok", report.error
    assert report.summary["inserted"] == 43


def test_two_jobs_then_remove_one(switches: Switches) -> None:
    sw = switches()
    both = star(sw, PS_JOB, SECOND_JOB)
    assert configure(both).status == "ok"
    schema = P4Schema(COMMITTED_P4INFO)
    job8 = {canonical(e.entity.encode(schema))[0] for e in state.desired(both)["s1"] if e.owner == "job 8"}
    assert len(job8) > 10
    report = configure(star(sw, PS_JOB))
    assert report.status == "ok"
    deleted = {canonical(c.entity)[0] for c in report.changes if c.op == "delete"}
    assert deleted == job8, "removing job 8 removed exactly its entries"
    assert not [c for c in report.changes if c.op != "delete"]
    s = report.summary
    assert configure(star(sw, PS_JOB)).summary["unchanged"] == s["unchanged"]
    # Job 7 still classifies; job 8's port is plain UDP again.
    assert sw.dp.inject(1, dlcp_frame(both, "h1", "h4", kind=MessageKind.PULL, priority=6)).queue == 6
    ag = sw.dp.inject(1, dlcp_frame(both, "h1", "h2", job=8, kind=MessageKind.ALL_GATHER, priority=0))
    assert ag.queue == 0


def test_clear_one_job_keeps_the_other(switches: Switches) -> None:
    sw = switches()
    both = star(sw, PS_JOB, SECOND_JOB)
    total = configure(both).summary["inserted"]
    (report,) = run(apply.configure(both, clear_job=8, timeout=20))
    assert report.status == "ok"
    gone = report.summary["deleted"]
    assert gone > 0 and all(c.owner == "job 8" for c in report.changes if c.op == "delete")
    # Job 7's entries and the routes are still there: applying the one-job file changes nothing more.
    assert configure(star(sw, PS_JOB)).summary == {"inserted": 0, "modified": 0, "deleted": 0,
                                                   "unchanged": total - gone}  # fmt: skip
    (report,) = run(apply.configure(both, clear_all=True, timeout=20))
    assert report.summary["deleted"] == total - gone
    assert configure(both, dry_run=True).summary["inserted"] == total


def test_clearing_a_job_touches_nothing_else_the_file_would_change(switches: Switches) -> None:
    """The switch runs job 7 in ring mode; the file says ps. Clearing job 8 with that file removes job
    8's entries and leaves job 7 as the switch has it (no apply in passing)."""
    sw = switches()
    assert configure(star(sw, RING_JOB, SECOND_JOB)).status == "ok"
    ring7 = {canonical(e.entity.encode(P4Schema(COMMITTED_P4INFO)))[0] for e in state.desired(star(sw, RING_JOB))["s1"]}
    (report,) = run(apply.configure(star(sw, PS_JOB, SECOND_JOB), clear_job=8, timeout=20))
    assert report.status == "ok", report.error
    assert report.changes and {c.op for c in report.changes} == {"delete"}
    assert {c.owner for c in report.changes} == {"job 8"}
    after = configure(star(sw, RING_JOB), dry_run=True)
    assert after.summary["inserted"] == after.summary["deleted"] == after.summary["modified"] == 0, after.summary
    assert after.summary["unchanged"] == len(ring7)


def test_stats_follow_traffic(switches: Switches) -> None:
    sw = switches()
    fab = star(sw, PS_JOB)
    configure(fab)
    before = run(counters.read(fab, timeout=20))
    assert before.jobs[7]["delivered"]["packets"] == 0
    sent = 0
    for seq in range(20):
        frame = dlcp_frame(fab, "h1", "h4", priority=3, seq=seq)
        assert not sw.dp.inject(1, frame).dropped
        sent += 1
    sw.dp.drain()
    after = run(counters.read(fab, timeout=20))
    job = after.jobs[7]
    assert job["delivered"]["packets"] == sent
    assert job["delivered"]["bytes"] >= sent * 1000
    queue = str(sw.dp.inject(1, dlcp_frame(fab, "h1", "h4", priority=3)).queue)
    sw.dp.drain()
    assert job["by_queue"][queue]["delivered"]["packets"] == sent
    (cell,) = [c for c in after.cells if c.port == 4]
    assert cell.jobs == (7,) and cell.values["forwarded"][0] == sent

    # Congestion at the server's port: the push queue is stalled, eligible packets above the
    # threshold are trimmed, class-0 packets are not.
    thresholds = [c.note for c in configure(fab, dry_run=True).changes]
    assert thresholds == []
    push_queue = int(queue)
    sw.dp.pause(4, push_queue)
    limit = 200
    for seq in range(limit):
        sw.dp.inject(1, dlcp_frame(fab, "h1", "h4", priority=3, drop_class=1, seq=seq))
    sw.dp.pause(4, push_queue, False)
    sw.dp.drain()
    cut = run(counters.read(fab, timeout=20)).jobs[7]
    assert cut["trimmed"]["packets"] > 0
    assert cut["dropped"]["packets"] == 0
    # Sized for the incast at the server's port: a 1 MiB buffer of 8274-byte frames less 3 workers x 4 packets
    # (the job fills one push queue at a time).
    threshold = (1 << 20) // fab.jobs[7].frame_bytes - 3 * 4
    assert cut["trimmed"]["packets"] == limit - (threshold + 1)
    assert cut["by_queue"][queue]["trimmed"]["packets"] == cut["trimmed"]["packets"]


def test_switch_down_or_slow_is_named_and_others_are_configured(switches: Switches) -> None:
    import tomllib

    from dlcp.controller import fabric

    good = switches()
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there
    slow = socket.socket()
    slow.bind(("127.0.0.1", 0))
    slow.listen(1)  # accepts the TCP connection, never answers gRPC
    try:
        doc = tomllib.loads(
            f"""
            [[switch]]
            name = "good"
            grpc = "{good.address}"
            ports = {{ 1 = "h1-good", 2 = "good-dead", 3 = "good-slow" }}
            [[switch]]
            name = "dead"
            grpc = "127.0.0.1:{dead_port}"
            ports = {{ 1 = "good-dead", 2 = "h2-dead" }}
            [[switch]]
            name = "slow"
            grpc = "127.0.0.1:{slow.getsockname()[1]}"
            ports = {{ 1 = "good-slow", 2 = "h3-slow" }}
            [[host]]
            name = "h1"
            switch = "good"
            port = 1
            [[host]]
            name = "h2"
            switch = "dead"
            port = 2
            [[host]]
            name = "h3"
            switch = "slow"
            port = 2
            """
        )
        fab = fabric.from_dict(doc)
        reports = {r.switch: r for r in run(apply.configure(fab, timeout=3))}
    finally:
        slow.close()
    assert reports["good"].status == "ok" and reports["good"].summary["inserted"] == 6
    assert reports["dead"].status == "unreachable" and "switch dead" in reports["dead"].error
    assert reports["slow"].status == "unreachable" and "switch slow" in reports["slow"].error
    assert "no answer within 3 s" in reports["slow"].error


def test_rejected_write_is_all_or_nothing_and_reported(switches: Switches) -> None:
    from dlcp.testbed.switch.entries import Action, FieldMatch, MatchKind, Op, TableEntry

    sw = switches()
    fab = star(sw, PS_JOB)
    configure(fab)  # DLCP's pipeline is pushed on first contact (which clears the tables); then empty them
    run(apply.configure(fab, clear_all=True, timeout=20))
    # A threshold slot taken behind the server's back (as a stale hardware entry would be): the job's
    # insert of that (queue, drop class) is refused by the data plane.
    sw.dp.write_entry(Op.INSERT, TableEntry(
        "DlcpIngress.selective_drop.dlcp_drop_thresholds",
        (FieldMatch("queue", MatchKind.EXACT, 2), FieldMatch("drop_class", MatchKind.EXACT, 1)),
        action=Action("DlcpIngress.selective_drop.admit_all", ()),
    ))  # fmt: skip
    report = configure(fab)
    assert report.status == "failed"
    out = report.outcome
    assert out is not None and out.atomic and out.applied == []
    assert len(out.failed) == 1 and out.failed[0].code not in ("OK", "ABORTED")
    assert out.failed[0].change.note == "queue 2 drop class 1: trim above 114 packets"
    assert len(out.skipped) == 42
    assert "nothing was applied" in report.error
    # Nothing is on the switch: a dry run still plans everything.
    assert configure(fab, dry_run=True).summary["inserted"] == 43


def test_without_rollback_support_the_exact_applied_list_is_reported(
    switches: Switches, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A switch that refuses ROLLBACK_ON_ERROR (as BMv2's PI does) gets CONTINUE_ON_ERROR batches."""
    import grpc

    from dlcp.testbed.switch.entries import Action, FieldMatch, MatchKind, Op, TableEntry

    original = P4RuntimeServicer.Write

    def write(self, request, context):  # type: ignore[no-untyped-def]
        if request.atomicity == 1:  # ROLLBACK_ON_ERROR
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "rollback is not supported")
        return original(self, request, context)

    monkeypatch.setattr(P4RuntimeServicer, "Write", write)
    sw = switches()
    fab = star(sw, PS_JOB)
    configure(fab)  # pushes the pipeline, which clears the tables; then empty them
    run(apply.configure(fab, clear_all=True, timeout=20))
    # One route's C slot is taken behind the server's back: that one insert fails.
    sw.dp.write_entry(Op.INSERT, TableEntry(
        "DlcpIngress.routing.ipv4_routes", (FieldMatch("dst_addr", MatchKind.LPM, 0x0A000002, 32),),
        action=Action("DlcpIngress.routing.drop_packet", ()),
    ))  # fmt: skip
    report = configure(fab)
    out = report.outcome
    assert report.status == "failed" and out is not None and not out.atomic
    assert [f.change.note for f in out.failed] == ["route 10.0.0.2/32 (h2) -> group 2"]
    assert len(out.applied) == 42 and not out.skipped
    assert "42 applied" in report.error
    assert report.summary["inserted"] == 42


def test_changed_setting_is_a_modify_in_place(switches: Switches) -> None:
    sw = switches()
    configure(star(sw, PS_JOB))
    explicit = PS_JOB + "[job.switch]\nthresholds = { 1 = 5 }\n"
    report = configure(star(sw, explicit))
    assert report.summary == {"inserted": 0, "modified": 3, "deleted": 0, "unchanged": 40}
    assert {c.note for c in report.changes} == {f"queue {q} drop class 1: trim above 5 packets" for q in (1, 2, 3)}
    fab = star(sw, explicit)
    sw.dp.pause(4, 3)
    trimmed = [sw.dp.inject(1, dlcp_frame(fab, "h1", "h4", priority=6, drop_class=1, seq=s)).trimmed for s in range(8)]
    sw.dp.pause(4, 3, False)
    sw.dp.drain()
    assert trimmed == [False] * 6 + [True] * 2, "trimmed above 5 packets in the queue"
