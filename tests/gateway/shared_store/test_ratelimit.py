"""Global rate limits on a real `redis-server`: exact across limiter instances (as two
replicas would hold), all-or-nothing charging, a computed Retry-After, settlement from
`usage`, and the local fallback while the store is stopped."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from inference_gateway.config.spec import RateLimitSpec
from inference_gateway.shared_store.client import StoreHealth, StoreSpec, connect
from inference_gateway.shared_store.local_server import LocalRedis
from inference_gateway.shared_store.ratelimit import GlobalRateLimiter, GlobalRateLimitSpec


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


async def test_a_request_larger_than_the_limit_is_too_large_and_stores_nothing(
    redis_server: LocalRedis,
) -> None:
    """Defect 1: a 1,024-token bound on a 200/min key was charged 200 and admitted."""
    r = limiter(redis_server.url, "a", rules=[RateLimitSpec(tokens_per_minute=200)])
    refused = await r.check("k", "m", 5, 1024, request_id="r1")
    assert not refused.allowed and refused.too_large is not None
    assert refused.too_large.requested == 1029 and refused.too_large.limit == 200
    assert await r.redis.keys("*") == []
    cut = await r.check("k", "m", 5, 256, request_id="r2", bounded=False)
    assert cut.allowed and cut.ticket.reserved == 195  # no bound set: cut to fit
    await r.redis.aclose()


async def test_a_reservation_holds_the_window_until_settled(redis_server: LocalRedis) -> None:
    """Defect 1: a stream longer than the window was never settled and the next request
    was admitted at once. Reserved tokens count until the request settles, however long
    it runs; extensions are all or nothing across replicas."""
    rules = [RateLimitSpec(tokens_per_minute=100, window_s=1)]
    a = limiter(redis_server.url, "a", rules=rules, slots=10)
    b = limiter(redis_server.url, "b", rules=rules, slots=10)
    long = await a.check("k", "m", 10, 60, request_id="long")
    assert long.allowed
    await asyncio.sleep(1.3)  # more than a window: a slot charge would have left
    assert not (await b.check("k", "m", 10, 40, request_id="next")).allowed
    assert await a.extend(long.ticket, 30) is True  # 10 committed went; 90 held
    assert await b.extend(long.ticket, 11) is False  # would make 101
    await a.settle(long.ticket, 10 + 50)  # delivered 50 of 90: committed now
    refused = await b.check("k", "m", 10, 41, request_id="next")
    assert not refused.allowed and refused.headers["x-ratelimit-remaining-tokens"] == "50"
    assert (await b.check("k", "m", 10, 40, request_id="next")).allowed
    await a.redis.aclose()
    await b.redis.aclose()


async def test_a_dead_replicas_reservation_ends_with_its_lease(redis_server: LocalRedis) -> None:
    store = StoreSpec(url=redis_server.url, timeout_ms=2000)
    health = StoreHealth("a", registry=CollectorRegistry())
    spec = GlobalRateLimitSpec(rules=[RateLimitSpec(tokens_per_minute=100)])
    r = GlobalRateLimiter(spec, connect(store), health, lease_s=0.5)
    assert (await r.check("k", "m", 0, 100, request_id="lost")).allowed  # never settled
    assert not (await r.check("k", "m", 0, 1, request_id="x")).allowed
    await asyncio.sleep(0.6)
    assert (await r.check("k", "m", 0, 1, request_id="x")).allowed
    await r.redis.aclose()
