"""A burst between two status polls spreads by load (issue 33, tier 2): the ranking counts
what the router sent since each cluster's last status (`ClusterState.sent_requests`, kept
by the registry's `hold` / `release`), so the continuations of a lost cluster's streams,
ranked at the break, and new requests arriving together do not all take the cluster that
looked best at the poll. The registry and the ranking are the ones `igw global` and the
fleet simulator run, driven here as both drivers drive them: rank, then `hold` the first
cluster while waiting for its first byte."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from inference_gateway.config.global_router import GlobalRouterSpec
from inference_gateway.core.scheduling.cluster_choice import POD_QUEUE, RequestTraits, rank_clusters
from inference_gateway.core.scheduling.cluster_registry import ClusterRegistry, ClusterStatus
from inference_gateway.frontends.global_router import parse_router_config
from inference_gateway.telemetry.global_metrics import GlobalMetrics

TRAITS = RequestTraits("r1", "latency")


def fleet(*clusters: tuple[str, str, int], saturation: float = 0.1) -> ClusterRegistry:
    """A registry of routable, fully ramped clusters (name, region, ready pods), each with
    one status of `saturation` and an empty queue."""
    spec: GlobalRouterSpec = parse_router_config(
        {
            "clusters": [
                {"name": n, "region": r, "endpoint": f"http://127.0.0.1:{i + 1}"}
                for i, (n, r, _) in enumerate(clusters)
            ],
            "rampS": 0,
        }
    )
    registry = ClusterRegistry(spec, GlobalMetrics(), clock=lambda: 100.0)
    for name, _, pods in clusters:
        registry.heartbeat(name, ClusterStatus(readyPods=pods, saturation=saturation))
    return registry


def burst(registry: ClusterRegistry, n: int, exclude: tuple[str, ...] = ()) -> Counter[str]:
    """`n` requests ranked one after another with no status in between, each held at its
    first cluster (no first byte yet), as `server._open` and the simulator's `_send` do."""
    rng = random.Random(3)
    placed: Counter[str] = Counter()
    for _ in range(n):
        ranked = rank_clusters(
            registry.spec, registry.routable(), TRAITS, 100.0, rng.random, exclude
        ).ranked
        placed[ranked[0].name] += 1
        registry.hold(ranked[0].name, lambda: None)
    return placed


def test_a_lost_clusters_continuations_spread_over_the_survivors_by_ready_pods() -> None:
    """a dies with 60 streams; ranked at the break, less a (tried), they go to b and c
    in proportion to their ready pods (8 and 4), where the arrival ranking sent every
    one to its next cluster."""
    registry = fleet(("a", "r1", 4), ("b", "r1", 8), ("c", "r1", 4))
    registry.drain("a", "connect_failed")
    placed = burst(registry, 60, exclude=("a",))
    assert placed["a"] == 0
    assert placed["b"] == pytest.approx(40, abs=2)
    assert placed["c"] == pytest.approx(20, abs=2)
    assert registry.states["b"].sent_requests == placed["b"]


def test_a_home_cluster_keeps_a_burst_until_it_is_full_then_the_full_one_least_loaded() -> None:
    """Proximity keeps the continuations home while the home cluster has headroom; as
    its status plus what was sent fills it (saturation 1: its gateway would queue them),
    the remote cluster with headroom comes first, and when both are full the one with the
    shorter queue per pod, so a burst larger than both spreads over both."""
    registry = fleet(("home", "r1", 4), ("away", "r2", 4))
    fill = round((1 - 0.1) * 4 * POD_QUEUE)  # requests that take a 4-pod cluster from 0.1 to 1
    placed = burst(registry, fill // 2)
    assert placed == {"home": fill // 2}
    placed += burst(registry, 2 * fill - fill // 2)
    assert placed["home"] == pytest.approx(fill, abs=2)
    assert placed["away"] == pytest.approx(fill, abs=2)
    placed += burst(registry, 40)
    assert placed["home"] == pytest.approx(placed["away"], abs=1)


def test_a_status_or_a_first_byte_ends_a_requests_count() -> None:
    """What was sent before a status is in its load: the count starts again; a request
    that got its first byte (or left) is released and no longer counts; a drain clears
    what it held."""
    registry = fleet(("a", "r1", 4), ("b", "r1", 4))
    keys = [registry.hold("a", lambda: None) for _ in range(3)]
    state = registry.states["a"]
    assert state.sent_requests == 3
    registry.release("a", keys[0])
    assert state.sent_requests == 2
    registry.heartbeat("a", ClusterStatus(readyPods=4, saturation=0.1))
    assert state.sent_requests == 0 and len(state.held) == 2  # still waiting: drain retries
    registry.hold("a", lambda: None)
    registry.drain("a", "connect_failed")
    assert state.sent_requests == 0 and not state.held


def test_new_requests_between_two_polls_alternate_instead_of_herding() -> None:
    """The same rule for new requests: two equal clusters share a burst evenly, where
    the cluster that looked best at the poll took it all."""
    registry = fleet(("a", "r1", 4), ("b", "r1", 4))
    registry.heartbeat("b", ClusterStatus(readyPods=4, saturation=0.12))  # a looks best
    placed = burst(registry, 20)
    assert placed["a"] == pytest.approx(10, abs=1)
    assert placed["b"] == pytest.approx(10, abs=1)
