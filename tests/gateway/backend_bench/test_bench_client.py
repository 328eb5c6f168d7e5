"""The benchmark client turns every way a backend can fail into one clear reason.

A loopback aiohttp server plays the broken backends; each route is one failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from inference_gateway.backend_bench.client import BackendError, ChatClient

MESSAGES = [{"role": "user", "content": "hi"}]


async def _unauthorized(request: web.Request) -> web.Response:
    return web.json_response(
        {"error": {"message": "Invalid API key", "type": "auth", "code": 401}}, status=401
    )


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(2)
    return web.json_response({})


async def _no_done(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b'data: {"choices":[{"index":0,"delta":{"content":" the"}}]}\n\n')
    await response.write_eof()
    return response


async def _plain_json(request: web.Request) -> web.Response:
    return web.json_response({"choices": [{"message": {"content": "x"}}]})


async def _no_choices(request: web.Request) -> web.Response:
    return web.json_response({"result": "ok"})


@pytest.fixture
async def base() -> AsyncIterator[str]:
    app = web.Application()
    for name, handler in (
        ("unauthorized", _unauthorized),
        ("slow", _slow),
        ("no-done", _no_done),
        ("plain-json", _plain_json),
        ("no-choices", _no_choices),
    ):
        app.router.add_post(f"/{name}/v1/chat/completions", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


@pytest.mark.parametrize(
    ("route", "stream", "reason"),
    [
        ("unauthorized", True, "HTTP 401 (check the API key): Invalid API key"),
        ("unauthorized", False, "HTTP 401 (check the API key): Invalid API key"),
        ("slow", False, "timed out after 0.3 s"),
        ("no-done", True, "not an OpenAI-compatible answer: the stream ended without"),
        ("plain-json", True, "not an OpenAI-compatible answer: unexpected stream line"),
        ("no-choices", False, "not an OpenAI-compatible answer: no choices[0].message"),
    ],
)
async def test_failures_become_reasons(base: str, route: str, stream: bool, reason: str) -> None:
    async with aiohttp.ClientSession() as session:
        client = ChatClient(
            session, base_url=f"{base}/{route}/v1", model="m", api_key="k", timeout_s=0.3
        )
        with pytest.raises(BackendError) as error:
            if stream:
                await client.stream(MESSAGES, max_tokens=4)
            else:
                await client.complete({"messages": MESSAGES})
    assert error.value.reason.startswith(reason)
