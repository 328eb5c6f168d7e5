"""Token limits at tier 2 hold while answers stream: `igw global` follows each answer
with the gateway's one token budget (core/request/budget.py), as `igw serve` does, so a
stream longer than what the client's window has left ends with OpenAI's rate-limit SSE
error event instead of delivering past the limit. Real redis-server (the limits' store),
fake cluster gateways on loopback."""

from __future__ import annotations

import aiohttp
import orjson

from inference_gateway.shared_store.local_server import LocalRedis

from .conftest import FakeCluster, running_router
from .test_router import config

LIMIT = 100  # tokens per window


def _tokens(text: str) -> int:
    """Output tokens the client got: one per chunk carrying a choice's finish_reason."""
    return text.count('"finish_reason"')


async def test_no_client_gets_more_tokens_than_its_window_allows(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis
) -> None:
    for cluster in fake_clusters:
        cluster.stream_mode = "long"  # 200 tokens per answer, whatever max_tokens says
    extra = {
        "rateLimits": {"rules": [{"tokensPerMinute": LIMIT}]},
        "store": {"url": redis_server.url, "timeoutMs": 2000},
    }
    delivered = 0
    ended_by_limit = 0
    async with (
        running_router(config(fake_clusters, **extra)) as (url, _),
        aiohttp.ClientSession() as s,
    ):
        body = {"model": "m", "prompt": "x", "max_tokens": 10, "stream": True}
        for _ in range(4):
            async with s.post(url + "/v1/completions", json=body) as r:
                if r.status == 429:
                    continue
                assert r.status == 200
                text = await r.text()
            delivered += _tokens(text)
            if "data: [DONE]" not in text:
                last = [line for line in text.split("\n\n") if line.startswith("data: {")][-1]
                assert orjson.loads(last[6:])["error"]["code"] == "rate_limit_exceeded"
                ended_by_limit += 1
    assert ended_by_limit >= 1  # the first answer alone outgrows the window
    assert 0 < delivered <= LIMIT


async def test_a_request_larger_than_the_whole_window_is_refused_at_once(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis
) -> None:
    cfg = config(
        fake_clusters,
        store={"url": redis_server.url, "timeoutMs": 2000},
        rateLimits={"rules": [{"tokensPerMinute": LIMIT}]},
    )
    async with running_router(cfg) as (url, _), aiohttp.ClientSession() as s:
        body = {"model": "m", "prompt": "x", "max_tokens": 5 * LIMIT}
        async with s.post(url + "/v1/completions", json=body) as r:
            assert r.status == 429
            assert r.headers["x-should-retry"] == "false"
            assert (await r.json())["error"]["type"] == "tokens"
    assert sum(sum(c.hits.values()) for c in fake_clusters) == 0
