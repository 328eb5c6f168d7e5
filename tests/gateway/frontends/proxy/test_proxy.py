"""The standalone gateway's wire behaviour against scripted pods on loopback: request ids,
the body limit, OpenAI-shaped errors, retries before the first byte (never after), SSE
passed through as the pod sends it, and the headers a pod receives."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from inference_gateway.assembly.core import ScrapeClient
from inference_gateway.assembly.serve import app_runner, build_gateway
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.transport.http1_client import UpstreamError

MODEL = "llama-3.1-8b"
METRICS = (
    "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0\n"
    'vllm:cache_config_info{block_size="16",num_gpu_blocks="26307"} 1\n'
)
ANSWER = {"id": "c", "object": "text_completion", "model": MODEL, "choices": [], "usage": {}}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def pod(handler: Handler, waiting: int = 0) -> AsyncIterator[tuple[int, list[web.Request]]]:
    """A pod that scrapes with `waiting` queued requests and answers with `handler`."""
    seen: list[web.Request] = []

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=METRICS.replace("waiting 0", f"waiting {waiting}"))

    async def complete(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        return await handler(request)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/chat/completions", complete)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1], seen  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


@asynccontextmanager
async def gateway(*ports: int, **options: Any) -> AsyncIterator[str]:
    endpoints = [
        Endpoint(f"pod-{p}", "127.0.0.1", p, pool="p", index=i) for i, p in enumerate(ports)
    ]
    app, _ = build_gateway(endpoints, **options)
    runner = app_runner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def ok(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response(ANSWER)


def body(**extra: Any) -> bytes:
    return orjson.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 4, **extra})


async def test_answer_headers_request_id_and_what_the_pod_sees() -> None:
    async with pod(ok) as (port, seen), gateway(port) as url, aiohttp.ClientSession() as client:
        async with client.post(
            url + "/v1/completions",
            data=body(),
            headers={"authorization": "Bearer k", "x-request-id": "req-1", "cookie": "a=b"},
        ) as r:
            assert r.status == 200
            assert await r.json() == ANSWER
            assert r.headers["x-request-id"] == "req-1"
            assert "x-gateway-destination-endpoint" not in r.headers  # pod addresses stay inside
            assert r.headers["content-type"].startswith("application/json")
        async with client.post(url + "/v1/completions", data=body()) as r:
            assert re.fullmatch("[0-9a-f]{32}", r.headers["x-request-id"])
            assert r.headers["x-request-id"] != "req-1"
        sent = seen[0]
        assert sent.path == "/v1/completions"
        assert sent.headers["x-request-id"] == "req-1"
        assert sent.headers["authorization"] == "Bearer k"
        assert sent.headers["content-type"] == "application/json"
        assert "cookie" not in sent.headers
        assert await sent.read() == body()  # the client's bytes, untouched


async def test_body_limit_bad_json_and_unknown_model_are_openai_errors() -> None:
    async with pod(ok) as (port, seen), gateway(port) as url, aiohttp.ClientSession() as client:
        big = body(prompt="x" * (4 * 2**20))
        for data, status, code in [
            (big, 413, "request_too_large"),
            (b"{not json", 400, "invalid_json"),
            (b'{"prompt": "no model"}', 400, "missing_model"),
        ]:
            async with client.post(url + "/v1/completions", data=data) as r:
                assert r.status == status
                error = (await r.json())["error"]
                assert error["code"] == code
                assert set(error) == {"message", "type", "param", "code"}
                assert r.headers["x-request-id"]
        assert seen == []


async def test_a_pod_failing_before_the_first_byte_is_retried_on_another() -> None:
    async def unavailable(request: web.Request) -> web.Response:
        return web.json_response({"error": "busy"}, status=503)

    async with (
        pod(unavailable) as (bad, bad_seen),
        pod(ok, waiting=3) as (good, _),  # so the bad pod ranks first
        gateway(bad, good, expose_endpoints=True) as url,
        aiohttp.ClientSession() as client,
    ):
        for _ in range(8):
            async with client.post(url + "/v1/completions", data=body()) as r:
                assert r.status == 200
                assert r.headers["x-gateway-destination-endpoint"] == f"127.0.0.1:{good}"
        assert len(bad_seen) == 8  # each was tried on the bad pod first


async def test_a_pod_that_went_away_is_retried_on_another() -> None:
    async with (
        pod(ok, waiting=3) as (good, _),  # so the vanished pod ranks first
        gateway_with_vanished_pod(good) as url,
        aiohttp.ClientSession() as client,
    ):
        for _ in range(8):
            async with client.post(url + "/v1/completions", data=body()) as r:
                assert r.status == 200
                assert r.headers["x-gateway-destination-endpoint"] == f"127.0.0.1:{good}"


@asynccontextmanager
async def gateway_with_vanished_pod(good: int) -> AsyncIterator[str]:
    """A second pod that was scraped fresh, then stopped: connections to it are refused
    until its scrape goes stale (2 s by default)."""
    async with pod(ok) as (gone, _):
        context = gateway(gone, good, expose_endpoints=True)
        url = await context.__aenter__()
    try:
        yield url
    finally:
        await context.__aexit__(None, None, None)


async def test_the_last_pods_failure_is_relayed() -> None:
    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=500, text="boom")

    async with (
        pod(broken) as (port, _),
        gateway(port) as url,
        aiohttp.ClientSession() as client,
        client.post(url + "/v1/completions", data=body()) as r,
    ):
        # the last pod's answer is relayed as it is: there is no one left to try
        assert r.status == 500
        assert await r.text() == "boom"


async def test_sse_chunks_pass_through_as_the_pod_sends_them() -> None:
    release = asyncio.Event()

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"n": 1}\n\n')
        await release.wait()
        await response.write(b'data: {"n": 2}\n\ndata: [DONE]\n\n')
        await response.write_eof()
        return response

    async with (
        pod(stream) as (port, _),
        gateway(port) as url,
        aiohttp.ClientSession() as client,
        client.post(url + "/v1/completions", data=body(stream=True)) as r,
    ):
        assert r.headers["content-type"] == "text/event-stream"
        first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), 5)
        assert first == b'data: {"n": 1}\n\n'  # while the pod still holds the rest
        release.set()
        assert await r.content.read() == b'data: {"n": 2}\n\ndata: [DONE]\n\n'


async def test_a_stream_breaking_after_the_first_byte_ends_with_an_error_event() -> None:
    attempts = 0

    async def breaks(request: web.Request) -> web.StreamResponse:
        nonlocal attempts
        attempts += 1
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"n": 1}\n\n')
        assert request.transport is not None
        request.transport.abort()
        return response

    async with pod(breaks) as (port, _), gateway(port) as url, aiohttp.ClientSession() as client:
        async with client.post(url + "/v1/completions", data=body(stream=True)) as r:
            assert r.status == 200
            events = [line async for line in r.content if line.strip()]
        assert events[0] == b'data: {"n": 1}\n'
        error = orjson.loads(events[-1].removeprefix(b"data: "))["error"]
        assert error["code"] == "stream_broken"
        assert attempts == 1  # never retried once a byte reached the client


async def test_scrape_fetch_decodes_text_and_refuses_errors() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=500)

    async with pod(handler, waiting=2) as (port, _):
        fetch = ScrapeClient(timeout_s=1.0)
        endpoint = Endpoint("pod", "127.0.0.1", port)
        assert "vllm:num_requests_waiting 2\n" in await fetch(endpoint, "/metrics")
        with pytest.raises(UpstreamError, match="HTTP 404"):
            await fetch(endpoint, "/nowhere")
        assert fetch.cpu_seconds() > 0  # what the store's CPU budget reads
        await fetch.close()


async def test_a_silent_pod_costs_the_scrape_round_its_deadline_and_its_connection() -> None:
    """Through the real scrape client: a pod that accepts and never answers is cut at the
    store's deadline (one a slice of scrapes), its view not renewed and its connection
    closed, not kept for the next round; the answering pod's view is fresh."""
    from inference_gateway.core.endpoints.store import EndpointStore

    hung_up = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the scraper gives up and closes
        hung_up.set()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    silent_port = server.sockets[0].getsockname()[1]
    fetch = ScrapeClient(timeout_s=5.0)  # the client's own read timeout would come later
    async with server, pod(lambda request: web.Response(), waiting=1) as (port, _):
        endpoints = [Endpoint("quiet", "127.0.0.1", silent_port)]
        endpoints.append(Endpoint("pod", "127.0.0.1", port))
        store = EndpointStore(endpoints, fetch, timeout_s=0.3)
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with asyncio.timeout(5):
            await store.scrape_once()
        assert 0.3 <= loop.time() - started < 2.0
        assert endpoints[0].metrics is None and endpoints[1].metrics is not None
        assert endpoints[1].metrics.waiting == 1
        async with asyncio.timeout(1):
            await hung_up.wait()  # the cut scrape's connection is closed, not kept
        await fetch.close()


async def test_a_refused_pod_is_not_picked_again_until_a_fresh_scrape() -> None:
    """Passive failure detection (the endpoint store's one rule, shared with the picker):
    the first refused connection takes the pod out of rotation at once, not when its
    scrape goes stale (60 s here), so only one request pays a retry."""
    from inference_gateway.core.scheduling.config_checks import parse_config

    spec = parse_config({"scrape": {"intervalMs": 50, "stalenessMs": 60_000, "timeoutMs": 100}})
    async with pod(ok, waiting=3) as (good, _), aiohttp.ClientSession() as client:
        async with pod(ok) as (gone, _):
            endpoints = [
                Endpoint("gone", "127.0.0.1", gone, pool="p", index=0),
                Endpoint("good", "127.0.0.1", good, pool="p", index=1),
            ]
            app, gateway = build_gateway(endpoints, spec, expose_endpoints=True)
            runner = app_runner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        try:
            for _ in range(8):
                async with client.post(url + "/v1/completions", data=body()) as r:
                    assert r.status == 200
                    assert r.headers["x-gateway-destination-endpoint"] == f"127.0.0.1:{good}"
            assert gateway.store.connection_failures == 1  # tried once, never again
            assert endpoints[0].stale and not endpoints[1].stale
        finally:
            await runner.cleanup()


async def test_serve_holds_a_request_for_an_empty_pool_until_a_pod_is_ready() -> None:
    """Scale from zero in `igw serve` too (the director's one admission rule): the pool's
    only pod is not up, the request waits in the standard queue (the KEDA metric counts
    it), and the pod that starts a second later answers it."""
    import socket

    from inference_gateway.core.scheduling.config_checks import parse_config
    from inference_gateway.emulator.profiles import pod_profile
    from inference_gateway.emulator.server import EmulatedPod

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    spec = parse_config(
        {
            "pools": [{"name": "p"}],
            "models": [{"name": MODEL, "pool": "p"}],
            "scrape": {"intervalMs": 50, "stalenessMs": 500, "timeoutMs": 200},
        }
    )
    app, _ = build_gateway([Endpoint("later", "127.0.0.1", port, pool="p")], spec)
    runner = app_runner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    queue = 'inference_extension_flow_control_queue_size{band="standard",name="p"} 1.0'
    pod_ = EmulatedPod("later", pod_profile("H100", MODEL), port=port)
    try:
        async with aiohttp.ClientSession() as client:
            held = asyncio.create_task(client.post(url + "/v1/completions", data=body()))
            async with asyncio.timeout(10):
                while True:
                    async with client.get(url + "/metrics") as r:
                        if queue in await r.text():
                            break
                    await asyncio.sleep(0.05)
            assert not held.done()
            await pod_.start()
            async with asyncio.timeout(10):
                response = await held
            assert response.status == 200
            response.release()
    finally:
        await pod_.stop()
        await runner.cleanup()
