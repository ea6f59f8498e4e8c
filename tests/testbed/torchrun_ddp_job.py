"""A user's DDP training script, as it would run under ``torchrun`` on a cluster, plus DLCP's hook.

Run by tests/testbed/test_cli_run.py as ``dlcp testbed run --torchrun FABRIC -- torchrun_ddp_job.py ITERATIONS``:
one torchrun node per host namespace. Apart from the two lines marked DLCP it is plain PyTorch (gloo process
group, DistributedDataParallel, SGD on synthetic data). It prints one JSON line: what torchrun gave it, how far it
trained, and a checksum of its parameters at the end (the test compares them across the nodes).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist

from dlcp.host.session import open_session_from_env
from dlcp.host.shim.torch import DLCPState, dlcp_hook


def main() -> int:
    iterations = int(sys.argv[1])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial parameters on every node (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    session = open_session_from_env()  # DLCP
    ddp.register_comm_hook(state := DLCPState(session, model=ddp), dlcp_hook)  # DLCP
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1000 + rank)  # each node its own data
    done = 0
    for _ in range(iterations):
        x, y = torch.randn(64, 32, generator=gen), torch.randint(0, 10, (64,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        done += 1
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).contiguous()
    checksum = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    state.close()
    stats = state.loss_stats()
    session.close()
    dist.destroy_process_group()
    print(json.dumps({
        "rank": rank, "world": world, "group_rank": int(os.environ["GROUP_RANK"]), "iterations": done,
        "checksum": checksum, "dlcp_host": os.environ.get("DLCP_HOST"), "layers": state.num_layers,
        "bytes_sent": state.bytes_sent, "loss_fraction": stats["loss_fraction"],
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
