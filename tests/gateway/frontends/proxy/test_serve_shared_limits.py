"""`igw serve --store URL`: the gateway config's rate limits kept in a real
`redis-server`, exact across two gateway replicas; token charges settled there from the
answers' `usage`; the local buckets while the store is away (metric, replicas keep
serving); the hot path without a store never touches it."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import aiohttp
import orjson
import pytest

from inference_gateway.config.spec import GatewayConfigSpec, RateLimitSpec
from inference_gateway.core.request.relay import StreamEnd, end_error
from inference_gateway.errors import ConfigError
from inference_gateway.shared_store.client import StoreSpec, store_from_flag
from inference_gateway.shared_store.local_server import LocalRedis

from .test_serve_adversarial import OPEN, ScriptedPod, body, pods, serve


@pytest.fixture
def redis_server() -> Iterator[LocalRedis]:
    with LocalRedis() as server:
        yield server


def limits(**rule: int) -> GatewayConfigSpec:
    return GatewayConfigSpec(flow_control=OPEN, rate_limits=[RateLimitSpec(**rule)])


def store(server: LocalRedis, **extra: int) -> StoreSpec:
    return StoreSpec(url=server.url, timeout_ms=2000, **extra)  # no fallback when loaded


async def test_two_gateway_replicas_share_one_limit(redis_server: LocalRedis) -> None:
    pod = ScriptedPod()
    config = limits(requests_per_minute=10)
    async with (
        pods(pod),
        serve(pod, config=config, store_spec=store(redis_server)) as (url1, _),
        serve(pod, config=config, store_spec=store(redis_server)) as (url2, _),
        aiohttp.ClientSession() as client,
    ):
        answers = []
        for _ in range(8):
            for url in (url1, url2):
                async with client.post(url + "/v1/completions", data=body()) as r:
                    await r.read()
                    answers.append((r.status, dict(r.headers)))
    assert Counter(status for status, _ in answers) == {200: 10, 429: 6}  # not 16 x 200
    refused = next(h for status, h in answers if status == 429)
    assert refused["x-ratelimit-scope"] == "global"
    assert int(refused["Retry-After"]) >= 1
    assert pod.seen == 10


async def test_usage_settles_the_shared_token_bucket(redis_server: LocalRedis) -> None:
    """5 x 301 tokens charged up front do not fit 1000; 5 x 12 used do, once settled."""
    pod = ScriptedPod()
    async with (
        pods(pod),
        serve(pod, config=limits(tokens_per_minute=1000), store_spec=store(redis_server)) as (
            url,
            gateway,
        ),
        aiohttp.ClientSession() as client,
    ):
        for stream in (False, True, False, True, False):
            async with client.post(
                url + "/v1/completions", data=body(max_tokens=300, stream=stream)
            ) as r:
                assert r.status == 200, await r.text()
                await r.read()
            shared = gateway.director.shared_limits
            assert shared is not None
            for _ in range(100):  # the settle is written in the background: bounded wait
                if not shared.pending:
                    break
                await asyncio.sleep(0.01)
            assert not shared.pending
        assert r.headers["x-ratelimit-scope"] == "global"


async def test_a_whole_answer_over_the_shared_window_is_a_429(redis_server: LocalRedis) -> None:
    """The pod's usage (10 generated) is over what an 8-token window leaves after
    admission (2 prompt + 1 reserved): serve's 429, with the store window's Retry-After."""
    pod = ScriptedPod()
    async with (
        pods(pod),
        serve(pod, config=limits(tokens_per_minute=8), store_spec=store(redis_server)) as (url, _),
        aiohttp.ClientSession() as client,
        client.post(url + "/v1/completions", data=body(max_tokens=1)) as r,
    ):
        assert r.status == 429
        error = orjson.loads(await r.read())["error"]
        message, kind = end_error(StreamEnd.OVER_LIMIT, whole=True)
        assert (error["message"], error["type"], error["code"]) == (
            message,
            kind,
            "rate_limit_exceeded",
        )
        assert r.headers["x-ratelimit-scope"] == "global"
        assert r.headers["Retry-After"] == "60"  # the store's window: all of it has left by then
    assert pod.seen == 1


async def test_store_away_the_replica_serves_on_its_local_buckets(
    redis_server: LocalRedis,
) -> None:
    pod = ScriptedPod()
    spec = store(redis_server, retry_ms=100)
    async with (
        pods(pod),
        serve(pod, config=limits(requests_per_minute=100), store_spec=spec) as (url, gateway),
        aiohttp.ClientSession() as client,
    ):
        redis_server.stop()
        for _ in range(3):
            async with client.post(url + "/v1/completions", data=body()) as r:
                assert r.status == 200
                assert "x-ratelimit-scope" not in r.headers  # the local buckets' answer
                assert r.headers["x-ratelimit-limit-requests"] == "100"
        registry = gateway.metrics.registry
        assert registry.get_sample_value("igw_store_up", {"component": "gateway"}) == 0
        assert registry.get_sample_value("igw_store_fallback_total", {"component": "gateway"}) == 1
        redis_server.start()
        await asyncio.sleep(0.15)
        async with client.post(url + "/v1/completions", data=body()) as r:
            assert r.headers["x-ratelimit-scope"] == "global"
        assert registry.get_sample_value("igw_store_up", {"component": "gateway"}) == 1


async def test_without_a_store_the_director_never_awaits_it() -> None:
    pod = ScriptedPod()
    async with pods(pod), serve(pod, config=limits(requests_per_minute=5)) as (url, gateway):
        assert gateway.director.shared_limits is None
        called = []
        gateway.director._charge_shared = lambda *a: called.append(a)  # type: ignore[method-assign]
        async with (
            aiohttp.ClientSession() as client,
            client.post(url + "/v1/completions", data=body()) as r,
        ):
            assert r.status == 200
        assert called == []


def test_the_store_flag_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert store_from_flag(None) is None
    monkeypatch.delenv("IGW_STORE_PASSWORD", raising=False)
    assert store_from_flag("redis://127.0.0.1:6379/0").password_env is None  # type: ignore[union-attr]
    monkeypatch.setenv("IGW_STORE_PASSWORD", "s3cret")
    spec = store_from_flag("rediss://valkey:6379/0")
    assert spec is not None and spec.password_env == "IGW_STORE_PASSWORD"
    with pytest.raises(ConfigError, match="--store"):
        store_from_flag("http://127.0.0.1:6379")
