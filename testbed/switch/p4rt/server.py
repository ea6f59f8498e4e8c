"""The software switch's P4Runtime server: grpcio, on the P4Runtime modules that finsy ships.

:func:`start_server` serves one device (``device_id``) whose forwarding state
is a :class:`~dlcp.testbed.switch.entries.TableBackend` (the C data plane, in
the same process). It runs DLCP's program only: ``SetForwardingPipelineConfig``
accepts DLCP's P4Info and refuses any other. What is implemented, and what is
not, is listed in ``docs/switch.md`` ("P4Runtime").

Threads: gRPC's worker pool serves the RPCs; each StreamChannel also has a
reader thread. One lock serialises writes, reads, pipeline changes and
arbitration, so the backend is called by one thread at a time and a change of
primary waits for the write in progress.

Bad input: the server parses requests itself (gRPC hands it the bytes), so a
request that is not the protobuf it should be gets INVALID_ARGUMENT naming the
message type, and ends a stream the same way. What one request may ask is
bounded (``dlcp.switch_limits``: updates in a Write, entities in a Read, a
table entry's metadata, messages queued to a stream whose client does not
read); a request above a limit gets RESOURCE_EXHAUSTED (INVALID_ARGUMENT for
the metadata) naming it, before anything is applied. An error message quotes
a value from the request only in part (:func:`errors.shown`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import grpc
from finsy.proto import p4i, p4r, p4r_grpc, rpc_code, rpc_status
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message

from dlcp import switch_limits as limits
from dlcp.testbed.switch.entries import TableBackend
from dlcp.testbed.switch.p4rt import errors, schema
from dlcp.testbed.switch.p4rt.arbitration import Arbiter, Notice, election_id_of
from dlcp.testbed.switch.p4rt.errors import P4RuntimeError
from dlcp.testbed.switch.p4rt.state import Journal, SwitchState

log = logging.getLogger(__name__)

P4RUNTIME_API_VERSION = "1.5.0"
"""The P4Runtime version of the protocol files this server is built on (finsy 0.30's)."""
MAX_STREAMS = limits.P4RT_MAX_STREAMS
MAX_WRITE_UPDATES = limits.P4RT_MAX_WRITE_UPDATES
MAX_READ_ENTITIES = limits.P4RT_MAX_READ_ENTITIES
MAX_MESSAGE_BYTES = limits.P4RT_MAX_MESSAGE_BYTES
_WORKERS = 2 * MAX_STREAMS
_STOP_WAIT_S = 10.0
"""After the grace time, how long stop() waits for the cancelled calls to end before it gives up on them."""
_READ_CHUNK = 1000
"""Entities per ReadResponse message."""

_Config = p4r.ForwardingPipelineConfig
_SetRequest = p4r.SetForwardingPipelineConfigRequest
_GetRequest = p4r.GetForwardingPipelineConfigRequest


class _End:
    """Marks the end of a stream's outgoing queue."""


_Item = p4r.StreamMessageResponse | P4RuntimeError | _End


@dataclass(eq=False)
class _Stream:
    """One StreamChannel: what the server sends it is queued here, and taken by the RPC's handler.

    The queue is bounded by what its client reads. The stream's own reader waits
    (:meth:`wait_for_room`) while the messages queued, not yet taken by the
    client, hold more than ``P4RT_MAX_PENDING_STREAM_BYTES``; a message for the
    stream that comes from elsewhere (an announcement of arbitration) never
    waits, and a stream with ``P4RT_MAX_PENDING_STREAM_MESSAGES`` queued is
    cancelled (its client reads nothing).
    """

    peer: str
    cancel: Callable[[], Any] = lambda: None
    """Cancels the RPC (gRPC's ``context.cancel``)."""
    items: deque[_Item] = field(default_factory=deque)
    pending_bytes: int = 0
    ended: bool = False
    cond: threading.Condition = field(default_factory=threading.Condition)

    def put(self, item: _Item) -> None:
        """Queue ``item``; never waits."""
        overflow = False
        with self.cond:
            if self.ended:
                return
            if isinstance(item, p4r.StreamMessageResponse):
                if len(self.items) >= limits.P4RT_MAX_PENDING_STREAM_MESSAGES:
                    overflow = True
                    self.ended = True
                    item = P4RuntimeError(grpc.StatusCode.RESOURCE_EXHAUSTED, "the stream's client reads nothing")
                else:
                    self.pending_bytes += item.ByteSize()
            else:
                self.ended = True  # an error or the end: nothing after it is sent
            self.items.append(item)
            self.cond.notify_all()
        if overflow:
            log.warning("stream from %s: %d messages queued and none read: cancelled", self.peer, len(self.items))
            self.cancel()

    def close(self) -> None:
        self.put(_End())

    def take(self) -> _Item:
        """The next item to send (waits for one)."""
        with self.cond:
            while not self.items:
                self.cond.wait()
            return self.items.popleft()

    def sent(self, item: p4r.StreamMessageResponse) -> None:
        """``item`` went to the client: room for more."""
        with self.cond:
            self.pending_bytes -= item.ByteSize()
            self.cond.notify_all()

    def wait_for_room(self) -> bool:
        """Wait until the queue holds less than the limit of bytes; False when the stream has ended."""
        with self.cond:
            while not self.ended and self.pending_bytes >= limits.P4RT_MAX_PENDING_STREAM_BYTES:
                self.cond.wait()
            return not self.ended


_Request = TypeVar("_Request", bound=Message)


def parse(kind: type[_Request], data: bytes) -> _Request:
    """The ``kind`` message in ``data``; INVALID_ARGUMENT naming the type when it is not one."""
    try:
        return kind.FromString(data)
    except DecodeError as exc:
        raise errors.invalid(
            f"the request is not a valid {kind.DESCRIPTOR.full_name} ({len(data)} bytes): {exc}"
        ) from None


def _status_details(code: grpc.StatusCode, message: str, results: list[P4RuntimeError | None]) -> bytes:
    """A serialized google.rpc.Status carrying one p4.v1.Error per update or read request."""
    details = []
    for r in results:
        err = (
            p4r.Error(canonical_code=rpc_code.OK)
            if r is None
            else p4r.Error(canonical_code=r.canonical_code, message=r.message)
        )
        packed = any_pb2.Any()
        packed.Pack(err)
        details.append(packed)
    status = rpc_status.Status(code=int(code.value[0]), message=message, details=details)
    return status.SerializeToString()


def _fail_batch(context: grpc.ServicerContext, results: list[P4RuntimeError | None], what: str) -> None:
    failed = [(i, r) for i, r in enumerate(results) if r is not None]
    first_i, first = failed[0]
    message = f"{len(failed)} of {len(results)} {what}s failed; first: #{first_i}: {first.code.name}: {first.message}"
    context.set_code(grpc.StatusCode.UNKNOWN)
    context.set_details(message)
    context.set_trailing_metadata(
        (("grpc-status-details-bin", _status_details(grpc.StatusCode.UNKNOWN, message, results)),)
    )


class P4RuntimeServicer(p4r_grpc.P4RuntimeServicer):  # type: ignore[misc]
    """P4Runtime for one device running DLCP's program on ``backend``."""

    def __init__(self, backend: TableBackend, device_id: int, p4info: p4i.P4Info | None = None) -> None:
        self.expected = p4info if p4info is not None else schema.dlcp_p4info()
        self.device_id = device_id
        self.backend = backend
        self.state = SwitchState(schema.Schema(self.expected), backend)
        self.arbiter = Arbiter(device_id)
        self.lock = threading.RLock()
        self.config: _Config | None = None
        """The committed pipeline config."""
        self.saved: _Config | None = None
        """A config saved by VERIFY_AND_SAVE, realized by the next COMMIT."""
        self.since_save: list[p4r.Update] = []
        """Updates applied since VERIFY_AND_SAVE: COMMIT replays them on the cleared state."""
        self.streams: set[_Stream] = set()

    # ------------------------------------------------------------ common checks

    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise errors.not_found(f"device id {device_id} is not this switch's ({self.device_id})")

    def _check_role(self, request: p4r.WriteRequest | p4r.ReadRequest | _SetRequest) -> None:
        role_id = getattr(request, "role_id", 0)
        if request.role or role_id:
            raise errors.not_found(
                f"role {errors.shown(request.role) if request.role else role_id}: this switch has only the default role"
            )

    def _check_primary(self, request: p4r.WriteRequest | _SetRequest) -> None:
        eid = election_id_of(request)
        if not self.arbiter.is_primary(eid):
            primary = self.arbiter.primary_election_id
            raise errors.permission_denied(
                f"election id {eid} is not the primary's ("
                + (f"{primary}" if primary is not None else "there is no primary")
                + "): only the primary controller may write"
            )

    def _check_pipeline(self) -> None:
        if self.config is None and self.saved is None:
            raise errors.failed_precondition(f"no forwarding pipeline config set for device {self.device_id}")

    @staticmethod
    def _abort(context: grpc.ServicerContext, exc: P4RuntimeError) -> None:
        log.info("P4Runtime request refused: %s: %s", exc.code.name, exc.message)
        context.abort(exc.code, exc.message)

    # ----------------------------------------------------------------- RPCs

    def Capabilities(self, request: p4r.CapabilitiesRequest, context: grpc.ServicerContext) -> Any:
        if request.device_id:
            try:
                self._check_device(request.device_id)
            except P4RuntimeError as exc:
                self._abort(context, exc)
        return p4r.CapabilitiesResponse(p4runtime_api_version=P4RUNTIME_API_VERSION)

    def GetForwardingPipelineConfig(self, request: _GetRequest, context: grpc.ServicerContext) -> Any:
        try:
            self._check_device(request.device_id)
        except P4RuntimeError as exc:
            self._abort(context, exc)
        with self.lock:
            config = self.saved if self.saved is not None else self.config
        reply = p4r.GetForwardingPipelineConfigResponse()
        if config is None:
            return reply  # P4Runtime: no config known, the config field stays unset
        kind = request.response_type
        if config.HasField("cookie"):
            reply.config.cookie.CopyFrom(config.cookie)
        if kind in (_GetRequest.ALL, _GetRequest.P4INFO_AND_COOKIE):
            reply.config.p4info.CopyFrom(config.p4info)
        if kind in (_GetRequest.ALL, _GetRequest.DEVICE_CONFIG_AND_COOKIE):
            reply.config.p4_device_config = config.p4_device_config
        reply.config.SetInParent()
        return reply

    def SetForwardingPipelineConfig(self, request: _SetRequest, context: grpc.ServicerContext) -> Any:
        try:
            with self.lock:
                self._set_pipeline(request)
        except P4RuntimeError as exc:
            self._abort(context, exc)
        return p4r.SetForwardingPipelineConfigResponse()

    def _set_pipeline(self, request: _SetRequest) -> None:
        self._check_device(request.device_id)
        self._check_role(request)
        self._check_primary(request)
        action = request.action
        if action == _SetRequest.COMMIT:
            if request.HasField("config"):
                raise errors.invalid("COMMIT takes no config (it realizes the one VERIFY_AND_SAVE saved)")
            if self.saved is None:
                raise errors.not_found("COMMIT: no config was saved by VERIFY_AND_SAVE")
            saved, replay = self.saved, self.since_save
            self._commit(saved)
            for update in replay:
                journal = Journal()
                try:
                    self.state.apply(update, journal)
                except P4RuntimeError as exc:  # e.g. a MODIFY of an entry written before the save
                    journal.rollback()
                    log.warning("COMMIT: a write made since the save fails on replay: %s", exc.message)
            return
        if action not in (_SetRequest.VERIFY, _SetRequest.VERIFY_AND_SAVE, _SetRequest.VERIFY_AND_COMMIT) and (
            action != _SetRequest.RECONCILE_AND_COMMIT
        ):
            raise errors.invalid(f"pipeline config action {action} is not VERIFY, VERIFY_AND_SAVE, ... or COMMIT")
        self._verify(request)
        config = _Config()
        config.CopyFrom(request.config)
        if action == _SetRequest.VERIFY_AND_SAVE:
            self.saved, self.since_save = config, []
        elif action == _SetRequest.VERIFY_AND_COMMIT:
            self._commit(config)
        elif action == _SetRequest.RECONCILE_AND_COMMIT:
            # The only program this switch runs is DLCP's, so the forwarding state always carries over.
            self.config, self.saved, self.since_save = config, None, []
            log.info("pipeline reconciled (forwarding state kept)")

    def _verify(self, request: _SetRequest) -> None:
        if not request.HasField("config") or not request.config.HasField("p4info"):
            raise errors.invalid("the request carries no P4Info")
        diff = schema.differences(self.expected, request.config.p4info)
        if diff:
            raise errors.invalid(
                "this switch runs DLCP's program only (p4src/v1model/dlcp.p4info.txtpb); the P4Info given is "
                "another: " + "; ".join(diff)
            )

    def _commit(self, config: _Config) -> None:
        self.backend.reset()
        self.state.clear()
        self.config, self.saved, self.since_save = config, None, []
        log.info("pipeline committed: tables, profiles and counters cleared")

    def Write(self, request: p4r.WriteRequest, context: grpc.ServicerContext) -> Any:
        with self.lock:
            try:
                self._check_device(request.device_id)
                self._check_role(request)
                self._check_primary(request)
                self._check_pipeline()
                if request.atomicity == p4r.WriteRequest.DATAPLANE_ATOMIC:
                    raise errors.unimplemented("DATAPLANE_ATOMIC batches are not supported")
                if request.atomicity not in (p4r.WriteRequest.CONTINUE_ON_ERROR, p4r.WriteRequest.ROLLBACK_ON_ERROR):
                    raise errors.invalid(f"atomicity {request.atomicity} is unknown")
                self._check_batch(request.updates)
            except P4RuntimeError as exc:
                self._abort(context, exc)
            if request.atomicity == p4r.WriteRequest.ROLLBACK_ON_ERROR:
                results = self._write_all_or_none(request.updates)
            else:
                results = [self._write_one(u) for u in request.updates]
        if any(r is not None for r in results):
            _fail_batch(context, results, "update")
        return p4r.WriteResponse()

    def _check_batch(self, updates: Any) -> None:
        """A batch within MAX_WRITE_UPDATES (an update writing every cell of a counter counts as its cells)."""
        cells = 0
        for u in updates:
            c = u.entity.counter_entry if u.entity.WhichOneof("entity") == "counter_entry" else None
            info = self.state.schema.counters.get(c.counter_id) if c is not None and not c.HasField("index") else None
            cells += info.size if info is not None else 1
            if cells > MAX_WRITE_UPDATES:
                raise errors.resource_exhausted(
                    f"the batch has {len(updates)} updates, writing more than {MAX_WRITE_UPDATES} entries or counter "
                    f"cells: at most {MAX_WRITE_UPDATES} per Write (split it)"
                )
        if self.saved is not None and len(self.since_save) + len(updates) > MAX_WRITE_UPDATES:
            raise errors.resource_exhausted(
                f"{len(self.since_save)} updates made since VERIFY_AND_SAVE wait for the COMMIT that replays them "
                f"(at most {MAX_WRITE_UPDATES}): COMMIT first"
            )

    def _write_one(self, update: p4r.Update) -> P4RuntimeError | None:
        journal = Journal()
        try:
            self.state.apply(update, journal)
        except P4RuntimeError as exc:
            journal.rollback()
            return exc
        except Exception as exc:
            journal.rollback()
            log.exception("write failed inside the server")
            return P4RuntimeError(grpc.StatusCode.INTERNAL, f"internal error: {exc}")
        if self.saved is not None:
            self.since_save.append(update)
        return None

    def _write_all_or_none(self, updates: Any) -> list[P4RuntimeError | None]:
        journal = Journal()
        results: list[P4RuntimeError | None] = [None] * len(updates)
        for i, update in enumerate(updates):
            try:
                self.state.apply(update, journal)
            except Exception as exc:
                journal.rollback()
                if isinstance(exc, P4RuntimeError):
                    results[i] = exc
                else:
                    log.exception("write failed inside the server")
                    results[i] = P4RuntimeError(grpc.StatusCode.INTERNAL, f"internal error: {exc}")
                for j in range(len(updates)):
                    if j != i:
                        what = "rolled back" if j < i else "not attempted"
                        results[j] = P4RuntimeError(grpc.StatusCode.ABORTED, f"{what}: update #{i} failed")
                return results
        if self.saved is not None:
            self.since_save.extend(updates)
        return results

    def Read(self, request: p4r.ReadRequest, context: grpc.ServicerContext) -> Iterator[p4r.ReadResponse]:
        found: list[p4r.Entity] = []
        results: list[P4RuntimeError | None] = []
        with self.lock:
            try:
                self._check_device(request.device_id)
                self._check_role(request)
                self._check_pipeline()
                if len(request.entities) > MAX_READ_ENTITIES:
                    raise errors.resource_exhausted(
                        f"the read asks for {len(request.entities)} entities: at most {MAX_READ_ENTITIES} (split it)"
                    )
                for entity in request.entities:
                    try:
                        found.extend(self.state.read(entity))
                        results.append(None)
                    except P4RuntimeError as exc:
                        results.append(exc)
                    if len(found) > MAX_READ_ENTITIES:
                        raise errors.resource_exhausted(
                            f"the read answers more than {MAX_READ_ENTITIES} entities (by its entity "
                            f"#{len(results) - 1} of {len(request.entities)}): at most {MAX_READ_ENTITIES} per Read "
                            "(split it)"
                        )
            except P4RuntimeError as exc:
                self._abort(context, exc)
        for start in range(0, max(len(found), 1), _READ_CHUNK):
            yield p4r.ReadResponse(entities=found[start : start + _READ_CHUNK])
        if any(r is not None for r in results):
            _fail_batch(context, results, "read request")

    def StreamChannel(
        self, request_iterator: Iterator[bytes], context: grpc.ServicerContext
    ) -> Iterator[p4r.StreamMessageResponse]:
        """A stream; its requests come as bytes, parsed one by one (a message that does not parse ends it)."""
        stream = _Stream(context.peer(), context.cancel)
        with self.lock:
            if len(self.streams) >= MAX_STREAMS:
                self._abort(context, errors.resource_exhausted(f"too many streams: at most {MAX_STREAMS} at a time"))
            self.streams.add(stream)
        log.info("stream opened by %s", stream.peer)
        context.add_callback(stream.close)
        reader = threading.Thread(
            target=self._read_stream, args=(stream, request_iterator), name="p4rt-stream", daemon=True
        )
        reader.start()
        try:
            while True:
                item = stream.take()
                if isinstance(item, _End):
                    return
                if isinstance(item, P4RuntimeError):
                    self._abort(context, item)
                else:
                    yield item
                    stream.sent(item)
        finally:
            self._drop(stream)
            stream.close()  # the reader, should it wait for room, ends too

    def _read_stream(self, stream: _Stream, requests: Iterator[bytes]) -> None:
        try:
            while stream.wait_for_room():
                data = next(requests, None)
                if data is None:
                    return
                msg = parse(p4r.StreamMessageRequest, data)
                if not self._on_stream_message(stream, msg):
                    return
        except P4RuntimeError as exc:
            log.info("stream from %s refused: %s: %s", stream.peer, exc.code.name, exc.message)
            stream.put(exc)
        except Exception as exc:  # the RPC was cancelled or the client went away
            log.debug("stream from %s ended: %r", stream.peer, exc)
        finally:
            self._drop(stream)
            stream.close()

    def _on_stream_message(self, stream: _Stream, msg: p4r.StreamMessageRequest) -> bool:
        """Handle one message; False when the stream must end."""
        kind = msg.WhichOneof("update")
        with self.lock:
            if kind == "arbitration":
                try:
                    self._deliver(self.arbiter.update(stream, msg.arbitration))
                except P4RuntimeError as exc:
                    stream.put(exc)
                    self._deliver(self.arbiter.remove(stream))
                    return False
                return True
        error = p4r.StreamError(canonical_code=rpc_code.UNIMPLEMENTED)
        if kind == "packet":
            error.message = "packet I/O is not supported (DLCP's program has no CPU port)"
            error.packet_out.packet_out.CopyFrom(msg.packet)
        elif kind == "digest_ack":
            error.message = "DLCP's program has no digests"
            error.digest_list_ack.digest_list_ack.CopyFrom(msg.digest_ack)
        else:
            error.message = f"stream message {kind} is not supported"
            error.other.SetInParent()
        stream.put(p4r.StreamMessageResponse(error=error))
        return True

    def _drop(self, stream: _Stream) -> None:
        with self.lock:
            if stream not in self.streams:
                return
            self.streams.discard(stream)
            self._deliver(self.arbiter.remove(stream))
        log.info("stream from %s closed", stream.peer)

    @staticmethod
    def _deliver(notices: list[Notice]) -> None:
        for stream, msg in notices:
            assert isinstance(stream, _Stream)
            stream.put(msg)


class P4RuntimeServer:
    """A running server: :attr:`port` it listens on, :meth:`stop` to end it (also a context manager)."""

    def __init__(self, server: grpc.Server, servicer: P4RuntimeServicer, address: str, port: int) -> None:
        self._server = server
        self.servicer = servicer
        self.address = address
        self.port = port

    def stop(self, grace: float | None = 0.5) -> None:
        """Stop serving: open streams and calls are cancelled after ``grace`` seconds.

        Returns once the calls ended, or a bounded time after the grace (a call gRPC
        never ends must not keep a switch from stopping; it is logged).
        """
        if not self._server.stop(grace).wait((grace or 0.0) + _STOP_WAIT_S):
            log.warning("P4Runtime server on port %d: calls still open %.0f s after the stop", self.port, _STOP_WAIT_S)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server stops (or ``timeout``); True if it stopped."""
        return bool(self._server.wait_for_termination(timeout))

    def __enter__(self) -> P4RuntimeServer:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


_SERVICE = "p4.v1.P4Runtime"


def _unary(method: Callable[[Any, grpc.ServicerContext], Any], kind: type[Message]) -> Callable[..., Any]:
    """``method`` called with the request parsed from its bytes (INVALID_ARGUMENT when it does not parse)."""

    def call(data: bytes, context: grpc.ServicerContext) -> Any:
        try:
            request = parse(kind, data)
        except P4RuntimeError as exc:
            P4RuntimeServicer._abort(context, exc)
        return method(request, context)

    return call


def _handlers(servicer: P4RuntimeServicer) -> dict[str, grpc.RpcMethodHandler]:
    """The P4Runtime service's methods on ``servicer``, taking the request's bytes (parsed by :func:`parse`)."""
    unary = grpc.unary_unary_rpc_method_handler
    return {
        "Write": unary(
            _unary(servicer.Write, p4r.WriteRequest), response_serializer=p4r.WriteResponse.SerializeToString
        ),
        "Read": grpc.unary_stream_rpc_method_handler(
            _unary(servicer.Read, p4r.ReadRequest), response_serializer=p4r.ReadResponse.SerializeToString
        ),
        "SetForwardingPipelineConfig": unary(
            _unary(servicer.SetForwardingPipelineConfig, _SetRequest),
            response_serializer=p4r.SetForwardingPipelineConfigResponse.SerializeToString,
        ),
        "GetForwardingPipelineConfig": unary(
            _unary(servicer.GetForwardingPipelineConfig, _GetRequest),
            response_serializer=p4r.GetForwardingPipelineConfigResponse.SerializeToString,
        ),
        "StreamChannel": grpc.stream_stream_rpc_method_handler(
            servicer.StreamChannel, response_serializer=p4r.StreamMessageResponse.SerializeToString
        ),
        "Capabilities": unary(
            _unary(servicer.Capabilities, p4r.CapabilitiesRequest),
            response_serializer=p4r.CapabilitiesResponse.SerializeToString,
        ),
    }


def start_server(
    backend: TableBackend, address: str, device_id: int = 1, *, p4info: p4i.P4Info | None = None
) -> P4RuntimeServer:
    """Serve P4Runtime for ``backend`` on ``address`` (``HOST:PORT``; port 0 picks a free one).

    ``device_id`` is the P4Runtime device id (≥ 1). ``p4info`` is the program the
    switch accepts; DLCP's committed P4Info by default. Raises ValueError for a
    bad argument and OSError when the address cannot be bound.
    """
    if device_id < 1 or device_id >= 1 << 64:
        raise ValueError(f"device id {device_id}: must be in 1..2**64-1")
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"P4Runtime address {address!r}: expected HOST:PORT with a port in 0..65535")
    servicer = P4RuntimeServicer(backend, device_id, p4info)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="p4rt"),
        options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
    )
    handlers = _handlers(servicer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, handlers),))
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"P4Runtime address {address}: cannot listen: {exc}") from exc
    if port == 0:
        raise OSError(f"P4Runtime address {address}: cannot listen")
    server.start()
    log.info("P4Runtime server for device %d listening on %s (port %d)", device_id, address, port)
    return P4RuntimeServer(server, servicer, address, port)
