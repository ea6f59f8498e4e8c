"""The switch's control-plane view of its state: canonical entries, by P4Info name.

This is the one interface between the P4Runtime server (which decodes and
validates P4Runtime messages against the P4Info) and the data plane (which
holds the forwarding state in C). The server hands the data plane only
entries that are already valid for the DLCP P4Info: names exist, values fit
their bit widths, LPM prefixes have no bits set past the prefix, ternary
values have no bits set outside their mask. The data plane applies them or
raises :class:`BackendError`; it never sees protobuf.

Names are those of ``dlcp.p4.names`` (the P4Info's fully qualified names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol


class MatchKind(Enum):
    EXACT = "exact"
    LPM = "lpm"
    TERNARY = "ternary"
    OPTIONAL = "optional"


@dataclass(frozen=True, slots=True)
class FieldMatch:
    """One key field. ``arg`` is the prefix length for LPM and the mask for TERNARY (0 otherwise)."""

    name: str
    kind: MatchKind
    value: int
    arg: int = 0


@dataclass(frozen=True, slots=True)
class Action:
    """An action by name with its parameters by name (unsigned integers)."""

    name: str
    params: tuple[tuple[str, int], ...] = ()

    def param(self, name: str) -> int:
        for key, value in self.params:
            if key == name:
                return value
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class TableEntry:
    """A table entry. Exactly one of ``action``, ``member_id`` and ``group_id`` is set.

    ``match`` holds the fields present in the P4Runtime message, in P4Info order; a
    ternary or optional field that is absent is a wildcard, an absent LPM field
    matches everything (prefix length 0). ``priority`` is 0 for tables without
    ternary, range or optional fields.
    """

    table: str
    match: tuple[FieldMatch, ...]
    priority: int = 0
    action: Action | None = None
    member_id: int | None = None
    group_id: int | None = None

    def key(self) -> tuple[str, tuple[FieldMatch, ...], int]:
        """What identifies the entry in its table (P4Runtime: match and priority)."""
        return (self.table, self.match, self.priority)


@dataclass(frozen=True, slots=True)
class ProfileMember:
    profile: str
    member_id: int
    action: Action


@dataclass(frozen=True, slots=True)
class ProfileGroup:
    """A selector group; ``members`` are (member id, weight) pairs."""

    profile: str
    group_id: int
    members: tuple[tuple[int, int], ...] = field(default_factory=tuple)
    max_size: int = 0


class Op(Enum):
    INSERT = "insert"
    MODIFY = "modify"
    DELETE = "delete"


class BackendError(Exception):
    """The data plane could not apply an update (e.g. a table is full); the server maps it to a gRPC code."""

    def __init__(self, message: str, *, resource_exhausted: bool = False) -> None:
        super().__init__(message)
        self.resource_exhausted = resource_exhausted


class TableBackend(Protocol):
    """What the P4Runtime server needs from a data plane. Every call is applied atomically or not at all.

    The server keeps the index of installed entries (to answer Read and to give
    ALREADY_EXISTS / NOT_FOUND); INSERT of an existing key or MODIFY/DELETE of a
    missing one never reaches the backend.
    """

    def write_entry(self, op: Op, entry: TableEntry) -> None: ...

    def set_default_action(self, table: str, action: Action) -> None: ...

    def write_member(self, op: Op, member: ProfileMember) -> None: ...

    def write_group(self, op: Op, group: ProfileGroup) -> None: ...

    def read_counter(self, counter: str, index: int) -> tuple[int, int]:
        """(packets, bytes) of one counter cell."""
        ...

    def write_counter(self, counter: str, index: int, packets: int, byte_count: int) -> None: ...

    def counter_size(self, counter: str) -> int: ...

    def reset(self) -> None:
        """Empty every table, profile and counter (a new pipeline config was committed)."""
        ...
