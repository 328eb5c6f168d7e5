"""Body-based routing and the picker's answers, through real Envoy 1.40.

The body-based router (`igw bbr`, Envoy Gateway's ext_proc #1) lifts `model` into
`X-Gateway-Model-Name`, Envoy re-matches the route, and only that route's pool's picker
filter runs (AI Gateway v0.4 disables the others per route); the picker's refusals
(ImmediateResponse) reach the client as OpenAI errors.
"""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
import openai
import orjson
import pytest
from envoy_harness import CONFIG, EnvoyStack

CHAT = "/v1/chat/completions"


def chat(model: str, text: str = "hello") -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 4}


async def test_models_and_adapters_reach_their_pools(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    async with envoy_stack() as stack:
        client = stack.client()
        for model in ("llama-3.1-8b", "sql", "qwen3-32b", "sql", "qwen3-32b"):
            reply = await client.chat.completions.create(**chat(model))  # type: ignore[call-overload]
            assert reply.model == model
        await client.close()
        lines = await stack.wait_access_log(5)
        by_model = {(line["model"], line["upstream"]) for line in lines}
        plain = {stack.pod_address(n) for n in ("plain-0", "plain-1", "lora")}
        assert {u for m, u in by_model if m == "llama-3.1-8b"} <= plain
        # the adapter only where it is loaded, the second model only on its own pool
        assert {u for m, u in by_model if m == "sql"} == {stack.pod_address("lora")}
        assert {u for m, u in by_model if m == "qwen3-32b"} == {stack.pod_address("small")}
        assert all(line["code"] == 200 for line in lines)
        routes = {line["model"]: line["route"] for line in lines}
        assert routes["qwen3-32b"].startswith("httproute/default/small-route/")
        assert routes["sql"].startswith("httproute/default/plain-route/")


async def test_a_spoofed_destination_is_overwritten(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    async with envoy_stack() as stack, aiohttp.ClientSession() as session:
        spoof = {"x-gateway-destination-endpoint": "127.0.0.1:9"}
        async with session.post(stack.url + CHAT, json=chat("qwen3-32b"), headers=spoof) as r:
            assert r.status == 200
        (line,) = await stack.wait_access_log(1)
        assert line["upstream"] == stack.pod_address("small")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b'{"messages": []}', 400, "missing_model"),
        (b'{"model": "nope", "messages": []}', 404, "model_not_found"),
        (b'{"model": "llama-3.1-8b", "prompt": "' + b"x" * (5 * 2**20) + b'"}', 413, None),
    ],
    ids=["invalid-json", "no-model", "unknown-model", "5MiB"],
)
async def test_bad_bodies_get_openai_errors(
    envoy_stack: Callable[..., EnvoyStack], body: bytes, status: int, code: str | None
) -> None:
    async with envoy_stack() as stack, aiohttp.ClientSession() as session:
        headers = {"content-type": "application/json"}
        async with session.post(stack.url + CHAT, data=body, headers=headers) as r:
            assert r.status == status
            assert r.headers["content-type"].startswith("application/json")
            error = orjson.loads(await r.read())["error"]
        assert error["message"]
        if code is not None:
            assert error["code"] == code
        # nothing reached a pod
        assert all(line["upstream"] in ("-", None) for line in await stack.wait_access_log(1))


async def test_unknown_model_is_not_found_for_the_sdk(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    async with envoy_stack() as stack:
        client = stack.client()
        with pytest.raises(openai.NotFoundError) as caught:
            await client.chat.completions.create(**chat("gpt-nope"))  # type: ignore[call-overload]
        assert caught.value.code == "model_not_found"
        await client.close()


async def test_admission_429_carries_retry_after(envoy_stack: Callable[..., EnvoyStack]) -> None:
    config = {**CONFIG, "rateLimits": [{"requestsPerMinute": 1}]}
    async with envoy_stack(config=config) as stack:
        client = stack.client()
        await client.chat.completions.create(**chat("llama-3.1-8b"))  # type: ignore[call-overload]
        with pytest.raises(openai.RateLimitError) as caught:
            await client.chat.completions.create(**chat("llama-3.1-8b"))  # type: ignore[call-overload]
        assert int(caught.value.response.headers["retry-after"]) >= 1
        assert caught.value.code == "rate_limited"
        await client.close()
