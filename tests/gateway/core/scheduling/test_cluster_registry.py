"""The registry's transitions on a virtual clock: stale heartbeat → drained once (one
failover event), a good heartbeat → routable and ramping, gauges follow; the EMF fleet
record carries the interval deltas under the names the CDK fleet alarms read."""

from __future__ import annotations

import io
import json

import pytest

from inference_gateway.config.global_router import parse_router_config
from inference_gateway.core.scheduling.cluster_registry import ClusterRegistry, ClusterStatus
from inference_gateway.telemetry.global_metrics import FleetEmfEmitter, GlobalMetrics

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


def test_a_starting_router_ramps_clusters_in_from_zero() -> None:
    now = [100.0]
    metrics = GlobalMetrics()
    registry = ClusterRegistry(SPEC, metrics, clock=lambda: now[0])
    registry.heartbeat("a", OK)
    assert registry.states["a"].ramp_fraction(100.0, SPEC.ramp_s) == 0.0
    assert registry.states["a"].ramp_fraction(105.0, SPEC.ramp_s) == 0.5


def test_a_status_sent_before_a_drain_is_dropped() -> None:
    now = [0.0]
    registry = ClusterRegistry(SPEC, GlobalMetrics(), clock=lambda: now[0])
    registry.heartbeat("a", OK)
    sent_under = registry.states["a"].epoch  # a poll leaves
    registry.drain("a", "connect_failed")  # a request finds the cluster refusing
    registry.heartbeat("a", OK, sent_under)  # the poll's answer comes back after
    assert not registry.states["a"].routable
    registry.heartbeat("a", OK, registry.states["a"].epoch)  # a poll sent after the drain
    assert registry.states["a"].routable


def test_a_drain_calls_back_the_requests_held_there_once() -> None:
    registry = ClusterRegistry(SPEC, GlobalMetrics())
    registry.heartbeat("a", OK)
    called: list[str] = []
    registry.hold("a", lambda: called.append("first"))
    released = registry.hold("a", lambda: called.append("released"))
    registry.release("a", released)
    registry.drain("a", "status_stale")
    registry.drain("a", "connect_failed")
    assert called == ["first"]


def test_a_planned_drain_holds_against_good_status_and_the_lift_ramps_from_zero() -> None:
    now = [0.0]
    metrics = GlobalMetrics()
    registry = ClusterRegistry(SPEC, metrics, clock=lambda: now[0])
    now[0] = 20.0
    registry.heartbeat("a", OK)
    registry.set_planned({"a", "not-ours"})  # a name of another fleet is ignored
    assert registry.routable() == []
    assert metrics.planned.labels("a")._value.get() == 1
    assert sum(s.value for s in metrics.failovers.collect()[0].samples) == 0  # no alarm
    now[0] = 21.0
    registry.heartbeat("a", OK)  # a good status does not undo a planned drain
    assert registry.routable() == []
    registry.set_planned(set())
    assert [s.name for s in registry.routable()] == ["a"]
    assert registry.states["a"].ramp_fraction(21.0, SPEC.ramp_s) == 0.0
    now[0] = 23.5
    registry.check_staleness()
    assert metrics.ramp.labels("a")._value.get() == 0.25
    assert metrics.planned.labels("a")._value.get() == 0


def test_a_lifted_drain_waits_for_a_fresh_status() -> None:
    now = [0.0]
    registry = ClusterRegistry(SPEC, GlobalMetrics(), clock=lambda: now[0])
    registry.heartbeat("a", OK)
    registry.set_planned({"a"})
    now[0] = 60.0  # its last status is long stale
    registry.set_planned(set())
    assert registry.routable() == []
    registry.heartbeat("a", OK)
    assert registry.routable()
