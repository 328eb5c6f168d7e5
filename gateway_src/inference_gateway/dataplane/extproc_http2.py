"""A small HTTP/2 server for the picker's gRPC services (ext_proc stream, health).

Why not `grpc.aio`: every read and write of a grpc.aio stream is a batch handed to
gRPC's C core and completed through its poller thread, so one ext_proc exchange (four
messages in, four out) costs about 1.3 ms of CPU in the transport alone here — more
than the whole per-exchange budget of the picker (1,000 exchanges per core-second). This
server speaks the same wire protocol (gRPC over HTTP/2, RFC 9113; gRPC's
PROTOCOL-HTTP2.md) straight from an asyncio protocol: frames are parsed and written in
Python with one socket write per answer, request headers are decoded with `hpack`, and
our own headers are constant HPACK blocks (literals without indexing, so the peer's
decoder table never changes).

What it implements: the client preface and SETTINGS (initial window, max frame size),
HEADERS + CONTINUATION, DATA with gRPC length-prefixed messages, flow control in both
directions (our windows are large and re-opened as data is consumed; the peer's are
honoured, data waits for WINDOW_UPDATE), PING, RST_STREAM (cancels the call's handler),
GOAWAY (both ways; `stop()` drains). Not implemented: message compression (a compressed
message ends the call with UNIMPLEMENTED), server push, priorities (ignored).

A handler is `async def handler(call: Call) -> None`: `await call.read()` returns the
next message's bytes or None once the client has half-closed; `call.send([...])` writes
messages; returning ends the call with status OK (`call.finish(code, message)` for
another status); an exception ends it with INTERNAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import Any, cast

from hpack import Decoder
from hpack.exceptions import HPACKError

__all__ = ["Call", "GrpcCode", "Handler", "HealthService", "Http2GrpcServer", "ssl_context"]

log = logging.getLogger(__name__)

Handler = Callable[["Call"], Awaitable[None]]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE = 0, 1, 2, 3, 4, 5
PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20

NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x3
FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x6, 0x7, 0x8, 0x9

MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
DEFAULT_FRAME = 16_384
# What we let the peer send: windows re-opened when half is consumed.
RECV_STREAM_WINDOW = 16 * 2**20
RECV_CONN_WINDOW = 64 * 2**20
RECV_MAX_FRAME = 2**20
MAX_CONCURRENT_STREAMS = 10_000
MAX_HEADER_BLOCK = 256 * 1024
MAX_MESSAGE = 64 * 2**20


class GrpcCode:
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


def _literal(name: bytes, value: bytes) -> bytes:
    """HPACK literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    assert len(name) < 127 and len(value) < 127  # constants only
    return b"\x00" + bytes((len(name),)) + name + bytes((len(value),)) + value


def _status_block(code: int, message: str) -> bytes:
    block = _literal(b"grpc-status", str(code).encode())
    if message:
        encoded = "".join(
            c if " " <= c <= "~" and c != "%" else "".join(f"%{b:02X}" for b in c.encode())
            for c in message
        ).encode()[:120]
        block += _literal(b"grpc-message", encoded)
    return block


# :status 200 is static-table entry 8 (indexed: 0x88).
RESPONSE_HEADERS = b"\x88" + _literal(b"content-type", b"application/grpc")
TRAILERS_OK = _status_block(GrpcCode.OK, "")
SETTINGS_ACK = _frame(SETTINGS, ACK, 0)
FRAME_HEAD = struct.Struct(">BHBBL")  # length as 1 + 2 bytes, type, flags, stream id


class Call:
    """One gRPC call (an HTTP/2 stream) as its handler sees it."""

    __slots__ = (
        "_conn",
        "_inbox",
        "_partial",
        "_waiter",
        "cancelled",
        "closed_remote",
        "coro",
        "done",
        "headers",
        "headers_sent",
        "id",
        "pending",
        "recv_unacked",
        "send_window",
        "task",
        "trailers",
    )

    def __init__(self, conn: _Connection, stream_id: int, headers: dict[str, str]) -> None:
        self._conn = conn
        self.id = stream_id
        self.headers = headers
        self._inbox: deque[bytes | None] = deque()
        self._partial = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self.cancelled = False
        self.closed_remote = False
        self.done = False  # trailers queued: nothing more is sent
        self.headers_sent = False
        self.pending = bytearray()  # framed gRPC data waiting for the peer's window
        self.trailers: bytes | None = None
        self.send_window = conn.peer_initial_window
        self.recv_unacked = 0
        self.task: asyncio.Task[None] | None = None
        self.coro: Coroutine[Any, Any, None] | None = None  # the handler, run in place

    async def read(self) -> bytes | None:
        """The next request message, or None when the client half-closed (or left)."""
        while not self._inbox:
            if self.closed_remote or self.cancelled:
                return None
            waiter = self._waiter = self._conn.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return self._inbox.popleft()

    def send(self, messages: list[bytes]) -> None:
        """Queue response messages and write what the peer's windows allow, in one write."""
        if self.done or self.cancelled:
            return
        pending = self.pending
        for message in messages:
            pending += b"\x00" + len(message).to_bytes(4, "big")
            pending += message
        self._conn.flush(self)

    def finish(self, code: int = GrpcCode.OK, message: str = "") -> None:
        """End the call with a status (the trailers go out after any queued data)."""
        if self.done or self.cancelled:
            return
        self.done = True
        self.trailers = TRAILERS_OK if code == 0 and not message else _status_block(code, message)
        self._conn.flush(self)

    # ------------------------------------------------------------ connection side

    def _push(self, message: bytes | None) -> None:
        self._inbox.append(message)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
            if self.coro is not None:  # parked in place: resume it now
                self._conn.step(self)

    def _data(self, chunk: bytes | memoryview) -> str | None:
        """Split length-prefixed messages out of DATA; an error text if one is bad."""
        partial = self._partial
        if not partial and len(chunk) >= 5 and chunk[0] == 0:
            # Fast path: whole messages in this frame, nothing carried over.
            size = int.from_bytes(chunk[1:5], "big")
            if len(chunk) == 5 + size:
                self._push(bytes(chunk[5:]))
                return None
        partial += chunk
        while len(partial) >= 5:
            if partial[0] != 0:
                return "compressed messages are not supported"
            size = int.from_bytes(partial[1:5], "big")
            if size > MAX_MESSAGE:
                return "message too large"
            if len(partial) < 5 + size:
                break
            self._push(bytes(partial[5 : 5 + size]))
            del partial[: 5 + size]
        return None


class _Connection(asyncio.Protocol):
    """One client connection: frame parsing, stream table, flow control."""

    def __init__(self, server: Http2GrpcServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.preface = False
        self.decoder = Decoder()
        self.decoder.max_allowed_table_size = 65_536
        self.header_cache: dict[bytes, dict[str, str]] = {}  # read-only: shared by calls
        self.streams: dict[int, Call] = {}
        self.last_stream = 0
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_frame = DEFAULT_FRAME
        self.send_window = DEFAULT_WINDOW
        self.recv_unacked = 0
        self.header_stream = 0  # a header block continues on this stream
        self.header_flags = 0
        self.header_block = bytearray()
        self.blocked: dict[int, Call] = {}  # streams waiting for window
        self.going_away = False
        self.closed = False
        self.out: list[bytes] | None = None  # frames to write at the end of data_received

    # ------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connections.add(self)
        settings = b"".join(
            key.to_bytes(2, "big") + value.to_bytes(4, "big")
            for key, value in (
                (0x2, 0),  # ENABLE_PUSH
                (0x3, MAX_CONCURRENT_STREAMS),
                (0x4, RECV_STREAM_WINDOW),
                (0x5, RECV_MAX_FRAME),
            )
        )
        transport.write(
            _frame(SETTINGS, 0, 0, settings)
            + _frame(WINDOW_UPDATE, 0, 0, (RECV_CONN_WINDOW - DEFAULT_WINDOW).to_bytes(4, "big"))
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        for call in list(self.streams.values()):
            self._cancel(call)
        self.streams.clear()
        self.blocked.clear()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        if buffer:
            buffer += data
            data = bytes(buffer)
            buffer.clear()
        offset = 0
        if not self.preface:
            if len(data) < len(PREFACE):
                buffer += data
                return
            if not data.startswith(PREFACE):
                self._abort(PROTOCOL_ERROR, "bad connection preface")
                return
            self.preface = True
            offset = len(PREFACE)
        size = len(data)
        view = memoryview(data)
        out: list[bytes] = []
        self.out = out
        try:
            while size - offset >= 9 and not self.closed:
                high, low, kind, flags, stream = FRAME_HEAD.unpack_from(data, offset)
                length = high << 16 | low
                if length > RECV_MAX_FRAME:
                    self._abort(FRAME_SIZE_ERROR, "frame too large")
                    return
                end = offset + 9 + length
                if end > size:
                    break
                stream &= 0x7FFFFFFF
                payload = view[offset + 9 : end]
                offset = end
                if self.header_stream and kind != CONTINUATION:
                    self._abort(PROTOCOL_ERROR, "header block interrupted")
                    return
                if kind == DATA:
                    self._on_data(flags, stream, payload)
                elif kind == WINDOW_UPDATE:
                    self._on_window_update(stream, payload)
                elif kind == HEADERS:
                    self._on_headers(flags, stream, payload)
                elif kind == CONTINUATION:
                    self._on_continuation(flags, stream, payload)
                elif kind == SETTINGS:
                    self._on_settings(flags, stream, payload)
                elif kind == PING:
                    if len(payload) != 8 or stream:
                        self._abort(PROTOCOL_ERROR, "bad PING")
                        return
                    if not flags & ACK:
                        out.append(_frame(PING, ACK, 0, bytes(payload)))
                elif kind == RST_STREAM:
                    call = self.streams.pop(stream, None)
                    self.blocked.pop(stream, None)
                    if call is not None:
                        self._cancel(call)
                elif kind == GOAWAY:
                    self.going_away = True
                    if not self.streams and self.transport is not None:
                        self.transport.close()
                elif kind == PUSH_PROMISE:
                    self._abort(PROTOCOL_ERROR, "clients cannot push")
                    return
                # PRIORITY and unknown frame types are ignored (RFC 9113 5.5).
        finally:
            self.out = None
            if out and not self.closed and self.transport is not None:
                self.transport.write(b"".join(out))
        if offset < size:
            buffer += view[offset:]

    # ------------------------------------------------------------ frames

    def _on_data(self, flags: int, stream: int, payload: memoryview) -> None:
        length = len(payload)
        if length:
            self.recv_unacked += length
            if self.recv_unacked >= RECV_CONN_WINDOW // 2:
                self._write([_frame(WINDOW_UPDATE, 0, 0, self.recv_unacked.to_bytes(4, "big"))])
                self.recv_unacked = 0
        call = self.streams.get(stream)
        if call is None or call.closed_remote:
            if stream == 0 or stream > self.last_stream:
                self._abort(PROTOCOL_ERROR, "DATA on an idle stream")
            return  # a stream we already ended: its data is dropped
        if flags & PADDED:
            pad = payload[0] if length else 0
            if pad >= length:
                self._abort(PROTOCOL_ERROR, "bad padding")
                return
            payload = payload[1 : length - pad]
        if payload:
            error = call._data(payload)
            if error is not None:
                self._end(call, GrpcCode.UNIMPLEMENTED, error)
                return
        if flags & END_STREAM:
            call.closed_remote = True
            call._wake()
            self._maybe_close(call)
        elif length:
            call.recv_unacked += length
            if call.recv_unacked >= RECV_STREAM_WINDOW // 2:
                self._write(
                    [_frame(WINDOW_UPDATE, 0, stream, call.recv_unacked.to_bytes(4, "big"))]
                )
                call.recv_unacked = 0

    def _on_headers(self, flags: int, stream: int, payload: memoryview) -> None:
        if stream == 0:
            self._abort(PROTOCOL_ERROR, "HEADERS on stream 0")
            return
        length = len(payload)
        start, end = 0, length
        if flags & PADDED:
            if not length:
                self._abort(PROTOCOL_ERROR, "bad padding")
                return
            start, end = 1, length - payload[0]
        if flags & PRIORITY_FLAG:
            start += 5
        if start > end:
            self._abort(PROTOCOL_ERROR, "bad HEADERS")
            return
        self.header_flags = flags
        if flags & END_HEADERS:
            self._header_block(stream, flags, payload[start:end])
        else:
            self.header_stream = stream
            self.header_block = bytearray(payload[start:end])

    def _on_continuation(self, flags: int, stream: int, payload: memoryview) -> None:
        if stream != self.header_stream or not stream:
            self._abort(PROTOCOL_ERROR, "unexpected CONTINUATION")
            return
        self.header_block += payload
        if len(self.header_block) > MAX_HEADER_BLOCK:
            self._abort(PROTOCOL_ERROR, "header block too large")
            return
        if flags & END_HEADERS:
            self.header_stream = 0
            block, self.header_block = bytes(self.header_block), bytearray()
            self._header_block(stream, self.header_flags, block)

    def _decode(self, block: bytes) -> dict[str, str] | None:
        """Header block → dict (None if undecodable), shared between equal blocks.

        A gRPC client's headers repeat per call, and after the first call its encoder
        sends them as indexed fields only (8 bytes, `hpack` ≈ 40 us to decode). Such a
        block cannot change the dynamic table, so its meaning holds until a block that
        can does: those clear the cache.
        """
        cache = self.header_cache
        headers = cache.get(block)
        if headers is not None:
            return headers
        try:
            fields = self.decoder.decode(block, raw=True)
        except HPACKError:
            return None
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in fields}
        if _only_indexed(block):
            if len(cache) >= 64:
                cache.clear()
            cache[block] = headers
        else:
            cache.clear()
        return headers

    def _header_block(self, stream: int, flags: int, block: bytes | memoryview) -> None:
        decoded = self._decode(bytes(block))
        if decoded is None:
            self._abort(COMPRESSION_ERROR, "bad header block")
            return
        call = self.streams.get(stream)
        if call is not None:  # trailers: only the end of the stream matters
            if flags & END_STREAM:
                call.closed_remote = True
                call._wake()
                self._maybe_close(call)
            return
        if stream <= self.last_stream:
            return  # trailers of a stream we already ended
        if not stream & 1:
            self._abort(PROTOCOL_ERROR, "even stream id from a client")
            return
        self.last_stream = stream
        if self.going_away or len(self.streams) >= MAX_CONCURRENT_STREAMS:
            self._write([_frame(RST_STREAM, 0, stream, REFUSED_STREAM.to_bytes(4, "big"))])
            return
        headers = decoded
        call = Call(self, stream, headers)
        if flags & END_STREAM:
            call.closed_remote = True
        self.streams[stream] = call
        handler = self.server.handlers.get(headers.get(":path", ""))
        encoding = headers.get("grpc-encoding", "identity")
        if handler is None:
            self._end(call, GrpcCode.UNIMPLEMENTED, f"unknown method {headers.get(':path')}")
        elif headers.get(":method") != "POST" or not headers.get("content-type", "").startswith(
            "application/grpc"
        ):
            self._end(call, GrpcCode.INTERNAL, "not a gRPC request")
        elif encoding != "identity":
            self._end(call, GrpcCode.UNIMPLEMENTED, f"grpc-encoding {encoding} not supported")
        else:
            call.coro = self._run(handler, call)
            self.step(call)

    def _on_window_update(self, stream: int, payload: memoryview) -> None:
        if len(payload) != 4:
            self._abort(FRAME_SIZE_ERROR, "bad WINDOW_UPDATE")
            return
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream == 0:
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                self._abort(FLOW_CONTROL_ERROR, "window overflow")
                return
            for call in list(self.blocked.values()):
                self.flush(call)
        else:
            call = self.streams.get(stream)
            if call is not None:
                call.send_window += increment
                self.flush(call)

    def _on_settings(self, flags: int, stream: int, payload: memoryview) -> None:
        if stream or (flags & ACK and payload) or len(payload) % 6:
            self._abort(PROTOCOL_ERROR, "bad SETTINGS")
            return
        if flags & ACK:
            return
        for i in range(0, len(payload), 6):
            key = int.from_bytes(payload[i : i + 2], "big")
            value = int.from_bytes(payload[i + 2 : i + 6], "big")
            if key == 0x4:
                if value > MAX_WINDOW:
                    self._abort(FLOW_CONTROL_ERROR, "initial window too large")
                    return
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for call in self.streams.values():
                    call.send_window += delta
            elif key == 0x5:
                if not DEFAULT_FRAME <= value <= 2**24 - 1:
                    self._abort(PROTOCOL_ERROR, "bad max frame size")
                    return
                self.peer_max_frame = value
        self._write([SETTINGS_ACK])
        for call in list(self.streams.values()):
            if call.pending:
                self.flush(call)

    # ------------------------------------------------------------ sending

    def flush(self, call: Call) -> None:
        """Write what the windows allow of the call's queued data, then its trailers."""
        if self.closed or call.cancelled:
            return
        out: list[bytes] = []
        stream = call.id
        if not call.headers_sent:
            call.headers_sent = True
            if call.done and not call.pending:  # trailers-only answer
                out.append(
                    _frame(
                        HEADERS, END_HEADERS | END_STREAM, stream, RESPONSE_HEADERS + call.trailers
                    )
                )  # type: ignore[operator]
                call.trailers = None
                self._write(out)
                self._closed_local(call)
                return
            out.append(_frame(HEADERS, END_HEADERS, stream, RESPONSE_HEADERS))
        pending = call.pending
        if pending:
            head = stream.to_bytes(4, "big")
            limit = self.peer_max_frame
            while pending:
                window = min(self.send_window, call.send_window)
                if window <= 0:
                    break
                n = min(len(pending), window, limit)
                out.append(n.to_bytes(3, "big") + b"\x00\x00" + head)
                out.append(bytes(pending[:n]) if n < len(pending) else bytes(pending))
                del pending[:n]
                self.send_window -= n
                call.send_window -= n
            if pending:
                self.blocked[stream] = call
            else:
                self.blocked.pop(stream, None)
        if call.trailers is not None and not pending:
            out.append(_frame(HEADERS, END_HEADERS | END_STREAM, stream, call.trailers))
            call.trailers = None
            self._write(out)
            self._closed_local(call)
            return
        if out:
            self._write(out)

    def _write(self, out: list[bytes]) -> None:
        if self.out is not None:  # inside data_received: one write at its end
            self.out.extend(out)
        elif self.transport is not None:
            self.transport.write(b"".join(out))

    def _closed_local(self, call: Call) -> None:
        """Our side ended; the stream leaves the table (late client data is dropped)."""
        self.streams.pop(call.id, None)
        self.blocked.pop(call.id, None)
        # No RST_STREAM(NO_ERROR) when the client has not half-closed (RFC 9113 8.1 allows
        # one): gRPC clients then fail a write already in flight instead of ignoring it,
        # as they do against grpcio's server. Late DATA is counted and dropped.
        if self.going_away and not self.streams and self.transport is not None:
            self.transport.close()

    def _maybe_close(self, call: Call) -> None:
        if call.done and call.trailers is None and not call.pending:
            self.streams.pop(call.id, None)

    def _end(self, call: Call, code: int, message: str) -> None:
        call.finish(code, message)
        self._stop_handler(call)

    def _cancel(self, call: Call) -> None:
        if call.cancelled:
            return
        call.cancelled = True
        self._stop_handler(call)

    def _stop_handler(self, call: Call) -> None:
        if call.coro is not None:
            self.step(call, asyncio.CancelledError())
        elif call.task is not None and not call.task.done():
            call.task.cancel()

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
            call.task = self.loop.create_task(_continue(coro, waiting))

    def _abort(self, error: int, reason: str) -> None:
        log.warning("HTTP/2 connection error: %s", reason)
        if self.transport is not None and not self.closed:
            payload = self.last_stream.to_bytes(4, "big") + error.to_bytes(4, "big")
            pending = b"".join(self.out or [])
            self.transport.write(pending + _frame(GOAWAY, 0, 0, payload + reason.encode()))
            self.out = []
            self.transport.close()
        self.closed = True

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
        call.finish()

    def goaway(self) -> None:
        """Graceful: no new streams; the connection closes when the last one ends."""
        if self.closed or self.transport is None:
            return
        self.going_away = True
        payload = self.last_stream.to_bytes(4, "big") + NO_ERROR.to_bytes(4, "big")
        self._write([_frame(GOAWAY, 0, 0, payload)])
        if not self.streams:
            self.transport.close()


def _only_indexed(block: bytes) -> bool:
    """Whether an HPACK block holds indexed fields only (RFC 7541 6.1): no literal and
    no table size update, so decoding it leaves the dynamic table as it was."""
    i, size = 0, len(block)
    while i < size:
        if not block[i] & 0x80:
            return False
        if block[i] & 0x7F == 0x7F:  # the index goes on in continuation bytes
            i += 1
            while i < size and block[i] & 0x80:
                i += 1
        i += 1
    return True


class _Resume:
    """Awaitable that continues, inside a Task, a coroutine suspended on `waiting`."""

    __slots__ = ("coro", "waiting")

    def __init__(self, coro: Coroutine[Any, Any, None], waiting: Any) -> None:
        self.coro = coro
        self.waiting = waiting

    def __await__(self) -> Generator[Any, Any, None]:
        coro, value = self.coro, self.waiting
        while True:
            try:
                sent = yield value
            except BaseException as error:  # Task.cancel(): into the coroutine
                try:
                    value = coro.throw(error)
                except StopIteration:
                    return
            else:
                try:
                    value = coro.send(sent)
                except StopIteration:
                    return


async def _continue(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    await _Resume(coro, waiting)


class Http2GrpcServer:
    """Serves `handlers` (`{"/package.Service/Method": handler}`) on one port."""

    def __init__(
        self, handlers: Mapping[str, Handler], *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.handlers = dict(handlers)
        self.ssl_context = ssl_context
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None
        self._stopped = asyncio.Event()

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the bound port (`port=0` picks a free one)."""
        loop = asyncio.get_running_loop()
        context = self.ssl_context
        if context is not None:
            context.set_alpn_protocols(["h2"])
        self._server = await loop.create_server(
            lambda: _Connection(self), host, port, ssl=context, reuse_address=True
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self, grace_s: float | None = 0) -> None:
        """Stop accepting, GOAWAY every connection, wait up to `grace_s` for calls."""
        if self._server is None:
            return
        self._server.close()
        for conn in list(self.connections):
            conn.goaway()
        if grace_s:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    while any(c.streams for c in self.connections):
                        await asyncio.sleep(0.02)
        tasks = []
        for conn in list(self.connections):
            for call in list(conn.streams.values()):
                conn._cancel(call)
                if call.task is not None:
                    tasks.append(call.task)
            if conn.transport is not None:
                conn.transport.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None
        self._stopped.set()

    async def wait_closed(self) -> None:
        """Return once `stop()` has finished."""
        await self._stopped.wait()

    def __repr__(self) -> str:
        return f"Http2GrpcServer({sorted(self.handlers)})"


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


class HealthService:
    """`grpc.health.v1.Health` (Check and Watch) on this server, with the same
    behaviour and `set` / `enter_graceful_shutdown` methods as grpcio's servicer."""

    def __init__(self) -> None:
        from grpc_health.v1 import health_pb2

        self.pb = health_pb2
        self.status: dict[str, int] = {"": health_pb2.HealthCheckResponse.SERVING}
        self.changed = asyncio.Event()
        self.shutting_down = False

    def handlers(self) -> dict[str, Handler]:
        return {HEALTH_CHECK: self.check, HEALTH_WATCH: self.watch}

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
        return self.pb.HealthCheckRequest.FromString(raw or b"").service

    async def check(self, call: Call) -> None:
        service = self._request(await call.read())
        status = self.status.get(service)
        if status is None:
            call.finish(GrpcCode.NOT_FOUND, "unknown service")
            return
        call.send([self.pb.HealthCheckResponse(status=status).SerializeToString()])  # type: ignore[arg-type]

    async def watch(self, call: Call) -> None:
        service = self._request(await call.read())
        last = None
        while not call.cancelled:
            status = self.status.get(service, self.pb.HealthCheckResponse.SERVICE_UNKNOWN)
            if status != last:
                last = status
                call.send([self.pb.HealthCheckResponse(status=status).SerializeToString()])  # type: ignore[arg-type]
            await self.changed.wait()
