"""An answer over the client's token window is a 429 through real Envoy 1.40, as `igw
serve` answers it: a non-streamed JSON whose usage is over, and a stream whose first
chunk is already over (issue 23).

openai SDK / aiohttp → Envoy (the bootstrap as Envoy Gateway v1.5 + AI Gateway v0.4
build it: the picker's ext_proc in FULL_DUPLEX_STREAMED for both bodies, message_timeout
300 s) → `igw picker` → an emulated vLLM pod, with a 60 tokens/min limit per key.

Envoy's side, from its source (envoyproxy/envoy v1.40,
`source/extensions/filters/http/ext_proc/`): in FULL_DUPLEX_STREAMED, ext_proc.cc onData
sends the response body to the picker while its `response_headers` answer is pending,
processor_state.cc onStartProcessorCall arms no message timer in that mode, and the
response headers stay in Envoy until that answer. So the picker holds it, judges the
body, and either lets headers and body go (the client gets the pod's bytes) or answers
an `ImmediateResponse` 429, which Envoy sends as a clean local reply
(`source/common/http/filter_manager.cc` sendLocalReply: headers not yet sent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import aiohttp
import openai
import orjson
from envoy_harness import CONFIG, EnvoyStack

from inference_gateway.core.request.contracts import openai_error
from inference_gateway.core.request.relay import StreamEnd, end_error
from inference_gateway.emulator.tokens import default_output_tokens, prompt_seed

from ..serve_process import igw_serve

MODEL = "llama-3.1-8b"
LIMIT = 60
LIMITED = {**CONFIG, "rateLimits": [{"tokensPerMinute": LIMIT}]}
ONE_POD = {"base_port": 0, "pods": [{"name": "plain", "gpu": "H100", "model": MODEL}]}
LONG = next(p for p in (f"tell story {i}" for i in range(400))
            if default_output_tokens(prompt_seed(p)) >= 3 * LIMIT)  # fmt: skip
# A prompt estimated at the whole limit (bytes // 4 + 1 tokens, prompt_cost.prompt_estimate):
# admitted with no room left for output, so the stream's first token is over the window.
FULL_PROMPT = "word " * ((LIMIT - 1) * 4 // 5) + "w" * ((LIMIT - 1) * 4 % 5)
TIMEOUT_S = 30.0
END = StreamEnd.OVER_LIMIT


async def post(
    url: str, body: dict[str, object], key: str | None
) -> tuple[int, dict[str, str], bytes]:
    """Status, lower-case headers and raw body of one POST."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    async with (
        aiohttp.ClientSession() as session,
        asyncio.timeout(TIMEOUT_S),
        session.post(url, json=body, headers=headers) as response,
    ):
        named = {k.lower(): v for k, v in response.headers.items()}
        return response.status, named, await response.read()


def same_but_ids(direct: bytes, through: bytes) -> bytes:
    """`direct` with the two fields the pod makes per request (`id`, `created`) set to
    those of `through`: the rest must then be byte for byte what the client got."""
    a, b = orjson.loads(direct), orjson.loads(through)
    for field in ("id", "created"):
        direct = direct.replace(orjson.dumps(a[field]), orjson.dumps(b[field]), 1)
    return direct


def refusal_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.startswith("x-ratelimit-")}


async def test_answers_over_the_window_are_429s_and_one_within_passes_unchanged(
    envoy_stack: Callable[..., EnvoyStack], tmp_path: Path
) -> None:
    assert len(FULL_PROMPT) // 4 + 1 == LIMIT
    long = {"model": MODEL, "prompt": LONG}
    streamed = {"model": MODEL, "prompt": FULL_PROMPT, "stream": True}
    async with envoy_stack(ONE_POD, LIMITED) as stack:
        assert stack.fleet is not None
        pod = stack.fleet.endpoints[0]
        # 1. a non-streamed answer over the window, through the official SDK
        client = stack.client(api_key="client-a")
        try:
            await client.completions.create(model=MODEL, prompt=LONG)
            raise AssertionError("an answer over the window was delivered")
        except openai.RateLimitError as refused:
            assert refused.code == END.value and refused.type == "tokens"
            assert isinstance(refused.body, dict)
            assert refused.body["message"] == end_error(END, whole=True)[0]
            assert refused.response.headers["content-type"] == "application/json"
            assert 1 <= int(refused.response.headers["retry-after"]) <= 61
            assert refused.response.headers["x-ratelimit-limit-tokens"] == str(LIMIT)
        await client.close()
        whole = await post(stack.url + "/v1/completions", long, "client-d")  # raw, for igw serve

        # 2. within the window (another key): the pod's answer, byte for byte
        small = {"model": MODEL, "prompt": "hi", "max_tokens": 4}
        status, headers, through = await post(stack.url + "/v1/completions", small, "client-b")
        assert status == 200 and headers["content-type"].startswith("application/json")
        _, _, direct = await post(f"http://{pod.host}:{pod.port}/v1/completions", small, None)
        assert orjson.loads(through)["usage"]["completion_tokens"] == 4
        assert through == same_but_ids(direct, through)

        # 3. a stream whose first chunk is already over: a 429 on the wire, not a 200
        first = await post(stack.url + "/v1/completions", streamed, "client-c")
        status, headers, raw = first
        assert status == 429, raw
        assert raw == openai_error(end_error(END)[0], "tokens", END.value, None)
        assert 1 <= int(headers["retry-after"]) <= 61
        assert headers["x-ratelimit-remaining-tokens"] == "0"

        lines = await stack.wait_access_log(4)
        assert [line["code"] for line in lines] == [429, 429, 200, 429]

        # igw serve in front of the same pod answers both with the same status, body and
        # rate-limit headers (its windows are its own: the same keys are fresh there)
        async with igw_serve(
            tmp_path, [pod.port], config={"rateLimits": LIMITED["rateLimits"]}
        ) as served:
            for envoy_answer, body, key in (
                (whole, long, "client-d"),
                (first, streamed, "client-c"),
            ):
                serve_answer = await post(served.url + "/v1/completions", body, key)
                assert serve_answer[0] == envoy_answer[0] == 429
                assert serve_answer[2] == envoy_answer[2]
                assert refusal_headers(serve_answer[1]) == refusal_headers(envoy_answer[1])
                retry = int(serve_answer[1]["retry-after"]) - int(envoy_answer[1]["retry-after"])
                assert abs(retry) <= 1  # the same window, a few seconds apart
