"""Passive failure detection in the endpoint store: the rule both data planes call.

A pod a data plane could not reach is out of rotation at once and comes back only with a
scrape that started after the failure. The scrape seam (`fetch`) is the store's own
injected transport; the clock is explicit so "started after" is exact.
"""

from __future__ import annotations

import asyncio

from inference_gateway.core.endpoints.discovery import DEFAULT_POOL, assign_pools, label_pools
from inference_gateway.core.endpoints.store import EndpointStore
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.types import Endpoint

PAGE = "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0\n"
MODELS = '{"data": [{"id": "m"}]}'


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def store_with(gate: asyncio.Event | None = None) -> tuple[EndpointStore, Clock]:
    clock = Clock()

    async def fetch(endpoint: Endpoint, path: str) -> str:
        if gate is not None and path == "/metrics":
            await gate.wait()
        return PAGE if path == "/metrics" else MODELS

    pods = [Endpoint(f"p{i}", "10.0.0.1", 8000 + i, pool="p", index=i) for i in range(2)]
    return EndpointStore(pods, fetch, staleness_s=60.0, clock=clock), clock


async def test_a_failed_pod_is_stale_at_once_and_back_after_a_fresh_scrape() -> None:
    store, clock = store_with()
    await store.scrape_once()
    dead, alive = store.endpoints
    assert store.ready() == [dead, alive]
    clock.now += 1
    store.connection_failed(dead)
    assert dead.stale and store.ready() == [alive]
    assert store.connection_failures == 1
    clock.now += 1
    await store.scrape_once()  # it answers scrapes again: back
    assert store.ready() == [dead, alive]


async def test_a_scrape_that_began_before_the_failure_does_not_bring_it_back() -> None:
    gate = asyncio.Event()
    store, clock = store_with(gate)
    gate.set()
    await store.scrape_once()
    dead = store.endpoints[0]
    gate.clear()
    round_ = asyncio.create_task(store.scrape_once())  # starts now, answers later
    await asyncio.sleep(0)
    clock.now += 1
    store.connection_failed(dead)  # the failure lands while that scrape is out
    gate.set()
    await round_
    assert dead.stale, "a scrape that started before the failure says nothing about now"
    clock.now += 1
    await store.scrape_once()
    assert not dead.stale


async def test_a_failed_pod_whose_scrapes_fail_stays_out_until_the_window_ends() -> None:
    clock = Clock()

    async def fetch(endpoint: Endpoint, path: str) -> str:
        if endpoint.name == "dead" and clock.now > 100.5:
            raise ConnectionRefusedError
        return PAGE if path == "/metrics" else MODELS

    dead = Endpoint("dead", "10.0.0.1", 8000, pool="p")
    store = EndpointStore([dead], fetch, staleness_s=60.0, clock=clock)
    await store.scrape_once()
    clock.now += 1
    store.connection_failed(dead)
    for _ in range(5):
        clock.now += 1
        await store.scrape_once()
        assert dead.stale  # its last good scrape is within 60 s, but it failed since


def test_static_pods_get_their_pool_from_the_configs_selectors() -> None:
    """`--endpoints` with a config: the pool selectors decide, as in the cluster; a pod
    no selector picks keeps its `igw.dev/pool` label (read by the file loader), else
    `default`."""
    spec = parse_config(
        {
            "pools": [
                {"name": "h100", "selector": {"gpu": "h100", "app": "vllm"}},
                {"name": "a10g", "selector": {"gpu": "a10g"}},
                {"name": "labelled"},  # no selector: picks nobody
            ]
        }
    )
    pods = [
        Endpoint("a", "10.0.0.1", 8000, labels={"gpu": "h100", "app": "vllm"}),
        Endpoint("b", "10.0.0.2", 8000, labels={"gpu": "a10g"}),
        Endpoint("c", "10.0.0.3", 8000, pool="labelled", labels={"igw.dev/pool": "labelled"}),
        Endpoint("d", "10.0.0.4", 8000, labels={"gpu": "l4"}),
    ]
    fallback = label_pools(pods)
    assign_pools(pods, spec.pools, fallback)
    assert [e.pool for e in pods] == ["h100", "a10g", "labelled", DEFAULT_POOL]
    # a reload that drops the a10g pool gives its pod back its own pool
    assign_pools(pods, spec.pools[:1], fallback)
    assert [e.pool for e in pods] == ["h100", DEFAULT_POOL, "labelled", DEFAULT_POOL]
