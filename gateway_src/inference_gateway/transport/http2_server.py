"""The picker's HTTP/2 gRPC server (ext_proc stream, health): sockets, TLS, timers, handlers.

Why not `grpc.aio`: every read and write of a grpc.aio stream is a batch handed to
gRPC's C core and completed through its poller thread, so one ext_proc exchange (four
messages in, four out) costs about 1.3 ms of CPU in the transport alone here — more
than the whole per-exchange budget of the picker (1,000 exchanges per core-second). This
server speaks the same wire protocol (gRPC over HTTP/2, RFC 9113; gRPC's
PROTOCOL-HTTP2.md) straight from an asyncio protocol, with one socket write per read.

Two layers: the protocol itself — framing, HPACK, flow control, stream states, budgets,
keepalive and idle bookkeeping, gRPC status — is `h2_connection.H2Connection`, a state
machine with no asyncio (bytes in, events and bytes out; `h2_frames` holds its wire
constants and `ConnectionPolicy`). This module is the thin asyncio layer around it: it
feeds the socket's reads in, writes what comes out, keeps the timers (`grpc-timeout`,
keepalive ticks, the lingering close) and runs the handlers. docs/picker.md lists the
limits.

A handler is `async def handler(call: Call) -> None`: `await call.read()` returns the
next message's bytes or None once the client has half-closed; `call.send([...])` writes
messages; returning ends the call with status OK (`call.finish(code, message)` for
another status); an exception ends it with INTERNAL. By default it runs in place (no
Task) while it waits only for messages; `Method(handler, in_task=True)` runs it in its
own Task from the start, for handlers that need `asyncio.timeout` or context variables.

Running in place (`_Connection.step`, the trampoline) is kept on purpose: a handler
waiting for its next message is resumed straight from `data_received` by
`coro.send`, so its answer joins that read's single write, and no Task, no future
callback and no event-loop turn is spent per message. bench/picker_throughput.py
measures what that buys (exchanges per core-second with and without it, in
docs/picker.md). Any other wait (an admission queue, a timer) moves the handler into a
Task (`_Continuation`), which carries on from there.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import functools
import importlib
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from inference_gateway.transport.h2_connection import (
    CallStarted,
    ConnectionDone,
    ConnectionTerminated,
    Event,
    H2Connection,
    Stream,
    StreamReadable,
    StreamStopped,
)
from inference_gateway.transport.h2_frames import (
    DEFAULT_MAX_MESSAGE,
    MAX_WINDOW,
    ConnectionPolicy,
    GrpcCode,
    parse_grpc_timeout,
    stream_window,
)
from inference_gateway.transport.listen import binding
from inference_gateway.transport.signals import Drained, drain

__all__ = [
    "Call",
    "ConnectionPolicy",
    "GrpcCode",
    "Handler",
    "HealthService",
    "Http2GrpcServer",
    "Method",
    "parse_grpc_timeout",
    "ssl_context",
]

log = logging.getLogger(__name__)

Handler = Callable[["Call"], Awaitable[None]]

LINGER_S = 1.0  # after GOAWAY for an error: what the peer still sends is read and dropped


@dataclass(frozen=True, slots=True)
class Method:
    """A handler with its limits: the largest request message it accepts (larger ones
    end the call with RESOURCE_EXHAUSTED before they are buffered), and whether it runs
    in a Task of its own from the start (`in_task`)."""

    handler: Handler
    max_message: int = DEFAULT_MAX_MESSAGE
    in_task: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.max_message <= MAX_WINDOW - 5:
            raise ValueError("max_message must be positive and fit a flow-control window")


class Call(Stream):
    """One gRPC call (an HTTP/2 stream) as its handler sees it: the connection layer's
    `Stream` (`headers`, `id`, `cancelled`, ...) with what the asyncio layer keeps
    beside it (the handler's waiter, coroutine or Task, and deadline timer)."""

    __slots__ = ("_conn", "_waiter", "coro", "deadline", "task")

    def __init__(
        self,
        conn: _Connection,
        stream_id: int,
        headers: dict[str, str],
        max_message: int,
        send_window: int,
        recv_window: int,
    ) -> None:
        Stream.__init__(self, stream_id, headers, max_message, send_window, recv_window)
        self._conn = conn
        self._waiter: asyncio.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None
        self.coro: Coroutine[Any, Any, None] | None = None  # the handler, run in place
        self.deadline: asyncio.TimerHandle | None = None  # grpc-timeout

    async def read(self) -> bytes | None:
        """The next request message, or None when the client half-closed (or left).

        Reading is what reopens the flow-control windows for the message's bytes.
        """
        while not self.inbox:
            if self.closed_remote or self.cancelled:
                return None
            waiter = self._waiter = self._conn.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        conn = self._conn
        message = conn.h2.read_message(self)
        if not conn.busy:  # inside data_received, its loop writes once at the end
            conn.pump()
        return message

    def send(self, messages: list[bytes]) -> None:
        """Queue response messages and write what the peer's windows allow, in one write."""
        conn = self._conn
        conn.h2.send(self, messages)
        if not conn.busy:
            conn.pump()

    def finish(self, code: int = GrpcCode.OK, message: str = "") -> None:
        """End the call with a status (the trailers go out after any queued data)."""
        conn = self._conn
        conn.h2.finish(self, code, message)
        if not conn.busy:
            conn.pump()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
            if self.coro is not None:  # parked in place: resume it now
                self._conn.step(self)

    def _stop(self) -> None:
        """The connection layer ended or cancelled the call: stop the handler."""
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        if self.coro is not None:
            self._conn.step(self, asyncio.CancelledError())
        elif self.task is not None and not self.task.done():
            self.task.cancel()


class _Connection(asyncio.Protocol):
    """One client connection: the socket and timers around its `H2Connection`."""

    def __init__(self, server: Http2GrpcServer) -> None:
        self.server = server
        self.policy = server.policy
        self.loop = asyncio.get_running_loop()
        self.h2 = H2Connection(
            server.policy, server.limits, self.loop.time(), functools.partial(Call, self)
        )
        self.transport: asyncio.Transport | None = None
        self.busy = False  # events are being handled: their writes join at the end
        self.timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=self.policy.write_high_water)
        self.server.connections.add(self)
        self.h2.initiate()
        transport.write(self.h2.data_to_send())
        self._schedule_tick()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.h2.connection_lost()
        self.pump()

    def pause_writing(self) -> None:
        """The peer is not reading what we write: stop reading what it sends, so its
        PINGs, SETTINGS and new calls cannot make us queue more answers."""
        self.h2.pause_writing(self.loop.time())
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.h2.resume_writing()
        if self.transport is not None and not self.h2.closed:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        h2 = self.h2
        h2.receive_data(data, self.loop.time())
        handle = self._handle
        self.busy = True
        try:
            for event in h2.events():
                if type(event) is StreamReadable:  # the common event, without a call
                    call: Call = event.stream  # type: ignore[assignment]  # `new_stream` is Call
                    call._wake()
                else:
                    handle(event)
        finally:
            self.busy = False
            out = h2.data_to_send()
            if out and self.transport is not None:
                self.transport.write(out)

    def pump(self) -> None:
        """Act on the events a call of the handler's caused and write what it queued;
        inside `data_received` its own loop does both, once, at the end."""
        if self.busy:
            return
        h2 = self.h2
        queued = h2.queued  # outside data_received no frame waits: only these
        if queued:
            self.busy = True
            try:
                while queued:
                    self._handle(queued.popleft())
            finally:
                self.busy = False
        out = h2.data_to_send()
        if out and self.transport is not None:
            self.transport.write(out)

    def _handle(self, event: Event) -> None:
        if isinstance(event, StreamReadable):  # the common one first
            cast(Call, event.stream)._wake()
        elif isinstance(event, CallStarted):
            self._start(cast(Call, event.stream), event.timeout_s)
        elif isinstance(event, StreamStopped):
            cast(Call, event.stream)._stop()
        elif isinstance(event, ConnectionTerminated):
            self._linger()
        elif isinstance(event, ConnectionDone):
            if self.transport is not None:
                self.transport.write(self.h2.data_to_send())  # the GOAWAY, before closing
                self.transport.close()
        elif self.transport is not None:  # ConnectionDropped
            log.info("HTTP/2 %s: dropped", event.reason)
            self.transport.abort()

    def _start(self, call: Call, timeout_s: float | None) -> None:
        if self.server.draining:  # a late connection: its first calls, then elsewhere
            self.h2.drain(self.loop.time())
        method = self.server.methods[call.headers[":path"]]
        if timeout_s is not None:
            call.deadline = self.loop.call_later(timeout_s, self._expire, call)
        if method.in_task:
            call.task = self.loop.create_task(self._run(method.handler, call))
        else:
            call.coro = self._run(method.handler, call)
            self.step(call)

    def _linger(self) -> None:
        """After a connection error: the GOAWAY goes out, our side is shut for writing
        and what the peer still sends is dropped unread for a moment (a closed socket
        with unread input resets, and the peer would lose the GOAWAY)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(self.h2.data_to_send())
        if transport.can_write_eof():
            transport.write_eof()
            self.loop.call_later(LINGER_S, transport.abort)
        else:
            transport.close()
            if transport.get_write_buffer_size():  # a peer that does not read
                self.loop.call_later(self.policy.keepalive_timeout_s, transport.abort)

    def _expire(self, call: Call) -> None:
        """The call's `grpc-timeout` has passed: DEADLINE_EXCEEDED, handler cancelled."""
        call.deadline = None
        self.h2.expire(call)
        self.pump()

    def step(self, call: Call, error: BaseException | None = None) -> None:
        """Run the call's handler in place until it waits again.

        A handler waiting for its next message stays parked here and `Call._wake`
        resumes it from `data_received`, so its answers join that read's single write
        and no Task or event-loop turn is spent per message. Any other wait (an
        admission queue, a timer) moves it into a Task, which carries on from there.
        """
        coro = call.coro
        if coro is None:
            return
        try:
            waiting = coro.send(None) if error is None else coro.throw(error)
        except StopIteration:
            call.coro = None
            return
        except BaseException:
            call.coro = None
            raise
        if waiting is None or waiting is not call._waiter:
            call.coro = None
            call.task = self.loop.create_task(_Continuation(coro, waiting))

    async def _run(self, handler: Handler, call: Call) -> None:
        try:
            await handler(call)
        except asyncio.CancelledError:
            if not call.cancelled:
                call.finish(GrpcCode.CANCELLED, "cancelled")
            return
        except Exception:
            log.exception("gRPC handler %s failed", call.headers.get(":path"))
            call.finish(GrpcCode.INTERNAL, "internal error")
            return
        finally:
            if call.deadline is not None:
                call.deadline.cancel()
                call.deadline = None
        call.finish()

    # ------------------------------------------------------------ keepalive

    def _schedule_tick(self) -> None:
        self.timer = self.loop.call_later(self.h2.tick_interval(), self._tick)

    def _tick(self) -> None:
        """Keepalive and idle checks, a few times per keepalive period (not per frame)."""
        self.timer = None
        if self.transport is None:
            return
        again = self.h2.tick(self.loop.time())
        self.pump()
        if again:
            self._schedule_tick()

    def drain(self) -> None:
        """Graceful: the peer opens no new stream here (two GOAWAYs, `H2Connection.drain`);
        the connection closes when the last one ends."""
        if self.transport is None:
            return
        self.h2.drain(self.loop.time())
        self.pump()


class _Continuation(collections.abc.Coroutine):  # type: ignore[type-arg]
    """The rest of a handler started in place, as a coroutine a Task can run.

    Its first step hands the Task the future the handler already waits on; every
    later step, and any exception (a cancel included, even one that comes before the
    Task's first step), goes straight into the handler's coroutine.
    """

    __slots__ = ("coro", "waiting")

    def __init__(self, coro: Coroutine[Any, Any, None], waiting: Any) -> None:
        self.coro = coro
        self.waiting: Any = waiting

    def send(self, value: Any) -> Any:
        waiting = self.waiting
        if waiting is not _STARTED:
            self.waiting = _STARTED
            return waiting
        return self.coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self.waiting = _STARTED
        if val is None and tb is None:
            return self.coro.throw(typ)
        return self.coro.throw(typ, val, tb)

    def close(self) -> None:
        self.coro.close()

    def __await__(self) -> Generator[Any, Any, None]:
        return self.coro.__await__()


_STARTED = object()


class Http2GrpcServer:
    """Serves `handlers` (`{"/package.Service/Method": handler}`) on one port."""

    def __init__(
        self,
        handlers: Mapping[str, Handler | Method],
        *,
        ssl_context: ssl.SSLContext | None = None,
        policy: ConnectionPolicy | None = None,
    ) -> None:
        self.methods = {
            path: h if isinstance(h, Method) else Method(h) for path, h in handlers.items()
        }
        self.limits = {path: m.max_message for path, m in self.methods.items()}
        self.stream_window = stream_window(self.limits)
        self.policy = policy or ConnectionPolicy()
        self.ssl_context = ssl_context
        self.connections: set[_Connection] = set()
        self.draining = False  # `drain()` was called: every connection is told to go
        self._server: asyncio.Server | None = None
        self._stopped = asyncio.Event()

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the bound port (`port=0` picks a free one)."""
        loop = asyncio.get_running_loop()
        context = self.ssl_context
        if context is not None:
            context.set_alpn_protocols(["h2"])
        with binding(host, port):
            self._server = await loop.create_server(
                lambda: _Connection(self), host, port, ssl=context, reuse_address=True
            )
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def active_calls(self) -> int:
        """Calls open on every connection (what a drain waits for)."""
        return sum(len(c.h2.streams) for c in self.connections)

    def drain(self) -> None:
        """Tell every client to open its next calls elsewhere (GOAWAY, graceful: the calls
        in flight run on). Keep listening, so a client with nowhere else to go is still
        served: a connection made from now on is told the same once its first call has
        started (a Kubernetes Service sends new connections to ready replicas once this
        one is NOT_SERVING; until then each lands here and gets its first calls served)."""
        self.draining = True
        for conn in list(self.connections):
            conn.drain()

    async def stop(self, grace_s: float | None = 0) -> Drained:
        """Stop accepting, GOAWAY every connection, wait up to `grace_s` for the calls
        in flight (`signals.drain`), cancel the rest; what the drain saw."""
        if self._server is None:
            return Drained(0, 0, 0.0)
        self._server.close()
        self.drain()
        drained = await drain(lambda: self.active_calls, grace_s or 0.0, poll_s=0.02)
        tasks = []
        for conn in list(self.connections):
            calls = [cast(Call, stream) for stream in conn.h2.streams.values()]
            for call in calls:
                conn.h2.cancel(call)
            conn.pump()
            tasks += [call.task for call in calls if call.task is not None]
            if conn.transport is not None:
                conn.transport.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None
        self._stopped.set()
        return drained

    async def wait_closed(self) -> None:
        """Return once `stop()` has finished."""
        await self._stopped.wait()

    def __repr__(self) -> str:
        return f"Http2GrpcServer({sorted(self.methods)})"


def ssl_context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A TLS server context (HTTP/2 by ALPN) from PEM certificate and key."""
    import os
    import tempfile

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory() as folder:  # load_cert_chain reads files only
        cert, key = os.path.join(folder, "tls.crt"), os.path.join(folder, "tls.key")
        with open(cert, "wb") as f:
            f.write(cert_pem)
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(key_pem)
        context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2"])
    return context


HEALTH_CHECK = "/grpc.health.v1.Health/Check"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
HEALTH_MAX_MESSAGE = 4_096


class HealthService:
    """`grpc.health.v1.Health` (Check and Watch) on this server, with the same
    behaviour and `set` / `enter_graceful_shutdown` methods as grpcio's servicer."""

    def __init__(self) -> None:
        # grpcio-health-checking ships no type stubs: its messages are Any here.
        self.pb: Any = importlib.import_module("grpc_health.v1.health_pb2")
        self.status: dict[str, int] = {"": self.pb.HealthCheckResponse.SERVING}
        self.changed = asyncio.Event()
        self.shutting_down = False

    def handlers(self) -> dict[str, Method]:
        """The two methods; a health request is a service name, so 4 KiB is plenty."""
        return {
            HEALTH_CHECK: Method(self.check, max_message=HEALTH_MAX_MESSAGE),
            HEALTH_WATCH: Method(self.watch, max_message=HEALTH_MAX_MESSAGE),
        }

    async def set(self, service: str, status: int) -> None:
        if self.shutting_down:
            return
        self.status[service] = status
        self.changed.set()
        self.changed = asyncio.Event()

    async def enter_graceful_shutdown(self) -> None:
        for service in self.status:
            await self.set(service, self.pb.HealthCheckResponse.NOT_SERVING)
        self.shutting_down = True

    def _request(self, raw: bytes | None) -> str:
        return str(self.pb.HealthCheckRequest.FromString(raw or b"").service)

    async def check(self, call: Call) -> None:
        service = self._request(await call.read())
        status = self.status.get(service)
        if status is None:
            call.finish(GrpcCode.NOT_FOUND, "unknown service")
            return
        call.send([self.pb.HealthCheckResponse(status=status).SerializeToString()])

    async def watch(self, call: Call) -> None:
        service = self._request(await call.read())
        last = None
        while not call.cancelled:
            status = self.status.get(service, self.pb.HealthCheckResponse.SERVICE_UNKNOWN)
            if status != last:
                last = status
                call.send([self.pb.HealthCheckResponse(status=status).SerializeToString()])
            await self.changed.wait()
