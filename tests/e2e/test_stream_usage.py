"""A stream is charged what the engine generated, not one token per event (issue 31,
finding 9), through `igw serve` with the official `openai` SDK at its defaults (no
`stream_options`) in front of an emulated vLLM pod started with vLLM's
`--stream-interval 4` (four tokens per event, as speculative decoding also gives).

Before: the gateway counted one token per event and settled from `usage` only when the
client had asked for it, so a 120-token stream cost 30 and a 200 tokens/min key got the
next 120-token stream at once. Now every stream asks the engine for `usage`
(`stream_options.include_usage`), settles from it, and takes the usage event out of a
stream whose client did not ask for it; a client that asks gets it as before.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.emulator.fleet import EmulatedFleet

MODEL = "llama-3.1-8b"
CONFIG = {
    "pools": [{"name": "h", "selector": {"igw.dev/pool": "h"}}],
    "models": [{"name": MODEL, "pool": "h"}],
    "rateLimits": [{"tokensPerMinute": 200}],
}
FLEET = {
    "base_port": 0,
    "pods": [{"name": "h", "gpu": "H100", "model": MODEL, "behavior": {"stream_interval": 4}}],
}
HI = [{"role": "user", "content": "hi"}]


async def drain(stream: Any) -> list[Any]:
    return [chunk async for chunk in stream]


async def test_a_stream_of_four_tokens_an_event_is_charged_every_token(gateway_on: Any) -> None:
    async with (
        EmulatedFleet(FLEET) as fleet,
        gateway_on(fleet, config=parse_config(CONFIG)) as (url, _, _),
    ):
        sdk = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-a", max_retries=0)
        chunks = await drain(
            await sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=120, stream=True)
        )
        content = [c for c in chunks if c.choices and c.choices[0].delta.content]
        assert len(content) == 30  # 120 tokens, four an event
        assert all(c.choices and c.usage is None for c in chunks)  # no usage event: not asked
        await asyncio.sleep(0.2)  # the charge settles after the answer
        with pytest.raises(openai.RateLimitError):  # 123 used + 123 asked > 200
            await sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=120, stream=True)
        other = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-b", max_retries=0)
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
