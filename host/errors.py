"""Errors the host transport raises to its caller."""

from __future__ import annotations


class TransportError(RuntimeError):
    """The transport cannot complete an operation."""


class PeerTimeoutError(TransportError):
    """A peer stopped answering mid-collective."""

    def __init__(self, rank: int, addr: tuple[str, int], waited_s: float, what: str) -> None:
        self.rank = rank
        self.addr = addr
        self.waited_s = waited_s
        super().__init__(f"peer rank {rank} at {addr[0]}:{addr[1]} silent for {waited_s:.1f} s while {what}")
