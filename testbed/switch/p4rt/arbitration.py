"""Primary election among the controllers' StreamChannels (P4Runtime spec, "Client Arbitration").

Only the default role exists (a non-empty role name is refused), for the one
device of the switch. The primary is the live stream whose election id equals
the highest election id the switch has ever accepted; there may be none (the
primary left, or downgraded itself). Every change of primary is announced to
every stream: status OK to the primary, ALREADY_EXISTS to the others while
there is a primary, NOT_FOUND when there is none; the announced election id is
the highest ever seen (unset before the first primary). A stream that becomes
a backup without changing the primary is told alone.

The class is pure bookkeeping: it returns the messages to send and raises
:class:`P4RuntimeError` for an update that must end the stream; the server
owns the streams and the locking.
"""

from __future__ import annotations

from collections.abc import Hashable

import grpc
from finsy.proto import U128, p4r, rpc_code, rpc_status

from dlcp.testbed.switch.p4rt import errors
from dlcp.testbed.switch.p4rt.errors import P4RuntimeError

Notice = tuple[Hashable, p4r.StreamMessageResponse]
"""A message for one stream (identified by the server's stream object)."""


def election_id_of(
    msg: p4r.MasterArbitrationUpdate | p4r.WriteRequest | p4r.SetForwardingPipelineConfigRequest,
) -> int | None:
    """The election id of a message, None when unset (lower than any, never primary)."""
    return U128.decode(msg.election_id) if msg.HasField("election_id") else None


class Arbiter:
    """Who is primary for this switch's one device and the default role."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self.streams: dict[Hashable, int | None] = {}
        """Live, arbitrated streams and their election ids."""
        self.highest: int | None = None
        """The highest election id ever accepted as primary (P4Runtime's ``election_id_past``)."""
        self.primary: Hashable | None = None

    @property
    def primary_election_id(self) -> int | None:
        return self.streams[self.primary] if self.primary is not None else None

    def is_primary(self, election_id: int | None) -> bool:
        """Whether a write carrying ``election_id`` (default role) comes from the primary."""
        return self.primary is not None and election_id is not None and election_id == self.primary_election_id

    def update(self, stream: Hashable, msg: p4r.MasterArbitrationUpdate) -> list[Notice]:
        """A MasterArbitrationUpdate received on ``stream``; raises to end the stream with that error."""
        first = stream not in self.streams
        if msg.device_id != self.device_id:
            code = grpc.StatusCode.NOT_FOUND if first else grpc.StatusCode.FAILED_PRECONDITION
            raise P4RuntimeError(code, f"device id {msg.device_id} is not this switch's ({self.device_id})")
        if msg.HasField("role") and msg.role.name:
            code = grpc.StatusCode.NOT_FOUND if first else grpc.StatusCode.FAILED_PRECONDITION
            raise P4RuntimeError(code, f"role {errors.shown(msg.role.name)}: this switch has only the default role")
        if msg.role.HasField("config"):
            raise errors.invalid("role config is not supported (default role, full pipeline access)")
        eid = election_id_of(msg)
        if eid is not None and any(s is not stream and e == eid for s, e in self.streams.items()):
            raise errors.invalid(f"election id {eid} is already used by another controller")
        self.streams[stream] = eid
        if eid is not None and (self.highest is None or eid >= self.highest):
            self.primary, self.highest = stream, eid
            return self._announce()
        if self.primary is stream:  # the primary downgraded itself
            self.primary = None
            return self._announce()
        return [(stream, self._message(stream))]

    def remove(self, stream: Hashable) -> list[Notice]:
        """``stream`` closed: if it was the primary, everyone left is told there is none."""
        self.streams.pop(stream, None)
        if self.primary is stream:
            self.primary = None
            return self._announce()
        return []

    def _announce(self) -> list[Notice]:
        # Backups first, then the primary (spec: the new primary is told last).
        order = sorted(self.streams, key=lambda s: s is self.primary)
        return [(s, self._message(s)) for s in order]

    def _message(self, stream: Hashable) -> p4r.StreamMessageResponse:
        if self.primary is None:
            status = rpc_status.Status(code=rpc_code.NOT_FOUND, message="no primary controller")
        elif stream is self.primary:
            status = rpc_status.Status(code=rpc_code.OK, message="you are the primary controller")
        else:
            status = rpc_status.Status(code=rpc_code.ALREADY_EXISTS, message="another controller is primary")
        update = p4r.MasterArbitrationUpdate(device_id=self.device_id, status=status)
        if self.highest is not None:
            update.election_id.CopyFrom(U128.encode(self.highest))
        return p4r.StreamMessageResponse(arbitration=update)
