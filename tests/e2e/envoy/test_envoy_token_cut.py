"""A stream that outgrows its token window is cut by `igw picker` through real Envoy 1.40.

openai SDK / aiohttp → Envoy (the bootstrap Envoy Gateway v1.5 + AI Gateway v0.4 build;
the picker's ext_proc in FULL_DUPLEX_STREAMED for both bodies, ai-gateway
`internal/extensionserver/inferencepool.go` buildHTTPFilterForInferencePool) → `igw
picker` → an emulated vLLM pod, with a 60 tokens/min limit per key. Each prompt's answer
(no `max_tokens`: the emulator's default length) is over 3x the limit.

Envoy's side, from its source (envoyproxy/envoy v1.40): the picker answers the chunk that
does not fit with `StreamedBodyResponse{body: the rate-limit event, end_of_stream: true}`;
`source/extensions/filters/http/ext_proc/processor_state.cc`
handleDuplexStreamedBodyResponse injects it with end of stream, so the client's chunked
response ends with its terminating chunk (aiohttp raises `ClientPayloadError` on a reset
or a truncated chunked body, so a clean read proves it), and the finished downstream
stream resets the upstream one: the pod stops generating (its
`vllm:generation_tokens_total` stays far below the full answer). An `ImmediateResponse`
here would have reset the client's stream instead (`source/common/http/filter_manager.cc`
sendLocalReply: "Prior headers have already been sent").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
import openai
import orjson
from envoy_harness import CONFIG, EnvoyStack

from inference_gateway.emulator.tokens import default_output_tokens, prompt_seed

MODEL = "llama-3.1-8b"
LIMIT = 60
LIMITED = {**CONFIG, "rateLimits": [{"tokensPerMinute": LIMIT}]}
ONE_POD = {"base_port": 0, "pods": [{"name": "plain", "gpu": "H100", "model": MODEL}]}
LONG = [p for p in (f"tell story {i}" for i in range(400))
        if default_output_tokens(prompt_seed(p)) >= 3 * LIMIT][:2]  # fmt: skip
STREAM_TIMEOUT_S = 30.0


def events(body: bytes) -> list[bytes]:
    return [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]


async def generated(stack: EnvoyStack) -> float:
    """The pod's own count of the tokens it generated."""
    assert stack.fleet is not None
    pod = stack.fleet.endpoints[0]
    url = f"http://{pod.host}:{pod.port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    line = next(x for x in text.splitlines() if x.startswith("vllm:generation_tokens_total"))
    return float(line.rsplit(" ", 1)[1])


async def test_stream_past_the_window_ends_with_the_rate_limit_event(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    assert len(LONG) == 2
    async with envoy_stack(ONE_POD, LIMITED) as stack:
        # raw client: the bytes on the wire and a clean end of the chunked body
        body = {"model": MODEL, "prompt": LONG[0], "stream": True}
        headers = {"authorization": "Bearer client-a"}
        started = time.monotonic()
        async with aiohttp.ClientSession() as session:
            async with asyncio.timeout(STREAM_TIMEOUT_S):
                async with session.post(
                    stack.url + "/v1/completions", json=body, headers=headers
                ) as response:
                    assert response.status == 200
                    assert response.headers["content-type"].startswith("text/event-stream")
                    assert response.headers.get("transfer-encoding") == "chunked"
                    raw = await response.read()  # raises if Envoy reset or truncated it
        elapsed = time.monotonic() - started
        sent = events(raw)
        tokens = [orjson.loads(e) for e in sent[:-1]]
        assert all(t["choices"][0]["text"] for t in tokens)
        assert 0 < len(tokens) < LIMIT  # the prompt was charged too
        assert orjson.loads(sent[-1])["error"]["code"] == "rate_limit_exceeded"
        assert b"[DONE]" not in raw
        # the pod was told: it stopped well short of the whole answer
        await asyncio.sleep(0.5)
        full = default_output_tokens(prompt_seed(LONG[0]))
        assert await generated(stack) < LIMIT + (full - LIMIT) / 2, elapsed

        # the official SDK: the same cut, read as the API error it is
        client = stack.client(api_key="client-b")
        received = 0
        cut: openai.APIError | None = None
        async with asyncio.timeout(STREAM_TIMEOUT_S):
            stream = await client.completions.create(model=MODEL, prompt=LONG[1], stream=True)
            try:
                async for chunk in stream:
                    received += sum(1 for c in chunk.choices if c.text)
            except openai.APIError as error:
                cut = error
        assert cut is not None and cut.code == "rate_limit_exceeded"
        assert 0 < received < LIMIT

        # the window is spent for both keys: the next request is a 429 with Retry-After
        for key in ("client-a", "client-b"):
            with_key = stack.client(api_key=key)
            try:
                await with_key.completions.create(model=MODEL, prompt="hi", max_tokens=4)
                raise AssertionError(f"{key} was admitted past its window")
            except openai.RateLimitError as refused:
                assert refused.code == "rate_limited"
                assert int(refused.response.headers["retry-after"]) >= 1
            await with_key.close()
        await client.close()
        lines = await stack.wait_access_log(4)
        assert [line["code"] for line in lines] == [200, 200, 429, 429]
        # Envoy saw the cut streams end downstream as complete responses, not resets
        assert all("DR" not in line["flags"] and "UR" not in line["flags"] for line in lines[:2])
