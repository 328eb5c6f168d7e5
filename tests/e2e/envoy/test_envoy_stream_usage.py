"""A stream is charged what the engine generated through `igw picker` and real Envoy 1.40
(issue 31, finding 9, on the in-cluster path; tests/e2e/test_stream_usage.py holds
`igw serve` to the same rule).

openai SDK at its defaults (no `stream_options`) → Envoy (the bootstrap Envoy Gateway
v1.5 + AI Gateway v0.4 build, the picker's ext_proc FULL_DUPLEX_STREAMED for both bodies)
→ `igw picker` → an emulated vLLM pod started with vLLM's `--stream-interval 4` (four
tokens an event, as speculative decoding also gives), 200 tokens/min per key.

Before: the picker passed the client's body as it came and counted one token per event,
so a 120-token stream cost 30 and the key got the next 120-token stream at once. Now the
picker asks the engine for `usage` (the body it hands Envoy carries
`stream_options.include_usage`: Envoy forwards the mutated body, ext_proc
`StreamedBodyResponse`), settles the charge from it, and takes the usage event out of the
stream of a client that did not ask; a client that asks gets it as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import openai
import pytest
from envoy_harness import CONFIG, EnvoyStack

MODEL = "llama-3.1-8b"
LIMITED = {**CONFIG, "rateLimits": [{"tokensPerMinute": 200}]}
FOUR_AN_EVENT = {
    "base_port": 0,
    "pods": [{"name": "plain", "gpu": "H100", "model": MODEL, "behavior": {"stream_interval": 4}}],
}
HI = [{"role": "user", "content": "hi"}]
TIMEOUT_S = 30.0


async def drain(stream: Any) -> list[Any]:
    async with asyncio.timeout(TIMEOUT_S):
        return [chunk async for chunk in stream]


async def test_a_stream_of_four_tokens_an_event_is_charged_every_token(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    async with envoy_stack(FOUR_AN_EVENT, LIMITED) as stack:
        sdk = stack.client(api_key="client-a")
        chunks = await drain(
            await sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=120, stream=True)
        )
        content = [c for c in chunks if c.choices and c.choices[0].delta.content]
        assert len(content) == 30  # 120 tokens, four an event
        assert all(c.choices and c.usage is None for c in chunks)  # no usage event: not asked
        await asyncio.sleep(0.3)  # the charge settles after the answer
        with pytest.raises(openai.RateLimitError):  # 123 used + 123 asked > 200
            await sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=120, stream=True)
        other = stack.client(api_key="client-b")
        asked = await drain(
            await other.chat.completions.create(
                model=MODEL,
                messages=HI,
                max_tokens=8,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        usage = [c.usage for c in asked if c.usage is not None]
        assert len(usage) == 1 and usage[0].completion_tokens == 8  # asked: delivered
        await sdk.close()
        await other.close()
