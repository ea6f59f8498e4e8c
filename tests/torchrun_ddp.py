"""A DDP job with the DLCP hook, for ``torchrun`` (run by tests/test_shim_torch.py; not a test module)."""

import torch
import torch.distributed as dist

from dlcp.config import TransportConfig
from dlcp.host.session import open_session_from_env
from dlcp.host.shim.torch import DLCPState, dlcp_hook


def main() -> int:
    dist.init_process_group("gloo")  # env:// from torchrun
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    session = open_session_from_env(transport=TransportConfig(port=0, payload_bytes=1024))
    state = DLCPState(session, model=ddp)
    ddp.register_comm_hook(state, dlcp_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(5):
        x, y = torch.randn(32, 8, generator=gen), torch.randint(0, 2, (32,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], t) for t in gathered)
    print(f"rank {dist.get_rank()} replicas_identical={same} layers={state.num_layers}", flush=True)
    state.close()
    session.close()
    dist.destroy_process_group()
    return 0 if same and state.num_layers == 4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
