"""Faults through real Envoy 1.40: the picker dies and comes back, a pod dies (before an
answer, or mid-stream), a client goes away mid-stream.

The picker's ext_proc filter fails closed (AI Gateway v0.4 `inferencepool.go`:
`FailureModeAllow: false`), so while the picker is down Envoy itself answers 500; the
BackendTrafficPolicy's `responseOverride` (Envoy Gateway v1.5 `custom_response.go`, the
`custom_response` filter ahead of the picker filters) turns that empty 500 into an
OpenAI-shaped error the SDK can read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
import openai
import orjson
import pytest
from envoy_harness import EnvoyStack

from inference_gateway.envoyproxy.bootstrap import route_cluster_name
from tests.e2e.test_stream_migration import metric_sum

CHAT = "/v1/chat/completions"


def chat(model: str = "llama-3.1-8b", max_tokens: int = 4) -> dict[str, object]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
    }


async def test_a_picker_outage_answers_an_openai_error_then_recovers(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    async with envoy_stack() as stack:
        assert stack.picker is not None
        client = stack.client()
        await client.chat.completions.create(**chat())  # type: ignore[call-overload]
        await stack.picker.kill()
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(**chat())  # type: ignore[call-overload]
        assert caught.value.status_code == 500
        assert caught.value.response.headers["content-type"] == "application/json"
        body = orjson.loads(caught.value.response.content)
        assert body["error"]["code"] == "endpoint_picker_unavailable"
        assert body["error"]["type"] == "server_error" and body["error"]["message"]
        # back on the same port: Envoy reconnects and requests are served again
        await stack.picker.start()
        deadline = time.monotonic() + 15
        while True:
            try:
                reply = await client.chat.completions.create(**chat())  # type: ignore[call-overload]
                break
            except openai.InternalServerError:
                assert time.monotonic() < deadline, "the restarted picker was never used"
                await asyncio.sleep(0.2)
        assert reply.choices[0].message.content
        await client.close()


async def test_without_the_override_the_outage_is_an_empty_500(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    """The defect the override fixes, so the test above cannot pass by accident."""
    async with envoy_stack(response_override=None) as stack, aiohttp.ClientSession() as s:
        assert stack.picker is not None
        await stack.picker.kill()
        async with s.post(stack.url + CHAT, json=chat()) as r:
            assert r.status == 500
            assert await r.read() == b""


async def test_a_killed_pod_stops_being_picked(envoy_stack: Callable[..., EnvoyStack]) -> None:
    """After a pod dies, requests that still reach it fail with Envoy's `UF` (connection
    failure), and once the picker's scrapes see it gone every request is served again."""
    async with envoy_stack() as stack:
        assert stack.fleet is not None
        client = stack.client()
        await stack.fleet.stop_pod("plain-0")
        dead = stack.pod_address("plain-0")
        served_after = sent = 0
        deadline = time.monotonic() + 20
        while served_after < 20:
            assert time.monotonic() < deadline, "requests kept failing after the pod died"
            sent += 1
            try:
                await client.chat.completions.create(**chat())  # type: ignore[call-overload]
                served_after += 1
            except openai.APIStatusError as error:
                assert error.status_code == 503
                served_after = 0
            await asyncio.sleep(0.02)
        await client.close()
        lines = await stack.wait_access_log(sent)  # Envoy flushes its log about every second
        assert len(lines) == sent
        failed = [line for line in lines if line["code"] != 200]
        assert all(line["upstream"] == dead and "UF" in line["flags"] for line in failed)
        assert all(line["upstream"] != dead for line in lines[-20:])


async def test_a_pod_killed_mid_stream_ends_the_clients_stream(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    """No tier 2 in front (docs/migration.md, "Behind Envoy"): Envoy cannot start another
    upstream request once it sent the response headers, so a pod that dies mid-answer
    ends the client's stream. Over HTTP/1.1 Envoy closes the connection before the
    chunked body's end, which the `openai` SDK raises as `APIConnectionError`: the text
    so far is all the client gets, with no `finish_reason`. Envoy logs the request as
    reset after its response started and counts the pod's connection closed with a
    request active. Behind `igw global` the same break is resumed
    (test_envoy_global_migration.py)."""
    async with envoy_stack() as stack:
        assert stack.fleet is not None and stack.envoy is not None
        pods = stack.fleet.pods
        client = stack.client()
        stream = await client.chat.completions.create(  # type: ignore[call-overload]
            **chat(max_tokens=400), temperature=0, stream=True
        )
        deltas: list[str] = []
        finish = None
        with pytest.raises(openai.APIConnectionError) as caught:
            async for chunk in stream:
                for choice in chunk.choices:
                    deltas.append(choice.delta.content or "")
                    finish = finish or choice.finish_reason
                if len(deltas) == 20:  # mid-answer: the pod serving it is killed
                    running = {
                        name: await metric_sum(pod.url, "vllm:num_requests_running")
                        for name, pod in pods.items()
                    }
                    (serving,) = [name for name, n in running.items() if n == 1]
                    await stack.fleet.stop_pod(serving)
        assert "incomplete chunked read" in str(caught.value.__cause__)
        assert finish is None and len(deltas) >= 20 and "".join(deltas)
        await client.close()
        lines = await stack.wait_access_log(1, where=lambda line: line["model"] is not None)
        (line,) = [line for line in lines if line["model"] is not None]
        assert line["code"] == 200, line
        assert line["details"].startswith("upstream_reset_after_response_started"), line
        assert line["upstream"] == stack.pod_address(serving)
        cluster = f"cluster.{route_cluster_name('default', 'plain-route')}."
        stats = await stack.envoy.stats(cluster)
        assert stats[cluster + "upstream_cx_destroy_remote_with_active_rq"] == 1


async def test_a_client_that_disconnects_mid_stream_frees_the_path(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    async with envoy_stack() as stack, aiohttp.ClientSession() as session:
        assert stack.envoy is not None
        body = {**chat(max_tokens=400), "stream": True}
        async with session.post(stack.url + CHAT, json=body) as r:
            assert r.status == 200
            await r.content.readline()  # the first chunk, then go away
            r.close()
        async with asyncio.timeout(10):
            while True:  # Envoy saw the client leave with the request active
                stats = await stack.envoy.stats("http.")
                if any(k.endswith("downstream_rq_rx_reset") and v for k, v in stats.items()):
                    break
                if any(
                    k.endswith("downstream_cx_destroy_remote_active_rq") and v
                    for k, v in stats.items()
                ):
                    break
                await asyncio.sleep(0.1)
        client = stack.client()
        reply = await client.chat.completions.create(**chat())  # type: ignore[call-overload]
        assert reply.choices[0].message.content
        await client.close()


async def test_sustained_traffic_keeps_envoys_picker_connection(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    """Envoy's ext_proc client resets each stream when its request ends; past 1,000 of
    them at more than 33/s the picker's HTTP/2 server used to take that for a rapid-reset
    attack and cut the connection (every request on it a 500). 1,200 requests, 24 at a
    time, all answered; the picker and the body-based router never said ENHANCE_YOUR_CALM."""
    async with envoy_stack() as stack, aiohttp.ClientSession() as session:
        assert stack.picker is not None and stack.bbr is not None
        body = chat(max_tokens=1)
        codes: list[int] = []

        async def client(n: int) -> None:
            for _ in range(n):
                async with session.post(stack.url + CHAT, json=body) as r:
                    await r.read()
                    codes.append(r.status)

        async with asyncio.timeout(120):
            await asyncio.gather(*(client(50) for _ in range(24)))
        assert codes.count(200) == 1_200
        said = stack.picker.log + stack.bbr.log
        assert not [line for line in said if "too many stream resets" in line]
