"""``dlcp testbed run --torchrun``: the torchrun command line each host gets (no namespaces needed)."""

from __future__ import annotations

from pathlib import Path

from testbed_support import star
from torch.distributed.run import get_args_parser

from dlcp.testbed import jobs, spec


def test_each_host_gets_a_torchrun_node_with_the_c10d_rendezvous_on_the_first_host(tmp_path: Path) -> None:
    s = spec.load(star(tmp_path, "trargv", hosts=3))
    _, hosts = jobs.job_hosts(s, None)
    parsed = []
    for rank in range(3):
        argv = jobs.torchrun_argv(s, hosts, rank, "run-7")
        assert argv[: len(jobs.TORCHRUN)] == list(jobs.TORCHRUN)
        # torch's own parser reads it as one node of three, one process, c10d at h1's address.
        parsed.append(get_args_parser().parse_args([*argv[len(jobs.TORCHRUN) :], "train.py", "--lr", "0.1"]))
    for rank, a in enumerate(parsed):
        assert (a.nnodes, a.node_rank, a.nproc_per_node, a.rdzv_backend) == ("3", rank, "1", "c10d")
        assert (a.rdzv_endpoint, a.rdzv_id, a.max_restarts) == ("10.0.0.1:29500", "run-7", 0)
        assert a.local_addr == s.fabric.hosts[hosts[rank]].ip
        assert a.rdzv_conf == f"is_host={int(rank == 0)}"  # only the first host's agent hosts the store
        assert (a.training_script, a.training_script_args) == ("train.py", ["--lr", "0.1"])


def test_the_rendezvous_numbers_nodes_by_address_text(tmp_path: Path) -> None:
    """torch sorts the nodes by address as text: h10 (10.0.0.10) comes before h2 with eleven hosts."""
    s = spec.load(star(tmp_path, "trorder", hosts=11))
    _, hosts = jobs.job_hosts(s, None)
    assert hosts[:3] == ["h1", "h2", "h3"]
    order = jobs.rendezvous_order(s, hosts)
    assert order[:4] == ["h1", "h10", "h11", "h2"] and sorted(order) == sorted(hosts)
    assert jobs.rendezvous_order(s, hosts[:9]) == hosts[:9]
