"""The proxy's outbound HTTP/1.1 client against scripted raw-socket pods: framing
(Content-Length, chunked split at every byte, until close), chunk-by-chunk delivery,
keep-alive reuse, a pod closing an idle connection, and each failure's translation.
Strictness follows RFC 9112 (§6.1 Transfer-Encoding, §6.3 message body length, §7.1
chunk-size = 1*HEXDIG) as llhttp enforces it."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from inference_gateway.transport.http1_client import (
    Upstream,
    UpstreamConnectError,
    UpstreamError,
    UpstreamTimeout,
)

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head and body (Content-Length framed, as the client sends; a GET
    has none)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    return head, await reader.readexactly(length)


class Pod:
    """A loopback server running `script` per connection; counts connections."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.heads: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.script(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> Pod:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    client = Upstream(connect_timeout_s=2, read_timeout_s=2)
    yield client
    await client.close()


def answer(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
        % (
            len(body),
            extra,
            body,
        )
    )


async def test_content_length_answer_and_keep_alive_reuse(upstream: Upstream) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, body = await read_request(reader)
            pod.heads.append(head)
            writer.write(answer(b'{"echo": ' + body + b"}"))

    async with Pod(script) as pod:
        for i in range(3):
            response = await upstream.post(
                "127.0.0.1", pod.port, "/v1/completions", b'{"n": %d}' % i, {"x-request-id": "r"}
            ).response()
            assert (response.status, response.headers["content-type"]) == (200, "application/json")
            assert await response.read() == b'{"echo": {"n": %d}}' % i
            response.release()
        assert pod.connections == 1
        head = pod.heads[0].decode()
        assert head.startswith("POST /v1/completions HTTP/1.1\r\n")
        assert f"host: 127.0.0.1:{pod.port}\r\n" in head
        assert "x-request-id: r\r\n" in head
        assert "content-length: 8\r\n" in head


async def test_one_parser_reads_every_framing_in_turn_on_a_kept_connection(
    upstream: Upstream,
) -> None:
    """A kept connection keeps the llhttp parser it was made with: after a chunked
    answer with trailers, a 103 before a 200, a 204 and a Content-Length answer, each read
    to its end, the next one on the same connection and parser is read whole."""
    replies = [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n0\r\nt: x\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n" + answer(b"cd"),
        b"HTTP/1.1 204 No Content\r\n\r\n",
        answer(b"ef"),
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\ngh\r\n0\r\n\r\n",
    ]

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for reply in replies:
            await read_request(reader)
            writer.write(reply)
        await reader.read()

    async with Pod(script) as pod:
        bodies, parsers = [], set()
        for _ in replies:
            response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
            parsers.add(id(response._connection().parser))
            bodies.append(await response.read())
            response.release()
        assert bodies == [b"ab", b"cd", b"", b"ef", b"gh"]
        assert pod.connections == 1 and len(parsers) == 1


CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b"d\r\ndata: first\n\n\r\n"
    b"E;ext=1\r\ndata: second\n\n\r\n"
    b"0\r\ntrailer: x\r\n\r\n"
)


@pytest.mark.parametrize("step", [1, 2, 3, 7, len(CHUNKED)])
async def test_chunked_answer_split_anywhere(upstream: Upstream, step: int) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        for i in range(0, len(CHUNKED), step):
            writer.write(CHUNKED[i : i + step])
            await writer.drain()
            await asyncio.sleep(0)
        await reader.read()

    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        body = b"".join([piece async for piece in response.chunks()])
        assert body == b"data: first\n\ndata: second\n\n"
        assert "trailer" not in response.headers  # trailers never rewrite the head
        response.release()
        assert response._conn is None  # released once; a second release is a no-op
        response.release()


async def test_chunks_arrive_as_the_pod_sends_them(upstream: Upstream) -> None:
    go_on = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(CHUNKED[: CHUNKED.index(b"E;ext")])
        await go_on.wait()
        writer.write(CHUNKED[CHUNKED.index(b"E;ext") :])
        await reader.read()

    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        pieces = response.chunks()
        assert await anext(pieces) == b"data: first\n\n"  # before the pod sends the second
        go_on.set()
        assert [p async for p in pieces] == [b"data: second\n\n"]
        response.release()


async def test_answer_until_close_is_not_reused(upstream: Upstream) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nall of ")
        await writer.drain()
        writer.write(b"it")

    async with Pod(script) as pod:
        for _ in range(2):
            response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
            assert await response.read() == b"all of it"
            response.release()
        assert pod.connections == 2


async def test_pod_closing_an_idle_connection_is_retried_on_a_new_one(
    upstream: Upstream,
) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"{}"))
        await writer.drain()
        if pod.connections == 1:
            await asyncio.sleep(0.05)  # the client has pooled the connection by now
            writer.transport.abort()  # closes under the client: its next request is lost
            return
        await reader.read()

    async with Pod(script) as pod:
        first = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        await first.read()
        first.release()
        pending = upstream.post("127.0.0.1", pod.port, "/", b"{}", {})  # on the pooled one
        await asyncio.sleep(0.2)  # …which the pod closes meanwhile
        second = await pending.response()
        assert await second.read() == b"{}"
        second.release()
        assert pod.connections == 2


async def test_idle_connections_expire(upstream: Upstream) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer(b"{}"))

    upstream.idle_timeout_s = 0.05
    async with Pod(script) as pod:
        for _ in range(2):
            response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
            await response.read()
            response.release()
            await asyncio.sleep(0.1)
        assert pod.connections == 2


async def test_unread_or_broken_answers_close_the_connection(upstream: Upstream) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            reply = answer(b"x" * 100)
            writer.write(reply[:-50])
            await asyncio.sleep(0.05)
            writer.write(reply[-50:])

    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        response.release()  # released mid-body: the connection cannot be reused
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        await response.read()
        response.release()
        assert pod.connections == 2


async def test_refused_connection(upstream: Upstream) -> None:
    async with Pod(read_request) as pod:  # type: ignore[arg-type]
        port = pod.port
    with pytest.raises(UpstreamConnectError) as caught:
        await upstream.post("127.0.0.1", port, "/", b"{}", {}).response()
    assert caught.value.before_response
    assert not caught.value.sent  # nothing reached the pod


async def test_no_answer_times_out(upstream: Upstream) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    upstream.read_timeout_s = 0.1
    async with Pod(script) as pod:
        with pytest.raises(UpstreamTimeout) as caught:
            await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        assert caught.value.before_response


@pytest.mark.parametrize(
    ("reply", "no_byte"),
    [
        (b"", True),  # closed before answering
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n", False),  # closed inside the headers
        (b"SSH-2.0-OpenSSH\r\n\r\n", False),  # not HTTP
        (b"HTTP/1.1 OK\r\n\r\n", False),  # no status code
        (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nok", False),
        (b"HTTP/1.1 200 OK\r\nx-a: 1\nx-b: 2\r\ncontent-length: 0\r\n\r\n", False),  # bare LF
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok", False),
        (b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 70_000, False),  # headers without end
    ],
)
async def test_broken_heads_fail_before_the_response(
    upstream: Upstream, reply: bytes, no_byte: bool
) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()

    async with Pod(script) as pod:
        with pytest.raises(UpstreamError) as caught:
            await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        assert caught.value.before_response is no_byte
        # never reached the engine ⇔ UpstreamConnectError (the caller may try another pod)
        assert isinstance(caught.value, UpstreamConnectError) is no_byte
        # ... though the request was written: the engine may have taken it (pd_body.py)
        assert getattr(caught.value, "sent", True)


@pytest.mark.parametrize(
    "reply",
    [
        answer(b"0123456789")[:-4],  # closed inside a Content-Length body
        CHUNKED[: CHUNKED.index(b"E;ext")],  # closed between chunks
        CHUNKED.replace(b"d\r\ndata: first\n\n\r\n", b"zz\r\n"),  # bad chunk size
    ],
)
async def test_broken_bodies_fail_after_the_response(upstream: Upstream, reply: bytes) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()

    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        with pytest.raises(UpstreamError) as caught:
            _ = [piece async for piece in response.chunks()]
        assert not caught.value.before_response
        response.release()


async def test_informational_answers_are_skipped_and_204_has_no_body(
    upstream: Upstream,
) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"
        )
        await reader.read()

    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        assert response.status == 204
        assert await response.read() == b""
        response.release()


async def test_large_bodies_both_ways(upstream: Upstream) -> None:
    big = b"y" * 3_000_000

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, body = await read_request(reader)
        writer.write(answer(body + big))
        await writer.drain()
        await reader.read()

    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"x" * 100_000, {}).response()
        total = 0
        async for piece in response.chunks():  # the reader pauses and resumes the socket
            total += len(piece)
            await asyncio.sleep(0)
        assert total == 100_000 + len(big)
        response.release()


async def test_header_injection_is_refused(upstream: Upstream) -> None:
    with pytest.raises(ValueError, match="CR or LF"):
        upstream.post("127.0.0.1", 9, "/", b"{}", {"x-request-id": "a\r\nhost: evil"})


async def test_an_abandoned_request_closes_its_connection(upstream: Upstream) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer(b"{}"))

    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        await response.read()
        response.release()
        upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).abandon()
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        await response.read()
        response.release()
        assert pod.connections == 2


def test_public_api() -> None:
    from inference_gateway.transport import http1_client as upstream

    assert sorted(upstream.__all__) == [
        "PendingResponse",
        "Upstream",
        "UpstreamConnectError",
        "UpstreamError",
        "UpstreamResponse",
        "UpstreamTimeout",
    ]


async def test_get_has_no_body_headers(upstream: Upstream) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pod.heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(answer(b"vllm:num_requests_waiting 0\n"))
        await reader.read()

    async with Pod(script) as pod:
        response = await upstream.get("127.0.0.1", pod.port, "/metrics").response()
        assert await response.read() == b"vllm:num_requests_waiting 0\n"
        response.release()
        head = f"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1:{pod.port}\r\n\r\n"
        assert pod.heads == [head.encode()]


async def test_a_failed_write_on_a_pooled_connection_is_retried_on_a_new_one(
    upstream: Upstream,
) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer(b"{}"))

    def refuse(data: bytes) -> None:
        raise RuntimeError("unable to perform operation: the handler is closed")

    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        await response.read()
        response.release()
        (pooled,) = upstream._idle[("127.0.0.1", pod.port)]
        pooled.transport.write = refuse  # type: ignore[union-attr, method-assign]
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        assert await response.read() == b"{}"
        response.release()
        assert pod.connections == 2


async def test_a_large_body_read_whole_does_not_stall(upstream: Upstream) -> None:
    big = b"z" * 3_000_000

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        reply = answer(big)
        for i in range(0, len(reply), 100_000):  # arrives in pieces, past the high water
            writer.write(reply[i : i + 100_000])
            await writer.drain()
            await asyncio.sleep(0.001)
        await reader.read()

    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        assert await asyncio.wait_for(response.read(), 5) == big
        response.release()


@pytest.mark.parametrize("size", [b"0x5", b"+5", b"5_0", b"-5", b" 5", b"5 "])
async def test_chunk_sizes_are_bare_hex(upstream: Upstream, size: bytes) -> None:
    """RFC 9112 §7.1: chunk-size = 1*HEXDIG. Python's int(…, 16) also takes `0x`, `+`,
    `_` and spaces, so a proxy in front would frame the body differently than we do."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            + size
            + b"\r\nhello\r\n0\r\n\r\n"
        )
        await reader.read()

    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        with pytest.raises(UpstreamError, match="chunk size"):
            await response.read()
        response.release()


async def test_chunked_is_a_token_not_a_substring(upstream: Upstream) -> None:
    """RFC 9112 §6.3: a response whose Transfer-Encoding does not end in the token
    `chunked` is read until the connection closes (and never reused)."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: xchunked\r\n\r\n5\r\nhello")

    async with Pod(script) as pod:
        for _ in range(2):
            response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
            assert await response.read() == b"5\r\nhello"  # raw: not decoded as chunks
            response.release()
        assert pod.connections == 2


@pytest.mark.parametrize(
    "head",
    [
        b"transfer-encoding: chunked\r\ncontent-length: 5\r\n",
        b"content-length: 5\r\ntransfer-encoding: chunked\r\n",
    ],
)
async def test_transfer_encoding_with_content_length_closes(
    upstream: Upstream, head: bytes
) -> None:
    """RFC 9112 §6.1: both headers may be a smuggling or splitting attempt; handled as an
    error and the connection closed, never reused for another request."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            if pod.connections == 1:
                writer.write(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n5\r\nhello\r\n0\r\n\r\n")
            else:
                writer.write(answer(b"{}"))

    async with Pod(script) as pod:
        with pytest.raises(UpstreamError, match=r"Content-Length|Transfer-Encoding"):
            await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        assert await response.read() == b"{}"
        response.release()
        assert pod.connections == 2


async def test_a_body_until_close_cut_by_a_reset_is_an_error(upstream: Upstream) -> None:
    """Only a clean close (FIN) ends a body framed by the close; a reset mid-body is a
    truncation the caller must see (the SSE error event), never a clean end."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # RST, not FIN

    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        pieces = response.chunks()
        assert await anext(pieces) == b"data: 1\n\n"
        with pytest.raises(UpstreamError, match="cut off") as caught:
            await anext(pieces)
        assert not isinstance(caught.value, UpstreamConnectError)
        response.release()


async def test_a_whole_body_read_is_capped(upstream: Upstream) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer(b"x" * 5000))

    upstream.max_body_bytes = 4000
    async with Pod(script) as pod:
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        with pytest.raises(UpstreamError, match="over 4000 bytes"):
            await response.read()
        response.release()
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        assert len(await response.read(limit=5000)) == 5000  # an explicit larger limit
        response.release()
        with pytest.raises(UpstreamError, match="over 100 bytes"):
            await upstream.get_text("127.0.0.1", pod.port, "/metrics", limit=100)
        response = await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        assert sum([len(p) async for p in response.chunks()]) == 5000  # streaming: no cap
        response.release()
        assert pod.connections == 3  # each over-limit answer closed its connection


async def test_exception_contract(upstream: Upstream) -> None:
    """Callers retry only `UpstreamConnectError` (never reached the engine); a timeout is
    `UpstreamTimeout` (504, no retry), even when not a byte had come."""
    assert issubclass(UpstreamConnectError, UpstreamError)
    assert issubclass(UpstreamTimeout, UpstreamError)
    assert not issubclass(UpstreamTimeout, UpstreamConnectError)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    upstream.read_timeout_s = 0.05
    async with Pod(silent) as pod:
        with pytest.raises(UpstreamTimeout) as caught:
            await upstream.post("127.0.0.1", pod.port, "/", b"{}", {}).response()
        assert not isinstance(caught.value, UpstreamConnectError)
