"""`igw serve`'s HTTP server against clients that misbehave: a slow request head is cut
off at the header deadline, a malformed request logs one line (no traceback), and a
client that hangs up mid-stream logs no traceback. aiohttp's server on loopback with the
settings `igw serve` passes to `web.run_app` (`RUN_OPTIONS` and `server_settings`); the
pod is a scripted aiohttp app."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from inference_gateway.assembly.serve import RUN_OPTIONS, build_gateway
from inference_gateway.cli.serve import register
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.transport.http_settings import HEADER_TIMEOUT_S, server_settings

MODEL = "llama-3.1-8b"
POD_LOG = "test.pod"
METRICS = "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0\n"


@asynccontextmanager
async def slow_streaming_pod() -> AsyncIterator[int]:
    """A pod whose completions stream one SSE event every 20 ms for two seconds."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=METRICS)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL}]})

    async def complete(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for i in range(100):
            await response.write(b'data: {"choices": [{"text": "%d"}]}\n\n' % i)
            await asyncio.sleep(0.02)
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", complete)
    runner = web.AppRunner(app, logger=logging.getLogger(POD_LOG))  # the pod's own noise
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


@asynccontextmanager
async def gateway(pod_port: int, header_timeout_s: float) -> AsyncIterator[int]:
    app, _ = build_gateway([Endpoint("pod", "127.0.0.1", pod_port, pool="p")])
    runner = web.AppRunner(app, **{**RUN_OPTIONS, **server_settings(header_timeout_s)})  # type: ignore[arg-type]
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def closed_after(reader: asyncio.StreamReader, limit_s: float) -> float:
    started = time.monotonic()
    async with asyncio.timeout(limit_s):
        while await reader.read(4096):
            pass
    return time.monotonic() - started


async def test_a_slow_request_head_is_cut_off_at_the_deadline() -> None:
    async with slow_streaming_pod() as pod, gateway(pod, header_timeout_s=0.3) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")

        async def trickle() -> None:  # a header line every 50 ms, never the blank line
            for i in range(100):
                writer.write(b"x-slow-%d: y\r\n" % i)
                await asyncio.sleep(0.05)

        feeding = asyncio.create_task(trickle())
        try:
            assert await closed_after(reader, limit_s=3.0) < 2.0
        finally:
            feeding.cancel()
            writer.close()
        # a connection that sends nothing at all is closed too
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await closed_after(reader, limit_s=3.0) < 2.0
        writer.close()


def test_igw_serve_has_a_header_timeout_flag() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["serve", "--endpoints", "e.yaml", "--header-timeout", "2.5"])
    assert args.header_timeout == 2.5
    defaults = parser.parse_args(["serve", "--endpoints", "e.yaml"])
    assert defaults.header_timeout == HEADER_TIMEOUT_S
    assert server_settings(2.5)["keepalive_timeout"] == 2.5
    with pytest.raises(ValueError):
        server_settings(0)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n"
        b"content-length: 2\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nbad header\r\n\r\n",
    ],
)
async def test_a_malformed_request_logs_one_line(
    request_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    async with slow_streaming_pod() as pod, gateway(pod, header_timeout_s=5) as port:
        with caplog.at_level(logging.DEBUG):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request_bytes)
            status = await asyncio.wait_for(reader.readline(), 5)
            async with asyncio.timeout(5):  # the line may follow the answer
                while not [r for r in caplog.records if "malformed request" in r.getMessage()]:
                    await asyncio.sleep(0.01)
            writer.close()
            await asyncio.sleep(0.05)
    assert status.startswith(b"HTTP/1.1 400") or status.startswith(b"HTTP/1.0 400"), status
    lines = [r for r in caplog.records if "malformed request" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert not [r for r in caplog.records if r.exc_info and r.name != POD_LOG], caplog.text


async def test_a_client_hanging_up_mid_stream_logs_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 100, "stream": True})
    async with slow_streaming_pod() as pod, gateway(pod, header_timeout_s=5) as port:
        with caplog.at_level(logging.DEBUG):
            for _ in range(5):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(
                    b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
                    b"\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body.encode())
                )
                assert (await reader.readline()).startswith(b"HTTP/1.1 200")
                await reader.readuntil(b"data: ")  # the stream has started
                writer.transport.abort()  # hang up
            await asyncio.sleep(0.3)  # the gateway's next writes meet the closed socket
    gateway_records = [r for r in caplog.records if r.name != POD_LOG]
    assert not [r for r in gateway_records if r.exc_info], caplog.text


def test_a_client_reset_reaching_the_server_log_is_one_debug_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Where a handler still raises on a client that left, aiohttp's `Error handling
    request` becomes one DEBUG line; other exceptions keep their traceback."""
    from aiohttp.client_exceptions import ClientConnectionResetError

    logger = server_settings()["logger"]
    with caplog.at_level(logging.DEBUG):
        try:
            raise ClientConnectionResetError("Cannot write to closing transport")
        except ClientConnectionResetError as error:
            logger.exception("Error handling request from %s", "127.0.0.1", exc_info=error)
        try:
            raise RuntimeError("a bug")
        except RuntimeError as error:
            logger.exception("Error handling request from %s", "127.0.0.1", exc_info=error)
    reset, bug = caplog.records
    assert reset.levelno == logging.DEBUG and not reset.exc_info
    assert "client left" in reset.getMessage()
    assert bug.levelno == logging.ERROR and bug.exc_info
