"""Framework shims (``dlcp.host.shim``): PyTorch DDP hook and MXNet KVStore."""
