"""Where a process finds its job: the one place DLCP reads launch environment variables.

It understands ``torchrun``'s variables and DLCP's own:

================  ===========================================  ==========================
variable          meaning                                      default
================  ===========================================  ==========================
RANK              this worker's rank                           required
WORLD_SIZE        number of workers                            required
DLCP_STORE_ADDR   host of the rendezvous TCPStore (rank 0)     MASTER_ADDR, else 127.0.0.1
DLCP_STORE_PORT   its TCP port                                 see below (required
                                                               without MASTER_PORT)
LOCAL_RANK        rank on this host (data port offset)         RANK
DLCP_HOST         address the data socket binds                127.0.0.1
DLCP_CONFIG       TOML job file (``docs/configuration.md``)    defaults
================  ===========================================  ==========================

Under ``torchrun`` nothing needs setting. Where torchrun's agent hosts the
store (``TORCHELASTIC_USE_AGENT_STORE=True``, torchrun's default), every rank
joins that store at ``MASTER_ADDR:MASTER_PORT`` as a client, as torch's own
``env://`` does, under keys scoped by ``TORCHELASTIC_RUN_ID`` and the restart
count: no second port is needed, and a restarted job never reads the keys of
the attempt before. Otherwise rank 0 hosts DLCP's store on ``MASTER_PORT + 1``
(torch's own store has ``MASTER_PORT``). ``DLCP_STORE_PORT`` overrides both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LaunchEnv:
    """Rank, world and rendezvous of this process; :meth:`from_environ` reads them (see the module)."""

    rank: int
    world: int
    store_port: int
    store_host: str = "127.0.0.1"
    local_rank: int | None = None
    host: str = "127.0.0.1"
    config: Path | None = None
    store_is_shared: bool = False
    """The store is already hosted (torchrun's agent): every rank connects as a client; none hosts it."""
    store_scope: str = ""
    """Prefix of DLCP's keys in a shared store ("" for a store of its own)."""

    def __post_init__(self) -> None:
        if self.world < 1:
            raise ValueError(f"world must be >= 1, got {self.world}")
        if not 0 <= self.rank < self.world:
            raise ValueError(f"rank must be in 0..{self.world - 1}, got {self.rank}")
        if not 0 < self.store_port < 1 << 16:
            raise ValueError(f"store_port must be a TCP port, got {self.store_port}")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> LaunchEnv:
        env = os.environ if environ is None else environ

        def integer(name: str) -> int | None:
            raw = env.get(name, "")
            try:
                return int(raw) if raw else None
            except ValueError:
                raise ValueError(f"{name} must be an integer, got {raw!r}") from None

        rank, world, port = integer("RANK"), integer("WORLD_SIZE"), integer("DLCP_STORE_PORT")
        master_port = integer("MASTER_PORT")
        shared = False
        scope = ""
        if port is None and master_port is not None:
            if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
                port, shared = master_port, True  # torchrun's agent hosts it: join as a client
                scope = (
                    f"torchelastic/{env.get('TORCHELASTIC_RUN_ID', '')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
                )
            else:
                port = master_port + 1  # rank 0 hosts DLCP's; torch's own store has MASTER_PORT
        if rank is None or world is None or port is None:
            unset = [n for n, v in (("RANK", rank), ("WORLD_SIZE", world), ("DLCP_STORE_PORT", port)) if v is None]
            raise ValueError(
                f"{', '.join(unset)} not set: DLCP reads the rendezvous from RANK, WORLD_SIZE and DLCP_STORE_PORT"
                " (or torchrun's MASTER_PORT); or pass a LaunchEnv(...) explicitly"
            )
        config = env.get("DLCP_CONFIG")
        return cls(
            rank=rank, world=world, store_port=port,
            store_host=env.get("DLCP_STORE_ADDR") or env.get("MASTER_ADDR") or "127.0.0.1",
            local_rank=integer("LOCAL_RANK"), host=env.get("DLCP_HOST") or "127.0.0.1",
            config=Path(config) if config else None, store_is_shared=shared, store_scope=scope,
        )  # fmt: skip
