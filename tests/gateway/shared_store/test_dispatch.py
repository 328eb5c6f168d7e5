"""Active-active replicas through a real `redis-server` on loopback (shared_store/dispatch.py).

Two in-process directors, each with its own endpoint objects for the same pods, share
their dispatch view through one redis-server (the `redis_server` fixture: free port,
temp dir). Every wait is a bounded poll; nothing asserts a duration.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from inference_gateway.config.spec import FlowControlSpec, GatewayConfigSpec
from inference_gateway.core.request.director import Director, RoutingState
from inference_gateway.core.request.lifecycle import RequestLifecycle
from inference_gateway.core.scheduling import Endpoint, PodMetrics, Scheduler
from inference_gateway.core.traffic.flow_control import FlowController
from inference_gateway.errors import ConfigError
from inference_gateway.shared_store.dispatch import DispatchShare, decode_entry
from inference_gateway.shared_store.local_server import LocalRedis, free_port

INTERVAL_S = 0.005
WAIT_S = 5.0  # bound on every poll below


def _pods() -> list[Endpoint]:
    """The same two pods as a replica's own endpoint objects (fresh scrape, idle)."""
    return [
        Endpoint(
            name,
            "127.0.0.1",
            port,
            pool="default",
            metrics=PodMetrics(),
            stale=False,
            models=frozenset({"m"}),
            index=i,
        )
        for i, (name, port) in enumerate([("pod-a", 9101), ("pod-b", 9102)])
    ]


class Replica:
    """A director over its own endpoints, and its share of the dispatch view."""

    def __init__(self, url: str, **options: object) -> None:
        self.endpoints = _pods()
        self.director = Director(
            lambda: self.endpoints,
            Scheduler(GatewayConfigSpec(), count_inflight=True),
            RoutingState.build(None),
        )
        self.controllers: dict[str, FlowController] = {}
        self.share = DispatchShare(
            url,
            lambda: self.endpoints,
            lambda: self.controllers,
            interval_s=INTERVAL_S,
            registry=self.director.metrics.registry,
            **options,  # type: ignore[arg-type]
        )

    async def dispatch(self, n: int, prompt: str = "hello " * 200) -> list[RequestLifecycle]:
        """`n` requests through the director to their first-ranked pod, as a data plane
        sends them (each request's lifecycle reports the pick)."""
        lives = []
        for _ in range(n):
            body = orjson.dumps({"model": "m", "prompt": prompt})
            life = await self.director.decide(body, {})
            life.picked(life.decision.ranked[0])
            lives.append(life)
        return lives

    def metric(self, name: str, **labels: str) -> float:
        return self.director.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def replicas(redis_server: LocalRedis) -> AsyncIterator[tuple[Replica, Replica]]:
    a, b = Replica(redis_server.url), Replica(redis_server.url)
    await a.share.start()
    await b.share.start()
    yield a, b
    await a.share.stop()
    await b.share.stop()


async def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached within the bound")
        await asyncio.sleep(INTERVAL_S)


def _by_hostport(replica: Replica) -> dict[str, Endpoint]:
    return {e.hostport: e for e in replica.endpoints}


async def test_each_replica_sees_the_others_inflight_and_not_its_own(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    lives = await a.dispatch(3)
    sent = {e.hostport: (e.sent_requests, e.prefill_tokens) for e in a.endpoints}
    assert sum(n for n, _ in sent.values()) == 3
    theirs = _by_hostport(b)
    await _until(
        lambda: all(
            (theirs[hp].peer_requests, theirs[hp].peer_prefill_tokens) == counts
            for hp, counts in sent.items()
        )
    )
    assert all(e.peer_requests == 0 and e.peer_prefill_tokens == 0 for e in a.endpoints)
    assert b.share.peers == 1 and b.metric("igw_dispatch_peers") == 1
    # first tokens arrive at A: nothing is pending any more, and B sees that too
    for life in lives:
        life.first_byte()
    await _until(lambda: all(e.peer_requests == e.peer_prefill_tokens == 0 for e in b.endpoints))


async def test_admission_waiters_are_seen_by_the_other_replica(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    spec = FlowControlSpec()
    a.controllers["default"] = FlowController(spec)
    b.controllers["default"] = mine = FlowController(spec)
    waiting = a.controllers["default"].offer("standard", "", time.monotonic(), saturated=True)
    assert waiting.waiter is not None
    await _until(lambda: len(mine.peer_waiters.get("standard", [])) == 1)
    # B's pool is not full, but A's older waiter is: B's newcomer queues behind it
    assert not mine.offer("standard", "", time.monotonic(), saturated=False).admitted


async def test_store_outage_falls_back_to_the_local_view_and_recovers(
    redis_server: LocalRedis, replicas: tuple[Replica, Replica], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = replicas
    await a.dispatch(2)
    await _until(lambda: sum(e.peer_requests for e in b.endpoints) == 2)
    assert b.metric("igw_dispatch_store_up") == 1
    with caplog.at_level(logging.INFO, logger="inference_gateway.shared_store.dispatch"):
        redis_server.stop()
        await _until(lambda: b.share.up is False)
        assert b.metric("igw_dispatch_store_up") == 0
        last = b.share.exchanged  # the last exchange that worked: it stays put while down
        assert time.monotonic() - 5 < last < time.monotonic()
        assert all(e.peer_requests == 0 for e in b.endpoints)  # local view only
        # still serving on the local view
        assert (await b.dispatch(1))[0].endpoint is not None
        await asyncio.sleep(0.6)  # a retry or two more, each failing
        assert b.share.exchanged == last
        down = [r for r in caplog.records if "unreachable" in r.getMessage()]
        assert len(down) == 2  # one line per replica, not one per failed exchange
        redis_server.start()
        await _until(lambda: b.share.up is True and sum(e.peer_requests for e in b.endpoints) == 2)
    assert b.metric("igw_dispatch_store_up") == 1 and b.share.exchanged > last
    assert any("reachable: sharing" in r.getMessage() for r in caplog.records)
    assert b.metric("igw_dispatch_store_errors_total", kind="unreachable") >= 1


async def test_a_dead_replicas_counts_expire(redis_server: LocalRedis) -> None:
    a = Replica(redis_server.url, ttl_s=0.3)
    b = Replica(redis_server.url, ttl_s=0.3)
    await a.share.start()
    await b.share.start()
    try:
        await a.dispatch(2)
        await _until(lambda: sum(e.peer_requests for e in b.endpoints) == 2)
        assert a.share._task is not None
        a.share._task.cancel()  # A dies: it never deletes its entry
        await _until(lambda: sum(e.peer_requests for e in b.endpoints) == 0)
        assert b.share.peers == 0
        client = Redis.from_url(redis_server.url)
        members = await client.smembers(b.share.keys[0])
        await client.aclose()
        assert members == {b.share.replica_id.encode()}  # the expired id was dropped
    finally:
        await b.share.stop()
        await a.share.redis.aclose()


async def test_malformed_entries_in_the_store_are_skipped(
    redis_server: LocalRedis, replicas: tuple[Replica, Replica]
) -> None:
    _, b = replicas
    client = Redis.from_url(redis_server.url)
    registry, prefix = b.share.keys[0], b.share.prefix
    good = {"d": {"127.0.0.1:9101": [4, 100]}, "q": {}}
    entries = {
        "good": orjson.dumps(good),
        "not-json": b"\xff{",
        "wrong-shape": orjson.dumps({"d": {"127.0.0.1:9101": ["many", 1]}}),
        "not-a-map": orjson.dumps([1, 2, 3]),
        "huge": orjson.dumps({"d": {"127.0.0.1:9102": [10**12, -5]}}),
    }
    for name, value in entries.items():
        await client.set(prefix + name, value, px=60_000)
        await client.sadd(registry, name)
    await client.aclose()
    theirs = _by_hostport(b)
    await _until(lambda: b.share.peers == 3)  # replica A (idle), `good` and `huge`
    assert (
        theirs["127.0.0.1:9101"].peer_requests,
        theirs["127.0.0.1:9101"].peer_prefill_tokens,
    ) == (
        4,
        100,
    )
    assert theirs["127.0.0.1:9102"].peer_requests == 1_000_000  # clamped
    assert theirs["127.0.0.1:9102"].peer_prefill_tokens == 0
    assert b.metric("igw_dispatch_store_errors_total", kind="malformed_entry") >= 3


def test_decode_entry_rejects_what_it_cannot_read() -> None:
    assert decode_entry(b"{}") == ({}, {})
    assert decode_entry(b'{"d": {"h:1": [1, 2]}, "q": {"p": {"standard": [0.5, 0.1]}}}') == (
        {"h:1": (1, 2)},
        {"p": {"standard": [0.1, 0.5]}},
    )
    for raw in (b"", b"[]", b'{"d": {"h:1": [true, 2]}}', b'{"d": {"h:1": [1]}}', b'{"q": 3}'):
        assert decode_entry(raw) is None, raw
    # unknown bands and non-numeric ages are dropped, not trusted
    assert decode_entry(b'{"q": {"p": {"vip": [1], "standard": ["x"]}}}') == ({}, {"p": {}})


async def test_an_unreachable_store_at_start_leaves_the_replica_on_its_local_view() -> None:
    replica = Replica(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    await replica.share.start()
    try:
        assert replica.share.up is False and replica.metric("igw_dispatch_store_up") == 0
        assert replica.share.exchanged == float("-inf")  # never exchanged
        assert (await replica.dispatch(1))[0].endpoint is not None
    finally:
        await replica.share.stop()


def test_a_store_url_that_is_not_redis_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--store"):
        DispatchShare("http://127.0.0.1:1", list)


async def _metric_from(url: str, name: str) -> float | None:
    """One sample of `/metrics` at `url`, None while the process is not up yet."""
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            text = await response.text()
    except aiohttp.ClientError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return None


@pytest.mark.slow
async def test_igw_serve_and_igw_picker_share_through_store(
    redis_server: LocalRedis, tmp_path: Path
) -> None:
    """The real commands: `igw serve --store URL` and `igw picker` with `$IGW_STORE_URL`
    each see the other as a peer, and both report the outage when the store stops."""
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(
        f"endpoints:\n  - {{name: pod, address: 127.0.0.1, port: {free_port()}}}\n"
    )
    serve_port, metrics_port = free_port(), free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cli = [sys.executable, "-m", "inference_gateway.cli.main"]
    serve = await asyncio.create_subprocess_exec(
        *cli, "serve", "--endpoints", str(endpoints), "--port", str(serve_port),
        "--store", redis_server.url,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, env=env,
    )  # fmt: skip
    picker = await asyncio.create_subprocess_exec(
        *cli, "picker", "--endpoints", str(endpoints), "--host", "127.0.0.1",
        "--grpc-port", "0", "--metrics-port", str(metrics_port),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        env={**env, "IGW_STORE_URL": redis_server.url},
    )  # fmt: skip
    urls = [f"http://127.0.0.1:{serve_port}/metrics", f"http://127.0.0.1:{metrics_port}/metrics"]
    try:
        for wanted, metric in ((1.0, "igw_dispatch_peers"), (1.0, "igw_dispatch_store_up")):
            deadline = time.monotonic() + 60  # two interpreters starting on a loaded machine
            while [await _metric_from(u, metric) for u in urls] != [wanted, wanted]:
                assert serve.returncode is None and picker.returncode is None
                assert time.monotonic() < deadline, f"{metric} never reached {wanted}"
                await asyncio.sleep(0.1)
        redis_server.stop()
        deadline = time.monotonic() + WAIT_S
        while [await _metric_from(u, "igw_dispatch_store_up") for u in urls] != [0.0, 0.0]:
            assert time.monotonic() < deadline, "the outage was not reported"
            await asyncio.sleep(0.1)
    finally:
        for process in (serve, picker):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in (serve, picker):
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
