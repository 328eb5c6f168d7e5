"""The picker's HTTP/2 server against a hostile peer: each known abuse class meets its
budget (`ConnectionPolicy`) and the server keeps serving others.

The peer is the `h2` library (with `hyperframe` for frames h2 refuses to send), scripted
per attack: rapid reset (CVE-2023-44487), PING / SETTINGS / empty-frame floods without
reading, CONTINUATION floods (CVE-2024-27316 class), oversize frames and messages, a
peer that stops reading or vanishes. RFC 9113 is the rulebook; where the budget's
number comes from nghttp2 or grpc-go the test says so. Every loop is bounded in count
and time, and after each case a normal call on a fresh connection still succeeds.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import orjson
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from fake_envoy import PickerFactory, request_headers_message
from h2.events import RemoteSettingsChanged, ResponseReceived, StreamEnded, TrailersReceived
from h2_peer import (
    DATA,
    ENHANCE_YOUR_CALM,
    FRAME_SIZE_ERROR,
    NO_ERROR,
    H2Peer,
    raw_frame,
)
from hyperframe.frame import ContinuationFrame, HeadersFrame

from inference_gateway.assembly.picker import PROCESS_PATH
from inference_gateway.frontends.extproc.picker import PickerOptions
from inference_gateway.transport.http2_server import (
    Call,
    ConnectionPolicy,
    GrpcCode,
    Http2GrpcServer,
    Method,
    parse_grpc_timeout,
)

ECHO = "/test.Echo/Once"
HOLD = "/test.Hold/Forever"
SINK = "/test.Sink/Later"
FLOOD = "/test.Flood/Out"


@dataclass
class Handlers:
    """Test handlers with the bookkeeping the assertions read."""

    active: int = 0
    cancelled: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    read: list[bytes] = field(default_factory=list)

    async def echo(self, call: Call) -> None:
        while (message := await call.read()) is not None:
            call.send([message])

    async def hold(self, call: Call) -> None:
        """Reads one message, then waits until cancelled (an exchange in flight)."""
        self.active += 1
        try:
            await call.read()
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1

    async def sink(self, call: Call) -> None:
        """Reads nothing until released: what it is sent must wait in the window."""
        await self.release.wait()
        while (message := await call.read()) is not None:
            self.read.append(message)

    async def flood(self, call: Call) -> None:
        """Answers one message with 8 MB, as fast as the peer's windows let it."""
        self.active += 1
        try:
            await call.read()
            for _ in range(128):
                call.send([b"x" * 65_536])
                await asyncio.sleep(0)
            await asyncio.sleep(60)
        finally:
            self.active -= 1

    def methods(self) -> dict[str, Method]:
        return {
            ECHO: Method(self.echo, max_message=1_024),
            HOLD: Method(self.hold),
            SINK: Method(self.sink, max_message=16_384),
            FLOOD: Method(self.flood),
        }


QUICK = ConnectionPolicy(keepalive_s=0.2, keepalive_timeout_s=0.4, idle_timeout_s=30)


@pytest.fixture
async def served() -> AsyncIterator[tuple[Http2GrpcServer, Handlers, int]]:
    handlers = Handlers()
    server = Http2GrpcServer(handlers.methods(), policy=QUICK)
    port = await server.start("127.0.0.1", 0)
    yield server, handlers, port
    await server.stop(0)


async def still_serves(port: int) -> None:
    """A normal call on a fresh connection succeeds."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        assert await channel.unary_unary(ECHO)(b"ok", timeout=5) == b"ok"


async def connections_drop_to_zero(server: Http2GrpcServer, seconds: float = 3.0) -> None:
    async with asyncio.timeout(seconds):
        while server.connections:
            await asyncio.sleep(0.02)


# ---------------------------------------------------------------- rapid reset


async def test_rapid_reset_ends_in_enhance_your_calm(
    served: tuple[Http2GrpcServer, Handlers, int],
) -> None:
    """CVE-2023-44487: HEADERS + RST_STREAM as fast as the peer can write cost the
    server a call each. Past the reset budget (nghttp2's default: 1,000, then 33/s) the
    connection ends with GOAWAY ENHANCE_YOUR_CALM, every call it started is cancelled,
    and no handler is left running."""
    server, handlers, port = served
    peer = await H2Peer.connect(port)
    for _ in range(1_500):  # bounded: past the burst of 1,000
        stream = peer.start_call(HOLD)
        peer.h2.reset_stream(stream)
    peer.flush()
    goaway = await peer.goaway()
    peer.close()
    assert goaway is not None and goaway.error_code == ENHANCE_YOUR_CALM
    await connections_drop_to_zero(server)
    assert handlers.active == 0
    await still_serves(port)


async def test_resets_of_answered_calls_are_free(
    served: tuple[Http2GrpcServer, Handlers, int],
) -> None:
    """Envoy's ext_proc client resets each stream when its HTTP request ends, often
    after the picker's answer and before its trailers: at a few hundred requests a
    second that is far past 33 resets/s, and counting them cut Envoy's connection with
    ENHANCE_YOUR_CALM under load (found through real Envoy 1.40, bench/envoy_path.py).
    A reset after the server answered ends a call the client is done with: 1,500 of them
    on one connection, as fast as they come, leave it serving."""
    _, _, port = served
    peer = await H2Peer.connect(port)
    from h2.events import DataReceived

    for _ in range(1_500):  # bounded: past the burst of 1,000
        stream = peer.start_call(ECHO)
        peer.send_message(stream, b"hi")
        peer.flush()
        await peer.events(DataReceived)  # the answer is in
        peer.h2.reset_stream(stream)
        peer.flush()
    stream = peer.start_call(ECHO)
    peer.send_message(stream, b"still", end=True)
    peer.flush()
    events = await peer.events(DataReceived)
    peer.close()
    assert any(isinstance(e, DataReceived) and b"still" in e.data for e in events)


# ---------------------------------------------------------------- floods without reading


@pytest.mark.parametrize("kind", ["ping", "settings", "empty_data", "priority"])
async def test_control_frame_floods_end_in_enhance_your_calm(
    served: tuple[Http2GrpcServer, Handlers, int], kind: str
) -> None:
    """Each PING and SETTINGS costs the server an answer, an empty DATA or a PRIORITY
    frame costs it a parse for nothing; a peer that sends them without end (and does
    not read the answers) used to starve the event loop and grow the write buffer.
    Past their ration the connection ends with GOAWAY ENHANCE_YOUR_CALM (grpc-go's
    "too_many_pings", nghttp2's flood limits), and the write buffer never passed the
    high-water mark meanwhile."""
    server, _, port = served
    peer = await H2Peer.connect(port)
    frames = {
        "ping": raw_frame(6, 0, 0, b"12345678"),
        "settings": raw_frame(4, 0, 0, (1).to_bytes(2, "big") + (4096).to_bytes(4, "big")),
        "empty_data": raw_frame(0, 0, 1, b""),
        "priority": raw_frame(2, 0, 1, b"\x00\x00\x00\x00\x10"),
    }
    if kind == "empty_data":
        peer.start_call(HOLD)
    flood = frames[kind] * 2_000
    highest = 0
    for _ in range(10):  # bounded: 20,000 frames
        peer.raw(flood)
        await asyncio.sleep(0)
        for conn in list(server.connections):
            if conn.transport is not None:
                highest = max(highest, conn.transport.get_write_buffer_size())
    goaway = await peer.goaway()
    peer.close()
    assert goaway is not None and goaway.error_code == ENHANCE_YOUR_CALM
    assert highest <= QUICK.write_high_water
    await connections_drop_to_zero(server)
    await still_serves(port)


async def test_pings_answered_while_data_flows_are_free(
    served: tuple[Http2GrpcServer, Handlers, int],
) -> None:
    """gRPC clients send a PING with each burst of data they receive (BDP probes); a
    PING after the server has sent HEADERS or DATA costs nothing (grpc-go resets its
    ping strikes when it sends), so a busy, well-behaved client is never cut off."""
    _, _, port = served
    peer = await H2Peer.connect(port)
    for i in range(300):  # three times the PING burst, one echo between each
        stream = peer.start_call(ECHO)
        peer.send_message(stream, b"x", end=True)
        await peer.events(StreamEnded)
        peer.h2.ping(i.to_bytes(8, "big"))
        peer.flush()
    stream = peer.start_call(ECHO)
    peer.send_message(stream, b"last", end=True)
    events = await peer.events(StreamEnded)
    peer.close()
    assert any(isinstance(e, TrailersReceived) for e in events)


async def test_a_peer_that_stops_reading_is_paused_then_dropped(
    served: tuple[Http2GrpcServer, Handlers, int],
) -> None:
    """Flow control bounds DATA, not the answers to control frames, and a peer can open
    windows it never drains: once the outgoing buffer passes the write high-water mark
    the server stops reading that connection, and drops it when it stays unread for
    the keepalive timeout; the call is cancelled, nothing of it is kept."""
    server, handlers, port = served
    peer = await H2Peer.connect(port, settings={4: 2**31 - 1})  # a huge stream window
    peer.h2.increment_flow_control_window(2**30)
    stream = peer.start_call(FLOOD)
    peer.send_message(stream, b"go")
    async with asyncio.timeout(5):
        while handlers.active == 0:
            await asyncio.sleep(0.01)
    # Read nothing; the server must give up on us.
    async with asyncio.timeout(5):
        while handlers.active:
            await asyncio.sleep(0.02)
    await connections_drop_to_zero(server)
    peer.close()
    await still_serves(port)


# ---------------------------------------------------------------- header blocks


@pytest.mark.parametrize("empty", [True, False])
async def test_continuation_flood_ends_in_enhance_your_calm(
    served: tuple[Http2GrpcServer, Handlers, int], empty: bool
) -> None:
    """CONTINUATION floods (the 2024 class of CVE-2024-27316 and friends): empty
    CONTINUATION frames never reach the header-size cap, so they are rationed as empty
    frames; non-empty ones are capped per header block (nghttp2 allows 8)."""
    server, _, port = served
    peer = await H2Peer.connect(port)
    block = peer.h2.encoder.encode([(":method", "POST"), (":path", ECHO)])
    head = HeadersFrame(1, data=block[:1])  # END_HEADERS unset
    piece = ContinuationFrame(1, data=b"" if empty else b"\x80").serialize()
    peer.raw(head.serialize() + piece * 5_000)
    goaway = await peer.goaway()
    peer.close()
    assert goaway is not None and goaway.error_code == ENHANCE_YOUR_CALM
    await connections_drop_to_zero(server)
    await still_serves(port)


# ---------------------------------------------------------------- sizes


async def test_advertised_frame_size_and_oversize_frame(
    served: tuple[Http2GrpcServer, Handlers, int],
) -> None:
    """The server advertises SETTINGS_MAX_FRAME_SIZE within 16-64 KiB (a large frame
    is a large allocation per read); a frame above it is a connection error of type
    FRAME_SIZE_ERROR (RFC 9113 4.2)."""
    _, _, port = served
    peer = await H2Peer.connect(port)
    await peer.events(RemoteSettingsChanged)
    assert 16_384 <= peer.h2.max_outbound_frame_size <= 65_536
    stream = peer.start_call(HOLD)
    peer.raw(raw_frame(DATA, 0, stream, b"x" * (peer.h2.max_outbound_frame_size + 1)))
    goaway = await peer.goaway()
    peer.close()
    assert goaway is not None and goaway.error_code == FRAME_SIZE_ERROR
    await still_serves(port)


async def test_message_over_the_method_limit_is_resource_exhausted(
    served: tuple[Http2GrpcServer, Handlers, int],
) -> None:
    """gRPC answers a request message larger than the server accepts with
    RESOURCE_EXHAUSTED (grpc-go's and grpc core's max receive size), at its 5-byte
    length prefix, before buffering it."""
    _, _, port = served
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await channel.unary_unary(ECHO)(b"x" * 2_000, timeout=5)
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await still_serves(port)


@pytest.mark.parametrize(
    ("kind", "stream", "payload"),
    [
        (3, 1, b"\x00\x00\x08"),  # RST_STREAM: 4 bytes
        (7, 0, b"\x00\x00\x00\x00"),  # GOAWAY: at least 8 bytes
        (2, 1, b"\x00\x00\x00\x00"),  # PRIORITY: 5 bytes
        (8, 0, b"\x00\x00\x01"),  # WINDOW_UPDATE: 4 bytes
        (6, 0, b"1234567"),  # PING: 8 bytes
        (4, 0, b"\x00\x01\x00\x00\x10"),  # SETTINGS: a multiple of 6
    ],
)
async def test_frames_of_the_wrong_length_are_frame_size_errors(
    served: tuple[Http2GrpcServer, Handlers, int], kind: int, stream: int, payload: bytes
) -> None:
    """RFC 9113 6.3-6.9: a fixed-size frame of another length is a connection error of
    type FRAME_SIZE_ERROR."""
    _, _, port = served
    peer = await H2Peer.connect(port)
    if stream:
        peer.start_call(HOLD)
    peer.raw(raw_frame(kind, 0, stream, payload))
    goaway = await peer.goaway()
    peer.close()
    assert goaway is not None and goaway.error_code == FRAME_SIZE_ERROR


# ---------------------------------------------------------------- flow control


async def test_windows_reopen_when_the_handler_reads_not_when_bytes_arrive() -> None:
    """A receive window is the memory a peer may make the server hold; reopening it on
    arrival (as before) let a peer fill a handler that does not read without bound.
    The stream window fits one message of the largest method (here 16 KiB, so the
    protocol's minimum of 64 KiB); what a handler has not read keeps it closed, and
    reading reopens it."""
    handlers = Handlers()
    server = Http2GrpcServer({SINK: handlers.methods()[SINK]}, policy=QUICK)
    port = await server.start("127.0.0.1", 0)
    try:
        await _windows_follow_reads(server, handlers, port)
    finally:
        await server.stop(0)


async def _windows_follow_reads(server: Http2GrpcServer, handlers: Handlers, port: int) -> None:
    peer = await H2Peer.connect(port)
    stream = peer.start_call(SINK)
    sent = 0
    for _ in range(200):  # bounded; stops when the window is spent
        if peer.h2.local_flow_control_window(stream) < 4_096 + 5:
            break
        peer.send_message(stream, b"y" * 4_096)
        sent += 1
    await peer.pump(0.3)  # any WINDOW_UPDATE the server sends arrives here
    assert peer.h2.local_flow_control_window(stream) < 4_096 + 5  # still closed
    held = sum(s.held for conn in server.connections for s in conn.h2.streams.values())
    assert held == sent * (4_096 + 5) <= server.stream_window
    handlers.release.set()
    async with asyncio.timeout(5):
        while len(handlers.read) < sent:
            await asyncio.sleep(0.01)
    await peer.pump(0.3)
    assert peer.h2.local_flow_control_window(stream) >= server.stream_window // 2  # reopened
    peer.close()


# ---------------------------------------------------------------- time


async def test_a_vanished_peer_is_dropped_and_its_calls_cancelled(
    served: tuple[Http2GrpcServer, Handlers, int],
) -> None:
    """A node that vanishes (no FIN, no RST: power loss, a partition) leaves its calls
    open for ever unless the server probes: keepalive PING after `keepalive_s` of
    silence, connection dropped after `keepalive_timeout_s` without the ACK (grpc-go's
    server keepalive). Its calls are cancelled, so nothing they hold leaks."""
    server, handlers, port = served
    peer = await H2Peer.connect(port)
    stream = peer.start_call(HOLD)
    peer.send_message(stream, b"in flight")
    async with asyncio.timeout(5):
        while handlers.active == 0:
            await asyncio.sleep(0.01)
    # Vanish: never read, never write again.
    async with asyncio.timeout(5):
        while handlers.active:
            await asyncio.sleep(0.02)
    assert handlers.cancelled == 1
    await connections_drop_to_zero(server)
    peer.close()


async def test_idle_connection_gets_goaway_no_error() -> None:
    """An idle connection (no call for `idle_timeout_s`) is closed with GOAWAY NO_ERROR,
    as grpc-go's MaxConnectionIdle does; a client reconnects when it needs to."""
    policy = ConnectionPolicy(keepalive_s=5, keepalive_timeout_s=5, idle_timeout_s=0.3)
    server = Http2GrpcServer(Handlers().methods(), policy=policy)
    port = await server.start("127.0.0.1", 0)
    try:
        peer = await H2Peer.connect(port)
        goaway = await peer.goaway(timeout=5)
        peer.close()
        assert goaway is not None and goaway.error_code == NO_ERROR
    finally:
        await server.stop(0)


async def test_grpc_timeout_is_enforced_by_the_server(
    served: tuple[Http2GrpcServer, Handlers, int],
) -> None:
    """gRPC PROTOCOL-HTTP2.md: `grpc-timeout` is the call's deadline; the server ends a
    call past it with DEADLINE_EXCEEDED and cancels its handler, whether or not the
    client still watches."""
    _, handlers, port = served
    peer = await H2Peer.connect(port)
    stream = peer.start_call(HOLD, [("grpc-timeout", "150m")])
    peer.send_message(stream, b"x")
    events = await peer.events(StreamEnded, timeout=5)
    status = [  # trailers-only (nothing was sent before the deadline) or trailers
        dict(e.headers).get("grpc-status")
        for e in events
        if isinstance(e, (ResponseReceived, TrailersReceived))
    ]
    assert str(GrpcCode.DEADLINE_EXCEEDED) in status
    async with asyncio.timeout(2):
        while handlers.active:
            await asyncio.sleep(0.01)
    peer.close()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("150m", 0.15), ("2S", 2.0), ("1H", 3600.0), ("99999999n", 0.099999999), ("5", None)],
)
def test_parse_grpc_timeout(value: str, seconds: float | None) -> None:
    """gRPC PROTOCOL-HTTP2.md: TimeoutValue is 1-8 ASCII digits, TimeoutUnit one of
    H M S m u n; anything else is malformed."""
    assert parse_grpc_timeout(value) == (pytest.approx(seconds) if seconds else None)
    assert parse_grpc_timeout("123456789S") is None


# ---------------------------------------------------------------- handlers in tasks


async def test_in_task_handlers_get_asyncio_timeout_and_context_variables() -> None:
    """Handlers run in place have no current Task, so `asyncio.timeout` raises and
    context variables leak between calls; `Method(in_task=True)` runs the handler in a
    Task of its own with a copy of the context."""
    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
    seen: list[str] = []

    async def timed(call: Call) -> None:
        message = await call.read() or b""
        request_id.set(message.decode())
        async with asyncio.timeout(5):
            await asyncio.sleep(0.01)
        seen.append(request_id.get())
        call.send([message])

    server = Http2GrpcServer({ECHO: Method(timed, in_task=True)})
    port = await server.start("127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            answers = await asyncio.gather(
                *(channel.unary_unary(ECHO)(f"id-{i}".encode(), timeout=5) for i in range(5))
            )
    finally:
        await server.stop(0)
    assert sorted(answers) == [f"id-{i}".encode() for i in range(5)]
    assert sorted(seen) == [f"id-{i}" for i in range(5)]
    assert request_id.get() == ""  # nothing leaked into the server's own context


def test_policy_rejects_frame_sizes_outside_16_to_64_kib() -> None:
    with pytest.raises(ValueError, match="16-64 KiB"):
        ConnectionPolicy(max_frame_size=2**20)
    with pytest.raises(ValueError, match="16-64 KiB"):
        ConnectionPolicy(max_frame_size=8_192)


# ---------------------------------------------------------------- the picker itself


@pytest.mark.parametrize("transport", ["http2"])
async def test_a_vanished_envoy_releases_its_in_flight_counts(make_picker: PickerFactory) -> None:
    """The must-hold line: an Envoy node that vanishes mid-exchange (decided, response
    not yet streamed) must not leave its pods' in-flight counts raised for ever; the
    keepalive drops the connection, the exchange finishes, the counts return to 0."""
    policy = ConnectionPolicy(keepalive_s=0.2, keepalive_timeout_s=0.4)
    picker = await make_picker(policy=policy)
    peer = await H2Peer.connect(picker.port)
    stream = peer.start_call(PROCESS_PATH)
    body = orjson.dumps({"model": "llama-3.1-8b", "prompt": "hi", "max_tokens": 2})
    peer.send_message(stream, request_headers_message("/v1/completions").SerializeToString())
    peer.send_message(
        stream,
        pb.ProcessingRequest(
            request_body=pb.HttpBody(body=body, end_of_stream=True)
        ).SerializeToString(),
    )
    async with asyncio.timeout(5):
        while sum(e.inflight for e in picker.store.endpoints) == 0:
            await asyncio.sleep(0.01)
    assert picker.servicer.active == 1
    # Vanish: no FIN, nothing read or written from here on.
    async with asyncio.timeout(5):
        while picker.servicer.active or any(e.inflight for e in picker.store.endpoints):
            await asyncio.sleep(0.02)
    peer.close()


async def test_picker_message_limit_follows_the_body_limit(make_picker: PickerFactory) -> None:
    """The ext_proc method accepts one body (or chunk) plus headers room, no more: a
    message twice the body limit is RESOURCE_EXHAUSTED at its length prefix (before,
    64 MiB per message were buffered against a 4 MiB body limit). Both transports."""
    options = PickerOptions(max_body_bytes=64 * 1024)
    picker = await make_picker(options=options)
    huge = pb.ProcessingRequest(request_body=pb.HttpBody(body=b"x" * (256 * 1024)))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{picker.port}") as channel:
        call = channel.stream_stream(PROCESS_PATH)()
        await call.write(huge.SerializeToString())
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await call.read()
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert picker.servicer.active == 0


def test_igw_picker_binds_loopback_unless_told() -> None:
    """`igw picker` used to listen on 0.0.0.0 by default: any host that could reach
    the machine could steer its traffic. Loopback is the default now; the Kubernetes
    chart passes its address explicitly."""
    import argparse

    from inference_gateway.assembly.picker import PickerServer
    from inference_gateway.cli import picker as extproc_cli

    parser = argparse.ArgumentParser()
    extproc_cli.register(parser.add_subparsers())
    assert parser.parse_args(["picker"]).host == "127.0.0.1"
    assert parser.parse_args(["picker", "--host", "0.0.0.0"]).host == "0.0.0.0"
    assert inspect.signature(PickerServer).parameters["host"].default == "127.0.0.1"


async def test_a_handler_cancelled_before_its_task_starts_still_ends(
    served: tuple[Http2GrpcServer, Handlers, int],
) -> None:
    """Found by the fuzzer: a handler that moved into a Task and was cancelled in the
    same read (here: a bad SETTINGS right after its HEADERS) never saw the cancel,
    because a Task cancelled before its first step never runs its coroutine; its
    `finally` did not run and what it held leaked."""
    server, handlers, port = served
    peer = await H2Peer.connect(port)
    block = peer.h2.encoder.encode(
        [(":method", "POST"), (":path", HOLD), ("content-type", "application/grpc")]
    )
    bad_settings = raw_frame(4, 0, 0, (5).to_bytes(2, "big") + (2**30).to_bytes(4, "big"))
    peer.raw(raw_frame(1, 0x4 | 0x1, 1, block) + bad_settings)
    await peer.goaway()
    peer.close()
    await connections_drop_to_zero(server)
    async with asyncio.timeout(2):
        while handlers.active:
            await asyncio.sleep(0.01)
    assert handlers.cancelled == 1
