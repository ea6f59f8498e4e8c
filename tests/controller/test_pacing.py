"""Host pacing from the fabric: each host's share of the narrowest port its data crosses, in the job file."""

from __future__ import annotations

import tomllib

from dlcp.apps.train.trainer import TrainConfig, policy_for
from dlcp.controller import fabric, pacing
from dlcp.controller.paths import Paths
from dlcp.host.pacing import AimdPacer, PacingConfig
from dlcp.host.pacing import for_host as pacing_for_host
from dlcp.protocol import HEADER_SIZE
from dlcp.rate_control import headroom

H = headroom(8192)
"""The default payload's headroom: what a port carries beyond the paced bytes, and the control share."""

# The testbed's bench fabric: h1 (the server) behind a 200 Mbit/s link, the others on 1 Gbit/s.
STAR = (
    '[topology]\nkind = "star"\nhosts = 4\nhost_link = { rate = "1gbit", buffer = "1MiB", mtu = 9000 }\n'
    '[[link]]\nname = "h1-s1"\nrate = "200mbit"\nbuffer = "256KiB"\n'
)


def job(mode: str, workers: str = '["h1", "h2", "h3"]') -> str:
    servers = 'servers = ["h1"]\n' if mode == "ps" else ""
    return f'[[job]]\nid = 1\nmode = "{mode}"\nworkers = {workers}\n{servers}[job.transport]\nport = 19111\n'


def rates(mode: str) -> dict[str, int]:
    f = fabric.from_dict(tomllib.loads(STAR + job(mode)))
    by_ip = pacing.send_rates(f, Paths(f), f.jobs[1])
    return {name: by_ip[h.ip] for name, h in f.hosts.items() if h.ip in by_ip}


def test_ps_workers_share_the_servers_link_and_the_server_has_its_own() -> None:
    r = rates("ps")
    assert r["h2"] == r["h3"] == int(200e6 / 2 * H), "two workers push into h1's 200 Mbit/s"
    assert r["h1"] == int(1e9 * H), "each pull leaves by a worker's own 1 Gbit/s link"
    assert "h4" not in r, "a host outside the job is not paced"


def test_ring_counts_only_data_toward_the_share() -> None:
    r = rates("ring")
    # h3 sends data to h1 (the next rank); h2 only acknowledges h1's data there: h3 has the port to itself.
    assert r["h3"] == int(200e6 * H)
    assert r["h1"] == r["h2"] == int(1e9 * H)


def test_an_unshaped_fabric_paces_nobody() -> None:
    f = fabric.from_dict(tomllib.loads('[topology]\nkind = "star"\nhosts = 3\n' + job("ps")))
    assert pacing.send_rates(f, Paths(f), f.jobs[1]) == {}


def test_the_burst_is_the_one_the_thresholds_leave_room_for() -> None:
    f = fabric.from_dict(tomllib.loads(STAR + job("ps") + "[job.switch]\nburst_packets = 3\n"))
    assert pacing.send_burst_bytes(f.jobs[1]) == 3 * (8192 + HEADER_SIZE)


def test_a_named_host_starts_at_its_rate_and_sends_at_most_its_burst_per_call() -> None:
    cfg = pacing_for_host({"10.0.0.2": 95_000_000}, 33_000, "10.0.0.2")
    assert cfg.max_rate == 95e6 / 8 and cfg.min_rate <= cfg.max_rate and cfg.burst == 33_000
    pacer = AimdPacer(cfg)
    assert pacer.rate == cfg.max_rate, "no unlimited start"
    assert pacer.call_bytes() == 33_000
    pacer.on_feedback(0.1)
    assert pacer.rate == cfg.max_rate * 0.9, "slowed by the loss fraction"
    pacer.on_feedback(0.8)
    assert pacer.rate == cfg.max_rate * 0.45, "at most halved"
    for _ in range(8):
        pacer.on_feedback(0.0)
    assert pacer.rate == cfg.max_rate, "back up by 1/8 of the rate per message, never above"
    assert pacing_for_host({"10.0.0.2": 95_000_000}, 0, "10.0.0.9").max_rate == PacingConfig().max_rate
    unpaced = AimdPacer(pacing_for_host({}, 33_000, "10.0.0.9"))
    assert unpaced.call_bytes() > 1 << 20, "only named hosts have their calls cut to the burst"


def test_loss_within_twice_the_largest_bound_does_not_slow_a_sender() -> None:
    policy = policy_for(TrainConfig(loss_bound=0.02))
    assert policy.largest_bound == 0.02
    cfg = pacing_for_host({"10.0.0.2": 95_000_000}, 33_000, "10.0.0.2", policy.largest_bound)
    pacer = AimdPacer(cfg)
    pacer.on_feedback(0.035)  # a 1% lossy link's unlucky message: within twice the bound
    assert pacer.rate == cfg.max_rate
    pacer.on_feedback(0.05)
    assert pacer.rate == cfg.max_rate * 0.95
    assert pacing_for_host({}, 0, "h", 0.001).decrease_above == 0.02, "at least 2%"


LEAF_SPINE = (
    '[topology]\nkind = "leaf-spine"\nleaves = 2\nspines = 2\nhosts_per_leaf = 2\n'
    'host_link = { rate = "1gbit", buffer = "1MiB", mtu = 9000 }\n'
    'fabric_link = { rate = "200mbit", buffer = "256KiB", mtu = 9000 }\n'
)


def test_sprayed_ring_flows_crossing_the_spines_each_get_a_spine_link() -> None:
    # h1 and h2 sit on leaf 1, h3 and h4 on leaf 2: the ring h1 h3 h2 h4 sends h1->h3 and h2->h4 up leaf 1's
    # two 200 Mbit/s spine links, h3->h2 and h4->h1 up leaf 2's. Sprayed, each pair puts half its packets on
    # each spine link: two senders load each link as one would, so each may send 200 Mbit/s.
    f = fabric.from_dict(tomllib.loads(LEAF_SPINE + job("ring", '["h1", "h3", "h2", "h4"]')))
    by_ip = pacing.send_rates(f, Paths(f), f.jobs[1])
    assert {name: by_ip[h.ip] for name, h in f.hosts.items()} == {h: int(200e6 * H) for h in ("h1", "h2", "h3", "h4")}
