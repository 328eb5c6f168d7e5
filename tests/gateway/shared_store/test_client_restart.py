"""The store client across a real `redis-server` restart (shared_store/client.py `connect`).

Issue 23, item 8: after a store restart every pooled socket is dead; the first
concurrent burst of store calls used to fail on them ("Connection closed by server")
and fall back to local counting although the store was back. A store that is really
down must still fall back at once, and a timeout must not be retried.
"""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from inference_gateway.shared_store.client import StoreHealth, StoreSpec, StoreUnavailable, connect
from inference_gateway.shared_store.local_server import LocalRedis


async def _burst(health: StoreHealth, redis: Redis, n: int = 20) -> list[BaseException]:
    results = await asyncio.gather(
        *(health.call(lambda: redis.incr("hits")) for _ in range(n)), return_exceptions=True
    )
    return [r for r in results if isinstance(r, BaseException)]


async def test_first_burst_after_a_restart_uses_the_store(redis_server: LocalRedis) -> None:
    # a wide round-trip bound: what is tested is the dead sockets, and a loaded CI
    # machine once took more than the default 250 ms to connect 20 new ones
    spec = StoreSpec(url=redis_server.url, retry_ms=100, timeout_ms=2000)
    redis = connect(spec)
    health = StoreHealth("restart", retry_s=0.1, registry=CollectorRegistry())
    try:
        assert await _burst(health, redis) == []  # 20 pooled connections, all open
        redis_server.restart()  # same port, every pooled socket now dead
        assert await _burst(health, redis) == []
        assert health.up
        assert health.fallbacks._value.get() == 0  # type: ignore[attr-defined]
        assert int(await redis.get("hits")) == 20  # counted once each: no double count
    finally:
        await redis.aclose()


async def test_a_store_that_is_down_still_falls_back_once(redis_server: LocalRedis) -> None:
    spec = StoreSpec(url=redis_server.url, retry_ms=60_000)
    redis = connect(spec)
    health = StoreHealth("down", retry_s=60.0, registry=CollectorRegistry())
    try:
        assert await _burst(health, redis, 4) == []
        redis_server.stop()
        errors = await _burst(health, redis, 4)
        assert len(errors) == 4 and all(isinstance(e, StoreUnavailable) for e in errors)
        assert not health.up
        assert health.fallbacks._value.get() == 1  # type: ignore[attr-defined]
    finally:
        await redis.aclose()


async def test_a_call_that_never_answers_is_bounded_and_falls_back() -> None:
    """Whatever inside the client waits (a reconnect racing a restarting store, a pool
    wait), one call is bounded by `deadline_s`, 4 x `timeoutMs` for a client from
    `connect(spec)`: it then counts as the store being away, and the request goes on
    with the local view (a global-router request once waited its client's whole 300 s
    in CI)."""
    spec = StoreSpec(url="redis://127.0.0.1:9/0", timeout_ms=20, retry_ms=60_000)
    health = StoreHealth.for_spec("stuck", spec, CollectorRegistry())
    assert health.deadline_s == 0.08 and health.retry_s == 60.0
    never = asyncio.Event()
    started = asyncio.get_running_loop().time()
    try:
        await health.call(never.wait)
    except StoreUnavailable:
        pass
    else:
        raise AssertionError("a call that never answers returned")
    assert asyncio.get_running_loop().time() - started < 1.0
    assert not health.up and health.fallbacks._value.get() == 1  # type: ignore[attr-defined]
