"""A tiny torchrun job for tests/testbed/test_torchrun.py: one gloo all-reduce across the nodes, one JSON line.

torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for this process; the JSON says what it saw.
"""

from __future__ import annotations

import json
import os
import socket

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    peer = os.environ["MASTER_ADDR"]
    dist.destroy_process_group()
    print(json.dumps({"rank": rank, "world": world, "sum": t.item(), "master": peer, "node": socket.gethostname(),
                      "group_rank": int(os.environ.get("GROUP_RANK", -1))}))  # fmt: skip


if __name__ == "__main__":
    main()
