"""Token budgets that hold, measured where the tokens arrive (issue 23, defect 1).

`igw serve` as a process in front of an emulated vLLM pod, the `openai` SDK as the
client, with the shared store (a real `redis-server`) and without. Before: a request
whose `max_tokens` exceeded the whole per-window limit was charged `min(cost, limit)`
and admitted (1,024 tokens on a 200/min key), and a stream longer than its charge ran
on (11,003 tokens in 74.5 s on a 200/min key). Now the first is OpenAI's 429 "Request
too large" (not retried by the SDK), and streams are charged as they pass: the client
below never receives more than the limit in any window, however its streams, 429s and
cut streams interleave.

Measurement: every content chunk is one token (the emulator streams one token per
event), stamped when the client receives it; prompt tokens (a few per request) are charged
by the gateway too but not counted here, so the bound measured is the stricter one.
Windows are taken on the client's clock, 0.1 s shorter than the gateway's (two of its
60 slots), which covers the loopback delay between the gateway's count and the
client's stamp.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import openai
import pytest

from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.emulator.tokens import default_output_tokens, prompt_seed
from inference_gateway.shared_store.local_server import LocalRedis

from .serve_process import igw_serve

MODEL = "llama-3.1-8b"
LIMIT, WINDOW_S = 200, 3.0
CONFIG = {"rateLimits": [{"tokensPerMinute": LIMIT, "windowS": WINDOW_S}]}
FLEET = {"base_port": 0, "pods": [{"name": "h100", "gpu": "H100", "model": MODEL, "replicas": 1}]}
# prompts whose answer (no max_tokens: the emulator's default length) outgrows the limit
LONG_PROMPTS = [p for p in (f"tell story {i}" for i in range(400))
                if default_output_tokens(prompt_seed(p)) >= 230][:8]  # fmt: skip


@pytest.fixture
async def fleet() -> AsyncIterator[EmulatedFleet]:
    async with EmulatedFleet(FLEET) as fleet:
        yield fleet


@pytest.fixture
def redis_server() -> Iterator[LocalRedis]:
    with LocalRedis() as server:
        yield server


async def rejected(url: str, reason: str) -> float:
    async with aiohttp.ClientSession() as client, client.get(url + "/metrics") as r:
        text = await r.text()
    for line in text.splitlines():
        if line.startswith("inference_objective_request_rejected_total{") and (
            f'reason="{reason}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("shared", [False, True], ids=["local", "store"])
async def test_no_window_delivers_more_than_the_limit(
    fleet: EmulatedFleet, redis_server: LocalRedis, tmp_path: Path, shared: bool
) -> None:
    assert len(LONG_PROMPTS) >= 3
    flags = ["--store", redis_server.url] if shared else []
    ports = [e.port for e in fleet.endpoints]
    async with igw_serve(tmp_path, ports, *flags, config=CONFIG) as served:
        client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="client-a")
        # a bound larger than the whole window: 429 at once, and the SDK does not retry
        with pytest.raises(openai.RateLimitError) as refused:
            await client.completions.create(model=MODEL, prompt="hi", max_tokens=1024)
        assert refused.value.code == "rate_limit_exceeded"
        assert refused.value.type == "tokens"
        body = refused.value.body
        assert isinstance(body, dict)
        assert body["message"] == (  # OpenAI's words, with this limit's window
            f"Request too large for {MODEL} on tokens per 3 s: Limit {LIMIT}, Requested 1025. "
            "The input or output tokens must be reduced in order to run successfully."
        )
        assert await rejected(served.url, "request_too_large") == 1  # one try, not three

        client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="client-a", max_retries=0)
        arrivals: list[float] = []
        outcome = {"completed": 0, "cut": 0, "429": 0}
        stop_at = time.monotonic() + 3 * WINDOW_S

        async def stream_until_stopped(prompt: str) -> None:
            while time.monotonic() < stop_at:
                try:
                    stream = await client.completions.create(
                        model=MODEL, prompt=prompt, stream=True
                    )
                    async for chunk in stream:
                        if chunk.choices and chunk.choices[0].text:
                            arrivals.append(time.monotonic())
                    outcome["completed"] += 1
                except openai.RateLimitError:
                    outcome["429"] += 1
                    await asyncio.sleep(0.1)
                except openai.APIError as error:  # the SSE error event ended the stream
                    assert error.code == "rate_limit_exceeded", error
                    outcome["cut"] += 1

        await asyncio.wait_for(
            asyncio.gather(*(stream_until_stopped(p) for p in LONG_PROMPTS[:3])), 60
        )
        # cut streams count with the 429s as the client's limit, never as errors
        assert await rejected(served.url, "rate_limited") == outcome["cut"] + outcome["429"]
    window = WINDOW_S - 0.1
    worst = max(sum(1 for t in arrivals if start <= t < start + window) for start in arrivals)
    assert worst <= LIMIT, (worst, outcome)
    # the windows rolled: more than one window's limit arrived, so the limit throttles and
    # does not block (a loaded machine's slower pod delivered 392 in the three windows)
    assert len(arrivals) > LIMIT
    assert outcome["cut"] >= 1 and outcome["429"] >= 1, outcome
