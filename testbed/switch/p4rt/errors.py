"""The one exception the P4Runtime server raises for a request it refuses: a gRPC code and a message."""

from __future__ import annotations

import grpc


class P4RuntimeError(Exception):
    """A refused request (or one update of a batch): reported to the client as ``code`` with ``message``."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def canonical_code(self) -> int:
        """The google.rpc.Code number of :attr:`code` (what ``p4.v1.Error.canonical_code`` carries)."""
        return int(self.code.value[0])


def invalid(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.NOT_FOUND, message)


def out_of_range(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.OUT_OF_RANGE, message)


def unimplemented(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.UNIMPLEMENTED, message)


def permission_denied(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.PERMISSION_DENIED, message)


def failed_precondition(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.FAILED_PRECONDITION, message)


def resource_exhausted(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


SHOWN_CHARS = 64
"""A value from a request is shown in an error message up to this many characters (a message is not an echo)."""


def shown(value: str | bytes) -> str:
    """``value`` as an error message quotes it: its repr, cut to :data:`SHOWN_CHARS` with its length said."""
    text = repr(value[:SHOWN_CHARS])
    return (
        text
        if len(value) <= SHOWN_CHARS
        else f"{text}... ({len(value)} {'chars' if isinstance(value, str) else 'bytes'})"
    )
