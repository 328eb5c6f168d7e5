"""The registry's transitions on a virtual clock: stale heartbeat → drained once (one
failover event), a good heartbeat → routable and ramping, gauges follow; the EMF fleet
record carries the interval deltas under the names the CDK fleet alarms read."""

from __future__ import annotations

import io
import json

import pytest

from inference_gateway.global_router import parse_router_config
from inference_gateway.global_router.clusters import ClusterRegistry, ClusterStatus
from inference_gateway.global_router.metrics import FleetEmfEmitter, GlobalMetrics

SPEC = parse_router_config(
    {
        "clusters": [{"name": "a", "region": "r1", "endpoint": "http://127.0.0.1:1"}],
        "staleAfterMs": 3000,
        "rampS": 10,
    }
)
OK = ClusterStatus(readyPods=1, saturation=0.2)


def test_stale_heartbeat_drains_once_and_the_return_ramps() -> None:
    now = [0.0]
    metrics = GlobalMetrics()
    registry = ClusterRegistry(SPEC, metrics, clock=lambda: now[0])
    assert registry.routable() == []  # nothing heard yet
    registry.heartbeat("a", OK)
    assert [s.name for s in registry.routable()] == ["a"]
    now[0] = 2.9
    assert registry.routable()
    now[0] = 3.1
    assert registry.routable() == []
    registry.check_staleness()  # a second look is not a second failover
    assert metrics.failovers.labels("a", "status_stale")._value.get() == 1
    assert metrics.healthy.labels("a", "r1")._value.get() == 0
    now[0] = 5.0
    registry.heartbeat("a", OK)
    now[0] = 7.5
    registry.check_staleness()
    assert metrics.ramp.labels("a")._value.get() == 0.25
    assert metrics.healthy.labels("a", "r1")._value.get() == 1


def test_fleet_emf_record_counts_the_interval() -> None:
    metrics = GlobalMetrics()
    stream = io.StringIO()
    emitter = FleetEmfEmitter(metrics, environment="prod", interval_s=60, stream=stream)
    metrics.failovers.labels("a", "connect_failed").inc()
    metrics.decisions.labels("a", "latency", "first").inc(3)
    record = emitter.emit()
    assert record["FailoverEvents"] == 1 and record["RoutingDecisions"] == 3
    assert record["RateLimitHits"] == 0 and record["Environment"] == "prod"
    assert record["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "InferenceGateway/Global"
    assert json.loads(stream.getvalue().splitlines()[0])["FailoverEvents"] == 1
    assert emitter.emit()["FailoverEvents"] == 0  # deltas, not totals


def test_per_cluster_emf_records_carry_health_ramp_and_drains() -> None:
    now = [0.0]
    metrics = GlobalMetrics()
    registry = ClusterRegistry(SPEC, metrics, clock=lambda: now[0])
    stream = io.StringIO()
    emitter = FleetEmfEmitter(metrics, environment="prod", interval_s=60, stream=stream)
    registry.heartbeat("a", OK)
    registry.drain("a", "connect_failed")
    now[0] = 1.0
    registry.heartbeat("a", OK)
    now[0] = 3.0  # 2 s into a 10 s ramp, within staleAfterMs
    registry.check_staleness()
    fleet, cluster = emitter.records()
    assert fleet["FailoverEvents"] == 1
    assert cluster["Cluster"] == "a" and cluster["Environment"] == "prod"
    assert cluster["ClusterHealthy"] == 1 and cluster["RampFraction"] == pytest.approx(0.2)
    assert cluster["ClusterFailoverEvents"] == 1 and cluster["ClusterSaturation"] == 0.2
    meta = cluster["_aws"]["CloudWatchMetrics"][0]  # type: ignore[index]
    assert meta["Dimensions"] == [["Environment", "Cluster"]]
    assert {m["Name"]: m["Unit"] for m in meta["Metrics"]}["ClusterFailoverEvents"] == "Count"
    _, again = emitter.records()
    assert again["ClusterFailoverEvents"] == 0  # the interval's drains, not the total
    emitter.emit()
    assert len(stream.getvalue().splitlines()) == 2  # one fleet line, one per cluster
