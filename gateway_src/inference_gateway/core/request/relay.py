"""One answer relay: how a model server's streamed answer is passed on to the client, for
every front end that relays one (the proxy `igw serve`, the global router `igw global`).

`StreamRelay.pump` moves chunks from the upstream to the client as they come and says
how the stream ended (`StreamEnd`):

* `COMPLETE`: the upstream ended it; the client's stream is closed.
* `BROKEN`: the upstream failed after its first byte (any error of the chunk source):
  the client gets the SSE error event (`stream_error_event`), then the end of the stream,
  never a silent truncation. The event names no library and no upstream detail.
* `STALLED`: no chunk for `idle_timeout_s` (a black-holed cluster that had already
  started the stream): the same error event with code `stream_stalled`, so a client is
  never left waiting on a silent stream for the whole read timeout.
* `CLIENT_LEFT`: a write to the client failed (it hung up): nothing more is written.
* `OVER_LIMIT`: `admit` refused a chunk (a token budget the stream outgrew): the chunk
  is not relayed and the stream ends with OpenAI's rate-limit error event.

A stream that breaks or stalls before its first byte was written gets no event and no
end: `Relayed.started` is False and the caller answers with a plain error status
instead (the client has not seen a 200 yet).

The caller does its own bookkeeping from the result (a broken or stalled stream counts
against the upstream). Everything here is transport-free: the chunk source is any async
iterator of bytes, the client any `Sink`, so both front ends (and tests) plug in their
own without a web framework in the core.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple, Protocol

import orjson

__all__ = [
    "Relayed",
    "Sink",
    "StreamEnd",
    "StreamRelay",
    "end_error",
    "is_event_stream",
    "stream_error_event",
]


class Sink(Protocol):
    """The client side of a stream (an aiohttp `StreamResponse` fits)."""

    async def write(self, data: bytes) -> None: ...

    async def write_eof(self) -> None: ...


class StreamEnd(Enum):
    COMPLETE = "ok"
    BROKEN = "stream_broken"
    STALLED = "stream_stalled"
    CLIENT_LEFT = "client_cancelled"
    OVER_LIMIT = "rate_limit_exceeded"


class Relayed(NamedTuple):
    end: StreamEnd
    started: bool  # a byte reached the client
    error: BaseException | None = None  # what the source raised (BROKEN, STALLED)


# the event's fixed text per end (never an exception's: that names internals)
_EVENTS = {
    StreamEnd.BROKEN: ("The model server stream broke.", "upstream_error"),
    StreamEnd.STALLED: ("The model server stream went silent.", "upstream_error"),
    StreamEnd.OVER_LIMIT: (
        "Rate limit reached: the answer outgrew what the token limit allows now.",
        "tokens",
    ),
}


def is_event_stream(content_type: str) -> bool:
    """An SSE answer (streamed chunk by chunk), as opposed to one JSON document."""
    return content_type.startswith("text/event-stream")


# a whole (non-streamed) answer refused for its size: nothing of it was sent
_WHOLE_OVER_LIMIT = (
    "Rate limit reached: the answer is larger than what the token limit allows now.",
    "tokens",
)


def end_error(end: StreamEnd, *, whole: bool = False) -> tuple[str, str]:
    """The fixed `(message, type)` of an early end: the SSE event's, and the plain
    error's where nothing was sent yet (`igw serve`'s 429, `igw picker`'s, `igw
    global`'s). `whole`: an `OVER_LIMIT` answer that did not stream (its code is the
    same, `end.value`)."""
    if whole and end is StreamEnd.OVER_LIMIT:
        return _WHOLE_OVER_LIMIT
    return _EVENTS[end]


def stream_error_event(end: StreamEnd) -> bytes:
    """The SSE event that ends a broken or stalled stream: OpenAI's error shape."""
    message, kind = end_error(end)
    error = {"message": message, "type": kind, "param": None, "code": end.value}
    return b"data: " + orjson.dumps({"error": error}) + b"\n\n"


@dataclass(frozen=True, slots=True)
class StreamRelay:
    """`idle_timeout_s`: the longest silence between two chunks (None: the source's own
    read timeout is the only bound)."""

    idle_timeout_s: float | None = None

    async def pump(
        self,
        chunks: AsyncIterable[bytes],
        client: Sink,
        *,
        first: bytes = b"",
        transform: Callable[[bytes], bytes] | None = None,
        flush: Callable[[], bytes] | None = None,
        sent: Callable[[bytes], None] | None = None,
        admit: Callable[[bytes], Awaitable[bool]] | None = None,
    ) -> Relayed:
        """Relay `first` (a chunk already read), then every chunk of `chunks`.
        `transform` rewrites each chunk on its way (and `flush` gives what it still
        holds at the end); `admit` may refuse a chunk before it is written (then
        `OVER_LIMIT`); `sent` sees every chunk as the client got it."""
        end = StreamEnd.COMPLETE
        pending = first
        started = False
        error: BaseException | None = None
        source = aiter(chunks)
        try:
            while True:
                if pending:
                    out = transform(pending) if transform is not None else pending
                    if out and admit is not None and not await admit(out):
                        end = StreamEnd.OVER_LIMIT
                        break
                    if out:
                        await client.write(out)
                        started = True
                        if sent is not None:
                            sent(out)
                try:
                    async with asyncio.timeout(self.idle_timeout_s):
                        pending = await anext(source)
                except StopAsyncIteration:
                    break
                except TimeoutError as failure:  # our idle deadline, or the source's own
                    end, error = StreamEnd.STALLED, failure
                    break
                except Exception as failure:  # any failure of the source: a broken stream
                    end, error = StreamEnd.BROKEN, failure
                    break
            if end is StreamEnd.COMPLETE and flush is not None:
                tail = flush()
                if tail:
                    await client.write(tail)
                    started = True
                    if sent is not None:
                        sent(tail)
            if end is not StreamEnd.COMPLETE:
                if not started:
                    return Relayed(end, False, error)
                await client.write(stream_error_event(end))
            await client.write_eof()
        except ConnectionError:  # a write to the client failed: it left
            return Relayed(StreamEnd.CLIENT_LEFT, started)
        return Relayed(end, started, error)
