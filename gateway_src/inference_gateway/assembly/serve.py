"""Assemble and run the standalone gateway: endpoints file + optional config → aiohttp app."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp import web

from inference_gateway.config.reloader import FileWatcher
from inference_gateway.config.spec import GatewayConfigSpec, load_config
from inference_gateway.config.watch import guard_reload
from inference_gateway.core.endpoints.discovery import (
    assign_pools,
    label_pools,
    load_endpoints_file,
)
from inference_gateway.core.endpoints.store import EndpointStore
from inference_gateway.core.scheduling import Scheduler
from inference_gateway.core.scheduling.baseline import RoundRobinScheduler
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.core.traffic.rewrites import load_rewrites
from inference_gateway.core.traffic.routing import ModelRouter
from inference_gateway.frontends.auth import Authenticator, auth_middleware
from inference_gateway.frontends.proxy import Gateway, RoutingState
from inference_gateway.frontends.status import add_status_route
from inference_gateway.store.client import StoreHealth, StoreSpec, connect
from inference_gateway.store.ratelimit import SharedLimits
from inference_gateway.telemetry.emf import EmfEmitter
from inference_gateway.telemetry.metrics import GatewayMetrics
from inference_gateway.transport.http1_client import Upstream
from inference_gateway.transport.http_settings import BODY_TIMEOUT_S
from inference_gateway.transport.kv_events_zmq import subscribe_pods

__all__ = ["RUN_OPTIONS", "WATCHER", "app_runner", "build_gateway", "http_fetch", "upstream_fetch"]

WATCHER = web.AppKey("watcher", FileWatcher)  # the app's config/rewrite file watcher
# How the gateway app must be served: a client that disconnects cancels its handler, so
# its admission slot, queue place and pod request end at once (aiohttp's default lets
# the handler run on); no access log (the request metrics count every request).
RUN_OPTIONS = {"handler_cancellation": True, "access_log": None}


def app_runner(app: web.Application) -> web.AppRunner:
    """A runner for the gateway app with `RUN_OPTIONS` (tests and embedders use this)."""
    return web.AppRunner(app, **RUN_OPTIONS)  # type: ignore[arg-type]


def http_fetch(session_holder: dict[str, Any]):
    """The store's fetch seam over HTTP: GET http://pod{path} → text, through the lean
    client (upstream.py), made on first use and kept in `session_holder` for its owner to
    `close()`. aiohttp's general client cost ~0.3 ms of CPU per scrape more."""

    async def fetch(endpoint: Endpoint, path: str) -> str:
        client = session_holder.get("session")
        if client is None:
            client = session_holder["session"] = Upstream(account_cpu=True)
        return await client.get_text(endpoint.address, endpoint.port, path)

    def cpu_seconds() -> float:
        client = session_holder.get("session")
        return client.busy_s if client is not None else 0.0

    fetch.cpu_seconds = cpu_seconds  # type: ignore[attr-defined]  # the store's budget reads it
    return fetch


def upstream_fetch(upstream: Upstream):
    """The store's fetch seam over the proxy's lean client: GET http://pod{path} → text."""

    async def fetch(endpoint: Endpoint, path: str) -> str:
        return await upstream.get_text(endpoint.address, endpoint.port, path)

    fetch.cpu_seconds = lambda: upstream.busy_s  # type: ignore[attr-defined]
    return fetch


def build_gateway(
    endpoints: list[Endpoint] | str | Path,
    config: GatewayConfigSpec | str | Path | None = None,
    *,
    policy: str = "gateway",
    rewrites: str | Path | None = None,
    seed: int | None = None,
    emf_interval_s: float = 0.0,
    emf_cluster: str = "igw",
    expose_endpoints: bool = False,
    body_timeout_s: float = BODY_TIMEOUT_S,
    auth: Authenticator | None = None,
    hourly_cost_usd: float = 0.0,
    store_spec: StoreSpec | None = None,
) -> tuple[web.Application, Gateway]:
    """The gateway app; scraping (and file reloads) start with the app and stop with it.
    Serve it with `RUN_OPTIONS` (`app_runner`), so a client that leaves ends its request;
    `expose_endpoints` names the chosen pod to clients (debugging only); a request body
    must arrive within `body_timeout_s` (transport/http_settings.py).

    `config` and `rewrites` given as paths are watched: a valid edit is swapped in
    without a restart, an invalid one is logged and ignored. `emf_interval_s` > 0 writes
    a CloudWatch EMF record to stdout every that many seconds (telemetry.emf). `auth`
    checks every request's credential before any pod is touched (frontends/auth.py).
    `GET /status` is the heartbeat the global router reads (status.py); `emf_cluster`
    names the cluster there too, and `hourly_cost_usd` prices its tokens. `store_spec`
    (`--store URL`) keeps the rate limits in the shared store, exact across replicas.
    """
    if not isinstance(endpoints, list):
        endpoints = load_endpoints_file(endpoints)
    config_path = None if config is None or isinstance(config, GatewayConfigSpec) else Path(config)
    if config_path is not None:
        config = load_config(config_path)
    spec = config if isinstance(config, GatewayConfigSpec) else GatewayConfigSpec()
    by_label = label_pools(endpoints)
    assign_pools(endpoints, spec.pools, by_label)  # the config's selectors first
    metrics = GatewayMetrics()
    scrape_client = Upstream(
        connect_timeout_s=spec.scrape.timeout_ms / 1000,
        read_timeout_s=spec.scrape.timeout_ms / 1000,
        account_cpu=True,
    )
    store = EndpointStore(
        endpoints,
        upstream_fetch(scrape_client),
        interval_s=spec.scrape.interval_ms / 1000,
        timeout_s=spec.scrape.timeout_ms / 1000,
        staleness_s=spec.scrape.staleness_ms / 1000,
    )
    metrics.watch_scrapes(store)
    scheduler = (
        RoundRobinScheduler()
        if policy == "round-robin"
        else Scheduler(spec, count_inflight=True, timer=metrics.time_plugin)
    )

    def known_models() -> set[str] | None:
        if isinstance(config, GatewayConfigSpec) and config.models:
            return set(ModelRouter(config).models([]))
        return {m for e in endpoints for m in e.models} or None

    def load_state() -> RoutingState:
        current = load_config(config_path) if config_path is not None else config
        if rewrites is None:
            state = RoutingState.build(current)  # type: ignore[arg-type]
        else:
            rules = load_rewrites(rewrites, known_models=known_models(), seed=seed)
            state = RoutingState.build(current, rules)  # type: ignore[arg-type]
        if isinstance(current, GatewayConfigSpec):  # a reload may move pods between pools
            assign_pools(endpoints, current.pools, by_label)
        return state

    gateway = Gateway(
        store,
        scheduler,
        RoutingState.build(config),
        metrics=metrics,
        expose_endpoints=expose_endpoints,
        body_timeout_s=body_timeout_s,
    )
    if store_spec is not None:
        health = StoreHealth(
            "gateway", retry_s=store_spec.retry_ms / 1000, registry=metrics.registry
        )
        gateway.director.shared_limits = SharedLimits(connect(store_spec), health)
    app = gateway.app()
    # credentials first: an unauthenticated client never makes the gateway read its body
    app.middlewares.insert(0, auth_middleware(auth))
    add_status_route(
        app, gateway.director, store, cluster=emf_cluster, hourly_cost_usd=hourly_cost_usd
    )
    kv_events = subscribe_pods(
        metrics.registry, lambda: store.endpoints, lambda: gateway.director.scheduler
    )
    watched = [p for p in (config_path, Path(rewrites) if rewrites else None) if p]
    tasks: list[asyncio.Task[None]] = []
    emitters: list[EmfEmitter] = []

    async def start_scraping(app: web.Application) -> None:
        await store.scrape_once()
        store.start()
        await kv_events.start()
        gateway.reload(load_state())  # rewrites need the pods' model names
        if watched:
            reload = guard_reload(lambda: gateway.reload(load_state()), metrics)
            watcher = FileWatcher(watched, reload)
            app[WATCHER] = watcher
            tasks.append(asyncio.get_running_loop().create_task(watcher.run()))
        if emf_interval_s > 0:
            emitter = EmfEmitter(
                metrics.registry,
                cluster=emf_cluster,
                interval_s=emf_interval_s,
                refresh=lambda: gateway.director.refresh_gauges(store.pools()),
            )
            await emitter.start()
            emitters.append(emitter)

    async def stop_scraping(app: web.Application) -> None:
        for task in tasks:
            task.cancel()
        for emitter in emitters:
            await emitter.stop()
        await store.stop()
        await kv_events.stop()
        await scrape_client.close()
        if gateway.director.shared_limits is not None:
            await gateway.director.shared_limits.aclose()

    app.on_startup.append(start_scraping)
    app.on_cleanup.append(stop_scraping)
    return app, gateway
