"""The picker's own HTTP/2 gRPC server (`transport/http2_server.py`), below and above the frames.

Real gRPC clients (grpcio's C core, as Envoy's role is played elsewhere in these tests)
check it speaks gRPC; a hand-written HTTP/2 client checks the framing cases a gRPC
client rarely produces on loopback: CONTINUATION, padding, tiny flow-control windows,
PING, a compressed message, a bad connection preface.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import orjson
import pytest
from fake_envoy import FakeEnvoy, PickerFactory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hpack import Decoder, Encoder

from inference_gateway.frontends.extproc.wire import BODY_CHUNK_BYTES
from inference_gateway.transport.h2_frames import (
    CACHED_BLOCK_BYTES,
    HeaderDecoder,
    keeps_table,
)
from inference_gateway.transport.http2_server import (
    Call,
    GrpcCode,
    HealthService,
    Http2GrpcServer,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
ECHO = "/test.Echo/Twice"


async def twice(call: Call) -> None:
    """Answers every message with two copies of it."""
    while (message := await call.read()) is not None:
        call.send([message, message])


@pytest.fixture
async def server() -> AsyncIterator[tuple[Http2GrpcServer, HealthService, int]]:
    health = HealthService()
    server = Http2GrpcServer({ECHO: twice, **health.handlers()})
    port = await server.start("127.0.0.1", 0)
    yield server, health, port
    await server.stop(0)


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


class RawClient:
    """Just enough of an HTTP/2 client to send chosen frames and read the server's."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.encoder, self.decoder = Encoder(), Decoder()

    @classmethod
    async def connect(cls, port: int, settings: bytes = b"") -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(PREFACE + frame(4, 0, 0, settings))
        return cls(reader, writer)

    async def read(self) -> tuple[int, int, int, bytes]:
        async with asyncio.timeout(5):
            head = await self.reader.readexactly(9)
            payload = await self.reader.readexactly(int.from_bytes(head[:3], "big"))
        return head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF, payload

    async def read_until(
        self, kind: int, stream: int | None = None
    ) -> list[tuple[int, int, int, bytes]]:
        frames = []
        while True:
            got = await self.read()
            frames.append(got)
            if got[0] == kind and (stream is None or got[2] == stream):
                return frames

    def headers_block(self, path: str) -> bytes:
        return self.encoder.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", "picker"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ]
        )

    def close(self) -> None:
        self.writer.close()


def grpc_message(payload: bytes, compressed: bool = False) -> bytes:
    return bytes((int(compressed),)) + len(payload).to_bytes(4, "big") + payload


async def test_grpc_client_round_trip_and_unknown_method(
    server: tuple[Http2GrpcServer, HealthService, int],
) -> None:
    _, _, port = server
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream(ECHO)()
        await call.write(b"one")
        assert [await call.read(), await call.read()] == [b"one", b"one"]
        await call.done_writing()
        assert await call.read() is grpc.aio.EOF
        assert await call.code() == grpc.StatusCode.OK
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await channel.unary_unary("/test.Echo/Missing")(b"x", timeout=5)
        assert error.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_health_check_and_watch(server: tuple[Http2GrpcServer, HealthService, int]) -> None:
    _, health, port = server
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        watch = stub.Watch(health_pb2.HealthCheckRequest(service="svc"))
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        await health.set("svc", health_pb2.HealthCheckResponse.SERVING)
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        await health.enter_graceful_shutdown()
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()


async def test_framing_continuation_padding_tiny_window_and_ping(
    server: tuple[Http2GrpcServer, HealthService, int],
) -> None:
    _, _, port = server
    # The client's stream window is 7 bytes: the server must wait for WINDOW_UPDATE.
    client = await RawClient.connect(port, settings=(4).to_bytes(2, "big") + (7).to_bytes(4, "big"))
    try:
        await client.read_until(4)  # the server's SETTINGS (then its window)
        client.writer.write(frame(4, 1, 0))  # ack them
        block = client.headers_block(ECHO)
        # HEADERS padded with 3 bytes, the block split across a CONTINUATION.
        client.writer.write(frame(1, 0x8, 1, b"\x03" + block[:5] + b"\0\0\0"))
        client.writer.write(frame(9, 0x4, 1, block[5:]))
        # One message in a padded DATA frame that also ends the stream.
        client.writer.write(frame(0, 0x8 | 0x1, 1, b"\x02" + grpc_message(b"hello") + b"\0\0"))
        client.writer.write(frame(6, 0, 0, b"12345678"))
        data = b""
        status = None
        while status is None:
            kind, flags, stream, payload = await client.read()
            if kind == 6:
                assert flags == 1 and payload == b"12345678"  # PING ACK
            elif kind == 0:
                assert stream == 1 and len(payload) <= 7
                data += payload
                client.writer.write(frame(8, 0, 1, len(payload).to_bytes(4, "big")))
            elif kind == 1 and flags & 0x1:
                status = dict(client.decoder.decode(payload))
            elif kind == 1:
                assert dict(client.decoder.decode(payload)) == {
                    ":status": "200",
                    "content-type": "application/grpc",
                }
        assert data == grpc_message(b"hello") * 2
        assert status == {"grpc-status": "0"}
    finally:
        client.close()


async def test_compressed_message_is_unimplemented_and_bad_preface_gets_goaway(
    server: tuple[Http2GrpcServer, HealthService, int],
) -> None:
    _, _, port = server
    client = await RawClient.connect(port)
    try:
        client.writer.write(frame(1, 0x4, 1, client.headers_block(ECHO)))
        client.writer.write(frame(0, 0x1, 1, grpc_message(b"zipped", compressed=True)))
        *_, (_, flags, _, payload) = await client.read_until(1, stream=1)
        assert flags & 0x1
        trailers = dict(client.decoder.decode(payload))
        assert trailers[":status"] == "200"  # trailers-only answer
        assert trailers["grpc-status"] == str(GrpcCode.UNIMPLEMENTED)
    finally:
        client.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    # Our SETTINGS and window first, then GOAWAY with PROTOCOL_ERROR (1).
    assert head[3] == 4
    goaway = head.index(b"\x07\x00\x00\x00\x00\x00", 9)  # type GOAWAY, flags, stream 0
    assert head[goaway + 10 : goaway + 14] == (1).to_bytes(4, "big")


async def test_a_handler_that_waits_on_something_else_moves_into_a_task() -> None:
    """Handlers run in place while they wait only for messages; any other wait (here a
    timer, in the picker an admission queue) continues in a Task, cancellable there."""
    tasks: list[asyncio.Task[object] | None] = []
    cancelled = asyncio.Event()

    async def slow(call: Call) -> None:
        tasks.append(asyncio.current_task())  # None: running in place
        while (message := await call.read()) is not None:
            await asyncio.sleep(0.01)
            tasks.append(asyncio.current_task())
            call.send([message])
            if message == b"park":
                try:
                    await asyncio.sleep(30)
                finally:
                    cancelled.set()

    server = Http2GrpcServer({ECHO: slow})
    port = await server.start("127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_stream(ECHO)()
            for message in (b"a", b"b"):
                await call.write(message)
                assert await call.read() == message
            await call.write(b"park")
            assert await call.read() == b"park"
            call.cancel()  # RST_STREAM: the Task is cancelled
            await asyncio.wait_for(cancelled.wait(), 5)
    finally:
        await server.stop(0)
    assert tasks[0] is None
    assert all(t is not None for t in tasks[1:]) and len(set(tasks[1:])) == 1


async def test_stop_cancels_open_calls() -> None:
    started, ended = asyncio.Event(), asyncio.Event()

    async def waits(call: Call) -> None:
        started.set()
        try:
            await call.read()
            await asyncio.sleep(30)
        finally:
            ended.set()

    server = Http2GrpcServer({ECHO: waits})
    port = await server.start("127.0.0.1", 0)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream(ECHO)()
        await call.write(b"x")
        await asyncio.wait_for(started.wait(), 5)
        await server.stop(0)
        await asyncio.wait_for(ended.wait(), 5)
        assert await call.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


@pytest.mark.parametrize("transport", ["http2"])
async def test_megabyte_bodies_flow_through_the_windows(make_picker: PickerFactory) -> None:
    """3 MB in 100 KB chunks: the answer (49 mutation chunks) overruns gRPC's initial
    64 KB window many times over, so it only arrives if WINDOW_UPDATEs are honoured."""
    picker = await make_picker()
    body = orjson.dumps(
        {
            "model": "llama-3.1-8b",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
            "metadata": {"blob": "x" * 3_000_000},
        }
    )
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        out = await envoy.exchange("/v1/chat/completions", body, chunk_size=100_000)
    chunks = [m for m in out.messages if m.HasField("request_body")]
    assert len(chunks) == -(-len(body) // BODY_CHUNK_BYTES)
    assert out.upstream_body == body
    assert out.status == 200


async def test_header_cache_follows_the_dynamic_table() -> None:
    """Equal indexed-only blocks share one decode; a block that can change the HPACK
    table clears the cache, so a later equal byte string is decoded afresh."""
    decoder = HeaderDecoder(65_536)
    encoder = Encoder()
    first = encoder.encode([(":path", "/a"), ("x-id", "1")])
    assert not keeps_table(first)
    assert decoder.decode(first) == {":path": "/a", "x-id": "1"}
    again = encoder.encode([(":path", "/a"), ("x-id", "1")])
    assert keeps_table(again)
    assert decoder.decode(again) is decoder.decode(again)  # cached
    assert decoder.decode(encoder.encode([("x-id", "2")])) == {"x-id": "2"}  # table grows
    assert decoder.cache == {}
    shifted = encoder.encode([(":path", "/a"), ("x-id", "1")])
    assert decoder.decode(shifted) == {":path": "/a", "x-id": "1"}


def _literal(name_index: int, value: bytes, name: bytes = b"") -> bytes:
    """RFC 7541 6.2.2, literal without indexing, lengths under 127, no Huffman."""
    head = bytes([name_index]) + (bytes([len(name)]) + name if name_index == 0 else b"")
    return head + bytes([len(value)]) + value


ENVOY_PATH = b"/envoy.service.ext_proc.v3.ExternalProcessor/Process"
# The shape Envoy 1.40's ext_proc client sends on every stream (read off the wire through
# bench/envoy_path.py): `:method POST` indexed, `:path` a literal without indexing (there
# Huffman-coded), the other fields indexed; `:authority` is a literal here too, so that
# the block holds two.
ENVOY_BLOCK = b"\x83" + _literal(4, ENVOY_PATH) + _literal(1, b"127.0.0.1:9002")


def test_envoys_literal_headers_are_decoded_once() -> None:
    """A block of literals without indexing leaves the table as it was, so it is
    cached like an indexed one; one that names a header never to index is not kept, nor
    is one over the size bound."""
    decoder = HeaderDecoder(65_536)
    headers = decoder.decode(ENVOY_BLOCK)
    assert headers == {
        ":method": "POST",
        ":path": ENVOY_PATH.decode(),
        ":authority": "127.0.0.1:9002",
    }
    assert decoder.decode(ENVOY_BLOCK) is headers
    sensitive = b"\x83\x10\x0dauthorization\x06secret"
    assert decoder.decode(sensitive) == {":method": "POST", "authorization": "secret"}
    assert sensitive not in decoder.cache
    long = _literal(0, b"v" * 120, b"x-a") * (CACHED_BLOCK_BYTES // 120 + 1)
    assert keeps_table(long)
    assert decoder.decode(long) is not None
    assert long not in decoder.cache


@pytest.mark.parametrize(
    ("block", "keeps"),
    [
        (b"\x86\x83\xc3", True),
        (b"\xff\x80\x01\x82", True),  # index 255 in continuation bytes, then index 2
        (ENVOY_BLOCK, True),
        (_literal(0, b"v", b"x-a"), True),  # a literal name too
        (b"\x0f\x2f" + bytes([0x7F, 0x01]) + b"v" * 128, True),  # long index and length
        (b"\xff\x49\x40", False),  # index 200, then a literal with incremental indexing
        (b"\x3f\xe1\x1f", False),  # a table size update
        (b"\x10\x01a\x01b", False),  # never indexed
        (ENVOY_BLOCK[:-1], False),  # the value cut short
        (b"\x04", False),  # the value missing
        (b"\x00\x05ab", False),  # the name cut short
        (b"\xff\x80", False),  # the index cut short
        (b"\x04\x7f" + b"\xff" * 8, False),  # a length past 2^28
    ],
)
def test_keeps_table(block: bytes, keeps: bool) -> None:
    assert keeps_table(block) is keeps
