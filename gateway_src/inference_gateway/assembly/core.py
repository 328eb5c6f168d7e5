"""The gateway's core, assembled in one place for every driver.

config → the endpoint store (with its one scrape client) → the scheduler → the director
(routing state, admission gates, rate limits, lifecycles) → the metrics they report
to. `igw serve` (the proxy), `igw picker` (ext_proc) and the simulator's `gateway`
policy all call `build_core`, and differ only in what they put around it (an aiohttp
app, a gRPC server, a virtual clock); `Core.apply_config` is the one way a new config
reaches a running core, whichever file or resource it came from.

The simulator passes no fetch (its pods are scraped by the simulator itself, through
`Endpoint.record_scrape` like the store's scraper), its virtual clock, a `soon` that runs
in its own event order, and no watchdog (it ends every request itself).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.endpoints.discovery import assign_pools, label_pools
from inference_gateway.core.endpoints.store import EndpointStore, Fetch
from inference_gateway.core.request.contracts import RoutingState, SchedulerLike
from inference_gateway.core.request.decisions import DecisionLog
from inference_gateway.core.request.director import Director, Series
from inference_gateway.core.scheduling import Scheduler
from inference_gateway.core.scheduling.baseline import RoundRobinScheduler
from inference_gateway.core.scheduling.kv_index import KVBlockIndex
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.core.traffic.rewrites import RewriteSet
from inference_gateway.shared_store.ratelimit import SharedLimits
from inference_gateway.telemetry.metrics import GatewayMetrics
from inference_gateway.transport.http1_client import Upstream

__all__ = ["POLICIES", "Core", "ScrapeClient", "build_core"]

log = logging.getLogger(__name__)

POLICIES = ("gateway", "round-robin")  # `round-robin`: the baseline `igw serve` can run


class ScrapeClient:
    """The store's fetch over HTTP: GET http://pod{path} → text, on the lean client
    (transport/http1_client.py; aiohttp's general client cost ~0.3 ms of CPU per scrape
    more) with the config's scrape timeout. `cpu_seconds` is what the store's CPU budget
    reads (the client's own parsing, timed where it runs)."""

    def __init__(self, timeout_s: float) -> None:
        self.client = Upstream(
            connect_timeout_s=timeout_s, read_timeout_s=timeout_s, account_cpu=True
        )

    async def __call__(self, endpoint: Endpoint, path: str) -> str:
        return await self.client.get_text(endpoint.address, endpoint.port, path)

    def cpu_seconds(self) -> float:
        return self.client.busy_s

    async def close(self) -> None:
        await self.client.close()


def build_scheduler(
    spec: GatewayConfigSpec,
    *,
    policy: str = "gateway",
    seed: int | None = None,
    timer: Any = None,
    kv_index: KVBlockIndex | None = None,
) -> SchedulerLike:
    """`kv_index`: the pods' KV events so far (kept across a reload; the simulator's runs
    on its virtual clock)."""
    if policy == "round-robin":
        return RoundRobinScheduler()
    return Scheduler(spec, count_inflight=True, seed=seed, timer=timer, kv_index=kv_index)


def _scheduling(spec: GatewayConfigSpec) -> tuple[Any, ...]:
    return (spec.plugins, spec.scheduling_profiles, spec.default_profile)


@dataclass
class Core:
    """What `build_core` made; `close()` stops what runs (scraping, the scrape client,
    the director's watchdog and gates)."""

    config: GatewayConfigSpec
    metrics: GatewayMetrics
    series: Series
    store: EndpointStore
    director: Director
    scrape_client: ScrapeClient | None
    policy: str = "gateway"
    seed: int | None = None
    timed: bool = True
    # a static list's pools before any config (`label_pools`); None: discovery assigns
    static_pools: dict[Endpoint, str] | None = None

    def apply_config(self, config: GatewayConfigSpec | None, rewrites: RewriteSet) -> None:
        """Swap in a validated config: routing state always, the scheduler only when its
        plugins or profiles changed (so the prefix index survives other edits), the
        scrape settings of the store, and a static list's pools (a reload may move pods
        between pools by the config's selectors)."""
        spec = config or GatewayConfigSpec()
        state = RoutingState.build(config, rewrites)
        if self.static_pools is not None:
            # pods may move between pools: a new list, so no router keeps stale groups
            assign_pools(self.store.endpoints, spec.pools, self.static_pools)
            self.store.endpoints = [*self.store.endpoints]
        self.director.reload(state)
        current = getattr(self.director.scheduler, "config", None)
        if self.policy == "gateway" and (
            current is None or _scheduling(current) != _scheduling(spec)
        ):
            self.director.scheduler = self._scheduler(spec)
        self.config = spec
        _scrape_settings(self.store, spec)
        log.info("%s, rewrites %s", self._describe(config), "on" if rewrites else "off")

    def _describe(self, config: GatewayConfigSpec | None) -> str:
        """What the config makes the gateway serve. Without one, the models are whatever
        the pods list in /v1/models (not known before they are scraped) and the pools
        are the endpoints' own labels: "0 models, 0 pools" would be untrue."""
        spec = config or GatewayConfigSpec()
        if config is not None and (spec.models or spec.pools):
            return f"config applied: {len(spec.models)} models, {len(spec.pools)} pools"
        pools = sorted(set(self.static_pools.values())) if self.static_pools else []
        where = f" (pools from the endpoints' labels: {', '.join(pools)})" if pools else ""
        return f"no models configured: serving every model the pods list in /v1/models{where}"

    def _scheduler(self, spec: GatewayConfigSpec) -> SchedulerLike:
        timer = self.series.time_plugin if self.timed else None
        kv_index = getattr(self.director.scheduler, "kv_index", None)  # the events survive
        return build_scheduler(
            spec, policy=self.policy, seed=self.seed, timer=timer, kv_index=kv_index
        )

    async def close(self) -> None:
        await self.store.stop()
        await self.director.close()
        if self.scrape_client is not None:
            await self.scrape_client.close()
        if self.director.shared_limits is not None:
            await self.director.shared_limits.aclose()


def _scrape_settings(store: EndpointStore, spec: GatewayConfigSpec) -> None:
    store.interval_s = spec.scrape.interval_ms / 1000
    store.timeout_s = spec.scrape.timeout_ms / 1000
    store.staleness_s = spec.scrape.staleness_ms / 1000
    store.max_cpu_fraction = spec.scrape.cpu_budget_cores


def build_core(
    endpoints: list[Endpoint],
    config: GatewayConfigSpec | None = None,
    *,
    fetch: Fetch | None = None,
    scrape: bool = True,
    rewrites: RewriteSet | None = None,
    policy: str = "gateway",
    seed: int | None = None,
    metrics: GatewayMetrics | None = None,
    timed: bool = True,
    clock: Callable[[], float] = time.monotonic,
    soon: Callable[[Callable[[], Any]], Any] | None = None,
    max_lifetime_s: float | None = 3600.0,
    shared_limits: SharedLimits | None = None,
    kv_index: KVBlockIndex | None = None,
) -> Core:
    """The core over `endpoints` (kept as given: discovery may fill an empty list).

    `fetch`: the store's scrape seam (default: HTTP, `ScrapeClient`); `scrape` False: the
    driver records scrapes itself (the simulator). A static list's pods take the first
    pool of the config whose selector matches them, else the pool they were given, else
    `default`. `timed`: the scheduler reports each plugin's
    time to the metrics (a real server; the simulator's would time nothing real). A
    server that scrapes keeps its recent decisions (`tracing.explain.recent`) for traces
    and `igw explain`; the simulator (`scrape` False) keeps none.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
    spec = config or GatewayConfigSpec()
    static_pools = label_pools(endpoints) if endpoints else None
    if static_pools is not None:
        assign_pools(endpoints, spec.pools, static_pools)  # the config's selectors first
    metrics = metrics or GatewayMetrics()
    client = ScrapeClient(spec.scrape.timeout_ms / 1000) if scrape and fetch is None else None
    store = EndpointStore(
        endpoints,
        fetch or client,
        interval_s=spec.scrape.interval_ms / 1000,
        timeout_s=spec.scrape.timeout_ms / 1000,
        staleness_s=spec.scrape.staleness_ms / 1000,
        clock=clock,
        max_cpu_fraction=spec.scrape.cpu_budget_cores,
    )
    metrics.watch_scrapes(store)  # the adaptive scrape interval, exported
    series = Series(metrics)
    timer = series.time_plugin if timed else None
    director = Director(
        lambda: store.endpoints,
        build_scheduler(spec, policy=policy, seed=seed, timer=timer, kv_index=kv_index),
        RoutingState.build(config, rewrites),
        metrics=metrics,
        series=series,
        max_lifetime_s=max_lifetime_s,
        clock=clock,
        soon=soon,
        shared_limits=shared_limits,
        # a refused connection (the proxy's, or Envoy's UF / UH / UC reported to the
        # picker): not picked again until a fresh scrape says the pod is back
        connection_failed=store.connection_failed,
        decisions=(
            DecisionLog(spec.tracing.explain.recent)
            if scrape and spec.tracing.explain.recent
            else None
        ),
    )
    return Core(spec, metrics, series, store, director, client, policy, seed, timed, static_pools)
