"""aiohttp's outbound errors, made for real on loopback, read as the pod client's tree
(transport/aiohttp_errors.py) and by the attempt plan: what `igw global` retries."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest

from inference_gateway.core.request.attempts import AttemptPlan, Failure
from inference_gateway.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout
from inference_gateway.transport.aiohttp_errors import OUTBOUND_ERRORS, translate

Peer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def peer(handle: Peer) -> AsyncIterator[str]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1/completions"
    finally:
        server.close()
        await server.wait_closed()


async def read_head(reader: asyncio.StreamReader) -> None:
    await reader.readuntil(b"\r\n\r\n")


async def closes_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_head(reader)
    writer.close()


async def stays_silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_head(reader)
    await asyncio.sleep(2)
    writer.close()


async def cuts_the_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_head(reader)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
    await writer.drain()
    writer.close()


async def attempt(url: str, read_timeout_s: float = 5.0) -> UpstreamError:
    """One POST and its whole body, as `igw global` makes it; the translated error."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=2.0, sock_read=read_timeout_s)
    answered = False
    async with aiohttp.ClientSession(timeout=timeout) as session:
        try:
            async with session.post(url, data=b"{}") as response:
                answered = True
                await response.read()
        except OUTBOUND_ERRORS as error:
            return translate(error, answered=answered)
    raise AssertionError("the attempt did not fail")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_nothing_listening_is_never_started() -> None:
    error = await attempt(f"http://127.0.0.1:{free_port()}/v1/completions")
    assert isinstance(error, UpstreamConnectError) and not error.sent
    assert AttemptPlan().failure_of(error) is Failure.REFUSED


async def test_a_close_before_the_status_line_is_never_started() -> None:
    async with peer(closes_at_once) as url:
        error = await attempt(url)
    assert isinstance(error, UpstreamConnectError)
    assert error.sent  # written: the engine may have taken it (pd_body.py `for_next_pod`)
    assert AttemptPlan().after_error(error).retry


async def test_silence_is_a_timeout_never_retried() -> None:
    async with peer(stays_silent) as url:
        error = await attempt(url, read_timeout_s=0.2)
    assert isinstance(error, UpstreamTimeout) and error.before_response
    assert AttemptPlan().failure_of(error) is Failure.TIMEOUT
    assert not AttemptPlan().after_error(error).retry


async def test_a_body_cut_after_the_status_line_is_broken() -> None:
    async with peer(cuts_the_body) as url:
        error = await attempt(url)
    assert type(error) is UpstreamError and not error.before_response
    assert AttemptPlan().failure_of(error) is Failure.BROKEN


@pytest.mark.parametrize("answered", [False, True])
def test_a_connect_timeout_is_never_started(answered: bool) -> None:
    """aiohttp's connect timeout is a timeout too, but nothing was sent: never started."""
    error = translate(aiohttp.ConnectionTimeoutError("connect"), answered=answered)
    assert isinstance(error, UpstreamConnectError) and not error.sent
