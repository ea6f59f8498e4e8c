"""Fixtures: a P4Runtime server on port 0 in this process, over a recording backend, and raw clients."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from finsy import P4Schema
from p4rt_support import RawClient, RecordingBackend, Stream, dlcp_config

from dlcp.p4.paths import COMMITTED_P4INFO
from dlcp.testbed.switch.p4rt.server import P4RuntimeServer, start_server


@pytest.fixture
def backend() -> RecordingBackend:
    return RecordingBackend()


@pytest.fixture
def server(backend: RecordingBackend) -> Iterator[P4RuntimeServer]:
    srv = start_server(backend, "127.0.0.1:0", device_id=1)
    try:
        yield srv
    finally:
        srv.stop(0)


@pytest.fixture
def raw(server: P4RuntimeServer) -> Iterator[RawClient]:
    client = RawClient(server.port)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def primary(raw: RawClient) -> Iterator[Stream]:
    """An arbitrated primary stream (election id 1) and DLCP's pipeline committed."""
    stream = Stream(raw)
    stream.arbitrate(1)
    assert stream.next_arbitration().status.code == 0
    raw.set_pipeline(dlcp_config())
    try:
        yield stream
    finally:
        stream.close()


@pytest.fixture(scope="session")
def schema() -> P4Schema:
    return P4Schema(COMMITTED_P4INFO)
