"""Kubernetes discovery against an in-process fake API server (aiohttp on loopback) that
implements list and watch with resourceVersion semantics and 410 Gone after compaction
(see fake_apiserver.py). Pods appearing, turning unready and disappearing must change
routing within one watch event; an expired watch re-lists; failures reconnect."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from fake_apiserver import FakeApiServer, pod

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.endpoints.store import EndpointStore
from inference_gateway.core.request.director import Director
from inference_gateway.core.scheduling import Scheduler
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.frontends.proxy import RoutingState
from inference_gateway.kubernetes.discovery import (
    LeaderElector,
    PodDiscovery,
    PodSource,
    PoolTarget,
    pod_endpoints,
)

PODS = "/api/v1/namespaces/igw/pods"
LABELS = {"app": "vllm", "igw.dev/pool": "chat"}
POOL = PoolTarget("chat", LABELS, (8000,), "igw")
MODEL = "llama-3.1-8b"


async def fetch(endpoint: Endpoint, path: str) -> str:
    """Every pod looks idle and serves MODEL (the store's scrape seam)."""
    if path == "/v1/models":
        return orjson.dumps({"data": [{"id": MODEL}]}).decode()
    return (
        "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0.1\n"
    )


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


@pytest.fixture
async def running(
    apiserver: FakeApiServer, client: Any
) -> AsyncIterator[tuple[PodDiscovery, Director]]:
    apiserver.put(PODS, pod("a", "10.0.0.1", labels=LABELS))
    apiserver.put(PODS, pod("b", "10.0.0.2", labels=LABELS))
    apiserver.put(PODS, pod("c", "10.0.0.3", ready=False, labels=LABELS))
    apiserver.put(PODS, pod("other", "10.0.0.9", labels={"app": "vllm", "igw.dev/pool": "x"}))
    store = EndpointStore([], fetch, staleness_s=60)
    discovery = PodDiscovery(
        store,
        [POOL],
        lambda p: PodSource(client, p.namespace, p.selector),
        backoff_s=(0.01, 0.05),
    )
    await discovery.start()
    await discovery.wait_synced()
    await store.scrape_once()
    director = Director(
        lambda: store.endpoints, Scheduler(GatewayConfigSpec()), RoutingState.build(None)
    )
    yield discovery, director
    await discovery.stop()
    await director.close()


async def routed(director: Director) -> set[str]:
    """Every pod the picker would consider for a request, best first."""
    body = b'{"model": "%s", "prompt": "hi"}' % MODEL.encode()
    life = await director.decide(body, {})
    life.finished()
    return {e.hostport for e in life.decision.ranked}


async def test_pods_appearing_unready_and_gone_change_routing_within_one_event(
    apiserver: FakeApiServer, running: tuple[PodDiscovery, Director]
) -> None:
    discovery, director = running
    assert await routed(director) == {"10.0.0.1:8000", "10.0.0.2:8000"}

    events = discovery.events
    apiserver.put(PODS, pod("d", "10.0.0.4", labels=LABELS))
    await until(lambda: discovery.events == events + 1)
    await until(lambda: not next(e for e in discovery.store.endpoints if e.name == "d").stale)
    assert await routed(director) == {"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.4:8000"}

    events = discovery.events
    apiserver.put(PODS, pod("b", "10.0.0.2", ready=False, labels=LABELS))
    await until(lambda: discovery.events == events + 1)
    assert await routed(director) == {"10.0.0.1:8000", "10.0.0.4:8000"}

    events = discovery.events
    apiserver.delete(PODS, "a")
    await until(lambda: discovery.events == events + 1)
    assert await routed(director) == {"10.0.0.4:8000"}


async def test_known_pods_keep_their_state_across_events(
    apiserver: FakeApiServer, running: tuple[PodDiscovery, Director]
) -> None:
    discovery, _ = running
    a = next(e for e in discovery.store.endpoints if e.name == "a")
    a.inflight = 3
    events = discovery.events
    apiserver.put(PODS, pod("e", "10.0.0.5", labels=LABELS))
    await until(lambda: discovery.events == events + 1)
    assert next(e for e in discovery.store.endpoints if e.name == "a") is a
    assert a.inflight == 3


async def test_expired_watch_relists_and_catches_up(
    apiserver: FakeApiServer, running: tuple[PodDiscovery, Director]
) -> None:
    discovery, director = running
    reflector = discovery.reflectors["chat"]
    lists = reflector.lists
    # End the watch, then change and compact while the reflector is away: the change
    # is only in the history that compaction forgets, so resuming must fail with 410.
    apiserver.drop_watches()
    apiserver.put(PODS, pod("f", "10.0.0.6", labels=LABELS))
    apiserver.compact()
    await until(lambda: reflector.lists == lists + 1)
    await until(lambda: any(e.name == "f" for e in discovery.store.endpoints))
    assert apiserver.gone_served == 1
    await until(lambda: not next(e for e in discovery.store.endpoints if e.name == "f").stale)
    assert "10.0.0.6:8000" in await routed(director)


async def test_failures_reconnect_with_backoff(
    apiserver: FakeApiServer, running: tuple[PodDiscovery, Director]
) -> None:
    discovery, _ = running
    apiserver.fail_next = 3
    apiserver.drop_watches()
    await until(lambda: apiserver.fail_next == 0)
    events = discovery.events
    apiserver.put(PODS, pod("g", "10.0.0.7", labels=LABELS))
    await until(lambda: discovery.events > events)
    assert any(e.name == "g" for e in discovery.store.endpoints)


@pytest.mark.parametrize(
    ("pods", "ports", "expected"),
    [
        ({"x": pod("x", "10.1.0.1")}, (8000,), [("x", "10.1.0.1:8000")]),
        (
            {"x": pod("x", "10.1.0.1")},
            (8000, 8001),
            [("x:8000", "10.1.0.1:8000"), ("x:8001", "10.1.0.1:8001")],
        ),
        ({"x": pod("x", None)}, (8000,), []),  # no IP yet
        ({"x": pod("x", "10.1.0.1", ready=False)}, (8000,), []),
    ],
)
def test_pod_endpoints(
    pods: dict[str, Any], ports: tuple[int, ...], expected: list[tuple[str, str]]
) -> None:
    target = PoolTarget("p", {}, ports)
    assert [(e.name, e.hostport) for e in pod_endpoints(pods, target)] == expected


def test_terminating_pod_is_not_an_endpoint() -> None:
    terminating = pod("x", "10.1.0.1")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pod_endpoints({"x": terminating}, PoolTarget("p", {})) == []


def test_pool_target_from_inference_pool() -> None:
    resource = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "chat", "namespace": "igw"},
        "spec": {
            "selector": {"matchLabels": {"app": "vllm"}},
            "targetPorts": [{"number": 8000}, {"number": 8001}],
            "endpointPickerRef": {"name": "igw-picker", "port": {"number": 9002}},
        },
    }
    assert PoolTarget.from_inference_pool(resource) == PoolTarget(
        "chat", {"app": "vllm"}, (8000, 8001), "igw"
    )


async def test_leader_election_one_leader_and_takeover_after_expiry(
    apiserver: FakeApiServer, client: Any
) -> None:
    now = [datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)]
    first = LeaderElector(client, "igw", "igw-picker", "pod-1", lease_s=10, clock=lambda: now[0])
    second = LeaderElector(client, "igw", "igw-picker", "pod-2", lease_s=10, clock=lambda: now[0])
    assert await first.try_acquire()
    assert not await second.try_acquire()
    now[0] += datetime.timedelta(seconds=5)
    assert await first.try_acquire()  # renewal
    now[0] += datetime.timedelta(seconds=11)  # first stopped renewing
    assert await second.try_acquire()
    assert not await first.try_acquire()
    lease = apiserver.collections["/apis/coordination.k8s.io/v1/namespaces/igw/leases"]
    spec = lease["igw-picker"]["spec"]
    assert spec["holderIdentity"] == "pod-2" and spec["leaseTransitions"] == 1


async def test_a_draining_leader_hands_the_lease_over_at_once(
    apiserver: FakeApiServer, client: Any
) -> None:
    """client-go's ReleaseOnCancel, as upstream's EPP releases its lease on SIGTERM: the
    lease is marked expired a second on, so the standby takes it on its next round, not
    `lease_s` later, and the holder that released it is no longer leading."""
    now = [datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)]
    first = LeaderElector(client, "igw", "igw-picker", "pod-1", lease_s=10, clock=lambda: now[0])
    second = LeaderElector(client, "igw", "igw-picker", "pod-2", lease_s=10, clock=lambda: now[0])
    assert await first.try_acquire()
    await first.release()
    assert not first.is_leader()
    now[0] += datetime.timedelta(seconds=2)  # well inside the 10 s lease
    assert await second.try_acquire()
    await second.release()
    await second.release()  # releasing twice, or not leading, does nothing
    lease = apiserver.collections["/apis/coordination.k8s.io/v1/namespaces/igw/leases"]
    assert lease["igw-picker"]["spec"]["holderIdentity"] == "pod-2"


class Lease:
    """A collaborator that hands over on drain (`assembly.picker.Handover`)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    async def start(self) -> None:
        self.events.append("start")

    async def stop(self) -> None:
        self.events.append("stop")

    async def release(self) -> None:
        self.events.append("release")


async def test_the_picker_hands_over_when_it_starts_draining_not_when_it_stops() -> None:
    from inference_gateway.assembly.picker import build_picker

    lease = Lease()
    picker = build_picker([], None, grpc_port=0, metrics_port=None, collaborators=[lease])
    await picker.start()
    try:
        await picker.drain(0.05)
        assert lease.events == ["start", "release"] and not picker.ready()
    finally:
        await picker.stop(0)
    assert lease.events == ["start", "release", "stop"]
