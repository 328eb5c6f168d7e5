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

What it implements: the client preface and SETTINGS, HEADERS + CONTINUATION, DATA with
gRPC length-prefixed messages, flow control in both directions, PING, RST_STREAM
(cancels the call's handler), GOAWAY (both ways; `stop()` drains), `grpc-timeout`. Not
implemented: message compression (a compressed message ends the call with
UNIMPLEMENTED), server push, priorities (ignored).

Every resource a peer can make the server hold has a budget (`ConnectionPolicy`; the
pattern of nghttp2 and grpc-go): resets, PINGs, SETTINGS and frames that carry nothing
are rationed per connection (past the ration: GOAWAY `ENHANCE_YOUR_CALM`); reading
pauses while the peer does not read our writes; receive windows reopen only when a
handler has read the message the bytes belong to; each method caps its message size
(`RESOURCE_EXHAUSTED`); a silent peer is probed with PING and dropped when it does not
answer, so a vanished Envoy cancels its calls (and their in-flight counts) instead of
holding them forever. docs/picker.md lists the limits.

A handler is `async def handler(call: Call) -> None`: `await call.read()` returns the
next message's bytes or None once the client has half-closed; `call.send([...])` writes
messages; returning ends the call with status OK (`call.finish(code, message)` for
another status); an exception ends it with INTERNAL. By default it runs in place (no
Task) while it waits only for messages; `Method(handler, in_task=True)` runs it in its
own Task from the start, for handlers that need `asyncio.timeout` or context variables.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import logging
import socket
import ssl
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from hpack import Decoder
from hpack.exceptions import HPACKError

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

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE = 0, 1, 2, 3, 4, 5
PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20

NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x3
FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x6, 0x7, 0x8, 0x9
ENHANCE_YOUR_CALM = 0xB

MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
DEFAULT_FRAME = 16_384
DEFAULT_MAX_MESSAGE = 4 * 2**20  # gRPC's own default receive limit
HEADER_TABLE_SIZE = 4_096  # the HPACK table we let the peer use (the protocol default)
KEEPALIVE_PING = b"igw-kpal"
LINGER_S = 1.0  # after GOAWAY for an error: what the peer still sends is read and dropped


class GrpcCode:
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


@dataclass(frozen=True, slots=True)
class ConnectionPolicy:
    """What one client connection may make the server hold or do.

    A ration is `(burst, per_second)`: a token bucket; a frame past it ends the
    connection with GOAWAY ENHANCE_YOUR_CALM. Resets follow nghttp2's defaults (1,000,
    then 33/s: CVE-2023-44487). A PING costs a token only when the server has sent no
    HEADERS or DATA since the previous one (grpc-go's "ping strikes"): gRPC clients
    probe bandwidth with a PING per burst of data they receive, and those are free.
    """

    max_frame_size: int = 65_536  # advertised SETTINGS_MAX_FRAME_SIZE, 16–64 KiB
    connection_window: int = 16 * 2**20  # unread bytes one connection may hold
    max_concurrent_streams: int = 1_000
    max_header_block: int = 65_536  # compressed, across HEADERS + CONTINUATION
    max_header_list: int = 65_536  # decoded (SETTINGS_MAX_HEADER_LIST_SIZE)
    max_continuations: int = 16  # CONTINUATION frames per header block
    write_high_water: int = 1 * 2**20  # queued outgoing bytes that pause reading
    resets: tuple[int, float] = (1_000, 33.0)
    pings: tuple[int, float] = (100, 10.0)
    settings: tuple[int, float] = (100, 10.0)
    empty_frames: tuple[int, float] = (100, 10.0)  # DATA/CONTINUATION with nothing, PRIORITY
    keepalive_s: float = 30.0  # PING a peer silent this long
    keepalive_timeout_s: float = 20.0  # drop it when the PING (or a write) waits this long
    idle_timeout_s: float = 600.0  # GOAWAY a connection with no call this long

    def __post_init__(self) -> None:
        if not DEFAULT_FRAME <= self.max_frame_size <= 65_536:
            raise ValueError("max_frame_size must be 16-64 KiB")
        if not DEFAULT_WINDOW <= self.connection_window <= MAX_WINDOW:
            raise ValueError(f"connection_window must be {DEFAULT_WINDOW}..{MAX_WINDOW}")
        for name in ("resets", "pings", "settings", "empty_frames"):
            burst, rate = getattr(self, name)
            if burst < 1 or rate <= 0:
                raise ValueError(f"{name} needs a burst >= 1 and a rate > 0")
        if min(self.keepalive_s, self.keepalive_timeout_s, self.idle_timeout_s) <= 0:
            raise ValueError("keepalive and idle timeouts must be positive")


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


class _Ration:
    """A token bucket: `take(now)` is False once the peer has spent its budget."""

    __slots__ = ("burst", "last", "rate", "tokens")

    def __init__(self, burst: int, rate: float, now: float) -> None:
        self.burst, self.rate = float(burst), rate
        self.tokens, self.last = float(burst), now

    def take(self, now: float) -> bool:
        tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if tokens < 1:
            self.tokens = tokens
            return False
        self.tokens = tokens - 1
        return True


_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_grpc_timeout(value: str) -> float | None:
    """`grpc-timeout` (gRPC PROTOCOL-HTTP2.md: 1-8 digits and a unit) in seconds; None
    when malformed."""
    digits, unit = value[:-1], value[-1:]
    if not 1 <= len(digits) <= 8 or not digits.isascii() or not digits.isdigit():
        return None
    scale = _TIMEOUT_UNITS.get(unit)
    return None if scale is None else int(digits) * scale


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


def _window_update(stream: int, increment: int) -> bytes:
    return _frame(WINDOW_UPDATE, 0, stream, increment.to_bytes(4, "big"))


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
        "deadline",
        "done",
        "headers",
        "headers_sent",
        "held",
        "id",
        "max_message",
        "pending",
        "recv_credit",
        "recv_window",
        "send_window",
        "task",
        "trailers",
    )

    def __init__(
        self, conn: _Connection, stream_id: int, headers: dict[str, str], max_message: int
    ) -> None:
        self._conn = conn
        self.id = stream_id
        self.headers = headers
        self.max_message = max_message
        self._inbox: deque[bytes] = deque()
        self._partial = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self.cancelled = False
        self.closed_remote = False
        self.done = False  # trailers queued: nothing more is sent
        self.headers_sent = False
        self.pending = bytearray()  # framed gRPC data waiting for the peer's window
        self.trailers: bytes | None = None
        self.send_window = conn.peer_initial_window
        self.recv_window = conn.stream_window  # what the peer may still send us
        self.recv_credit = 0  # bytes read by the handler, not yet given back
        self.held = 0  # bytes received and not yet read (they hold connection window)
        self.task: asyncio.Task[None] | None = None
        self.coro: Coroutine[Any, Any, None] | None = None  # the handler, run in place
        self.deadline: asyncio.TimerHandle | None = None  # grpc-timeout

    async def read(self) -> bytes | None:
        """The next request message, or None when the client half-closed (or left).

        Reading is what reopens the flow-control windows for the message's bytes.
        """
        while not self._inbox:
            if self.closed_remote or self.cancelled:
                return None
            waiter = self._waiter = self._conn.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        message = self._inbox.popleft()
        self._conn.consumed(self, len(message) + 5)
        return message

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

    def _push(self, message: bytes) -> None:
        self._inbox.append(message)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
            if self.coro is not None:  # parked in place: resume it now
                self._conn.step(self)

    def _data(self, chunk: bytes | memoryview) -> tuple[int, str] | None:
        """Split length-prefixed messages out of DATA; a gRPC status if one is refused."""
        partial = self._partial
        if not partial and len(chunk) >= 5 and chunk[0] == 0:
            # Fast path: whole messages in this frame, nothing carried over.
            size = int.from_bytes(chunk[1:5], "big")
            if len(chunk) == 5 + size and size <= self.max_message:
                self._push(bytes(chunk[5:]))
                return None
        partial += chunk
        while len(partial) >= 5:
            if partial[0] != 0:
                return GrpcCode.UNIMPLEMENTED, "compressed messages are not supported"
            size = int.from_bytes(partial[1:5], "big")
            if size > self.max_message:
                return (
                    GrpcCode.RESOURCE_EXHAUSTED,
                    f"message of {size} bytes is over the limit of {self.max_message}",
                )
            if len(partial) < 5 + size:
                break
            self._push(bytes(partial[5 : 5 + size]))
            del partial[: 5 + size]
        return None


class _Connection(asyncio.Protocol):
    """One client connection: frame parsing, stream table, flow control, budgets."""

    def __init__(self, server: Http2GrpcServer) -> None:
        self.server = server
        self.policy = policy = server.policy
        self.loop = loop = asyncio.get_running_loop()
        now = loop.time()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.preface = False
        self.decoder = Decoder()
        self.decoder.max_allowed_table_size = HEADER_TABLE_SIZE
        self.decoder.max_header_list_size = policy.max_header_list
        self.header_cache: dict[bytes, dict[str, str]] = {}  # read-only: shared by calls
        self.streams: dict[int, Call] = {}
        self.last_stream = 0
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_frame = DEFAULT_FRAME
        self.send_window = DEFAULT_WINDOW
        self.stream_window = server.stream_window
        self.recv_window = policy.connection_window  # what the peer may still send us
        self.recv_credit = 0  # bytes consumed (or dropped), not yet given back
        self.header_stream = 0  # a header block continues on this stream
        self.header_flags = 0
        self.header_block = bytearray()
        self.continuations = 0
        self.blocked: dict[int, Call] = {}  # streams waiting for window
        self.going_away = False
        self.closed = False
        self.out: list[bytes] | None = None  # frames to write at the end of data_received
        self.resets = _Ration(*policy.resets, now)
        self.pings = _Ration(*policy.pings, now)
        self.settings = _Ration(*policy.settings, now)
        self.empty = _Ration(*policy.empty_frames, now)
        self.sent_since_ping = True  # HEADERS or DATA written since the peer's last PING
        self.last_read = self.last_active = now
        self.ping_sent_at = 0.0  # our keepalive PING, unanswered since then
        self.write_paused_at = 0.0
        self.timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=self.policy.write_high_water)
        self.server.connections.add(self)
        policy = self.policy
        settings = b"".join(
            key.to_bytes(2, "big") + value.to_bytes(4, "big")
            for key, value in (
                (0x2, 0),  # ENABLE_PUSH
                (0x3, policy.max_concurrent_streams),
                (0x4, self.stream_window),
                (0x5, policy.max_frame_size),
                (0x6, policy.max_header_list),
            )
        )
        out = _frame(SETTINGS, 0, 0, settings)
        if policy.connection_window > DEFAULT_WINDOW:
            out += _window_update(0, policy.connection_window - DEFAULT_WINDOW)
        transport.write(out)
        self._schedule_tick()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for call in list(self.streams.values()):
            self._cancel(call)
        self.streams.clear()
        self.blocked.clear()

    def pause_writing(self) -> None:
        """The peer is not reading what we write: stop reading what it sends, so its
        PINGs, SETTINGS and new calls cannot make us queue more answers."""
        self.write_paused_at = self.loop.time()
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused_at = 0.0
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.closed:  # lingering after GOAWAY: dropped unread
            return
        self.last_read = self.loop.time()
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
        max_frame = self.policy.max_frame_size
        try:
            while size - offset >= 9 and not self.closed:
                high, low, kind, flags, stream = FRAME_HEAD.unpack_from(data, offset)
                length = high << 16 | low
                if length > max_frame:
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
                    self._on_ping(flags, stream, payload)
                elif kind == RST_STREAM:
                    self._on_rst_stream(stream, payload)
                elif kind == GOAWAY:
                    self._on_goaway(stream, payload)
                elif kind == PRIORITY:
                    self._on_priority(stream, payload)
                elif kind == PUSH_PROMISE:
                    self._abort(PROTOCOL_ERROR, "clients cannot push")
                    return
                elif not self.empty.take(self.last_read):  # unknown types: ignored, rationed
                    self._calm("too many frames that do nothing")
        finally:
            self.out = None
            if out and not self.closed and self.transport is not None:
                self.transport.write(b"".join(out))
        if offset < size:
            buffer += view[offset:]

    # ------------------------------------------------------------ frames

    def _on_data(self, flags: int, stream: int, payload: memoryview) -> None:
        length = len(payload)
        if length > self.recv_window:
            self._abort(FLOW_CONTROL_ERROR, "DATA beyond the connection window")
            return
        self.recv_window -= length
        if not length and not flags & END_STREAM and not self.empty.take(self.last_read):
            self._calm("too many empty DATA frames")
            return
        call = self.streams.get(stream)
        if call is None or call.closed_remote:
            if stream == 0 or stream > self.last_stream:
                self._abort(PROTOCOL_ERROR, "DATA on an idle stream")
                return
            self._credit(None, length)  # a stream we already ended: dropped
            return
        if length > call.recv_window:
            self._credit(None, length)
            self._reset(call, FLOW_CONTROL_ERROR)
            return
        call.recv_window -= length
        call.held += length
        if flags & PADDED:
            pad = payload[0] if length else 0
            if pad >= length:
                self._abort(PROTOCOL_ERROR, "bad padding")
                return
            payload = payload[1 : length - pad]
            self.consumed(call, pad + 1)
        if payload and call.done:  # we have answered: nobody reads the rest
            self.consumed(call, len(payload))
        elif payload:
            refused = call._data(payload)
            if refused is not None:
                self._end(call, *refused)
                self.consumed(call, len(call._partial))
                call._partial.clear()
                return
        if flags & END_STREAM:
            call.closed_remote = True
            call._wake()
            self._maybe_close(call)
        elif self.recv_window < self.policy.connection_window // 2 or call.recv_window < (
            self.stream_window // 2
        ):
            self._credit(call, 0)

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
            if start == end and not self.empty.take(self.last_read):
                self._calm("too many empty header fragments")
                return
            self.header_stream = stream
            self.header_block = bytearray(payload[start:end])
            self.continuations = 0

    def _on_continuation(self, flags: int, stream: int, payload: memoryview) -> None:
        if stream != self.header_stream or not stream:
            self._abort(PROTOCOL_ERROR, "unexpected CONTINUATION")
            return
        self.continuations += 1
        if self.continuations > self.policy.max_continuations:
            self._calm("too many CONTINUATION frames")
            return
        if not payload and not flags & END_HEADERS and not self.empty.take(self.last_read):
            self._calm("too many empty CONTINUATION frames")
            return
        self.header_block += payload
        if len(self.header_block) > self.policy.max_header_block:
            self._abort(PROTOCOL_ERROR, "header block too large")
            return
        if flags & END_HEADERS:
            self.header_stream = 0
            block, self.header_block = bytes(self.header_block), bytearray()
            self._header_block(stream, self.header_flags, block)

    def _on_ping(self, flags: int, stream: int, payload: memoryview) -> None:
        if len(payload) != 8:
            self._abort(FRAME_SIZE_ERROR, "PING is not 8 bytes")
        elif stream:
            self._abort(PROTOCOL_ERROR, "PING on a stream")
        elif flags & ACK:
            if payload == KEEPALIVE_PING:
                self.ping_sent_at = 0.0
        elif not self.sent_since_ping and not self.pings.take(self.last_read):
            self._calm("too many PINGs")
        else:
            self.sent_since_ping = False
            self._write([_frame(PING, ACK, 0, bytes(payload))])

    def _on_rst_stream(self, stream: int, payload: memoryview) -> None:
        if len(payload) != 4:
            self._abort(FRAME_SIZE_ERROR, "RST_STREAM is not 4 bytes")
        elif not stream or stream > self.last_stream:
            self._abort(PROTOCOL_ERROR, "RST_STREAM on an idle stream")
        elif not self.resets.take(self.last_read):
            self._calm("too many stream resets")
        else:
            call = self.streams.get(stream)
            if call is not None:
                self._forget(call)
                self._cancel(call)

    def _on_goaway(self, stream: int, payload: memoryview) -> None:
        if len(payload) < 8:
            self._abort(FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes")
        elif stream:
            self._abort(PROTOCOL_ERROR, "GOAWAY on a stream")
        else:
            self.going_away = True
            if not self.streams and self.transport is not None:
                self.transport.close()

    def _on_priority(self, stream: int, payload: memoryview) -> None:
        if len(payload) != 5:
            self._abort(FRAME_SIZE_ERROR, "PRIORITY is not 5 bytes")
        elif not stream:
            self._abort(PROTOCOL_ERROR, "PRIORITY on stream 0")
        elif not self.empty.take(self.last_read):  # priorities are ignored (RFC 9113 5.3)
            self._calm("too many PRIORITY frames")

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
        if self.going_away or len(self.streams) >= self.policy.max_concurrent_streams:
            if not self.resets.take(self.last_read):  # a refusal costs what a reset does
                self._calm("too many refused streams")
                return
            self._write([_frame(RST_STREAM, 0, stream, REFUSED_STREAM.to_bytes(4, "big"))])
            return
        headers = decoded
        method = self.server.methods.get(headers.get(":path", ""))
        call = Call(self, stream, headers, method.max_message if method else 0)
        if flags & END_STREAM:
            call.closed_remote = True
        self.streams[stream] = call
        encoding = headers.get("grpc-encoding", "identity")
        timeout = headers.get("grpc-timeout")
        seconds = parse_grpc_timeout(timeout) if timeout is not None else None
        if method is None:
            self._end(call, GrpcCode.UNIMPLEMENTED, f"unknown method {headers.get(':path')}")
        elif headers.get(":method") != "POST" or not headers.get("content-type", "").startswith(
            "application/grpc"
        ):
            self._end(call, GrpcCode.INTERNAL, "not a gRPC request")
        elif encoding != "identity":
            self._end(call, GrpcCode.UNIMPLEMENTED, f"grpc-encoding {encoding} not supported")
        elif timeout is not None and seconds is None:
            self._end(call, GrpcCode.INTERNAL, f"malformed grpc-timeout {timeout!r}")
        else:
            if seconds is not None:
                call.deadline = self.loop.call_later(seconds, self._expire, call)
            if method.in_task:
                call.task = self.loop.create_task(self._run(method.handler, call))
            else:
                call.coro = self._run(method.handler, call)
                self.step(call)

    def _on_window_update(self, stream: int, payload: memoryview) -> None:
        if len(payload) != 4:
            self._abort(FRAME_SIZE_ERROR, "WINDOW_UPDATE is not 4 bytes")
            return
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream == 0:
            if not increment:
                self._abort(PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
                return
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                self._abort(FLOW_CONTROL_ERROR, "window overflow")
                return
            for call in list(self.blocked.values()):
                self.flush(call)
            return
        if stream > self.last_stream:
            self._abort(PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream")
            return
        call = self.streams.get(stream)
        if call is None:
            return
        if not increment or call.send_window + increment > MAX_WINDOW:
            self._reset(call, PROTOCOL_ERROR if not increment else FLOW_CONTROL_ERROR)
            return
        call.send_window += increment
        self.flush(call)

    def _on_settings(self, flags: int, stream: int, payload: memoryview) -> None:
        if stream:
            self._abort(PROTOCOL_ERROR, "SETTINGS on a stream")
            return
        if len(payload) % 6 or (flags & ACK and payload):
            self._abort(FRAME_SIZE_ERROR, "bad SETTINGS length")
            return
        if flags & ACK:
            return
        if not self.settings.take(self.last_read):
            self._calm("too many SETTINGS")
            return
        for i in range(0, len(payload), 6):
            key = int.from_bytes(payload[i : i + 2], "big")
            value = int.from_bytes(payload[i + 2 : i + 6], "big")
            if key == 0x2 and value > 1:
                self._abort(PROTOCOL_ERROR, "bad ENABLE_PUSH")
                return
            if key == 0x4:
                if value > MAX_WINDOW:
                    self._abort(FLOW_CONTROL_ERROR, "initial window too large")
                    return
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for call in self.streams.values():
                    call.send_window += delta
                    if call.send_window > MAX_WINDOW:
                        self._abort(FLOW_CONTROL_ERROR, "window overflow")
                        return
            elif key == 0x5:
                if not DEFAULT_FRAME <= value <= 2**24 - 1:
                    self._abort(PROTOCOL_ERROR, "bad max frame size")
                    return
                self.peer_max_frame = value
        self._write([SETTINGS_ACK])
        for call in list(self.streams.values()):
            if call.pending:
                self.flush(call)

    # ------------------------------------------------------------ receive windows

    def consumed(self, call: Call, size: int) -> None:
        """The handler has read `size` bytes of the call's DATA: they may be resent."""
        size = min(size, call.held)  # nothing, once the stream has left the table
        if size <= 0:
            return
        call.held -= size
        call.recv_credit += size
        self.recv_credit += size
        if (
            call.recv_window < self.stream_window // 2
            or self.recv_window < self.policy.connection_window // 2
        ):
            self._credit(call, 0)

    def _credit(self, call: Call | None, dropped: int) -> None:
        """Give back window: `dropped` bytes nobody will read, plus what was consumed,
        once the peer has used half a window (WINDOW_UPDATE frames stay rare)."""
        self.recv_credit += dropped
        out = []
        if self.recv_credit and self.recv_window < self.policy.connection_window // 2:
            out.append(_window_update(0, self.recv_credit))
            self.recv_window += self.recv_credit
            self.recv_credit = 0
        if (
            call is not None
            and call.recv_credit
            and not call.closed_remote
            and call.id in self.streams
            and call.recv_window < self.stream_window // 2
        ):
            out.append(_window_update(call.id, call.recv_credit))
            call.recv_window += call.recv_credit
            call.recv_credit = 0
        if out:
            self._write(out)

    def _forget(self, call: Call) -> None:
        """The stream leaves the table: what it still holds is given back."""
        self.streams.pop(call.id, None)
        self.blocked.pop(call.id, None)
        if call.deadline is not None:
            call.deadline.cancel()
            call.deadline = None
        if call.held:
            held, call.held = call.held, 0
            call._inbox.clear()
            call._partial.clear()
            self._credit(None, held)

    # ------------------------------------------------------------ sending

    def flush(self, call: Call) -> None:
        """Write what the windows allow of the call's queued data, then its trailers."""
        if self.closed or call.cancelled:
            return
        self.sent_since_ping = True
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
        elif self.transport is not None and not self.closed:
            self.transport.write(b"".join(out))

    def _closed_local(self, call: Call) -> None:
        """Our side ended; the stream leaves the table (late client data is dropped)."""
        self._forget(call)
        # No RST_STREAM(NO_ERROR) when the client has not half-closed (RFC 9113 8.1 allows
        # one): gRPC clients then fail a write already in flight instead of ignoring it,
        # as they do against grpcio's server. Late DATA is counted and dropped.
        if self.going_away and not self.streams and self.transport is not None:
            self.transport.close()

    def _maybe_close(self, call: Call) -> None:
        if call.done and call.trailers is None and not call.pending:
            self._forget(call)

    def _end(self, call: Call, code: int, message: str) -> None:
        call.finish(code, message)
        self._stop_handler(call)

    def _expire(self, call: Call) -> None:
        """The call's `grpc-timeout` has passed: DEADLINE_EXCEEDED, handler cancelled."""
        call.deadline = None
        if not call.done and not call.cancelled:
            self._end(call, GrpcCode.DEADLINE_EXCEEDED, "deadline exceeded")

    def _reset(self, call: Call, error: int) -> None:
        """A stream error: RST_STREAM, the handler cancelled."""
        self._write([_frame(RST_STREAM, 0, call.id, error.to_bytes(4, "big"))])
        self._forget(call)
        self._cancel(call)

    def _cancel(self, call: Call) -> None:
        if call.cancelled:
            return
        call.cancelled = True
        if call.deadline is not None:
            call.deadline.cancel()
            call.deadline = None
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
            call.task = self.loop.create_task(_Continuation(coro, waiting))

    def _calm(self, reason: str) -> None:
        """A budget is spent: GOAWAY ENHANCE_YOUR_CALM (RFC 9113 7), calls cancelled."""
        self._abort(ENHANCE_YOUR_CALM, reason)

    def _abort(self, error: int, reason: str) -> None:
        """GOAWAY with `error`, every call cancelled, the connection closed.

        Our side is shut for writing first and what the peer still sends is dropped
        unread for a moment (a "lingering close", as nghttp2 and Go do): closing a
        socket with unread input resets it, and the peer would lose the GOAWAY and
        the reason with it.
        """
        log.warning("HTTP/2 connection error: %s", reason)
        transport = self.transport
        if transport is not None and not self.closed:
            payload = self.last_stream.to_bytes(4, "big") + error.to_bytes(4, "big")
            pending = b"".join(self.out or [])
            transport.write(pending + _frame(GOAWAY, 0, 0, payload + reason.encode()))
            self.out = []
            if transport.can_write_eof():
                transport.write_eof()
                self.loop.call_later(LINGER_S, transport.abort)
            else:
                transport.close()
                if transport.get_write_buffer_size():  # a peer that does not read
                    self.loop.call_later(self.policy.keepalive_timeout_s, transport.abort)
        self.closed = True
        for call in list(self.streams.values()):
            self._cancel(call)

    # ------------------------------------------------------------ keepalive

    def _schedule_tick(self) -> None:
        policy = self.policy
        every = min(policy.keepalive_s, policy.keepalive_timeout_s, policy.idle_timeout_s) / 2
        self.timer = self.loop.call_later(every, self._tick)

    def _tick(self) -> None:
        """Keepalive and idle checks, a few times per keepalive period (not per frame)."""
        self.timer = None
        transport = self.transport
        if self.closed or transport is None:
            return
        now, policy = self.loop.time(), self.policy
        if self.write_paused_at and now - self.write_paused_at >= policy.keepalive_timeout_s:
            log.info("HTTP/2 peer stopped reading for %.0f s: dropped", now - self.write_paused_at)
            transport.abort()
            return
        if self.ping_sent_at and now - self.ping_sent_at >= policy.keepalive_timeout_s:
            log.info("HTTP/2 peer did not answer a keepalive PING: dropped")
            transport.abort()
            return
        if self.streams:
            self.last_active = now
        elif now - self.last_active >= policy.idle_timeout_s:
            self.goaway()
            return
        if not self.ping_sent_at and now - self.last_read >= policy.keepalive_s:
            self.ping_sent_at = now
            self._write([_frame(PING, 0, 0, KEEPALIVE_PING)])
        self._schedule_tick()

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
        self.policy = policy or ConnectionPolicy()
        # Every stream may hold one whole message of its method: the window is sized
        # for the largest, and reopens only as the handler reads (Call.read).
        largest = max((m.max_message for m in self.methods.values()), default=0)
        self.stream_window = max(DEFAULT_WINDOW, largest + 5)
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
        from grpc_health.v1 import health_pb2

        self.pb = health_pb2
        self.status: dict[str, int] = {"": health_pb2.HealthCheckResponse.SERVING}
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
