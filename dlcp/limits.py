"""Memory caps that keep a receiver bounded whatever arrives on the wire."""

from __future__ import annotations

from dataclasses import dataclass

from dlcp import checks


@dataclass(frozen=True)
class Limits:
    max_message_bytes: int = 1 << 30
    """Largest message a receiver accepts to assemble."""
    max_job_bytes: int = 4 << 30
    """Total bytes of the messages one job may have in assembly at once."""
    max_stash_bytes: int = 64 << 20
    """Early packets (for messages not yet expected) one job may hold."""
    completed_memory: int = 4096
    """How many completed messages are remembered, to answer late probes and count late packets."""

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_job_bytes", "max_stash_bytes", "completed_memory"):
            checks.at_least(f"limits.{name}", getattr(self, name), 0)
        checks.in_range(
            "limits.max_message_bytes", self.max_message_bytes, 0, self.max_job_bytes, note="limits.max_job_bytes"
        )
