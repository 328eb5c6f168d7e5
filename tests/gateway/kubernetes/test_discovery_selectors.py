"""Discovery with full label selectors (`matchExpressions`), through the fake API server
on loopback (see fake_apiserver.py; a real API server cannot run here).

The picker sends the selector in the API's set-based syntax (kubernetes.io "Labels and
Selectors": `k in (a,b)`, `k notin (a,b)`, `k`, `!k`), and the API server, not the
picker, filters the pods: the fake parses that syntax as the API server does, answers
400 to what it cannot parse, and turns a relabelled pod into ADDED/DELETED for a
filtered watch, as the API server's watch cache does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
from fake_apiserver import FakeApiServer, SelectorError, parse_selector, pod

from inference_gateway.config.spec import LabelSelector
from inference_gateway.core.endpoints.store import EndpointStore
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.kubernetes.discovery import (
    PodDiscovery,
    PodSource,
    PoolTarget,
    selector_query,
)

PODS = "/api/v1/namespaces/igw/pods"
SELECTOR = {
    "matchLabels": {"app": "vllm"},
    "matchExpressions": [
        {"key": "igw.dev/gpu", "operator": "In", "values": ["H100", "A100"]},
        {"key": "tier", "operator": "NotIn", "values": ["canary", "shadow"]},
        {"key": "igw.dev/pool", "operator": "Exists"},
        {"key": "draining", "operator": "DoesNotExist"},
    ],
}
QUERY = "app=vllm,igw.dev/gpu in (H100,A100),tier notin (canary,shadow),igw.dev/pool,!draining"


async def fetch(endpoint: Endpoint, path: str) -> str:
    if path == "/v1/models":
        return orjson.dumps({"data": [{"id": "m"}]}).decode()
    return "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\n"


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def test_the_query_is_the_api_set_based_syntax() -> None:
    assert selector_query(LabelSelector.model_validate(SELECTOR)) == QUERY
    assert selector_query({"b": "2", "a": "1"}) == "a=1,b=2"  # the plain map, as before
    assert selector_query({}) == ""


def test_the_fake_parses_what_the_picker_sends_and_refuses_garbage() -> None:
    """The fake's parser is its own (not the picker's), so the round trip is a check."""
    assert parse_selector(QUERY) == [
        ("app", "in", frozenset({"vllm"})),
        ("igw.dev/gpu", "in", frozenset({"H100", "A100"})),
        ("tier", "notin", frozenset({"canary", "shadow"})),
        ("igw.dev/pool", "exists", frozenset()),
        ("draining", "!exists", frozenset()),
    ]
    for bad in ("a in ()", "a in (x", "a b", "=x", "a in (x,,y)"):
        with pytest.raises(SelectorError):
            parse_selector(bad)


async def test_a_selector_the_api_server_refuses_is_an_error_not_every_pod(
    apiserver: FakeApiServer, client: Any
) -> None:
    source = PodSource(client, "igw", {})
    source.selector = "tier in ()"
    with pytest.raises(RuntimeError, match="HTTP 400"):
        await source.list()


async def test_discovery_routes_exactly_the_pods_the_expressions_select(
    apiserver: FakeApiServer, client: Any
) -> None:
    base = {"app": "vllm", "igw.dev/pool": "chat"}
    apiserver.put(PODS, pod("h100", "10.0.0.1", labels={**base, "igw.dev/gpu": "H100"}))
    apiserver.put(PODS, pod("a100", "10.0.0.2", labels={**base, "igw.dev/gpu": "A100"}))
    apiserver.put(PODS, pod("a10g", "10.0.0.3", labels={**base, "igw.dev/gpu": "A10G"}))
    apiserver.put(
        PODS, pod("canary", "10.0.0.4", labels={**base, "igw.dev/gpu": "H100", "tier": "canary"})
    )
    apiserver.put(
        PODS, pod("draining", "10.0.0.5", labels={**base, "igw.dev/gpu": "H100", "draining": ""})
    )
    apiserver.put(PODS, pod("nopool", "10.0.0.6", labels={"app": "vllm", "igw.dev/gpu": "H100"}))
    spec = parse_config({"pools": [{"name": "chat", "selector": SELECTOR}]}, "test")
    pool = spec.pools[0]
    store = EndpointStore([], fetch, staleness_s=60)
    discovery = PodDiscovery(
        store,
        [PoolTarget(pool.name, pool.selector, (pool.target_port,), "igw")],
        lambda p: PodSource(client, p.namespace, p.selector),
        backoff_s=(0.01, 0.05),
    )
    await discovery.start()
    try:
        await discovery.wait_synced()

        def names() -> set[str]:
            return {e.name for e in store.endpoints}

        assert names() == {"h100", "a100"}
        sent = [parse_qs(urlsplit(r).query).get("labelSelector") for r in apiserver.requests]
        assert sent and all(s == [QUERY] for s in sent)

        # relabelled into the selector: the filtered watch sees it ADDED
        apiserver.put(PODS, pod("canary", "10.0.0.4", labels={**base, "igw.dev/gpu": "H100"}))
        await until(lambda: names() == {"h100", "a100", "canary"})
        # relabelled out of it (NotIn): DELETED, so it leaves routing at once
        apiserver.put(
            PODS, pod("a100", "10.0.0.2", labels={**base, "igw.dev/gpu": "A100", "tier": "shadow"})
        )
        await until(lambda: names() == {"h100", "canary"})
        # DoesNotExist: a pod marked draining leaves too
        apiserver.put(
            PODS, pod("h100", "10.0.0.1", labels={**base, "igw.dev/gpu": "H100", "draining": "1"})
        )
        await until(lambda: names() == {"canary"})
    finally:
        await discovery.stop()


def test_an_inference_pool_is_read_by_match_labels_only() -> None:
    """Upstream InferencePool v1's selector has `matchLabels` only ("This simplified
    version uses only the matchLabels field": gateway-api-inference-extension
    api/v1/shared_types.go, `LabelSelector`), so that is all discovery reads from it."""
    resource = {
        "metadata": {"name": "chat", "namespace": "igw"},
        "spec": {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": [{"number": 1}]},
    }
    target = PoolTarget.from_inference_pool(resource)
    assert selector_query(target.selector) == "app=vllm"
