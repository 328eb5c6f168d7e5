"""The one answer relay (core/request/relay.py), driven in-process: an async iterator of
chunks as the upstream, a list as the client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson

from inference_gateway.core.request.relay import (
    StreamEnd,
    StreamRelay,
    is_event_stream,
    stream_error_event,
)


class Client:
    def __init__(self, fail_after: int | None = None) -> None:
        self.written: list[bytes] = []
        self.ended = False
        self.fail_after = fail_after

    async def write(self, data: bytes) -> None:
        if self.fail_after is not None and len(self.written) >= self.fail_after:
            raise ConnectionResetError("the client left")
        self.written.append(data)

    async def write_eof(self) -> None:
        self.ended = True


async def source(*chunks: bytes, then: BaseException | float | None = None) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk
    if isinstance(then, BaseException):
        raise then
    if isinstance(then, float):
        await asyncio.sleep(then)


def error_code(data: bytes) -> str:
    assert data.startswith(b"data: ") and data.endswith(b"\n\n")
    return str(orjson.loads(data[6:])["error"]["code"])


async def test_a_complete_stream_is_passed_through_with_its_first_chunk() -> None:
    client, seen = Client(), []
    relayed = await StreamRelay().pump(source(b"b", b"c"), client, first=b"a", sent=seen.append)
    assert (relayed.end, relayed.started) == (StreamEnd.COMPLETE, True)
    assert client.written == [b"a", b"b", b"c"] == seen and client.ended


async def test_a_broken_stream_ends_with_an_error_event_that_names_no_library() -> None:
    client = Client()
    error = OSError("TransferEncodingError: 400, message='Not enough data'")
    relayed = await StreamRelay().pump(source(b"a", then=error), client)
    assert (relayed.end, relayed.started) == (StreamEnd.BROKEN, True)
    assert error_code(client.written[-1]) == "stream_broken"
    assert b"Not enough data" not in client.written[-1] and client.ended
    assert relayed.error is error  # the caller logs it; the client never sees it


async def test_a_silent_stream_ends_after_the_idle_timeout() -> None:
    client = Client()
    loop = asyncio.get_running_loop()
    started = loop.time()
    relayed = await StreamRelay(idle_timeout_s=0.2).pump(source(b"a", then=30.0), client)
    assert (relayed.end, relayed.started) == (StreamEnd.STALLED, True)
    assert loop.time() - started < 5  # the idle timeout, not the source's 30 s
    assert error_code(client.written[-1]) == "stream_stalled" and client.ended


async def test_a_break_before_any_byte_is_left_to_the_caller() -> None:
    client = Client()
    relayed = await StreamRelay().pump(source(then=OSError("gone")), client)
    assert (relayed.end, relayed.started) == (StreamEnd.BROKEN, False)
    assert client.written == [] and not client.ended  # a plain error status is still possible


async def test_a_client_that_leaves_gets_nothing_more() -> None:
    client = Client(fail_after=1)
    relayed = await StreamRelay().pump(source(b"a", b"b", b"c"), client)
    assert (relayed.end, relayed.started) == (StreamEnd.CLIENT_LEFT, True)
    assert client.written == [b"a"]


async def test_transform_and_flush() -> None:
    client = Client()
    relayed = await StreamRelay().pump(
        source(b"b"), client, first=b"a", transform=bytes.upper, flush=lambda: b"!"
    )
    assert relayed.end is StreamEnd.COMPLETE and client.written == [b"A", b"B", b"!"]


def test_content_types() -> None:
    assert is_event_stream("text/event-stream; charset=utf-8")
    assert not is_event_stream("application/json")
    assert error_code(stream_error_event(StreamEnd.BROKEN)) == "stream_broken"


async def test_admit_refuses_a_chunk_and_ends_with_the_rate_limit_event() -> None:
    """A token budget the stream outgrew: the refused chunk is not relayed."""
    client, allowed = Client(), [True, False]

    async def admit(chunk: bytes) -> bool:
        return allowed.pop(0)

    relayed = await StreamRelay().pump(source(b"b", b"c"), client, first=b"a", admit=admit)
    assert (relayed.end, relayed.started) == (StreamEnd.OVER_LIMIT, True)
    assert client.written[:1] == [b"a"] and error_code(client.written[-1]) == "rate_limit_exceeded"
    assert b"b" not in client.written and client.ended
