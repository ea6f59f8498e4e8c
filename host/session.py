"""Bring up one rank of a DLCP job: rendezvous, socket, endpoint, collectives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlcp.config import DLCPConfig, TransportConfig, load
from dlcp.host.collectives import Collectives, Mode
from dlcp.host.endpoint import Endpoint
from dlcp.host.launch_env import LaunchEnv
from dlcp.host.loss import LossSpec
from dlcp.host.pacing import PacingConfig
from dlcp.host.pacing import for_host as pacing_for_host
from dlcp.host.rendezvous import Rendezvous
from dlcp.host.udp import open_socket
from dlcp.limits import Limits
from dlcp.policy import Policy


@dataclass
class Session:
    rendezvous: Rendezvous
    endpoint: Endpoint
    collectives: Collectives
    mode: Mode = "ring"
    """The job's all-reduce mode (``job.mode`` of its configuration); shims default to it."""

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
    store_is_shared: bool = False,
    store_scope: str = "",
) -> Session:
    """Rendezvous with the other ranks and return a ready session.

    The data socket binds ``transport.port + local_rank`` (``port = 0``: any free port).
    ``store`` is an existing torch.distributed Store to rendezvous through (one is
    made at ``store_host:store_port`` otherwise: hosted by rank 0, or, with
    ``store_is_shared``, already hosted there, e.g. by torchrun's agent). DLCP's
    keys go under ``store_scope`` (:class:`LaunchEnv`).
    """
    transport = transport or TransportConfig()
    policy = policy or Policy()
    if pacing is None:
        pacing = pacing_for_host(transport.send_rate_bps, transport.send_burst_bytes, host, policy.largest_bound)
    if store is not None:
        rdv = Rendezvous(store, job_id, rank, world, store_scope)
    else:
        rdv = Rendezvous.tcp(store_host, store_port, job_id, rank, world, shared=store_is_shared, scope=store_scope)
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


def open_session_from_env(
    launch: LaunchEnv | None = None,
    *,
    config: DLCPConfig | str | Path | None = None,
    mode: Mode | None = None,
    **kwargs: Any,
) -> Session:
    """:func:`open_session` with rank, world and rendezvous from the environment (works under ``torchrun``).

    The job configuration is ``config`` (a :class:`DLCPConfig` or a TOML job
    file), else ``DLCP_CONFIG``, else the defaults. It supplies the job id,
    transport, policy and limits unless ``kwargs`` give them, and the mode
    (``mode`` overrides ``job.mode``): in PS mode ranks ``0 .. job.servers-1``
    also serve a shard each. The session remembers the mode for the shims.
    """
    env = launch or LaunchEnv.from_environ()
    source = config if config is not None else env.config
    cfg = source if isinstance(source, DLCPConfig) else load(source) if source is not None else DLCPConfig()
    chosen: Mode = mode or cfg.job.mode
    if chosen not in ("ring", "ps"):
        raise ValueError(f"mode must be 'ring' or 'ps', got {chosen!r}")
    if chosen == "ps" and cfg.job.servers > env.world:
        raise ValueError(f"job.servers = {cfg.job.servers} exceeds the {env.world} workers")
    kwargs.setdefault("job_id", cfg.job.id)
    kwargs.setdefault("transport", cfg.transport)
    kwargs.setdefault("policy", cfg.policy)
    kwargs.setdefault("limits", cfg.limits)
    kwargs.setdefault("server_ranks", tuple(range(cfg.job.servers)) if chosen == "ps" else (0,))
    session = open_session(
        rank=env.rank, world=env.world, store_host=env.store_host, store_port=env.store_port, host=env.host,
        local_rank=env.local_rank, store_is_shared=env.store_is_shared, store_scope=env.store_scope, **kwargs,
    )  # fmt: skip
    session.mode = chosen
    return session
