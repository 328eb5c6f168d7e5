"""The global router's metrics: Prometheus series, and CloudWatch EMF fleet records.

Prometheus names (stable; dashboards and alarms read them):

    igw_global_routing_decisions_total{cluster,profile,attempt}   first | retry | resume
    igw_global_failover_events_total{cluster,reason}   status_stale | status_timeout |
                                                        status_invalid | connect_failed |
                                                        stream_stalled
    igw_global_rate_limit_hits_total{scope}             global | local
    igw_global_requests_total{cluster,region,cross_region,code}   status | stream_broken |
                                                        stream_stalled (at the answer's end)
    igw_global_request_ttft_seconds{cluster,cross_region}         histogram
    igw_global_retries_total{cluster,reason}            a request moved off this cluster
    igw_global_requests_failed_total{code}              no cluster could answer
    igw_global_cluster_healthy{cluster,region}          1 routable, 0 drained
    igw_global_cluster_ramp_fraction{cluster}           0..1 share cap while ramping back
    igw_global_cluster_saturation{cluster}              from its /status
    igw_global_cluster_cost_per_million_tokens{cluster}
    igw_store_up{component}, igw_store_fallback_total{component}   (shared_store/client.py)
    igw_request_migrations_total{tier="2",reason,outcome}, igw_request_resume_gap_seconds
        {tier="2"}: streams resumed on the next cluster (telemetry/metrics.py, as igw serve)

The EMF side writes, every interval, `telemetry.emf.fleet_record` with the deltas of the
three counters the CDK fleet alarms read (`FLEET_METRICS`: RoutingDecisions,
FailoverEvents, RateLimitHits in namespace InferenceGateway/Global, dimension
Environment), then one record per cluster in the same namespace with dimensions
Environment and Cluster (`CLUSTER_HEALTH_METRICS`): ClusterHealthy (1/0), RampFraction,
ClusterSaturation (as they stand) and ClusterFailoverEvents (the interval's drains).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import TextIO

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inference_gateway.background import cancel_and_wait
from inference_gateway.telemetry.emf import (
    FLEET_DIMENSION,
    FLEET_NAMESPACE,
    emf_record,
    fleet_record,
)
from inference_gateway.telemetry.metrics import LATENCY_BUCKETS, migration_series

__all__ = ["CLUSTER_HEALTH_METRICS", "FleetEmfEmitter", "GlobalMetrics"]

#: Per-cluster EMF records (namespace InferenceGateway/Global, dimensions Environment and
#: Cluster): Prometheus series → (EMF metric name, unit).
CLUSTER_HEALTH_METRICS = {
    "igw_global_cluster_healthy": ("ClusterHealthy", "None"),
    "igw_global_cluster_ramp_fraction": ("RampFraction", "None"),
    "igw_global_cluster_saturation": ("ClusterSaturation", "None"),
    "igw_global_failover_events_total": ("ClusterFailoverEvents", "Count"),
}


class GlobalMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.decisions = Counter(
            "igw_global_routing_decisions_total",
            "Requests sent to a cluster, by profile and attempt (first, retry, or resume: "
            "a broken stream's continuation).",
            ["cluster", "profile", "attempt"],
            registry=r,
        )
        self.failovers = Counter(
            "igw_global_failover_events_total",
            "A cluster was drained (stale or invalid status, refused connection).",
            ["cluster", "reason"],
            registry=r,
        )
        self.rate_limit_hits = Counter(
            "igw_global_rate_limit_hits_total",
            "Requests refused with 429 by the global rate limit.",
            ["scope"],
            registry=r,
        )
        self.migrations, self.resume_gap = migration_series(r)  # tier 2
        self.requests = Counter(
            "igw_global_requests_total",
            "Answers relayed from a cluster; cross_region when outside the client's region.",
            ["cluster", "region", "cross_region", "code"],
            registry=r,
        )
        self.ttft = Histogram(
            "igw_global_request_ttft_seconds",
            "Time to the first byte of a cluster's answer (cross-region cost shows here).",
            ["cluster", "cross_region"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.retries = Counter(
            "igw_global_retries_total",
            "Requests moved off a cluster before streaming started.",
            ["cluster", "reason"],
            registry=r,
        )
        self.failed = Counter(
            "igw_global_requests_failed_total",
            "Requests no cluster could answer.",
            ["code"],
            registry=r,
        )
        self.healthy = Gauge(
            "igw_global_cluster_healthy",
            "1 while the cluster is routable, 0 while drained.",
            ["cluster", "region"],
            registry=r,
        )
        self.ramp = Gauge(
            "igw_global_cluster_ramp_fraction",
            "Share cap of a returning cluster, growing from 0 to 1 over the ramp window.",
            ["cluster"],
            registry=r,
        )
        self.planned = Gauge(
            "igw_global_cluster_planned_drain",
            "1 while the cluster is in the operator's drain set (igw global drain).",
            ["cluster"],
            registry=r,
        )
        self.saturation = Gauge(
            "igw_global_cluster_saturation",
            "The cluster's reported pool saturation (1 = full).",
            ["cluster"],
            registry=r,
        )
        self.cost = Gauge(
            "igw_global_cluster_cost_per_million_tokens",
            "USD per million tokens: hourly / (tokens/s x 3600) x 1e6.",
            ["cluster"],
            registry=r,
        )

    def fleet_counts(self) -> dict[str, float]:
        """Current totals of the three counters the fleet alarms read."""
        totals = {"routing_decisions": 0.0, "failovers": 0.0, "rate_limit_hits": 0.0}
        names = {
            "igw_global_routing_decisions_total": "routing_decisions",
            "igw_global_failover_events_total": "failovers",
            "igw_global_rate_limit_hits_total": "rate_limit_hits",
        }
        for family in self.registry.collect():
            for sample in family.samples:
                key = names.get(sample.name)
                if key is not None:
                    totals[key] += sample.value
        return totals

    def cluster_values(self) -> dict[str, dict[str, float]]:
        """Cluster → EMF metric name → current value (failover counts summed over reasons)."""
        out: dict[str, dict[str, float]] = {}
        for family in self.registry.collect():
            for sample in family.samples:
                named = CLUSTER_HEALTH_METRICS.get(sample.name)
                cluster = sample.labels.get("cluster")
                if named is None or cluster is None:
                    continue
                values = out.setdefault(cluster, {})
                values[named[0]] = values.get(named[0], 0.0) + sample.value
        return out


class FleetEmfEmitter:
    """Per interval: the fleet record (the counters' deltas) and one record per cluster."""

    def __init__(
        self,
        metrics: GlobalMetrics,
        *,
        environment: str,
        interval_s: float,
        stream: TextIO | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.metrics = metrics
        self.environment = environment
        self.interval_s = interval_s
        self.stream = stream
        self._last = metrics.fleet_counts()
        self._last_failovers = self._failovers(metrics.cluster_values())
        self._task: asyncio.Task[None] | None = None

    @staticmethod
    def _failovers(values: dict[str, dict[str, float]]) -> dict[str, float]:
        return {c: v.get("ClusterFailoverEvents", 0.0) for c, v in values.items()}

    def records(self) -> list[dict[str, object]]:
        """The fleet record, then one per cluster, for the interval since the last call."""
        stamp = int(time.time() * 1000)
        now = self.metrics.fleet_counts()
        deltas = {k: now[k] - self._last.get(k, 0.0) for k in now}
        self._last = now
        out: list[dict[str, object]] = [fleet_record(self.environment, deltas, stamp)]
        clusters = self.metrics.cluster_values()
        totals = self._failovers(clusters)
        units = dict(CLUSTER_HEALTH_METRICS.values())
        for cluster, values in sorted(clusters.items()):
            failovers = values.get("ClusterFailoverEvents", 0.0)
            values["ClusterFailoverEvents"] = failovers - self._last_failovers.get(cluster, 0.0)
            out.append(
                emf_record(
                    namespace=FLEET_NAMESPACE,
                    dimensions={FLEET_DIMENSION: self.environment, "Cluster": cluster},
                    metrics={n: (v, units[n]) for n, v in sorted(values.items())},
                    timestamp_ms=stamp,
                )
            )
        self._last_failovers = totals
        return out

    def emit(self) -> dict[str, object]:
        """Write the interval's records (one JSON line each); the fleet record back."""
        records = self.records()
        stream = self.stream or sys.stdout
        for record in records:
            stream.write(json.dumps(record, separators=(",", ":")) + "\n")
        stream.flush()
        return records[0]

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.emit()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
            self.emit()
