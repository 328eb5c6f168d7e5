"""CloudWatch embedded-metric-format (EMF) records of the gateway, and the metric contract.

The CDK alarms (`stacks/parts/metrics.py`) import the names below, so the alarms and the
records written here cannot drift apart. Nothing in this module needs AWS: EMF is one
JSON object per line on stdout, which the CloudWatch agent (Container Insights) turns
into metrics. The shape, from the EMF specification:

    {"_aws": {"Timestamp": <ms since epoch>,
              "CloudWatchMetrics": [{"Namespace": "InferenceGateway",
                                     "Dimensions": [["Cluster"]],
                                     "Metrics": [{"Name": "Requests", "Unit": "Count"}, …]}]},
     "Cluster": "igw-prod", "Requests": 42, …}

`EmfEmitter` reads a `GatewayMetrics` registry every N seconds and writes one cluster
record per interval: counters as interval deltas, TTFT as the P99 of the interval's
histogram observations (interpolated within a bucket, as Prometheus'
`histogram_quantile` does), pool gauges as they stand. Fleet records (namespace
`InferenceGateway/Global`) are built by `fleet_record` for the global router.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from inference_gateway.background import cancel_and_wait

__all__ = [
    "CLUSTER_DIMENSION",
    "CLUSTER_METRICS",
    "CLUSTER_NAMESPACE",
    "CLUSTER_UNITS",
    "FLEET_DIMENSION",
    "FLEET_METRICS",
    "FLEET_NAMESPACE",
    "EmfEmitter",
    "Registry",
    "Snapshot",
    "cluster_record",
    "emf_record",
    "fleet_record",
    "histogram_quantile",
    "interval_values",
    "snapshot",
]

# --- the contract (alarms in stacks/parts/alarms.py read exactly these) ---------------

CLUSTER_NAMESPACE = "InferenceGateway"
CLUSTER_DIMENSION = "Cluster"  # the EKS cluster name
FLEET_NAMESPACE = "InferenceGateway/Global"
FLEET_DIMENSION = "Environment"

#: Per cluster (namespace InferenceGateway, dimension Cluster): key → metric name.
CLUSTER_METRICS = {
    "kv_cache": "KvCacheUtilization",  # 0..1, mean over the ready pods of every pool
    "requests": "Requests",  # count: every answered request, rejected ones included
    "errors": "Errors",  # count of 5xx answers
    "rate_limited": "RateLimited",  # count of 429 answers
    "ttft": "TimeToFirstToken",  # seconds, P99 of the interval
    "ready_pods": "ReadyPods",  # gauge
}
CLUSTER_UNITS = {
    "kv_cache": "None",
    "requests": "Count",
    "errors": "Count",
    "rate_limited": "Count",
    "ttft": "Seconds",
    "ready_pods": "Count",
}

#: Across clusters (namespace InferenceGateway/Global, dimension Environment).
FLEET_METRICS = {
    "routing_decisions": "RoutingDecisions",
    "failovers": "FailoverEvents",
    "rate_limit_hits": "RateLimitHits",
}

# --- where the numbers come from (telemetry.GatewayMetrics, upstream GIE names) --------

_REQUESTS = "inference_objective_request_total"
_ERRORS = "inference_objective_request_error_total"
_REJECTED = "inference_objective_request_rejected_total"
_TTFT = "inference_objective_request_ttft_seconds"
_POOL_KV = "inference_pool_average_kv_cache_utilization"
_POOL_READY = "inference_pool_ready_pods"
#: Rejection reasons by the status the client gets (core/request/refusals.py).
_REJECTED_429 = frozenset({"rate_limited", "pool_saturated"})
_REJECTED_5XX = frozenset({"no_ready_endpoint", "queue_timeout"})

_UNITS = frozenset(
    {"Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes",
     "Gigabytes", "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits",
     "Percent", "Count", "Bytes/Second", "Kilobytes/Second", "Megabytes/Second",
     "Gigabytes/Second", "Terabytes/Second", "Bits/Second", "Kilobits/Second",
     "Megabits/Second", "Gigabits/Second", "Terabits/Second", "Count/Second", "None"}
)  # fmt: skip


# --- records -----------------------------------------------------------------------------


def emf_record(
    *,
    namespace: str,
    dimensions: Mapping[str, str],
    metrics: Mapping[str, tuple[float, str]],
    timestamp_ms: int,
) -> dict[str, Any]:
    """One EMF object: metric name → (value, unit), under one dimension set."""
    for name, (_, unit) in metrics.items():
        if unit not in _UNITS:
            raise ValueError(f"{name}: {unit!r} is not a CloudWatch unit")
    clash = set(dimensions) & set(metrics)
    if clash:
        raise ValueError(f"names used as both dimension and metric: {sorted(clash)}")
    return {
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [
                {
                    "Namespace": namespace,
                    "Dimensions": [list(dimensions)],
                    "Metrics": [{"Name": n, "Unit": u} for n, (_, u) in metrics.items()],
                }
            ],
        },
        **{k: str(v) for k, v in dimensions.items()},
        **{n: v for n, (v, _) in metrics.items()},
    }


def cluster_record(cluster: str, values: Mapping[str, float], timestamp_ms: int) -> dict[str, Any]:
    """A cluster record; `values` maps CLUSTER_METRICS keys to numbers (missing → left out)."""
    unknown = set(values) - set(CLUSTER_METRICS)
    if unknown:
        raise ValueError(f"unknown cluster metrics: {sorted(unknown)}")
    metrics = {CLUSTER_METRICS[k]: (float(values[k]), CLUSTER_UNITS[k]) for k in values}
    return emf_record(
        namespace=CLUSTER_NAMESPACE,
        dimensions={CLUSTER_DIMENSION: cluster},
        metrics=metrics,
        timestamp_ms=timestamp_ms,
    )


def fleet_record(
    environment: str, counts: Mapping[str, float], timestamp_ms: int
) -> dict[str, Any]:
    """A global-router record; `counts` maps FLEET_METRICS keys to interval counts."""
    unknown = set(counts) - set(FLEET_METRICS)
    if unknown:
        raise ValueError(f"unknown fleet metrics: {sorted(unknown)}")
    return emf_record(
        namespace=FLEET_NAMESPACE,
        dimensions={FLEET_DIMENSION: environment},
        metrics={FLEET_METRICS[k]: (float(v), "Count") for k, v in counts.items()},
        timestamp_ms=timestamp_ms,
    )


# --- reading the Prometheus registry -------------------------------------------------------


class _Sample(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> dict[str, str]: ...
    @property
    def value(self) -> float: ...


class _Family(Protocol):
    @property
    def samples(self) -> Iterable[_Sample]: ...


class Registry(Protocol):
    """What `prometheus_client.CollectorRegistry` offers and this module uses."""

    def collect(self) -> Iterable[_Family]: ...


@dataclass(frozen=True)
class Snapshot:
    """Totals of one registry read, summed over labels where the meaning allows it."""

    requests: float = 0.0
    errors: float = 0.0
    rejected_429: float = 0.0
    rejected_5xx: float = 0.0
    rejected_other: float = 0.0
    ttft_buckets: tuple[tuple[float, float], ...] = ()  # (le, cumulative count), sorted
    pools: tuple[tuple[str, float, float], ...] = ()  # (pool, ready pods, mean KV use)


def snapshot(registry: Registry) -> Snapshot:
    totals = {"requests": 0.0, "errors": 0.0, "429": 0.0, "5xx": 0.0, "other": 0.0}
    buckets: dict[float, float] = {}
    kv: dict[str, float] = {}
    ready: dict[str, float] = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name == _REQUESTS:
                totals["requests"] += s.value
            elif s.name == _ERRORS:
                totals["errors"] += s.value
            elif s.name == _REJECTED:
                reason = s.labels.get("reason", "")
                key = (
                    "429"
                    if reason in _REJECTED_429
                    else "5xx"
                    if reason in _REJECTED_5XX
                    else "other"
                )
                totals[key] += s.value
            elif s.name == f"{_TTFT}_bucket":
                le = float(s.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + s.value
            elif s.name == _POOL_KV:
                kv[s.labels.get("name", "")] = s.value
            elif s.name == _POOL_READY:
                ready[s.labels.get("name", "")] = s.value
    return Snapshot(
        requests=totals["requests"],
        errors=totals["errors"],
        rejected_429=totals["429"],
        rejected_5xx=totals["5xx"],
        rejected_other=totals["other"],
        ttft_buckets=tuple(sorted(buckets.items())),
        pools=tuple((p, ready[p], kv.get(p, 0.0)) for p in sorted(ready)),
    )


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """Prometheus' `histogram_quantile` over cumulative (le, count) buckets; None if empty.

    Linear interpolation inside the bucket that holds the rank; a rank in the `+Inf`
    bucket answers the largest finite bound (the histogram knows nothing above it).
    """
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for le, count in ordered:
        if count >= rank:
            if math.isinf(le):
                return lower
            if count == below:
                return le
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    return lower


def _delta(now: float, before: float) -> float:
    """A counter's increase; a counter that went down was reset, so all of it is new."""
    return now - before if now >= before else now


def interval_values(before: Snapshot, now: Snapshot) -> dict[str, float]:
    """CLUSTER_METRICS key → value for the interval between two snapshots."""
    rejected = (
        _delta(now.rejected_429, before.rejected_429)
        + _delta(now.rejected_5xx, before.rejected_5xx)
        + _delta(now.rejected_other, before.rejected_other)
    )
    values = {
        "requests": _delta(now.requests, before.requests) + rejected,
        "errors": _delta(now.errors, before.errors) + _delta(now.rejected_5xx, before.rejected_5xx),
        "rate_limited": _delta(now.rejected_429, before.rejected_429),
        "ready_pods": sum(r for _, r, _ in now.pools),
    }
    old = dict(before.ttft_buckets)
    window = [(le, _delta(c, old.get(le, 0.0))) for le, c in now.ttft_buckets]
    p99 = histogram_quantile(0.99, window)
    if p99 is not None:
        values["ttft"] = p99
    if values["ready_pods"] > 0:
        values["kv_cache"] = sum(r * kv for _, r, kv in now.pools) / values["ready_pods"]
    return values


# --- the periodic emitter --------------------------------------------------------------------


class EmfEmitter:
    """Writes one cluster record per interval to `stream` (stdout by default).

    `refresh`, when given, runs before each read (the server passes one that updates the
    pool gauges from the endpoint store). The first record counts from construction.
    """

    def __init__(
        self,
        registry: Registry,
        *,
        cluster: str,
        interval_s: float,
        stream: TextIO | None = None,
        refresh: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.registry = registry
        self.cluster = cluster
        self.interval_s = interval_s
        self.stream = stream
        self.refresh = refresh
        self.clock = clock
        self._last = snapshot(registry)
        self._task: asyncio.Task[None] | None = None

    def record(self) -> dict[str, Any]:
        """The record of the interval since the previous one (and start the next)."""
        if self.refresh is not None:
            self.refresh()
        now = snapshot(self.registry)
        values = interval_values(self._last, now)
        self._last = now
        return cluster_record(self.cluster, values, int(self.clock() * 1000))

    def emit(self) -> dict[str, Any]:
        record = self.record()
        stream = self.stream or sys.stdout
        stream.write(json.dumps(record, separators=(",", ":")) + "\n")
        stream.flush()
        return record

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.emit()

    async def start(self) -> None:
        """Start the loop (async, like the picker's other collaborators)."""
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        """Stop the loop and write the last, partial interval, so no count is lost."""
        if self._task is None:
            return
        await cancel_and_wait(self._task)
        self._task = None
        self.emit()
