"""The desired state, without a switch: modes, thresholds sized for the incast, jobs' own entries."""

from __future__ import annotations

import tomllib

from dlcp.controller import fabric, modes, selective_drop, state
from dlcp.controller.paths import Paths
from dlcp.protocol import MessageKind

STAR = '[topology]\nkind = "star"\nhosts = 5\nhost_link = { buffer = "1MiB" }\n'


def job(mode: str, extra: str = "", workers: str = '["h1", "h2", "h3", "h4", "h5"]', jid: int = 7) -> str:
    servers = 'servers = ["h5"]\n' if mode == "ps" else ""
    return (
        f'[[job]]\nid = {jid}\nmode = "{mode}"\nworkers = {workers}\n{servers}'
        f"[job.transport]\nport = {19100 + jid}\n{extra}"
    )


def load(*parts: str) -> fabric.Fabric:
    return fabric.from_dict(tomllib.loads("".join(parts)))


def test_ps_favours_pull_and_ring_favours_all_gather_keeping_layer_order() -> None:
    for mode, hi, lo in (("ps", MessageKind.PULL, MessageKind.PUSH),
                         ("ring", MessageKind.ALL_GATHER, MessageKind.REDUCE_SCATTER)):  # fmt: skip
        rules = modes.class_rules(load(STAR, job(mode)).jobs[7])
        q = {(r.kind, r.priority): r.queue for r in rules}
        assert min(v for (k, _), v in q.items() if k == hi) > max(v for (k, _), v in q.items() if k == lo)
        for kind in (hi, lo):
            order = [q[(kind, p)] for p in range(7)]
            assert order == sorted(order) and order[0] < order[-1], "front layers (high priority) stay higher"
        assert all(modes.DATA_QUEUES[0] <= v <= modes.DATA_QUEUES[-1] for v in q.values())
        eligible = {r.kind for r in rules if r.eligible}
        assert eligible == {lo}, "by default the pushed / partial gradients may be cut, results not"


def test_thresholds_are_sized_for_the_incast_at_the_servers_port() -> None:
    ps = load(STAR, job("ps"))
    ring = load(STAR, job("ring"))
    frame = ps.jobs[7].frame_bytes
    capacity = (1 << 20) // frame
    ps_t = selective_drop.job_thresholds(ps, Paths(ps), ps.jobs[7], "s1")
    ring_t = selective_drop.job_thresholds(ring, Paths(ring), ring.jobs[7], "s1")
    # A job fills one of its eligible queues at a time (one collective at a time, in the same order on every
    # rank): the room above the headroom is the queue's, not divided among the job's three push queues.
    assert ps_t == {1: capacity - 4 * 4}, "four workers push into the server's port"
    assert ring_t == {1: capacity - 2 * 4}, "two neighbours send into each port (data one way, control back)"
    fan = Paths(ps).fan_in(ps.jobs[7].pairs())
    assert fan[("s1", 5)] == 4 and fan[("s1", 1)] == 1


def test_more_drop_classes_and_explicit_thresholds() -> None:
    extra = "[job.policy.push]\ndrop_quantiles = [0.25, 0.5, 0.75]\n[job.switch]\nthresholds = { 3 = 10 }\n"
    f = load(STAR, job("ps", extra))
    t = selective_drop.job_thresholds(f, Paths(f), f.jobs[7], "s1")
    top = (1 << 20) // f.jobs[7].frame_bytes - 16
    assert t == {1: top, 2: top * 2 // 3, 3: 10}
    entries = selective_drop.entries(f, Paths(f), "s1")
    assert len(entries) == 3 * 3, "three push queues x three drop classes"


def test_a_jobs_threshold_and_every_senders_burst_fit_the_buffer() -> None:
    """What one job's eligible packets may hold in a queue, plus every sender's protected burst, fits the buffer,
    and nothing more is held back: the job fills one of its push queues at a time."""
    for workers, servers in (('["h1", "h2", "h3", "h5"]', 3), ('["h1", "h5"]', 1)):
        f = load(STAR, job("ps", workers=workers))
        paths = Paths(f)
        j = f.jobs[7]
        capacity = (1 << 20) // j.frame_bytes
        senders = paths.fan_in(j.pairs())[("s1", 5)]
        assert senders == servers
        top = selective_drop.job_thresholds(f, paths, j, "s1")[1]
        assert top + senders * j.switch.burst_packets == capacity
        assert len(modes.eligible_queues(j)) == 3, "three push queues, each may take the whole room"


def test_two_jobs_share_thresholds_by_minimum_and_keep_their_own_classes() -> None:
    f = load(STAR, job("ps"), job("ring", workers='["h1", "h2"]', jid=8))
    wanted = state.desired(f)["s1"]
    owners = {e.owner for e in wanted}
    assert owners == {"fabric", "job 7", "job 8", "jobs 7,8"}
    shared = [e for e in wanted if e.owner == "jobs 7,8"]
    ps_alone = selective_drop.job_thresholds(f, Paths(f), f.jobs[7], "s1")[1]
    assert shared and all(e.entity.action.args["threshold"] == ps_alone for e in shared)  # type: ignore[union-attr]


def test_job_entries_only_on_the_switches_its_traffic_crosses() -> None:
    ls = '[topology]\nkind = "leaf-spine"\nleaves = 2\nspines = 2\nhosts_per_leaf = 2\n'
    local = load(ls, job("ring", workers='["h1", "h2"]'))
    assert state.job_switches(local, Paths(local), 7) == {"leaf1"}
    spread = load(ls, job("ring", workers='["h1", "h3"]'))
    assert state.job_switches(spread, Paths(spread), 7) == {"leaf1", "leaf2", "spine1", "spine2"}
    wanted = state.desired(spread)
    assert any(e.owner == "job 7" for e in wanted["spine1"])
    assert not any(e.owner == "job 7" for e in state.desired(local)["spine1"])


def test_features_off_means_no_entries_for_the_job() -> None:
    f = load(STAR, job("ps", "[job.switch]\nfeatures = false\n"))
    assert {e.owner for e in state.desired(f)["s1"]} == {"fabric"}
    assert modes.queues_of(f.jobs[7]) == {0}


def test_default_port_needs_no_port_entry() -> None:
    f = load(STAR, job("ps").replace("port = 19107", "port = 19110"))
    assert not [e for e in state.desired(f)["s1"] if "UDP port" in e.note]


def test_per_job_counts_delivery_once_however_many_switches_a_packet_crosses() -> None:
    from dlcp.controller import counters

    ls = '[topology]\nkind = "leaf-spine"\nleaves = 2\nspines = 1\nhosts_per_leaf = 2\n'
    f = load(ls, job("ring", workers='["h1", "h3"]'), job("ring", workers='["h1", "h2"]', jid=8))
    owners = counters.attribution(f)
    assert owners[("leaf1", 3, 1)] == (7,), "leaf1's uplink carries only job 7"
    assert owners[("leaf1", 1, 1)] == (7, 8), "h1's port is shared"

    def cell(sw: str, port: int, fwd: int, trim: int = 0) -> counters.Cell:
        values = {"forwarded": (fwd, fwd * 100), "dropped": (0, 0), "trimmed": (trim, trim * 100)}
        return counters.Cell(sw, port, 1, owners[(sw, port, 1)], values)

    # 10 packets h1 -> h3 cross leaf1 (uplink), spine1 and leaf2 (to h3); 2 were trimmed at the spine.
    cells = [cell("leaf1", 3, 10), cell("spine1", 2, 10, trim=2), cell("leaf2", 1, 10), cell("leaf1", 1, 4)]
    jobs = counters.per_job(f, cells)
    assert jobs[7]["delivered"] == {"packets": 10, "bytes": 1000}
    assert jobs[7]["trimmed"]["packets"] == 2 and jobs[7]["shared_cells"] == 1
    assert jobs[8]["delivered"]["packets"] == 0 and jobs[8]["shared_cells"] == 1
