"""The launch environment: the one place rank, world and rendezvous are read from."""

import pytest

from dlcp.host.launch_env import LaunchEnv


def test_launch_env_parsing() -> None:
    env = LaunchEnv.from_environ(
        {"RANK": "1", "WORLD_SIZE": "4", "DLCP_STORE_PORT": "29500", "DLCP_STORE_ADDR": "node0", "LOCAL_RANK": "0"}
    )
    assert env == LaunchEnv(rank=1, world=4, store_port=29500, store_host="node0", local_rank=0)
    with pytest.raises(ValueError, match="RANK must be an integer"):
        LaunchEnv.from_environ({"RANK": "x", "WORLD_SIZE": "2", "DLCP_STORE_PORT": "1"})
    with pytest.raises(ValueError, match=r"rank must be in 0\.\.1"):
        LaunchEnv.from_environ({"RANK": "2", "WORLD_SIZE": "2", "DLCP_STORE_PORT": "1"})


def test_launch_env_reads_torchrun_variables() -> None:
    env = LaunchEnv.from_environ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"})
    assert (env.store_host, env.store_port, env.rank) == ("node0", 29501, 1)
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        LaunchEnv.from_environ({"RANK": "0"})


def test_launch_env_joins_torchruns_agent_store() -> None:
    # torchrun's agent hosts a store at MASTER_PORT: every rank joins it as a client, DLCP's keys scoped by the
    # run and the restart (MASTER_PORT + 1 could be taken: once EADDRINUSE under --standalone's random port).
    agent = {
        "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500",
        "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "r1", "TORCHELASTIC_RESTART_COUNT": "3",
    }  # fmt: skip
    env = LaunchEnv.from_environ(agent)
    assert (env.store_port, env.store_is_shared, env.store_scope) == (29500, True, "torchelastic/r1/3")
    explicit = LaunchEnv.from_environ({**agent, "DLCP_STORE_PORT": "4000"})
    assert (explicit.store_port, explicit.store_is_shared, explicit.store_scope) == (4000, False, "")
    own = LaunchEnv.from_environ({**agent, "TORCHELASTIC_USE_AGENT_STORE": "False"})
    assert (own.store_port, own.store_is_shared) == (29501, False)


def test_rendezvous_in_a_store_hosted_by_another_process() -> None:
    """Two ranks rendezvous as clients of a store that a third party (here the test, as torchrun's agent) hosts."""
    import threading
    from datetime import timedelta

    from torch.distributed import TCPStore

    from dlcp.apps.launch import free_tcp_port
    from dlcp.host.rendezvous import Rendezvous

    port = free_tcp_port()
    agent = TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=10), wait_for_workers=False)
    agent.set("torchelastic/r1/0/dlcp/1/token", "7")  # the attempt before: must not be read
    infos: dict[int, object] = {}
    errors: list[BaseException] = []

    def rank_main(rank: int) -> None:
        try:
            rdv = Rendezvous.tcp("127.0.0.1", port, 1, rank, 2, timeout_s=10, shared=True, scope="torchelastic/r1/1")
            infos[rank] = rdv.exchange(("10.0.0.1", 5000 + rank))
            rdv.barrier()
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    tokens = {info.token for info in infos.values()}  # type: ignore[attr-defined]
    assert len(tokens) == 1 and tokens != {7}
    assert infos[1].addresses == {0: ("10.0.0.1", 5000), 1: ("10.0.0.1", 5001)}  # type: ignore[attr-defined]
    assert agent.check(["torchelastic/r1/1/dlcp/1/token"])


def test_session_from_env_takes_mode_and_servers_from_the_job() -> None:
    from dlcp.apps.launch import free_tcp_port
    from dlcp.config import DLCPConfig, JobConfig, TransportConfig
    from dlcp.host.session import open_session_from_env

    env = LaunchEnv(rank=0, world=1, store_port=free_tcp_port())
    ps = DLCPConfig(job=JobConfig(mode="ps", workers=1, servers=1), transport=TransportConfig(port=0))
    with open_session_from_env(env, config=ps) as s:
        assert s.mode == "ps" and s.collectives.servers == (0,)
    with pytest.raises(ValueError, match="exceeds"):
        open_session_from_env(env, config=DLCPConfig(job=JobConfig(mode="ps", servers=2)))
    env = LaunchEnv(rank=0, world=1, store_port=free_tcp_port())
    with open_session_from_env(env, config=ps, mode="ring") as s:
        assert s.mode == "ring"
