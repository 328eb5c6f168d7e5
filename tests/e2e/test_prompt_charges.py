"""A token limit charges every part of a prompt the engine will prefill (issue 31,
finding 8), through `igw serve` with the official `openai` SDK in front of an emulated
vLLM pod. Before, the estimate was 4 characters a token over `content` / `prompt`
text only: on a 2,000 tokens/min key, 7,000 token ids, 7,000 emoji, 40 KB of `tools`
or of `tool_calls` arguments were each admitted as a prompt of a few hundred tokens
at most, and a 40 KB image as one token.

Each case runs on its own key (a limit without `client` keeps one window per caller),
so what the gateway charged up front is what its `x-ratelimit-remaining-tokens` says
was left after admission; a prompt that can never fit the window is OpenAI's 429
"Request too large" before any pod sees it.
"""

from __future__ import annotations

import itertools
from typing import Any

import openai
import pytest

from inference_gateway.core.request.prompt_cost import MEDIA_PART_TOKENS
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.emulator.fleet import EmulatedFleet

MODEL = "llama-3.1-8b"
LIMIT = 2000
CONFIG = {
    "pools": [{"name": "h", "selector": {"igw.dev/pool": "h"}}],
    "models": [{"name": MODEL, "pool": "h"}],
    "rateLimits": [{"tokensPerMinute": LIMIT}],
}
FLEET = {"base_port": 0, "pods": [{"name": "h", "gpu": "H100", "model": MODEL}]}
KEYS = (f"sk-case-{i}" for i in itertools.count())
BIG_JSON = "x" * 40_000  # 40 KB of text inside JSON
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": BIG_JSON,
        "parameters": {"type": "object", "properties": {}},
    },
}
CALL = {
    "id": "call-1",
    "type": "function",
    "function": {"name": "lookup", "arguments": '{"q": "' + BIG_JSON + '"}'},
}
HISTORY = [
    {"role": "user", "content": "look it up"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call-1", "content": "done"},
]


def user(content: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


TOO_LARGE = {
    "7,000 token ids": {"prompt": [1] * 7000},  # "1" * 7000 before: 1,751 tokens
    "7,000 emoji (28 KB)": {"messages": user("\N{GRINNING FACE}" * 7000)},
    "40 KB of tools": {"messages": user("hi"), "tools": [TOOL]},
    "40 KB of tool_calls arguments": {"messages": HISTORY},
}


@pytest.fixture
async def served(gateway_on: Any) -> Any:
    async with (
        EmulatedFleet(FLEET) as fleet,
        gateway_on(fleet, config=parse_config(CONFIG)) as (url, _, _),
    ):
        yield url


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=next(KEYS), max_retries=0)


@pytest.mark.parametrize("case", list(TOO_LARGE))
async def test_a_prompt_larger_than_the_window_is_refused_before_any_pod(
    served: str, case: str
) -> None:
    body = TOO_LARGE[case]
    sdk = client(served)
    with pytest.raises(openai.RateLimitError) as refused:
        if "prompt" in body:
            await sdk.completions.create(model=MODEL, max_tokens=1, **body)
        else:
            await sdk.chat.completions.create(model=MODEL, max_tokens=1, **body)
    assert "too large" in refused.value.message.lower()


async def test_small_parts_are_charged_by_bytes_and_an_image_as_an_image(served: str) -> None:
    async def left(**body: Any) -> int:
        raw = await client(served).chat.completions.with_raw_response.create(
            model=MODEL, max_tokens=1, **body
        )
        return int(raw.headers["x-ratelimit-remaining-tokens"])

    plain = LIMIT - await left(messages=user("hi"))  # the prompt estimate + 1 output token
    assert plain <= 5
    emoji = LIMIT - await left(messages=user("\N{GRINNING FACE}" * 400))  # 1,600 bytes
    assert emoji >= 400  # a character count would have said 100
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 40_000}}
    with_image = LIMIT - await left(messages=user([{"type": "text", "text": "what?"}, image]))
    assert with_image >= MEDIA_PART_TOKENS  # an image is an image, whatever its bytes
    assert with_image < 1000  # and 40 KB of base64 is not 10,000 tokens of text
