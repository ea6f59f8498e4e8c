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


def test_session_from_env_takes_mode_and_servers_from_the_job() -> None:
    from dlcp.config import DLCPConfig, JobConfig, TransportConfig
    from dlcp.host.launch import free_tcp_port
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
