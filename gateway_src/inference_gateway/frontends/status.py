"""`GET /status` of a cluster gateway: the heartbeat the global router reads.

One JSON document, built from what the gateway already knows (its endpoint store and its
Prometheus registry), so the status cannot disagree with `/metrics`:

    {"cluster": "eks-a", "time": <unix s>, "readyPods": 3, "stalePods": 1,
     "saturation": 0.4,                 # max over pools of inference_pool_saturation
     "kvUsage": 0.3,                    # mean KV-cache use of ready pods (0 with none)
     "queue": {"critical": 0, "standard": 2, "sheddable": 5},
     "tokensPerSecond": 812.5,          # prompt + completion tokens through this gateway
     "errorRate": 0.01,                 # (5xx + refused 5xx) / requests, same window
     "hourlyCostUsd": 98.3,
     "costPerMillionTokens": 33.6,      # hourly / (tokens/s × 3600) × 1e6, null when idle
     "pools": {"<pool>": {"ready", "stale", "saturation", "kvUsage", "queue": {...}}}}

Rates are measured over the last `window_s` seconds between reads (each read keeps a
sample); a gateway read once answers 0 tokens/s and a null cost.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiohttp import web

from inference_gateway.backend_bench.cost import cost_per_million_tokens
from inference_gateway.core.endpoints.store import EndpointStore
from inference_gateway.core.request.director import Director
from inference_gateway.core.scheduling.cluster_choice import mean_kv_usage
from inference_gateway.core.traffic.flow_control import BANDS
from inference_gateway.telemetry.emf import Snapshot, snapshot
from inference_gateway.telemetry.metrics import GatewayMetrics

__all__ = ["STATUS_PATH", "StatusTracker", "add_status_route"]

STATUS_PATH = "/status"
_TOKEN_SUMS = ("inference_objective_input_tokens_sum", "inference_objective_output_tokens_sum")
_POOL_GAUGES = (
    "inference_pool_saturation",
    "inference_pool_average_kv_cache_utilization",
    "inference_extension_flow_control_queue_size",
)


class StatusTracker:
    def __init__(
        self,
        director: Director,
        store: EndpointStore,
        *,
        cluster: str,
        hourly_cost_usd: float = 0.0,
        window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.director = director
        self.store = store
        self.cluster = cluster
        self.hourly_cost_usd = hourly_cost_usd
        self.window_s = window_s
        self.clock = clock
        self._samples: deque[tuple[float, Snapshot, float]] = deque()

    def status(self) -> dict[str, Any]:
        metrics: GatewayMetrics = self.director.metrics
        pools = self.store.pools()
        self.director.refresh_gauges(pools)
        now = self.clock()
        snap = snapshot(metrics.registry)
        tokens, gauges = _read(metrics)
        self._samples.append((now, snap, tokens))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        then, before, tokens_before = self._samples[0]
        elapsed = now - then
        tokens_per_s = (tokens - tokens_before) / elapsed if elapsed > 0 else 0.0
        requests = snap.requests - before.requests + snap.rejected_5xx - before.rejected_5xx
        failed = snap.errors - before.errors + snap.rejected_5xx - before.rejected_5xx
        per_pool = {name: self._pool(name, eps, gauges) for name, eps in sorted(pools.items())}
        ready = [e.metrics for e in self.store.endpoints if not e.stale and e.metrics is not None]
        queue = {b: sum(int(p["queue"][b]) for p in per_pool.values()) for b in BANDS}
        return {
            "cluster": self.cluster,
            "time": time.time(),
            "readyPods": len(ready),
            "stalePods": len(self.store.endpoints) - len(ready),
            "saturation": max((p["saturation"] for p in per_pool.values()), default=1.0),
            "kvUsage": mean_kv_usage(ready),
            "queue": queue,
            "tokensPerSecond": max(0.0, tokens_per_s),
            "errorRate": failed / requests if requests > 0 else 0.0,
            "hourlyCostUsd": self.hourly_cost_usd,
            "costPerMillionTokens": cost_per_million_tokens(self.hourly_cost_usd, tokens_per_s),
            "pools": per_pool,
        }

    @staticmethod
    def _pool(
        name: str, endpoints: list[Any], gauges: dict[tuple[str, ...], float]
    ) -> dict[str, Any]:
        ready = sum(1 for e in endpoints if not e.stale)
        return {
            "ready": ready,
            "stale": len(endpoints) - ready,
            "saturation": gauges.get(("inference_pool_saturation", name), 0.0),
            "kvUsage": gauges.get(("inference_pool_average_kv_cache_utilization", name), 0.0),
            "queue": {
                b: gauges.get(("inference_extension_flow_control_queue_size", name, b), 0.0)
                for b in BANDS
            },
        }

    async def handle(self, request: web.Request) -> web.Response:
        return web.json_response(self.status())


def _read(metrics: GatewayMetrics) -> tuple[float, dict[tuple[str, ...], float]]:
    """Token total (prompt + completion sums) and the pool gauges, in one registry pass."""
    total = 0.0
    gauges: dict[tuple[str, ...], float] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name in _TOKEN_SUMS:
                total += sample.value
            elif sample.name in _POOL_GAUGES:
                labels = sample.labels
                key = (
                    sample.name,
                    labels.get("name", ""),
                    *([labels["band"]] if "band" in labels else []),
                )
                gauges[key] = sample.value
    return total, gauges


def add_status_route(
    app: web.Application,
    director: Director,
    store: EndpointStore,
    *,
    cluster: str,
    hourly_cost_usd: float = 0.0,
) -> StatusTracker:
    """Serve `GET /status` on an app: `igw serve`'s own, or the picker's metrics server
    (in the cluster the picker is what routes, so it is what the global router reads)."""
    tracker = StatusTracker(director, store, cluster=cluster, hourly_cost_usd=hourly_cost_usd)
    app.router.add_get(STATUS_PATH, tracker.handle)
    return tracker
