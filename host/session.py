"""Bring up one rank of a DLCP job: rendezvous, socket, endpoint, collectives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlcp.config import TransportConfig
from dlcp.host.collectives import Collectives
from dlcp.host.endpoint import Endpoint
from dlcp.host.launch_env import LaunchEnv
from dlcp.host.loss import LossSpec
from dlcp.host.pacing import PacingConfig
from dlcp.host.rendezvous import Rendezvous
from dlcp.host.udp import open_socket
from dlcp.limits import Limits
from dlcp.policy import Policy


@dataclass
class Session:
    rendezvous: Rendezvous
    endpoint: Endpoint
    collectives: Collectives

    def close(self) -> None:
        self.endpoint.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_session(
    *,
    rank: int,
    world: int,
    store_host: str,
    store_port: int,
    job_id: int = 1,
    host: str = "127.0.0.1",
    local_rank: int | None = None,
    transport: TransportConfig | None = None,
    policy: Policy | None = None,
    limits: Limits | None = None,
    loss: LossSpec | None = None,
    pacing: PacingConfig | None = None,
    server_ranks: tuple[int, ...] = (0,),
    worker_ranks: tuple[int, ...] | None = None,
    store: Any = None,
) -> Session:
    """Rendezvous with the other ranks and return a ready session.

    The data socket binds ``transport.port + local_rank`` (``port = 0``: any free port).
    ``store`` is an existing torch.distributed Store to rendezvous through (one is
    made at ``store_host:store_port`` otherwise).
    """
    transport = transport or TransportConfig()
    policy = policy or Policy()
    if store is not None:
        rdv = Rendezvous(store, job_id, rank, world)
    else:
        rdv = Rendezvous.tcp(store_host, store_port, job_id, rank, world)
    port = transport.port + (rank if local_rank is None else local_rank) if transport.port else 0
    sock = open_socket(host, port)
    info = rdv.exchange(sock.getsockname())
    ep = Endpoint(
        rank=rank, job_id=job_id, token=info.token, addresses=info.addresses, transport=transport, limits=limits,
        loss=loss, pacing=pacing, control_class=policy.control_class, sock=sock,
    )  # fmt: skip
    coll = Collectives(ep, world, policy, server_ranks=server_ranks, worker_ranks=worker_ranks)
    rdv.barrier()
    return Session(rdv, ep, coll)


def open_session_from_env(launch: LaunchEnv | None = None, **kwargs: Any) -> Session:
    """:func:`open_session` with rank, world and rendezvous from the environment (works under ``torchrun``).

    ``DLCP_CONFIG`` (a TOML job file) supplies the job id, transport, policy and
    limits unless ``kwargs`` give them.
    """
    from dlcp.config import load

    env = launch or LaunchEnv.from_environ()
    if env.config is not None:
        cfg = load(env.config)
        kwargs.setdefault("job_id", cfg.job.id)
        kwargs.setdefault("transport", cfg.transport)
        kwargs.setdefault("policy", cfg.policy)
        kwargs.setdefault("limits", cfg.limits)
    return open_session(
        rank=env.rank, world=env.world, store_host=env.store_host, store_port=env.store_port, host=env.host,
        local_rank=env.local_rank, **kwargs,
    )  # fmt: skip
