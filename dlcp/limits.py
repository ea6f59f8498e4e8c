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
    """Early packets (for messages not yet expected) one job may hold; more are dropped (``STASH_FULL``)."""
    max_stash_age_s: float = 10.0
    """Early packets of a message that has received none for this long are evicted
    (``STASH_EXPIRED``): a message never expected (a cancelled receive, a peer of an
    earlier run) must not hold the stash. Longer than any compute skew worth waiting
    for (``transport.peer_timeout_s`` is 5 s by default); an evicted message that is
    expected later is still completed, by retransmission."""
    completed_memory: int = 4096
    """How many completed messages are remembered, to answer late probes and count late packets."""

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_job_bytes", "max_stash_bytes", "completed_memory"):
            checks.at_least(f"limits.{name}", getattr(self, name), 0)
        checks.positive("limits.max_stash_age_s", self.max_stash_age_s)
        checks.in_range(
            "limits.max_message_bytes", self.max_message_bytes, 0, self.max_job_bytes, note="limits.max_job_bytes"
        )
