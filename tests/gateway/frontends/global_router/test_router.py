"""The global router in front of fake cluster gateways on loopback: failover before
streaming, garbage heartbeats, ramp-back, global rate limits over a real `redis-server`
(two router replicas), the store's local fallback, cost-aware shaping, authentication
and bad requests."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from inference_gateway.errors import ConfigError
from inference_gateway.frontends.global_router import build_global_router, parse_router_config
from inference_gateway.shared_store.local_server import LocalRedis

from .conftest import FakeCluster, running_router


def config(clusters: list[FakeCluster], **extra: Any) -> dict[str, Any]:
    regions = {"a": "r1", "b": "r1", "c": "r2"}
    costs = {"a": 100.0, "b": 40.0, "c": 60.0}
    return {
        "homeRegion": "r1",
        "pollIntervalMs": 100,
        "staleAfterMs": 500,
        "rampS": 0,
        "clusters": [
            {
                "name": c.name,
                "region": regions[c.name],
                "endpoint": c.url,
                "hourlyCostUsd": costs[c.name],
            }
            for c in clusters
        ],
        **extra,
    }


async def post(
    session: aiohttp.ClientSession, url: str, **headers: str
) -> tuple[int, dict[str, str], Any]:
    body = {"model": "m", "prompt": "hello", "max_tokens": 5}
    async with session.post(url + "/v1/completions", json=body, headers=headers) as r:
        return r.status, dict(r.headers), await r.json(content_type=None)


async def test_refused_cluster_is_drained_and_the_request_retried(
    fake_clusters: list[FakeCluster],
) -> None:
    b = fake_clusters[1]  # the first choice: home region, cheapest there
    slow_polls = config(fake_clusters, pollIntervalMs=30_000, staleAfterMs=60_000)
    async with running_router(slow_polls) as (url, router), aiohttp.ClientSession() as s:
        await b.stop()  # b's port refuses connections; no poll comes before the requests
        answers = [await post(s, url) for _ in range(10)]
        assert all(status == 200 for status, _, _ in answers)
        assert {h["x-igw-cluster"] for _, h, _ in answers} == {"a"}  # same region next
        assert not router.registry.states["b"].routable
        assert router.metrics.failovers.labels("b", "connect_failed")._value.get() == 1
        assert router.metrics.retries.labels("b", "connect_failed")._value.get() == 1


async def test_a_retryable_answer_moves_on_without_draining(
    fake_clusters: list[FakeCluster],
) -> None:
    a = fake_clusters[0]
    a.answer_status = 503
    async with running_router(config(fake_clusters)) as (url, router), aiohttp.ClientSession() as s:
        status, headers, _ = await post(s, url)
        assert status == 200 and headers["x-igw-cluster"] != "a"
        assert router.registry.states["a"].routable


@pytest.mark.parametrize(
    "garbage",
    [
        b"not json",
        b"[]",
        b'{"readyPods": -1, "saturation": 0}',
        b'{"readyPods": 1, "saturation": NaN}',
        b"{}",
    ],
)
async def test_garbage_status_drains_the_cluster(
    fake_clusters: list[FakeCluster], garbage: bytes
) -> None:
    a = fake_clusters[0]
    a.status_body = garbage
    async with running_router(config(fake_clusters)) as (url, router), aiohttp.ClientSession() as s:
        assert not router.registry.states["a"].routable
        assert router.registry.states["b"].routable
        status, headers, _ = await post(s, url)
        assert status == 200 and headers["x-igw-cluster"] == "b"


async def test_failed_heartbeat_drains_and_the_return_ramps(
    fake_clusters: list[FakeCluster],
) -> None:
    a = fake_clusters[0]
    async with running_router(config(fake_clusters, rampS=2)) as (_, router):
        states = router.registry.states
        # a router that starts ramps every cluster in, too (not the full share at once)
        assert 0 <= states["a"].ramp_fraction(router.registry.clock(), 2) < 1
        a.status_body = b"garbage"
        await asyncio.sleep(0.3)
        assert not states["a"].routable
        a.status_body = None
        await asyncio.sleep(0.3)
        assert states["a"].routable
        first = states["a"].ramp_fraction(router.registry.clock(), 2)
        await asyncio.sleep(0.5)
        later = states["a"].ramp_fraction(router.registry.clock(), 2)
        assert 0 < first < later < 1


async def stream_post(
    session: aiohttp.ClientSession, url: str, stream: bool = True
) -> tuple[int, dict[str, str], bytes]:
    body = {"model": "m", "prompt": "hello", "max_tokens": 5, "stream": stream}
    async with session.post(url + "/v1/completions", json=body) as r:
        return r.status, dict(r.headers), await r.read()


async def test_a_retry_skips_a_cluster_drained_since_the_ranking(
    fake_clusters: list[FakeCluster],
) -> None:
    """Ranking on arrival: b (home, cheapest), a (home), c. b refuses (503) after a
    while; a is drained meanwhile, so the retry goes to c, not to a."""
    a, b, _ = fake_clusters
    b.answer_status, b.answer_delay_s = 503, 0.6
    slow_polls = config(fake_clusters, pollIntervalMs=30_000, staleAfterMs=60_000)
    async with running_router(slow_polls) as (url, router), aiohttp.ClientSession() as s:
        sent = asyncio.ensure_future(stream_post(s, url))
        await asyncio.sleep(0.2)
        router.registry.drain("a", "connect_failed")  # learnt from another request
        status, headers, _ = await sent
        assert status == 200 and headers["x-igw-cluster"] == "c"
        assert sum(a.hits.values()) == 0
        assert router.metrics.retries.labels("b", "503")._value.get() == 1


async def test_a_drain_retries_the_requests_held_there_at_once(
    fake_clusters: list[FakeCluster],
) -> None:
    """A JSON request (no first-byte timeout: its answer comes whole) held by a cluster
    whose heartbeat then fails is retried the moment the cluster is drained."""
    b = fake_clusters[1]
    b.answer_status, b.hang_s = -1, 5.0
    async with running_router(config(fake_clusters)) as (url, router), aiohttp.ClientSession() as s:
        started = asyncio.get_running_loop().time()
        sent = asyncio.ensure_future(post(s, url))
        await asyncio.sleep(0.3)
        b.status_body = b"garbage"  # the next poll (100 ms) drains b
        status, headers, _ = await sent
        took = asyncio.get_running_loop().time() - started
        assert status == 200 and headers["x-igw-cluster"] == "a"
        assert took < 2.0  # not b's 5 s
        assert router.metrics.retries.labels("b", "cluster_drained")._value.get() == 1
        assert router.registry.states["b"].held == {}  # nothing outlives the request


async def test_a_status_sent_before_a_drain_does_not_revive_the_cluster(
    fake_clusters: list[FakeCluster],
) -> None:
    a = fake_clusters[0]
    slow_polls = config(fake_clusters, pollIntervalMs=30_000, staleAfterMs=60_000)
    async with running_router(slow_polls) as (_, router):
        a.status_delay_s = 0.4
        poll = asyncio.ensure_future(router.poller.poll_once())
        await asyncio.sleep(0.15)  # the poll is on its way: a request finds a refusing
        router.registry.drain("a", "connect_failed")
        await poll  # its good answer left before the drain: dropped
        assert not router.registry.states["a"].routable
        await router.poller.poll_once()  # a status sent after the drain brings it back
        assert router.registry.states["a"].routable


async def test_two_replicas_share_one_limit(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis
) -> None:
    limits = {"rules": [{"requestsPerMinute": 30}], "windowS": 60}
    store = {"url": redis_server.url, "timeoutMs": 2000}  # no fallback on a loaded machine
    cfg = config(fake_clusters, store=store, rateLimits=limits)
    async with (
        running_router(cfg) as (url1, _),
        running_router(cfg) as (url2, _),
        aiohttp.ClientSession() as s,
    ):
        answers = await asyncio.gather(
            *(post(s, u, authorization="Bearer k1") for _ in range(25) for u in (url1, url2))
        )
    statuses = Counter(status for status, _, _ in answers)
    assert statuses == {200: 30, 429: 20}
    refused = next(h for status, h, _ in answers if status == 429)
    assert int(refused["Retry-After"]) >= 1
    assert refused["x-ratelimit-limit-requests"] == "30"
    assert refused["x-ratelimit-remaining-requests"] == "0"


async def test_a_request_larger_than_the_whole_limit_is_too_large(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis
) -> None:
    """Issue 23, defect 1: a bound above the whole per-window limit was charged
    `min(cost, limit)` and admitted. It is OpenAI's 429 "Request too large", no retry."""
    limits = {"rules": [{"tokensPerMinute": 200}]}
    cfg = config(
        fake_clusters, store={"url": redis_server.url, "timeoutMs": 2000}, rateLimits=limits
    )
    async with running_router(cfg) as (url, _), aiohttp.ClientSession() as s:
        body = {"model": "m", "prompt": "hello", "max_tokens": 1024}
        async with s.post(url + "/v1/completions", json=body) as r:
            assert r.status == 429 and r.headers["x-should-retry"] == "false"
            error = (await r.json())["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "tokens"
    assert error["message"].startswith(
        "Request too large for m on tokens per min (TPM): Limit 200, Requested 1026."
    )
    assert sum(sum(c.hits.values()) for c in fake_clusters) == 0  # no cluster saw it


async def test_store_stopped_routers_keep_serving(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis
) -> None:
    cfg = config(
        fake_clusters,
        store={"url": redis_server.url, "retryMs": 100},
        rateLimits={"rules": [{"requestsPerMinute": 1000}], "fallbackReplicas": 2},
    )
    bounded = aiohttp.ClientTimeout(total=30)  # a request that hangs fails here, not at 300 s
    async with (
        running_router(cfg) as (url, _),
        aiohttp.ClientSession(timeout=bounded) as s,
    ):
        _, headers, _ = await post(s, url, authorization="Bearer k")
        assert headers["x-ratelimit-scope"] == "global"
        await asyncio.to_thread(redis_server.stop)  # the router's loop keeps running
        answers = [await post(s, url, authorization="Bearer k") for _ in range(5)]
        assert all(status == 200 for status, _, _ in answers)
        assert {h["x-ratelimit-scope"] for _, h, _ in answers} == {"local"}
        metrics = (await (await s.get(url + "/metrics")).read()).decode()
        assert 'igw_store_up{component="global-router"} 0.0' in metrics
        await asyncio.to_thread(redis_server.start)
        await asyncio.sleep(0.15)
        _, headers, _ = await post(s, url, authorization="Bearer k")
        assert headers["x-ratelimit-scope"] == "global"


async def test_streamed_usage_settles_the_token_bucket(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis
) -> None:
    cfg = config(
        fake_clusters,
        store={"url": redis_server.url, "timeoutMs": 2000},
        rateLimits={"rules": [{"tokensPerMinute": 1000}]},
    )
    async with running_router(cfg) as (url, _), aiohttp.ClientSession() as s:
        body = {"model": "m", "prompt": "x", "max_tokens": 300, "stream": True}
        for _ in range(5):  # 5 x 301 charged up front would not fit; 5 x 10 used does
            async with s.post(url + "/v1/completions", json=body) as r:
                assert r.status == 200
                text = await r.text()
                assert text.endswith("data: [DONE]\n\n")
                remaining = int(r.headers["x-ratelimit-remaining-tokens"])
        assert remaining >= 1000 - 4 * 10 - 302


async def test_cost_mode_sends_sheddable_traffic_to_the_cheaper_cluster(
    fake_clusters: list[FakeCluster],
) -> None:
    a, b, c = fake_clusters
    await c.stop()
    cfg = config([a, b], sheddableObjectives=["batch"])
    async with running_router(cfg) as (url, _), aiohttp.ClientSession() as s:
        for _ in range(40):
            await post(s, url, **{"x-gateway-inference-objective": "batch"})
        assert b.hits["batch"] >= 0.9 * 40  # b costs 40 $/h, a 100 $/h
        b.status = {**b.status, "saturation": 0.97}
        await asyncio.sleep(0.25)  # a poll or two
        for _ in range(20):
            await post(s, url, **{"x-gateway-inference-objective": "batch"})
        assert a.hits["batch"] >= 0.9 * 20


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b'{"prompt": "x"}', 400, "missing_model"),
        (b'["model"]', 400, "missing_model"),
        (b'{"model": "m", "prompt": "' + b"x" * (5 * 2**20) + b'"}', 413, "request_too_large"),
    ],
)
async def test_bad_requests_get_openai_errors(
    fake_clusters: list[FakeCluster], raw: bytes, status: int, code: str
) -> None:
    async with (
        running_router(config(fake_clusters)) as (url, _),
        aiohttp.ClientSession() as s,
        s.post(url + "/v1/completions", data=raw) as r,
    ):
        assert r.status == status
        assert (await r.json())["error"]["code"] == code


async def test_no_routable_cluster_answers_503(fake_clusters: list[FakeCluster]) -> None:
    for c in fake_clusters:
        c.status_body = b"garbage"
    async with running_router(config(fake_clusters)) as (url, _), aiohttp.ClientSession() as s:
        status, _, body = await post(s, url)
        assert status == 503 and body["error"]["code"] == "no_routable_cluster"
        async with s.get(url + "/health") as r:
            assert r.status == 503


async def test_unreachable_store_at_start_serves_on_the_local_view(
    fake_clusters: list[FakeCluster],
) -> None:
    cfg = config(
        fake_clusters,
        store={"url": "redis://127.0.0.1:9/0", "timeoutMs": 200},
        rateLimits={"rules": [{"requestsPerMinute": 3}]},
    )
    async with running_router(cfg) as (url, router), aiohttp.ClientSession() as s:
        answers = [await post(s, url, authorization="Bearer k") for _ in range(4)]
        assert [status for status, _, _ in answers] == [200, 200, 200, 429]
        assert {h["x-ratelimit-scope"] for _, h, _ in answers} == {"local"}
        assert router.metrics.rate_limit_hits.labels("local")._value.get() == 1


async def test_every_cluster_full_passes_the_last_429_through(
    fake_clusters: list[FakeCluster],
) -> None:
    for c in fake_clusters:
        c.answer_status = 429
    async with running_router(config(fake_clusters)) as (url, router), aiohttp.ClientSession() as s:
        status, headers, _ = await post(s, url)
        assert status == 429 and headers["Retry-After"] == "7"
        assert sum(sum(c.hits.values()) for c in fake_clusters) == 3  # maxAttempts
        assert all(router.registry.states[c.name].routable for c in fake_clusters)


def key_file(tmp_path: Path) -> str:
    """Two keys of one client (a rotation in progress) and a key limited to model `m2`."""
    entries = [
        {"client": "team-a", "sha256": hashlib.sha256(b"key-old").hexdigest()},
        {"client": "team-a", "sha256": hashlib.sha256(b"key-new").hexdigest()},
        {"client": "batch", "sha256": hashlib.sha256(b"key-b").hexdigest(), "models": ["m2"]},
    ]
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": entries}))
    return str(path)


async def test_authenticated_client_ids_key_the_limits(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis, tmp_path: Path
) -> None:
    cfg = config(
        fake_clusters,
        auth={"apiKeysFile": key_file(tmp_path)},
        store={"url": redis_server.url, "timeoutMs": 2000},
        rateLimits={"rules": [{"client": "team-a", "requestsPerMinute": 3}]},
    )
    async with running_router(cfg) as (url, _), aiohttp.ClientSession() as s:
        status, headers, body = await post(s, url, authorization="Bearer wrong")
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
        assert headers["WWW-Authenticate"].startswith("Bearer")
        status, _, body = await post(s, url, authorization="Bearer key-b")
        assert status == 404 and body["error"]["code"] == "model_not_found"
        # both keys of team-a spend one budget of 3
        answers = [
            await post(s, url, authorization=f"Bearer {k}")
            for k in ("key-old", "key-new", "key-old", "key-new")
        ]
        assert [a[0] for a in answers] == [200, 200, 200, 429]
    assert sum(sum(c.hits.values()) for c in fake_clusters) == 3  # refusals reached none


def test_a_bad_key_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "keys.yaml").write_text("keys: [{client: a, sha256: nothex}]\n")
    spec = parse_router_config(
        {
            "clusters": [{"name": "a", "region": "r1", "endpoint": "http://127.0.0.1:1"}],
            "auth": {"apiKeysFile": str(tmp_path / "keys.yaml")},
        }
    )
    with pytest.raises(ConfigError):
        build_global_router(spec)


async def test_emf_records_are_written_while_the_router_runs(
    fake_clusters: list[FakeCluster], capsys: pytest.CaptureFixture[str]
) -> None:
    from aiohttp import web

    spec = parse_router_config(config(fake_clusters))
    app, _ = build_global_router(spec, emf_interval_s=0.1, environment="prod")
    runner = web.AppRunner(app)
    await runner.setup()
    await asyncio.sleep(0.35)
    await runner.cleanup()  # writes the last, partial interval too
    lines = [orjson.loads(x) for x in capsys.readouterr().out.splitlines()]
    fleet = [x for x in lines if "RoutingDecisions" in x]
    clusters = {x["Cluster"] for x in lines if "ClusterHealthy" in x}
    assert len(fleet) >= 3 and {x["Environment"] for x in fleet} == {"prod"}
    assert clusters == {"a", "b", "c"}


async def test_a_drain_racing_a_first_byte_timeout_is_harmless() -> None:
    """The drain's call back may come after the wait's own deadline fired (before the
    request unregistered): it must not raise into the poll loop or another request."""
    from inference_gateway.frontends.global_router.server import _end_now

    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as waiting:
            _end_now(waiting, loop)  # a drain: the wait ends at once
            await asyncio.sleep(5)
    _end_now(waiting, loop)  # a second drain after expiry: nothing happens
    assert waiting.expired()


async def test_a_slow_cluster_delays_its_own_status_not_the_others(
    fake_clusters: list[FakeCluster],
) -> None:
    """A poll round waits for answers until the next is due, not for its slowest: a
    cluster gateway slow to answer its status held every other cluster's poll as long.
    The slow one is not asked again while its poll is out, and `stop` ends that poll."""
    a = fake_clusters[0]
    settings = config(fake_clusters, statusTimeoutMs=5_000, staleAfterMs=10_000)
    async with running_router(settings) as (_, router):
        loop = asyncio.get_running_loop()
        a.status_delay_s = 1.5
        polls_before = a.status_polls
        ages: list[float] = []
        until = loop.time() + 1.2
        while loop.time() < until:
            await asyncio.sleep(0.05)
            now = router.registry.clock()
            ages.append(max(now - router.registry.states[n].last_ok for n in ("b", "c")))
        assert max(ages) < 0.6, f"b and c waited for a's status: {max(ages):.2f} s"
        assert a.status_polls - polls_before <= 1, "asked again while its poll was out"
    assert not router.poller._left, "a poll outlived the router"
