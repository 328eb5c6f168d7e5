"""`igw serve` as a process against body tricklers and stop signals (issue 23, defect 7).

A header trickler was closed at the header deadline, a body trickler never (0 of 150 in
30 s); SIGHUP killed the process at once with 20 streams in flight, all cut, nothing
logged. Now a body must arrive within `--body-timeout` (408, connection closed), and
SIGTERM, SIGINT and SIGHUP all drain: the socket closes, the streams in flight finish,
one log line says how many were waited for, exit 0. The pod is an aiohttp server that
streams ten SSE events 100 ms apart.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from .serve_process import igw_serve, until_refused

MODEL = "llama-3.1-8b"


class StreamingPod:
    def __init__(self) -> None:
        self.cut = 0  # streams whose gateway connection went away mid-answer
        self.done = 0
        self.port = 0

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            text="vllm:num_requests_waiting 0\nvllm:num_requests_running 0\n"
            "vllm:kv_cache_usage_perc 0\n"
        )

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def complete(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:
            for n in range(10):
                event = {"model": MODEL, "choices": [{"text": str(n), "finish_reason": None}]}
                await response.write(b"data: " + orjson.dumps(event) + b"\n\n")
                await asyncio.sleep(0.1)
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionError, asyncio.CancelledError):
            self.cut += 1
            raise
        self.done += 1
        return response


@asynccontextmanager
async def streaming_pod() -> AsyncIterator[StreamingPod]:
    pod = StreamingPod()
    app = web.Application()
    app.router.add_get("/metrics", pod.metrics)
    app.router.add_get("/v1/models", pod.models)
    app.router.add_post("/v1/completions", pod.complete)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    pod.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield pod
    finally:
        await runner.cleanup()


async def test_body_tricklers_are_answered_408_and_closed_at_the_body_deadline(
    tmp_path: Path,
) -> None:
    """40 clients send a complete head and then one body byte every 200 ms: each gets a
    408 and a closed connection at the 1 s deadline (a close with body bytes unread may
    reach the client as a reset, which can discard the 408 before it is read); a normal
    request still succeeds."""
    async with (
        streaming_pod() as pod,
        igw_serve(tmp_path, [pod.port], "--body-timeout", "1") as served,
    ):
        body = orjson.dumps({"model": MODEL, "prompt": "x" * 200})
        head = (
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body)
        )

        async def trickler() -> tuple[bytes, float]:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(head)
            started = time.monotonic()

            async def feed() -> None:
                for i in range(len(body)):
                    writer.write(body[i : i + 1])
                    await asyncio.sleep(0.2)

            feeding = asyncio.create_task(feed())
            answer = b""
            try:
                async with asyncio.timeout(6):
                    while chunk := await reader.read(4096):  # until the gateway closes
                        answer += chunk
            except ConnectionResetError:
                pass  # closed with body bytes unread: the kernel may answer them with RST
            try:
                return answer, time.monotonic() - started
            finally:
                feeding.cancel()
                writer.close()

        results = await asyncio.gather(*(trickler() for _ in range(40)))
        assert all(seconds < 4.0 for _, seconds in results)  # every one closed
        answers = [answer for answer, _ in results if answer]  # what the RSTs left
        assert answers
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
            assert b'"code":"request_timeout"' in answer
        async with (
            aiohttp.ClientSession() as client,
            client.post(served.url + "/v1/completions", data=body) as r,
        ):
            assert r.status == 200
            await r.read()


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
async def test_a_stop_signal_drains_twenty_streams_and_says_so(
    tmp_path: Path, sig: signal.Signals
) -> None:
    async with streaming_pod() as pod, igw_serve(tmp_path, [pod.port]) as served:
        async with aiohttp.ClientSession() as client:
            data = orjson.dumps({"model": MODEL, "prompt": "hi", "stream": True})
            streams = [
                await client.post(served.url + "/v1/completions", data=data) for _ in range(20)
            ]
            for r in streams:
                assert r.status == 200
                await r.content.readuntil(b"\n\n")
            served.process.send_signal(sig)
            await until_refused(served.port)
            for r in streams:
                rest = await asyncio.wait_for(r.content.read(), 10)
                assert rest.endswith(b"data: [DONE]\n\n")
                r.close()
        assert await asyncio.wait_for(served.process.wait(), 15) == 0
        log = await served.stderr_text()
    assert pod.cut == 0 and pod.done == 20
    assert f"{sig.name} received" in log
    assert "waited for 20 in flight, 20 finished, 0 cut" in log
    assert "Traceback" not in log
