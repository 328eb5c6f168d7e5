"""Global rate limits on a real `redis-server`: exact across limiter instances (as two
replicas would hold), all-or-nothing charging, a computed Retry-After, settlement from
`usage`, and the local fallback while the store is stopped."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from inference_gateway.config.spec import RateLimitSpec
from inference_gateway.store.client import StoreHealth, StoreSpec, connect
from inference_gateway.store.local_server import LocalRedis
from inference_gateway.store.ratelimit import GlobalRateLimiter, GlobalRateLimitSpec


def limiter(url: str, name: str, **spec: object) -> GlobalRateLimiter:
    store = StoreSpec(url=url, timeout_ms=2000, retry_ms=100)  # a loaded CI machine
    health = StoreHealth(name, retry_s=0.1, registry=CollectorRegistry())
    return GlobalRateLimiter(GlobalRateLimitSpec(**spec), connect(store), health)


async def test_two_replicas_admit_exactly_the_limit(redis_server: LocalRedis) -> None:
    rules = [RateLimitSpec(requests_per_minute=50)]
    a = limiter(redis_server.url, "a", rules=rules)
    b = limiter(redis_server.url, "b", rules=rules)
    results = await asyncio.gather(*(r.check("key-1", "m", 10) for _ in range(60) for r in (a, b)))
    admitted = [x for x in results if x.allowed]
    assert len(admitted) == 50
    refused = [x for x in results if not x.allowed]
    assert all(1 <= x.retry_after_s <= 62 for x in refused)
    assert refused[0].headers["x-ratelimit-remaining-requests"] == "0"
    assert refused[0].headers["x-ratelimit-limit-requests"] == "50"
    # another client has its own bucket
    assert (await a.check("key-2", "m", 10)).allowed
    await a.redis.aclose()
    await b.redis.aclose()


async def test_all_or_nothing_and_per_model_scope(redis_server: LocalRedis) -> None:
    rules = [
        RateLimitSpec(requests_per_minute=100),
        RateLimitSpec(model="big", tokens_per_minute=1000),
    ]
    r = limiter(redis_server.url, "a", rules=rules)
    assert (await r.check("k", "big", 900)).allowed
    refused = await r.check("k", "big", 200)
    assert not refused.allowed
    # the refused request charged no request either: 99 remain after one more
    ok = await r.check("k", "small", 200)
    assert ok.allowed and ok.headers["x-ratelimit-remaining-requests"] == "98"
    await r.redis.aclose()


async def test_window_slides_and_retry_after_is_computed(redis_server: LocalRedis) -> None:
    r = limiter(
        redis_server.url, "a", rules=[RateLimitSpec(requests_per_minute=3)], window_s=1, slots=10
    )
    for _ in range(3):
        assert (await r.check("k", "m", 1)).allowed
    refused = await r.check("k", "m", 1)
    assert not refused.allowed and 1 <= refused.retry_after_s <= 2  # 1.0-1.1 s, rounded up
    await asyncio.sleep(1.25)  # one window and one slot: the first charges have left
    assert (await r.check("k", "m", 1)).allowed
    await r.redis.aclose()


async def test_usage_settles_the_token_bucket(redis_server: LocalRedis) -> None:
    r = limiter(redis_server.url, "a", rules=[RateLimitSpec(tokens_per_minute=1000)])
    first = await r.check("k", "m", 600)
    assert first.allowed
    assert not (await r.check("k", "m", 600)).allowed
    await r.settle(first.ticket, 100)  # the answer used 100 tokens, not 600
    second = await r.check("k", "m", 600)
    assert second.allowed and second.headers["x-ratelimit-remaining-tokens"] == "300"
    await r.redis.aclose()


async def test_store_stopped_falls_back_locally_and_returns(redis_server: LocalRedis) -> None:
    r = limiter(
        redis_server.url, "a", rules=[RateLimitSpec(requests_per_minute=600)], fallback_replicas=2
    )
    assert (await r.check("k", "m", 1)).scope == "global"
    redis_server.stop()
    fallback = await r.check("k", "m", 1)
    assert fallback.allowed and fallback.scope == "local"
    assert fallback.headers["x-ratelimit-limit-requests"] == "300"  # half, for two replicas
    assert not r.health.up
    redis_server.start()
    await asyncio.sleep(0.15)  # past the probe period
    back = await r.check("k", "m", 1)
    assert back.scope == "global" and r.health.up
    await r.redis.aclose()


async def test_unreachable_store_at_start_is_not_an_error() -> None:
    r = limiter("redis://127.0.0.1:9/0", "a", rules=[RateLimitSpec(requests_per_minute=5)])
    answers = [await r.check("k", "m", 1) for _ in range(7)]
    assert [a.allowed for a in answers] == [True] * 5 + [False] * 2
    assert {a.scope for a in answers} == {"local"}
    await r.redis.aclose()


def test_hostile_names_do_not_reach_keys() -> None:
    r = limiter("redis://127.0.0.1:9/0", "a", rules=[RateLimitSpec(requests_per_minute=5)])
    (bucket,) = r.buckets("x" * 10_000 + "\r\nFLUSHALL", "m", 1)
    assert len(bucket.key) < 64 and "FLUSHALL" not in bucket.key
