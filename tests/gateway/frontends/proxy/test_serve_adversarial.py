"""`igw serve` against clients and pods that misbehave, on loopback.

Each case is one way a real client or pod goes wrong: duplicate request ids, clients that
leave mid-stream, mid-answer or while queued, pods that go quiet or close early, bodies
that are malformed, oversize or try to credit a token bucket, readers that stall. After
each case a normal request must succeed and the gateway's bookkeeping must be back at
zero: no live request, nothing in flight or pending prefill on any pod, nobody queued.

The pods are aiohttp servers scripted through an extra `script` field of the request body
(which the gateway forwards untouched); they record what they saw and every request
that ended because its connection went away (the engine's view of a cancel).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from inference_gateway.assembly.serve import app_runner, build_gateway
from inference_gateway.config.spec import (
    FlowControlSpec,
    GatewayConfigSpec,
    RateLimitSpec,
    SaturationSpec,
)
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.frontends.proxy import Gateway

MODEL = "llama-3.1-8b"
USAGE = {"prompt_tokens": 2, "completion_tokens": 10, "total_tokens": 12}
# Admission out of the way (each case that needs a queue sets its own thresholds).
OPEN = FlowControlSpec(
    saturation=SaturationSpec(
        queue_threshold=10_000,
        noncritical_queue_threshold=10_000,
        prefill_threshold_s=None,
        noncritical_prefill_threshold_s=None,
        critical_reserve_s=None,
    )
)


class ScriptedPod:
    """A model server whose answers the request body scripts; it counts cancels."""

    def __init__(self, waiting: int = 0, *, dies: bool = False) -> None:
        self.waiting = waiting
        self.dies = dies  # closes every connection before answering
        self.seen = 0
        self.active = 0
        self.cancelled: list[float] = []  # monotonic time of each cancel seen
        self.port = 0

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            text=f"vllm:num_requests_waiting {self.waiting}\nvllm:num_requests_running 0\n"
            "vllm:kv_cache_usage_perc 0\n"
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="26307"} 1\n'
        )

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def complete(self, request: web.Request) -> web.StreamResponse:
        self.seen += 1
        self.active += 1
        try:
            body = await request.json()
            script = body.get("script", {})
            if self.dies:  # the engine dies before answering
                assert request.transport is not None
                request.transport.abort()
                return web.Response()
            if script.get("status"):
                return web.Response(status=script["status"], text="engine error")
            await asyncio.sleep(script.get("delay", 0))
            if body.get("stream"):
                return await self._stream(request, script)
            answer = {"id": "c", "object": "text_completion", "model": body["model"]}
            return web.json_response({**answer, "choices": [], "usage": USAGE})
        except (asyncio.CancelledError, ConnectionResetError):
            self.cancelled.append(time.monotonic())
            raise
        finally:
            self.active -= 1

    async def _stream(self, request: web.Request, script: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        pad = b"x" * script.get("pad", 0)
        for n in range(script.get("chunks", 3)):
            event = {"model": MODEL, "choices": [{"text": str(n)}], "pad": pad.decode()}
            await response.write(b"data: " + orjson.dumps(event) + b"\n\n")
            await asyncio.sleep(script.get("interval", 0))
        await response.write(b"data: " + orjson.dumps({"usage": USAGE}) + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response


@asynccontextmanager
async def pods(*pods: ScriptedPod) -> AsyncIterator[None]:
    runners = []
    for pod in pods:
        app = web.Application()
        app.router.add_get("/metrics", pod.metrics)
        app.router.add_get("/v1/models", pod.models)
        app.router.add_post("/v1/completions", pod.complete)
        runner = web.AppRunner(app, handler_cancellation=True)  # as uvicorn notices, too
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        pod.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        runners.append(runner)
    try:
        yield
    finally:
        for runner in runners:
            await runner.cleanup()


@asynccontextmanager
async def serve(
    *scripted: ScriptedPod,
    config: GatewayConfigSpec | None = None,
    timeout_s: float | None = None,
    lifetime_s: float | None = None,
    **options: Any,
) -> AsyncIterator[tuple[str, Gateway]]:
    """The gateway as `igw serve` runs it, in front of `scripted` pods."""
    endpoints = [
        Endpoint(f"pod-{i}", "127.0.0.1", p.port, pool="p", index=i) for i, p in enumerate(scripted)
    ]
    app, gateway = build_gateway(
        endpoints, config or GatewayConfigSpec(flow_control=OPEN), **options
    )
    if timeout_s is not None:
        gateway.first_byte_timeout_s = timeout_s
    if lifetime_s is not None:
        gateway.director.max_lifetime_s = lifetime_s
    runner = app_runner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", gateway  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def body(**extra: Any) -> bytes:
    return orjson.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 10, **extra})


def bookkeeping(gateway: Gateway) -> dict[str, int]:
    endpoints = gateway.store.endpoints
    return {
        "live requests": gateway.director.active,
        "in flight": sum(e.inflight for e in endpoints),
        "pending prefill": sum(e.prefill_tokens for e in endpoints),
        "queued": sum(g.controller.queued() for g in gateway.gates.values()),
    }


async def settled(gateway: Gateway, within_s: float = 2.0) -> None:
    """Every count back at zero (bounded wait: releases run as handlers unwind)."""
    zero = dict.fromkeys(bookkeeping(gateway), 0)
    deadline = time.monotonic() + within_s
    while bookkeeping(gateway) != zero and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert bookkeeping(gateway) == zero


async def normal_request_succeeds(url: str, client: aiohttp.ClientSession) -> None:
    async with client.post(url + "/v1/completions", data=body()) as r:
        assert r.status == 200, await r.text()
        assert (await r.json())["usage"] == USAGE


def cancels(gateway: Gateway) -> float:
    """Client cancels: counted apart from errors (the error-rate alarm ignores them)."""
    value = gateway.metrics.registry.get_sample_value(
        "inference_objective_request_cancelled_total",
        {"model_name": MODEL, "target_model_name": MODEL},
    )
    return value or 0.0


def errors(gateway: Gateway, code: str) -> float:
    value = gateway.metrics.registry.get_sample_value(
        "inference_objective_request_error_total",
        {"model_name": MODEL, "target_model_name": MODEL, "error_code": code},
    )
    return value or 0.0


async def until(condition: Any, within_s: float) -> float:
    """Seconds until `condition()` held; fails past `within_s`."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < within_s, "condition not reached in time"
        await asyncio.sleep(0.005)
    return time.monotonic() - started


# ---------------------------------------------------------------------- request ids


async def test_requests_sharing_an_x_request_id_keep_their_own_bookkeeping() -> None:
    """Defect 1: the client's id keyed the scheduler's per-request state, so 30 requests
    with one id left 29 requests' prefill tokens on the pod for good."""
    pod = ScriptedPod()
    async with pods(pod), serve(pod) as (url, gateway), aiohttp.ClientSession() as client:

        async def one() -> None:
            async with client.post(
                url + "/v1/completions",
                data=body(script={"delay": 0.2}),
                headers={"x-request-id": "same"},
            ) as r:
                assert r.status == 200, await r.text()
                assert r.headers["x-request-id"] == "same"  # still echoed to the client

        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(30))), 20)
        await settled(gateway)
        await normal_request_succeeds(url, client)


# ---------------------------------------------------------------------- clients that leave


async def test_a_client_leaving_a_non_streamed_request_cancels_it_at_the_pod() -> None:
    """Defect 2: the handler ran on, holding its slot and the pod, until the pod answered."""
    pod = ScriptedPod()
    async with pods(pod), serve(pod) as (url, gateway), aiohttp.ClientSession() as client:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await client.post(url + "/v1/completions", data=body(script={"delay": 30}))
        left = time.monotonic()
        await until(lambda: pod.cancelled, 1.0)
        assert pod.cancelled[0] - left < 1.0
        await settled(gateway)
        assert cancels(gateway) == 1
        await normal_request_succeeds(url, client)


async def test_100_streams_whose_clients_leave_after_the_first_chunk() -> None:
    """Must hold: the pods see 100 cancelled requests within 1 s, every count returns to
    zero, and the hang-ups count as client cancels, not as broken upstream streams."""
    a, b = ScriptedPod(), ScriptedPod()
    script = {"chunks": 200, "interval": 0.05}  # 10 s of stream unless cancelled
    async with pods(a, b), serve(a, b) as (url, gateway):
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as client:
            responses = []

            async def first_chunk() -> None:
                r = await client.post(
                    url + "/v1/completions", data=body(stream=True, script=script)
                )
                assert r.status == 200
                await r.content.readuntil(b"\n\n")
                responses.append(r)

            await asyncio.wait_for(asyncio.gather(*(first_chunk() for _ in range(100))), 30)
            for r in responses:
                r.close()  # the client leaves: its connection closes
            left = time.monotonic()
            await until(lambda: len(a.cancelled) + len(b.cancelled) == 100, 1.0)
            assert max(a.cancelled + b.cancelled) - left < 1.0
            await settled(gateway)
            assert cancels(gateway) == 100
            assert errors(gateway, "stream_broken") == 0
            assert errors(gateway, "client_cancelled") == 0
            await normal_request_succeeds(url, client)


async def test_queued_clients_that_hang_up_leave_the_queue_at_once() -> None:
    """Defect 7 / must hold: 30 queued clients that hang up leave the queue within 100 ms
    and never reach a pod."""
    pod = ScriptedPod(waiting=50)  # saturated: standard requests wait
    config = GatewayConfigSpec(
        flow_control=FlowControlSpec(saturation=SaturationSpec(critical_reserve_s=None))
    )
    async with (
        pods(pod),
        serve(pod, config=config) as (url, gateway),
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client,
    ):
        await until(lambda: not gateway.store.endpoints[0].stale, 2.0)

        async def wait_in_queue() -> None:
            await client.post(url + "/v1/completions", data=body())

        clients = [asyncio.create_task(wait_in_queue()) for _ in range(30)]

        def queued() -> int:
            return sum(g.controller.queued() for g in gateway.gates.values())

        await until(lambda: queued() == 30, 5.0)
        for task in clients:
            task.cancel()  # the client hangs up
        assert await until(lambda: queued() == 0, 0.1) < 0.1
        await asyncio.gather(*clients, return_exceptions=True)
        pod.waiting = 0  # capacity again: nobody left to send
        await asyncio.sleep(0.3)
        assert pod.seen == 0
        await settled(gateway)
        await normal_request_succeeds(url, client)


async def test_a_slow_reader_holds_only_its_own_stream() -> None:
    """A client that stops reading a large stream does not slow anyone else, and when it
    finally leaves its request ends at the pod."""
    pod = ScriptedPod()
    script = {"chunks": 400, "pad": 64 * 1024}  # 25 MiB the reader never takes
    async with pods(pod), serve(pod) as (url, gateway), aiohttp.ClientSession() as client:
        slow = await client.post(url + "/v1/completions", data=body(stream=True, script=script))
        await slow.content.readuntil(b"\n\n")  # then reads nothing more
        for _ in range(5):
            async with asyncio.timeout(2):
                await normal_request_succeeds(url, client)
        assert pod.active == 1  # the slow stream is paused, not finished
        slow.close()
        await until(lambda: pod.cancelled, 1.0)
        await settled(gateway)


async def test_a_request_past_its_maximum_lifetime_is_ended() -> None:
    """The lifecycle's watchdog: whatever the data plane does, a request ends by its
    maximum lifetime and gives back what it holds."""
    pod = ScriptedPod()
    script = {"chunks": 200, "interval": 0.05}
    async with (
        pods(pod),
        serve(pod, lifetime_s=0.5) as (url, gateway),
        aiohttp.ClientSession() as client,
    ):
        async with client.post(url + "/v1/completions", data=body(stream=True, script=script)) as r:
            with pytest.raises(aiohttp.ClientPayloadError):
                await asyncio.wait_for(r.content.read(), 5)
        await until(lambda: pod.cancelled, 1.0)
        await settled(gateway)
        assert errors(gateway, "lifetime_exceeded") == 1
        await normal_request_succeeds(url, client)


# ---------------------------------------------------------------------- retries


async def test_a_timeout_is_a_504_and_the_generation_never_runs_twice() -> None:
    """Defect 3: a generation longer than the read timeout ran on every ranked pod."""
    a, b = ScriptedPod(), ScriptedPod()
    async with (
        pods(a, b),
        serve(a, b, timeout_s=0.3) as (url, gateway),
        aiohttp.ClientSession() as client,
        client.post(url + "/v1/completions", data=body(script={"delay": 5})) as r,
    ):
        assert r.status == 504
        assert (await r.json())["error"]["code"] == "upstream_timeout"
        assert a.seen + b.seen == 1
        await until(lambda: a.cancelled or b.cancelled, 1.0)  # and it stops there
        await settled(gateway)
        await normal_request_succeeds(url, client)


async def test_an_engine_error_is_relayed_not_retried() -> None:
    """A 500 means the engine had the request: it is the client's answer."""
    a, b = ScriptedPod(), ScriptedPod()
    async with pods(a, b), serve(a, b) as (url, gateway), aiohttp.ClientSession() as client:
        async with client.post(url + "/v1/completions", data=body(script={"status": 500})) as r:
            assert r.status == 500
        assert a.seen + b.seen == 1
        await settled(gateway)


async def test_a_pod_closing_before_any_answer_byte_is_retried() -> None:
    """Closed before a byte of the answer: the engine never started, so the next pod may."""
    dying, good = ScriptedPod(dies=True), ScriptedPod(waiting=3)  # the dying pod ranks first
    async with pods(dying, good), serve(dying, good) as (url, gateway):
        await until(lambda: all(not e.stale for e in gateway.store.endpoints), 2.0)
        async with aiohttp.ClientSession() as client:
            for _ in range(4):
                async with client.post(url + "/v1/completions", data=body()) as r:
                    assert r.status == 200
        assert dying.seen >= 1 and good.seen == 4
        await settled(gateway)


# ---------------------------------------------------------------------- hostile bodies


@pytest.mark.parametrize(
    ("data", "status", "code", "param"),
    [
        (b"{not json", 400, "invalid_json", None),
        (b"[1, 2]", 400, "missing_model", None),
        (b'{"prompt": "no model"}', 400, "missing_model", None),
        (body(prompt="x" * (4 * 2**20)), 413, "request_too_large", None),
        (body(model="nope"), 404, "model_not_found", None),
        (body(model="m" * 4097), 400, "invalid_value", "model"),  # no route could match it
        (body(model="llama\r\nx-injected: 1"), 400, "invalid_value", "model"),
        (body(max_tokens=-1000), 400, "invalid_value", "max_tokens"),
        (body(max_tokens=10**12), 400, "invalid_value", "max_tokens"),
        (body(max_tokens="9"), 400, "invalid_value", "max_tokens"),
        (body(max_completion_tokens=0), 400, "invalid_value", "max_completion_tokens"),
        (body(n=-3), 400, "invalid_value", "n"),
    ],
)
async def test_hostile_bodies_are_openai_errors_and_leave_nothing_behind(
    data: bytes, status: int, code: str, param: str | None
) -> None:
    pod = ScriptedPod()
    async with pods(pod), serve(pod) as (url, gateway), aiohttp.ClientSession() as client:
        async with client.post(url + "/v1/completions", data=data) as r:
            assert r.status == status
            error = (await r.json())["error"]
            assert (error["code"], error["param"]) == (code, param)
            assert set(error) == {"message", "type", "param", "code"}
        assert pod.seen == 0
        await settled(gateway)
        await normal_request_succeeds(url, client)


def limited(tokens_per_minute: int = 1000) -> GatewayConfigSpec:
    return GatewayConfigSpec(
        flow_control=OPEN, rate_limits=[RateLimitSpec(tokens_per_minute=tokens_per_minute)]
    )


async def remaining_tokens(client: aiohttp.ClientSession, url: str, data: bytes) -> int:
    async with client.post(url + "/v1/completions", data=data) as r:
        assert r.status == 200, await r.text()
        await r.read()
        return int(r.headers["x-ratelimit-remaining-tokens"])


async def test_a_negative_max_tokens_cannot_credit_a_token_bucket() -> None:
    """Defect 8: `max_tokens: -1000000` answered 200 with a million tokens remaining."""
    pod = ScriptedPod()
    async with (
        pods(pod),
        serve(pod, config=limited()) as (url, _),
        aiohttp.ClientSession() as client,
    ):
        async with client.post(url + "/v1/completions", data=body(max_tokens=-(10**6))) as r:
            assert r.status == 400
        assert await remaining_tokens(client, url, body()) <= 1000
        assert pod.seen == 1


async def test_the_largest_output_bound_is_charged_then_settled_from_usage() -> None:
    """Defect 8: `max_tokens: 1` beside `max_completion_tokens: 900` was charged 1. The
    charge is the larger bound; the answer's usage (12 tokens) then settles it."""
    pod = ScriptedPod()
    async with (
        pods(pod),
        serve(pod, config=limited()) as (url, gateway),
        aiohttp.ClientSession() as client,
    ):
        split = body(max_tokens=1, max_completion_tokens=900)
        assert await remaining_tokens(client, url, split) <= 1000 - 900
        await settled(gateway)  # the answer is in: 900 + prompt charged, 12 used
        # the next request sees the refund: 1000 - 12 used - its own 12, plus any refill
        after_refund = await remaining_tokens(client, url, body())
        assert 1000 - 12 - 12 <= after_refund <= 1000
        await settled(gateway)
        # `n` choices: n times the bound (2 x 100 + the prompt's 2)
        assert await remaining_tokens(client, url, body(max_tokens=100, n=2)) <= (
            after_refund - 202 + 5  # 5: what the bucket refills meanwhile, generously
        )


# ---------------------------------------------------------------------- parity and leaks


async def test_streamed_usage_is_counted_like_the_picker_counts_it() -> None:
    """Defect 12: the proxy's SSE path never counted output tokens."""
    pod = ScriptedPod()
    async with pods(pod), serve(pod) as (url, gateway), aiohttp.ClientSession() as client:
        async with client.post(url + "/v1/completions", data=body(stream=True)) as r:
            assert (await r.read()).endswith(b"data: [DONE]\n\n")
        await settled(gateway)
        labels = {"model_name": MODEL, "target_model_name": MODEL}
        sample = gateway.metrics.registry.get_sample_value
        assert sample("inference_objective_output_tokens_sum", labels) == 10
        assert sample("inference_objective_output_tokens_count", labels) == 1


async def test_pod_addresses_reach_clients_only_with_the_debug_switch() -> None:
    """Defect 6: 502 messages and a response header named pods and their addresses."""
    pod = ScriptedPod()
    async with pods(pod):
        for expose in (False, True):
            async with (
                serve(pod, expose_endpoints=expose) as (url, gateway),
                aiohttp.ClientSession() as client,
            ):
                async with client.post(url + "/v1/completions", data=body()) as r:
                    assert r.status == 200
                    header = r.headers.get("x-gateway-destination-endpoint")
                    assert header == (f"127.0.0.1:{pod.port}" if expose else None)
                gateway.store.endpoints[0].port = 1  # nothing listens there: refused
                async with client.post(url + "/v1/completions", data=body()) as r:
                    assert r.status == 502
                    message = (await r.json())["error"]["message"]
                    assert ("127.0.0.1" in message and "pod-0" in message) is expose
                await settled(gateway)


# ---------------------------------------------------------------------- SIGTERM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_sigterm_under_load_drains_streams_and_refuses_new_connections(
    tmp_path: Path,
) -> None:
    """`igw serve` as a process: on SIGTERM it stops listening at once, lets the 12
    streams in flight finish (none is cut at the pod), and exits 0."""
    pod = ScriptedPod()
    async with pods(pod):
        endpoints = tmp_path / "endpoints.yaml"
        endpoints.write_text(
            f"endpoints:\n- name: pod-0\n  address: 127.0.0.1\n  port: {pod.port}\n"
            "  labels: {igw.dev/pool: p}\n"
        )
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import sys; from inference_gateway.cli.main import main; sys.exit(main())",
            "serve",
            "--endpoints",
            str(endpoints),
            "--port",
            str(port),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with aiohttp.ClientSession() as client:
                await until_serving(client, url)
                streams = [
                    await client.post(
                        url + "/v1/completions",
                        data=body(stream=True, script={"chunks": 10, "interval": 0.1}),
                    )
                    for _ in range(12)
                ]
                for r in streams:
                    assert r.status == 200
                    await r.content.readuntil(b"\n\n")
                process.send_signal(signal.SIGTERM)
                await until_refused(port)
                for r in streams:
                    rest = await asyncio.wait_for(r.content.read(), 10)
                    assert rest.endswith(b"data: [DONE]\n\n")
                    r.close()
            assert await asyncio.wait_for(process.wait(), 15) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert pod.cancelled == [] and pod.active == 0 and pod.seen == 12


async def until_serving(client: aiohttp.ClientSession, url: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            async with client.get(url + "/health") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        assert time.monotonic() < deadline, "igw serve did not come up"
        await asyncio.sleep(0.1)


async def until_refused(port: int) -> None:
    """New connections are refused within 2 s of the signal."""
    deadline = time.monotonic() + 2
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except ConnectionRefusedError:
            return
        writer.close()
        assert time.monotonic() < deadline, "still accepting connections"
        await asyncio.sleep(0.05)
