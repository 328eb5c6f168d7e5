"""The store asks vLLM pods for only the families routing reads, and reads a pod whole
where it cannot filter.

vLLM serves `/metrics/` from prometheus_client's ASGI app, which answers `name[]` with the
restricted registry, and an empty page in multiprocess mode (several API servers), where
that registry knows no names; `adapters.FILTERED_PATHS` has the upstream sources. The
pages below are what prometheus_client renders (checked against the library itself in
`test_the_filtered_path_is_what_prometheus_client_serves`); the fetch is the store's own
injected seam.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import parse_qs, urlsplit

import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram, make_asgi_app

from inference_gateway.core.endpoints.adapters import FILTERED_PATHS
from inference_gateway.core.endpoints.store import FILTER_RECHECK, EndpointStore
from inference_gateway.core.scheduling.types import Endpoint

FILTERED = FILTERED_PATHS["vllm"]
GAUGES = (
    "# HELP vllm:num_requests_running r\n# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{model_name="m"} 3.0\n'
    "# HELP vllm:num_requests_waiting w\n# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{model_name="m"} 2.0\n'
    "# HELP vllm:kv_cache_usage_perc k\n# TYPE vllm:kv_cache_usage_perc gauge\n"
    'vllm:kv_cache_usage_perc{model_name="m"} 0.25\n'
)
WHOLE = GAUGES + (
    "# HELP vllm:time_to_first_token_seconds t\n"
    "# TYPE vllm:time_to_first_token_seconds histogram\n"
    'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 1.0\n'
)
MODELS = '{"data": [{"id": "m"}]}'


class Pod:
    """A pod's answers by path: `filters` False answers the filtered path with an empty
    page (a multiprocess registry), `routes` False with an error (no such route)."""

    def __init__(self, *, filters: bool = True, routes: bool = True) -> None:
        self.filters, self.routes, self.up = filters, routes, True
        self.paths: list[str] = []

    def answer(self, path: str) -> str:
        if not self.up:
            raise ConnectionRefusedError
        self.paths.append(path)
        if path == "/v1/models":
            return MODELS
        if path == "/metrics":
            return WHOLE
        if not self.routes:
            raise RuntimeError("GET /metrics/ answered HTTP 404")
        return GAUGES if self.filters else ""


def store_of(*pods: Pod, engine: str = "vllm") -> tuple[EndpointStore, list[Endpoint]]:
    endpoints = [Endpoint(f"p{i}", "10.0.0.1", 8000 + i, pool="p") for i in range(len(pods))]
    by_endpoint = dict(zip(endpoints, pods, strict=True))

    async def fetch(endpoint: Endpoint, path: str) -> str:
        return by_endpoint[endpoint].answer(path)

    store = EndpointStore(endpoints, fetch, engine=engine, staleness_s=60.0, max_cpu_fraction=None)
    return store, endpoints


def metrics_paths(pod: Pod) -> list[str]:
    return [p for p in pod.paths if p != "/v1/models"]


async def test_a_pod_that_filters_is_only_ever_asked_for_the_routing_families() -> None:
    pod = Pod()
    store, (endpoint,) = store_of(pod)
    for _ in range(3):
        await store.scrape_once()
    assert metrics_paths(pod) == [FILTERED] * 3
    assert (endpoint.metrics.waiting, endpoint.metrics.running) == (2, 3)
    assert endpoint.metrics.kv_usage == 0.25
    assert store.ready() == [endpoint]


@pytest.mark.parametrize(
    "pod", [Pod(filters=False), Pod(routes=False)], ids=["empty-answer", "no-route"]
)
async def test_a_pod_that_cannot_filter_is_read_whole_and_asked_again_later(
    pod: Pod, caplog: pytest.LogCaptureFixture
) -> None:
    store, (endpoint,) = store_of(pod)
    with caplog.at_level(logging.INFO, logger="inference_gateway.core.endpoints.store"):
        for _ in range(FILTER_RECHECK + 1):
            await store.scrape_once()
    paths = metrics_paths(pod)
    assert paths[:2] == [FILTERED, "/metrics"], "the whole page in the same scrape"
    assert paths[2 : FILTER_RECHECK + 1] == ["/metrics"] * (FILTER_RECHECK - 1)
    assert paths[FILTER_RECHECK + 1 :] == [FILTERED, "/metrics"], "asked again, read whole"
    assert (endpoint.metrics.waiting, endpoint.metrics.running) == (2, 3)
    assert store.ready() == [endpoint]
    said = [r.getMessage() for r in caplog.records if "does not filter" in r.getMessage()]
    assert len(said) == 1 and "p0" in said[0], said


async def test_a_pod_that_starts_filtering_is_read_filtered_from_its_next_check() -> None:
    pod = Pod(filters=False)
    store, _ = store_of(pod)
    await store.scrape_once()
    pod.filters = True  # replaced by a single-API-server build
    for _ in range(FILTER_RECHECK + 2):
        await store.scrape_once()
    assert metrics_paths(pod)[-2:] == [FILTERED, FILTERED]


async def test_a_pod_that_is_down_is_not_taken_for_one_that_cannot_filter() -> None:
    pod = Pod()
    store, (endpoint,) = store_of(pod)
    await store.scrape_once()
    pod.up = False
    await store.scrape_once()
    pod.up = True
    await store.scrape_once()
    assert metrics_paths(pod) == [FILTERED, FILTERED], "back on the filtered page at once"
    assert store.ready() == [endpoint]


async def test_each_pod_gets_its_own_path_and_other_engines_the_whole_page() -> None:
    filtering, whole = Pod(), Pod(filters=False)
    store, _ = store_of(filtering, whole)
    await store.scrape_once()
    await store.scrape_once()
    assert metrics_paths(filtering) == [FILTERED, FILTERED]
    assert metrics_paths(whole) == [FILTERED, "/metrics", "/metrics"]
    sglang = Pod()
    store, _ = store_of(sglang, engine="sglang")
    await store.scrape_once()
    assert metrics_paths(sglang) == ["/metrics"]


async def test_the_filtered_path_is_what_prometheus_client_serves() -> None:
    """prometheus_client's ASGI app (what vLLM mounts at `/metrics/`) given our path's
    query answers the gauges routing reads and leaves the histograms out."""
    registry = CollectorRegistry()
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        Gauge(name, "g", ["model_name"], registry=registry).labels("m").set(1)
    Gauge("vllm:kv_cache_usage_perc", "k", ["model_name"], registry=registry).labels("m").set(0.5)
    Histogram("vllm:time_to_first_token_seconds", "t", registry=registry).observe(0.1)
    app = make_asgi_app(registry=registry)
    messages: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request"}

    async def send(message: dict[str, object]) -> None:
        messages.append(message)

    query = urlsplit(FILTERED).query
    assert set(parse_qs(query)) == {"name[]"}
    scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
    scope["query_string"] = query.encode()
    await asyncio.wait_for(app(scope, receive, send), 5)  # type: ignore[arg-type]
    page = bytes(messages[1]["body"]).decode()  # type: ignore[arg-type]
    assert "vllm:num_requests_waiting" in page and "vllm:kv_cache_usage_perc" in page
    assert "time_to_first_token" not in page
