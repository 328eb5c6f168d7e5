"""Property-based fuzzing of the picker's HTTP/2 server with frame sequences.

Hypothesis draws sequences of frames, some well formed (a gRPC call's HEADERS and DATA,
WINDOW_UPDATE, SETTINGS, PING, RST_STREAM), most arbitrary (any type, flags, stream
and payload), and plays them after the client preface. Whatever the sequence:

* the server never raises (no exception reaches the event loop's handler);
* what the connection holds stays within the policy's bounds (read buffer, header
  block, unread DATA, streams, queued writes): memory cannot grow without limit;
* once the peer leaves, its connection and every call it started are gone;
* a normal call on a fresh connection still succeeds.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest
from h2.events import StreamEnded
from h2_peer import H2Peer, grpc_message, raw_frame
from hpack import Encoder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inference_gateway.transport.http2_server import Call, ConnectionPolicy, Http2GrpcServer, Method

ECHO = "/fuzz.Echo/Once"
HOLD = "/fuzz.Hold/Open"
POLICY = ConnectionPolicy(keepalive_s=5, keepalive_timeout_s=5, idle_timeout_s=60)
BARRIER = b"barrier!"


@pytest.fixture(autouse=True, scope="module")
def _earlier_files_garbage_collected() -> Iterator[None]:
    """Collect what earlier test files on this worker left, with no loop running, before
    the first example. An `openai.AsyncOpenAI` left unclosed closes itself when collected
    by scheduling `aclose()` on whatever loop is running then (`openai._base_client.
    AsyncHttpxClientWrapper.__del__`); collected during an example, that task fails on
    its own closed loop and reaches this test's exception handler, which fails the server
    for another file's client (seen once `make test` grouped files per worker)."""
    gc.collect()
    yield


def call_headers(path: str) -> bytes:
    return Encoder().encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "fuzz"),
            ("content-type", "application/grpc"),
        ]
    )


streams = st.sampled_from([0, 1, 3, 5, 7, 2, 2**31 - 1])
arbitrary = st.builds(
    raw_frame,
    st.integers(0, 12) | st.integers(13, 255),
    st.integers(0, 255),
    streams,
    st.binary(max_size=48),
)
well_formed = st.one_of(
    st.builds(
        lambda s, path, end: raw_frame(1, 0x4 | (0x1 if end else 0), s, call_headers(path)),
        st.sampled_from([1, 3, 5, 7]),
        st.sampled_from([ECHO, HOLD, "/nope/Nope"]),
        st.booleans(),
    ),
    st.builds(
        lambda s, body, end: raw_frame(0, 0x1 if end else 0, s, grpc_message(body)),
        st.sampled_from([1, 3, 5, 7]),
        st.binary(max_size=64),
        st.booleans(),
    ),
    st.builds(
        lambda s, n: raw_frame(8, 0, s, n.to_bytes(4, "big")),
        st.sampled_from([0, 1, 3]),
        st.integers(0, 2**31 - 1),
    ),
    st.builds(
        lambda key, value: raw_frame(4, 0, 0, key.to_bytes(2, "big") + value.to_bytes(4, "big")),
        st.integers(1, 8),
        st.integers(0, 2**32 - 1),
    ),
    st.builds(lambda s: raw_frame(3, 0, s, (8).to_bytes(4, "big")), st.sampled_from([1, 3, 5])),
    st.builds(lambda data: raw_frame(6, 0, 0, data), st.binary(min_size=8, max_size=8)),
)
sequences = st.lists(well_formed | arbitrary, max_size=40)


class Bookkeeping:
    def __init__(self) -> None:
        self.active = 0

    async def echo(self, call: Call) -> None:
        while (message := await call.read()) is not None:
            call.send([message])

    async def hold(self, call: Call) -> None:
        self.active += 1
        try:
            while await call.read() is not None:
                pass
            await asyncio.sleep(30)
        finally:
            self.active -= 1


def check_bounds(server: Http2GrpcServer) -> None:
    for conn in server.connections:
        h2 = conn.h2
        assert h2.buffered <= POLICY.max_frame_size + 9
        assert len(h2.header_block) <= POLICY.max_header_block
        assert len(h2.streams) <= POLICY.max_concurrent_streams
        held = sum(stream.held for stream in h2.streams.values())
        assert held <= POLICY.connection_window
        for stream in h2.streams.values():
            assert len(stream.partial) <= stream.max_message + 5
        if conn.transport is not None:
            assert conn.transport.get_write_buffer_size() <= POLICY.write_high_water + 2**20


async def play(frames: list[bytes]) -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    book = Bookkeeping()
    server = Http2GrpcServer(
        {ECHO: Method(book.echo, max_message=256), HOLD: book.hold}, policy=POLICY
    )
    port = await server.start("127.0.0.1", 0)
    try:
        peer = await H2Peer.connect(port)
        peer.raw(b"".join(frames) + raw_frame(6, 0, 0, BARRIER))
        # Everything before the barrier PING is processed once its ACK (or the end of
        # the connection) arrives.
        buffer = bytearray()
        async with asyncio.timeout(5):
            while BARRIER not in buffer:
                data = await peer.reader.read(65_536)
                if not data:
                    break
                buffer += data
                check_bounds(server)
        check_bounds(server)
        peer.close()
        async with asyncio.timeout(5):
            while server.connections or book.active:
                await asyncio.sleep(0.005)
        fresh = await H2Peer.connect(port)
        stream = fresh.start_call(ECHO)
        fresh.send_message(stream, b"still here", end=True)
        events = await fresh.events(StreamEnded)
        fresh.close()
        assert any(isinstance(e, StreamEnded) for e in events)
    finally:
        await server.stop(0)
    assert not errors, errors


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(sequences)
def test_any_frame_sequence_leaves_the_server_bounded_and_serving(frames: list[bytes]) -> None:
    asyncio.run(play(frames))
