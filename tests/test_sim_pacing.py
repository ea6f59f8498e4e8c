"""Host pacing in the simulator: each DLCP sender's share of the fabric, by the core's computation."""

from __future__ import annotations

from sim_support import needs_ns3

from dlcp.rate_control import headroom
from dlcp.simulations import pacing, runner, topology, workloads


def test_ps_workers_share_a_server_port_and_servers_a_worker_port() -> None:
    fabric = topology.leaf_spine(2, 2, 8, 100.0, 100.0, 1e-6)
    job = workloads.Job(
        mode=0, transport=workloads.DLCP, tag="ps", workers=(0, 1, 2, 9), servers=(4, 12), layer_bytes=(1,),
        forward_s=(0.0,), backward_s=(0.0,), priority=(0,), push_bound=(0.0,), pull_bound=(0.0,),
        push_drop_fractions=(1.0,), pull_drop_fractions=(1.0,), iterations=1, start_s=0.0,
    )  # fmt: skip
    tcp = workloads.Message(src=7, dst=4, start_s=0.0, bytes=1, transport=workloads.TCP, tag="bg")
    rates = pacing.host_rates(fabric, workloads.Traffic(messages=[tcp], jobs=[job]), 8192)
    # Four workers meet at each server's port; two servers at each worker's, which is the servers' share:
    # server 4 shares leaf 0's two uplinks with workers 0, 1 and 2 (all four send to leaf 1), but sprayed,
    # each of the four puts half its packets on each uplink: a load of two, half each. TCP is not paced.
    quarter, half = int(100e9 / 4 * headroom(8192)), int(100e9 / 2 * headroom(8192))
    assert rates == {0: quarter, 1: quarter, 2: quarter, 9: quarter, 4: half, 12: half}


def test_a_narrow_fabric_link_is_the_share() -> None:
    # Two leaves joined by one 10 Gbit/s spine: three senders on leaf 0 into one receiver on leaf 1
    # share the 10 Gbit/s uplink (a third each), not the receiver's 100 Gbit/s port.
    fabric = topology.leaf_spine(2, 1, 4, 100.0, 10.0, 1e-6)
    msgs = [workloads.Message(src=h, dst=5, start_s=0.0, bytes=1, transport=workloads.DLCP, tag="g") for h in (0, 1, 2)]
    assert pacing.host_rates(fabric, workloads.Traffic(messages=msgs), 1024) == {
        h: int(10e9 / 3 * headroom(1024)) for h in (0, 1, 2)
    }


def test_partitioned_layers_spread_a_model_over_more_buckets() -> None:
    # ResNet-50's largest layer is 9.4 MB: whole, it is one server's bucket; partitioned at 512 KiB
    # (as BytePS does), no bucket holds more than a 1 MiB bucket's worth plus one part, and the bytes
    # and FLOPs are the model's either way.
    whole = workloads.buckets("resnet50", 1 << 20)
    parts = workloads.buckets("resnet50", 1 << 20, partition_bytes=1 << 19)
    assert max(b for b, _ in whole) > 9_000_000
    assert max(b for b, _ in parts) < (1 << 20) + (1 << 19)
    assert sum(b for b, _ in parts) == sum(b for b, _ in whole)
    assert abs(sum(f for _, f in parts) - sum(f for _, f in whole)) < 1e-6 * sum(f for _, f in whole)


def test_without_spraying_a_sender_counts_as_on_a_single_path() -> None:
    # Two leaves joined by two 10 Gbit/s spines; two senders on leaf 0 into two receivers on leaf 1. Sprayed,
    # each puts half its packets on each uplink: a load of one per uplink, 10 Gbit/s each. Hashed per flow
    # (dlcp_no_spray, tensor_priority), either flow may land wholly on either uplink: a load of two, 5 each.
    fabric = topology.leaf_spine(2, 2, 4, 100.0, 10.0, 1e-6)
    msgs = [
        workloads.Message(src=s, dst=d, start_s=0.0, bytes=1, transport=workloads.DLCP, tag="g")
        for s, d in ((0, 4), (1, 5))
    ]
    traffic = workloads.Traffic(messages=msgs)
    assert pacing.host_rates(fabric, traffic, 1024) == {0: int(10e9 * headroom(1024)), 1: int(10e9 * headroom(1024))}
    assert pacing.host_rates(fabric, traffic, 1024, spraying=False) == {
        0: int(10e9 / 2 * headroom(1024)),
        1: int(10e9 / 2 * headroom(1024)),
    }
    single = pacing.pair_paths(fabric, pacing.data_pairs(traffic), spraying=False)
    assert set(single[(0, 4)].values()) == {1.0} and len(single[(0, 4)]) == 5, "2 uplinks, 2 spine downlinks, 1 port"


def test_active_pairs_share_only_with_the_senders_active_now() -> None:
    # An incast's possible senders are every other host; active now are 3 of them: each gets a third of the
    # receiver's port, not a fifteenth (the static share).
    from dlcp.rate_control import active_rates

    fabric = topology.leaf_spine(2, 2, 8, 100.0, 100.0, 1e-6)
    msgs = [
        workloads.Message(src=h, dst=15, start_s=0.0, bytes=1, transport=workloads.DLCP, tag="g") for h in range(15)
    ]
    traffic = workloads.Traffic(messages=msgs)
    static = pacing.host_rates(fabric, traffic, 8192)
    assert set(static.values()) == {int(100e9 / 15 * headroom(8192))}
    paths = pacing.pair_paths(fabric, pacing.data_pairs(traffic))
    now = active_rates([(0, 15), (9, 15), (10, 15)], paths, pacing.port_rates(fabric).__getitem__, headroom(8192))
    assert now == {p: int(100e9 / 3 * headroom(8192)) for p in ((0, 15), (9, 15), (10, 15))}


def _ring(workers: tuple[int, ...], transport: int = workloads.DLCP) -> workloads.Job:
    return workloads.Job(
        mode=workloads.RING_MODE, transport=transport, tag="ring", workers=workers, servers=(), layer_bytes=(1,),
        forward_s=(0.0,), backward_s=(0.0,), priority=(0,), push_bound=(0.0,), pull_bound=(0.0,),
        push_drop_fractions=(1.0,), pull_drop_fractions=(1.0,), iterations=1, start_s=0.0,
    )  # fmt: skip


def test_a_ring_through_a_narrow_port_cuts_its_chunks_by_the_hops_rates() -> None:
    """The testbed's star: host 0's port toward it runs at 200 Mbit/s, so worker 2's hop (to worker 0) is the
    slow one and its chunk is empty (dlcp.ring_shares), as the hosts' collectives cut it from their job file."""
    star = topology.star(4, 1.0, 1e-6, 0.0, 0, 0.2)
    weights = pacing.ring_weights(star, _ring((0, 1, 2)), 8192, 1e9)
    assert [round(w, 9) for w in weights] == [0.5, 0.5, 0.0]
    assert pacing.ring_weights(topology.star(4, 1.0, 1e-6), _ring((0, 1, 2)), 8192, 1e9) == [], "even hops"
    assert pacing.ring_weights(star, _ring((0, 1, 2), workloads.TCP), 8192, 1e9) == [], "only DLCP's ring"


@needs_ns3
def test_on_the_testbeds_star_a_ring_with_weighted_chunks_beats_the_even_rings_floor() -> None:
    """The simulator cuts a DLCP ring's chunks as the hosts do: on a star whose port toward host 0 runs at a fifth
    of the others, the slow hop carries the tensor once, so an iteration takes well under the time an even ring
    needs at the least (4/3 of the tensor through that hop at its rate)."""
    size = 2_400_000
    table = {
        "name": "weighted-ring", "stop_s": 2.0, "host_pacing": "share",
        "topology": {"kind": "star", "hosts": 3, "host_gbps": 1.0, "bottleneck_host": 0, "bottleneck_gbps": 0.2,
                     "delay_us": 1.0},
        "dlcp": {"policy": {}},
        "workload": [{"type": "ring", "workers": 3, "iterations": 3, "layer_bytes": [size], "compute_us": 1.0}],
    }  # fmt: skip
    times = runner.run(table)["jobs"][0]["iteration_s"]
    even_floor = size * 8 * 4 / 3 / 0.2e9
    once = size * 8 / 0.2e9
    assert len(times) == 3
    assert all(once <= t < 0.85 * even_floor for t in times[1:]), (times, once, even_floor)
