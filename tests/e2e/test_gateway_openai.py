"""End to end on loopback: the official openai SDK → `igw serve` app → emulated pods."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest
from aiohttp import web

from inference_gateway.assembly.serve import app_runner, build_gateway
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.emulator.fleet import EmulatedFleet

FLEET = {
    "base_port": 0,
    "pods": [
        {"name": "plain", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 2},
        {
            "name": "lora",
            "gpu": "H100",
            "model": "llama-3.1-8b",
            "replicas": 1,
            "max_loras": 2,
            "adapters": ["sql"],
        },
    ],
}


@pytest.fixture
async def gateway_url() -> AsyncIterator[tuple[str, EmulatedFleet]]:
    async with EmulatedFleet(FLEET) as fleet:
        endpoints = [
            Endpoint(e.name, e.host, e.port, pool="p", labels=e.labels, index=i)
            for i, e in enumerate(fleet.endpoints)
        ]
        app, _ = build_gateway(endpoints, expose_endpoints=True)  # the tests read the pod
        runner = app_runner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        yield f"http://127.0.0.1:{port}", fleet
        await runner.cleanup()


async def test_openai_sdk_non_streaming_and_streaming(
    gateway_url: tuple[str, EmulatedFleet],
) -> None:
    url, _ = gateway_url
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
    reply = await client.chat.completions.create(
        model="llama-3.1-8b",
        messages=[{"role": "user", "content": "hello there"}],
        max_tokens=8,
    )
    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.completion_tokens == 8
    chunks = []
    stream = await client.chat.completions.create(
        model="llama-3.1-8b",
        messages=[{"role": "user", "content": "stream please"}],
        max_tokens=6,
        stream=True,
    )
    async for chunk in stream:
        chunks.append(chunk)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and len(chunks) >= 6
    models = await client.models.list()
    assert "llama-3.1-8b" in {m.id for m in models.data}
    await client.close()


async def test_unknown_model_is_not_found(gateway_url: tuple[str, EmulatedFleet]) -> None:
    url, _ = gateway_url
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
    await client.close()


async def test_malformed_json_is_400(gateway_url: tuple[str, EmulatedFleet]) -> None:
    url, _ = gateway_url
    async with aiohttp.ClientSession() as session:
        async with session.post(
            url + "/v1/chat/completions",
            data=b"{not json",
            headers={"content-type": "application/json"},
        ) as response:
            assert response.status == 400
            body = await response.json()
            assert body["error"]["code"] == "invalid_json"
        async with session.post(url + "/v1/completions", data=b'{"prompt": "x"}') as response:
            assert response.status == 400


async def test_adapter_requests_land_on_pods_holding_the_adapter(
    gateway_url: tuple[str, EmulatedFleet],
) -> None:
    url, fleet = gateway_url
    lora_ports = {str(e.port) for e in fleet.endpoints if e.name.startswith("lora")}
    async with aiohttp.ClientSession() as session:
        for _ in range(5):
            body = {"model": "sql", "prompt": "select things", "max_tokens": 2}
            async with session.post(url + "/v1/completions", json=body) as response:
                assert response.status == 200, await response.text()
                target = response.headers["x-gateway-destination-endpoint"]
                assert target.rsplit(":", 1)[1] in lora_ports
