"""Fake cluster gateways on loopback (aiohttp apps serving /status and completions), a
real `redis-server`, and a global router in the same event loop."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web

from inference_gateway.frontends.global_router import (
    GlobalRouter,
    build_global_router,
    parse_router_config,
)
from inference_gateway.frontends.global_router.server import runner_settings
from inference_gateway.shared_store.local_server import LocalRedis

HEALTHY = {
    "readyPods": 2,
    "stalePods": 0,
    "saturation": 0.1,
    "kvUsage": 0.1,
    "queue": {"critical": 0, "standard": 0, "sheddable": 0},
    "tokensPerSecond": 0.0,
    "errorRate": 0.0,
}


@dataclass
class FakeCluster:
    """A cluster gateway double: its status and its answers are set by the test."""

    name: str
    status: dict[str, Any] = field(default_factory=lambda: dict(HEALTHY))
    status_body: bytes | None = None  # raw bytes instead of `status` (garbage tests)
    answer_status: int = 200
    hang_s: float = 2.0  # how long answer_status -1 stays silent
    answer_delay_s: float = 0.0  # a pause before any answer
    status_delay_s: float = 0.0  # a slow status answer (ordering tests)
    # how a stream goes: ok | stall (first chunk, then hang_s of silence) | break (first
    # chunk, then the connection is cut) | error_event (first chunk, then the gateway's SSE
    # error event and the end) | slow (a chunk every 0.2 s, 30 of them) |
    # split_usage (the usage event split across two writes) | responses (the Responses
    # API's `response.completed` event carries the usage) | long (200 one-token chunks,
    # each with its `finish_reason` key, as vLLM streams them)
    stream_mode: str = "ok"
    hits: Counter[str] = field(default_factory=Counter)
    status_polls: int = 0  # /status requests received
    bodies: list[dict[str, Any]] = field(default_factory=list)  # the requests, as sent
    cancelled_at: list[float] = field(default_factory=list)  # loop times of seen cancels
    runner: web.AppRunner | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _status(self, request: web.Request) -> web.Response:
        self.status_polls += 1
        if self.status_delay_s:
            await asyncio.sleep(self.status_delay_s)
        if self.status_body is not None:
            return web.Response(body=self.status_body, content_type="application/json")
        return web.json_response(self.status)

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._answer(request)
        except asyncio.CancelledError:  # the caller closed the connection (cancellation on)
            self.cancelled_at.append(asyncio.get_running_loop().time())
            raise

    async def _stream(self, request: web.Request, usage: dict[str, int]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"choices":[{"text":"hi"}]}\n\n')
        mode = self.stream_mode
        if mode == "stall":
            await asyncio.sleep(self.hang_s)
        elif mode == "error_event":  # a cluster gateway that could not go on itself
            await response.write(
                b'data: {"error": {"message": "broke", "code": "stream_broken"}}\n\n'
            )
            await response.write_eof()
            return response
        elif mode == "break":
            assert request.transport is not None
            request.transport.abort()  # a chunked body cut short: the client sees it broken
            return response
        elif mode == "slow":
            for _ in range(30):
                await asyncio.sleep(0.2)
                await response.write(b'data: {"choices":[{"text":"."}]}\n\n')
        elif mode == "long":
            for _ in range(200):
                await response.write(
                    b'data: {"choices":[{"index":0,"text":"t","finish_reason":null}]}\n\n'
                )
        usage_json = orjson.dumps(usage)
        if mode == "split_usage":
            line = b'data: {"choices":[],"usage":' + usage_json + b"}\n\n"
            await response.write(line[:20])
            await asyncio.sleep(0.05)  # two chunks on the wire
            await response.write(line[20:])
        elif mode == "responses":
            event = {"type": "response.completed", "response": {"id": "r", "usage": {
                "input_tokens": usage["prompt_tokens"],
                "output_tokens": usage["completion_tokens"],
                "total_tokens": usage["total_tokens"]}}}  # fmt: skip
            await response.write(b"event: response.completed\ndata: " + orjson.dumps(event))
            await response.write(b"\n\n")
        else:
            await response.write(b'data: {"choices":[],"usage":' + usage_json + b"}\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        self.hits[request.headers.get("x-gateway-inference-objective", "")] += 1
        if self.answer_delay_s:
            await asyncio.sleep(self.answer_delay_s)
        if self.answer_status == -1:  # a cluster that accepted and went silent
            await asyncio.sleep(self.hang_s)
        if self.answer_status != 200:
            return web.json_response(
                {"error": {"message": "busy"}},
                status=self.answer_status,
                headers={"retry-after": "7"},
            )
        usage = {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
        if body.get("stream"):
            return await self._stream(request, usage)
        return web.json_response({"choices": [{"text": self.name}], "usage": usage})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def start(self, *, cancellation: bool = False) -> FakeCluster:
        """`cancellation`: the handler is cancelled when its caller hangs up, as in
        `igw serve` (so `cancelled_at` records it)."""
        app = web.Application()
        app.router.add_get("/status", self._status)
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_get("/v1/models", self._models)
        self.runner = web.AppRunner(app, handler_cancellation=cancellation)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


@asynccontextmanager
async def running_router(config: dict[str, Any]) -> AsyncIterator[tuple[str, GlobalRouter]]:
    app, router = build_global_router(parse_router_config(config), seed=1)
    runner = web.AppRunner(app, **runner_settings())  # as `igw global` runs it
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", router
    finally:
        await runner.cleanup()


@pytest.fixture
async def fake_clusters() -> AsyncIterator[list[FakeCluster]]:
    clusters = [await FakeCluster(name).start() for name in ("a", "b", "c")]
    yield clusters
    await asyncio.gather(*(c.stop() for c in clusters))


@pytest.fixture
def redis_server() -> Iterator[LocalRedis]:
    with LocalRedis() as server:
        yield server
