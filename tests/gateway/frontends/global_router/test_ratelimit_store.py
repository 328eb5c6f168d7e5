"""`rateLimitStore`: the global rate limits counted in a store apart from the regional one
(the deployment gives every region's router the primary region's store), over real
`redis-server`s: routers with different regional stores but one rate-limit store admit
exactly the limit between them; without it each counts alone; with the rate-limit store
stopped they fall back to their local share and keep serving."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from inference_gateway.shared_store.local_server import LocalRedis

from .conftest import FakeCluster, running_router
from .test_router import config, post

LIMITS = {"rules": [{"requestsPerMinute": 30}], "windowS": 60}
# a slow poll on a loaded machine drains no cluster here: neither a late heartbeat nor a
# status answer slower than the default 0.5 s (the fake clusters share the test's loop)
CALM = {"staleAfterMs": 30_000, "statusTimeoutMs": 5_000}


@pytest.fixture
def second_redis() -> Iterator[LocalRedis]:
    with LocalRedis() as server:
        yield server


def store(server: LocalRedis, **extra: Any) -> dict[str, Any]:
    return {"url": server.url, "timeoutMs": 2000, **extra}  # no fallback on a loaded machine


async def admitted(cfg1: dict[str, Any], cfg2: dict[str, Any]) -> Counter[int]:
    """25 requests of one client through each of two routers, all at once."""
    async with (
        running_router(cfg1) as (url1, _),
        running_router(cfg2) as (url2, _),
        aiohttp.ClientSession() as s,
    ):
        answers = await asyncio.gather(
            *(post(s, u, authorization="Bearer k1") for _ in range(25) for u in (url1, url2))
        )
    return Counter(status for status, _, _ in answers)


async def limit_keys(server: LocalRedis) -> list[bytes]:
    """The rate-limit buckets kept in `server` (the key prefix's hash tag)."""
    client = Redis.from_url(server.url, socket_timeout=5, socket_connect_timeout=5)
    try:
        async with asyncio.timeout(15):  # bounded: a stuck read fails here, not at 300 s
            return list(await client.keys("{igw:rl}:*"))
    finally:
        await client.aclose()


async def test_two_regions_share_one_rate_limit_store(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis, second_redis: LocalRedis
) -> None:
    """As deployed: the primary's router counts in its own store, the secondary's router
    keeps its own regional store and counts in the primary's."""
    primary = config(fake_clusters, store=store(redis_server), rateLimits=LIMITS, **CALM)
    secondary = config(
        fake_clusters,
        store=store(second_redis),
        rateLimitStore=store(redis_server),
        rateLimits=LIMITS,
        **CALM,
    )
    assert await admitted(primary, secondary) == {200: 30, 429: 20}
    assert await limit_keys(redis_server) and not await limit_keys(second_redis)


async def test_without_it_each_regional_store_counts_alone(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis, second_redis: LocalRedis
) -> None:
    """The control: per-region stores alone admit the limit in each region (50 of 50)."""
    primary = config(fake_clusters, store=store(redis_server), rateLimits=LIMITS, **CALM)
    secondary = config(fake_clusters, store=store(second_redis), rateLimits=LIMITS, **CALM)
    assert await admitted(primary, secondary) == {200: 50}


async def test_rate_limit_store_stopped_falls_back_locally_and_keeps_serving(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis, second_redis: LocalRedis
) -> None:
    cfg = config(
        fake_clusters,
        store=store(redis_server),
        rateLimitStore={"url": second_redis.url, "retryMs": 100},
        rateLimits={"rules": [{"requestsPerMinute": 1000}], "fallbackReplicas": 2},
    )
    async with running_router(cfg) as (url, _), aiohttp.ClientSession() as s:
        _, headers, _ = await post(s, url, authorization="Bearer k")
        assert headers["x-ratelimit-scope"] == "global"
        second_redis.stop()
        answers = [await post(s, url, authorization="Bearer k") for _ in range(5)]
        assert all(status == 200 for status, _, _ in answers)
        assert {h["x-ratelimit-scope"] for _, h, _ in answers} == {"local"}
        metrics = (await (await s.get(url + "/metrics")).read()).decode()
        assert 'igw_store_up{component="global-ratelimit"} 0.0' in metrics
        assert 'igw_store_up{component="global-router"} 1.0' in metrics  # regional store up
        second_redis.start()
        await asyncio.sleep(0.15)
        _, headers, _ = await post(s, url, authorization="Bearer k")
        assert headers["x-ratelimit-scope"] == "global"
