"""The per-rank timeline (dlcp.host.timeline) and ``dlcp testbed explain`` (dlcp.apps.testbed.explain)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dlcp.apps.testbed import explain
from dlcp.config import TransportConfig
from dlcp.host.local import local_endpoints
from dlcp.host.loss import LossSpec
from dlcp.host.timeline import Timeline, label
from dlcp.message import MessageKey, MessageSpec
from dlcp.protocol import MessageKind


def test_timeline_keeps_at_most_its_limit_and_counts_the_rest() -> None:
    tl = Timeline(limit=3)
    for i in range(5):
        tl.at("iter", float(i), i)
    assert tl.as_dict() == {"events": [["iter", 0.0, 0], ["iter", 1.0, 1], ["iter", 2.0, 2]], "dropped": 2}
    with pytest.raises(ValueError, match="at least 1"):
        Timeline(limit=0)


def test_an_endpoint_records_a_message_from_send_to_stop_and_from_post_to_done() -> None:
    # The receivers drop a tenth of the data: the send needs a retransmission round (bound 0).
    eps = local_endpoints(2, token=5, transport=TransportConfig(port=0), loss=LossSpec(rate=0.1, seed=3))
    try:
        tx, rx = Timeline(), Timeline()
        eps[0].timeline, eps[1].timeline = tx, rx
        spec = MessageSpec(MessageKey(1, 0, 9, 4), MessageKind.ALL_GATHER, 64 * 2048, 2048)
        values = np.arange(spec.num_elems, dtype=np.float32)
        got = np.zeros_like(values)
        handle = eps[1].post_recv(spec, got)
        eps[0].send(spec, values, 1, priority=3)
        eps[1].wait(handle)
        np.testing.assert_array_equal(got, values)
    finally:
        for e in eps:
            e.close()
    name = label(spec)
    assert name == "all_gather/4/9/0"
    sent = [e for e in tx.events if len(e) > 2 and e[2] == name]
    kinds = [e[0] for e in sent]
    assert kinds[0] == "send" and sent[0][3:] == (1, values.nbytes)
    assert kinds.index("pass") < kinds.index("probe") < kinds.index("stop")
    assert "retx" in kinds, "a tenth of the first pass was lost: a retransmission round"
    assert [e[1] for e in sent] == sorted(e[1] for e in sent), "stamped in order"
    got_events = {e[0]: e for e in rx.events if len(e) > 2 and e[2] == name}
    assert got_events["post"][3:] == (0, values.nbytes)
    assert got_events["done"][3] == 0, "bound 0: nothing accepted as lost"
    assert got_events["post"][1] <= got_events["done"][1]


def _write_run(folder: Path, *, rate_bps: int = 100_000_000) -> None:
    """A run of two ranks, 4 iterations of 100 ms; rank 1 sends 1 MB per iteration from 20 to 100 ms."""
    folder.mkdir(parents=True)
    ranks = []
    for rank in range(2):
        events: list[list[object]] = []
        for i in range(4):
            t = 10.0 + 0.1 * i
            events.append(["iter", t, t + 0.005, t + 0.095, t + 0.1, 0.02 * (i + 1) * (rank + 1)])
            if rank == 1:
                events.append(["send", t + 0.02, f"reduce_scatter/{i}/0/1", 0, 1_000_000])
                events.append(["pass", t + 0.1 - 0.001, f"reduce_scatter/{i}/0/1", 0.05])
                events.append(["retx", t + 0.099, f"reduce_scatter/{i}/0/1", 3])
            events.append(["wait", t + 0.01, f"reduce_scatter/{i}/0/{1 - rank}", t + 0.03])
        ranks.append({"rank": rank, "timeline": {"events": events, "dropped": 0},
                      "posted_ahead": {"posted": 3, "taken": 2, "forgotten": 1}})  # fmt: skip
        (folder / f"rank{rank}.json").write_text(json.dumps(ranks[-1]))
    (folder / "run.json").write_text(json.dumps({
        "job": 3, "ranks": [{"rank": 0, "host": "h1", "ip": "10.0.0.1"}, {"rank": 1, "host": "h2", "ip": "10.0.0.2"}],
        "cpu": {"wall_s": 1.0, "cores": 2, "machine_busy": 0.5, "switch_cpu_s": {"s1": 0.1}},
    }))  # fmt: skip
    (folder / "job3.toml").write_text(f'[transport.send_rate_bps]\n"10.0.0.2" = {rate_bps}\n')
    (folder / "result.json").write_text(json.dumps({"name": "DLCP ring", "iter_skipped": []}))
    cls = {"sent": 10, "sent_bytes": 0, "dropped": {"buffer": 1}, "trimmed": 2}
    before = {"s1": {"ports": {"1": {"stats": {"classes": [cls]}}}}}
    after = {"s1": {"ports": {"1": {"stats": {"classes": [{**cls, "sent": 30, "dropped": {"buffer": 5}}]}}}}}
    (folder / "switches.json").write_text(json.dumps({"before": before, "after": after}))


def test_explain_reports_the_bottleneck_senders_wire_time_idle_link_and_drops(tmp_path: Path) -> None:
    _write_run(tmp_path / "res" / "2-dlcp-ring-on")
    (report,) = explain.explain(tmp_path / "res")
    assert report["name"] == "DLCP ring" and report["iterations"] == 4
    assert report["phases_s"]["iteration"] == pytest.approx(0.1)
    assert report["phases_s"]["backward"] == pytest.approx(0.09)
    assert report["cpu_per_iteration_s"] == pytest.approx([0.02, 0.04])
    (s,) = report["senders"]
    assert s["rank"] == 1 and s["host"] == "h2"
    assert s["wire"] == pytest.approx(0.08), "1 MB at 100 Mbit/s"
    assert s["passes"] == pytest.approx(0.079) and s["slept"] == pytest.approx(0.05)
    assert s["lead"] == pytest.approx(0.02) and s["tail"] == pytest.approx(0.001)
    assert s["wait"] == pytest.approx(0.02) and s["retx"] == 3
    assert report["switches"] == [
        {"switch": "s1", "port": "1", "class": 0, "sent": 20, "dropped": {"buffer": 4}, "trimmed": 0}
    ]
    assert "rank 1's data on the wire" in report["verdict"] and "before its first send" in report["verdict"]
    text = explain.render([report])
    assert "rank 1 (h2, 100 Mbit/s): sends 1.00 MB = 80.0 ms" in text
    assert "receives posted ahead 3, taken 2, forgotten 1" in text


def test_explain_refuses_a_folder_without_runs_or_timelines(tmp_path: Path) -> None:
    with pytest.raises(explain.ExplainError, match="no such folder"):
        explain.explain(tmp_path / "nothing")
    with pytest.raises(explain.ExplainError, match="no run of a job"):
        explain.explain(tmp_path)
    _write_run(tmp_path / "run")
    (tmp_path / "run" / "rank0.json").write_text(json.dumps({"rank": 0}))
    with pytest.raises(explain.ExplainError, match="no timeline"):
        explain.explain(tmp_path / "run")
