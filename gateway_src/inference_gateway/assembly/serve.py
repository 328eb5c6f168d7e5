"""`igw serve`'s app: the core (`assembly.core.build_core`) behind the proxy, with file
reloads, authentication, the status heartbeat, EMF records, traces and the recent
decisions (`/debug/decisions`) around it."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from inference_gateway.assembly.config_watch import guard_reload, load_files
from inference_gateway.assembly.core import build_core
from inference_gateway.assembly.kv_events import subscribe_pods
from inference_gateway.config.reloader import FileWatcher, load_off_loop
from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.endpoints.discovery import load_endpoints_file
from inference_gateway.core.request.director import CLIENT_ID_HEADER
from inference_gateway.core.scheduling.config_checks import load_config
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.frontends.auth import Authenticator, auth_middleware
from inference_gateway.frontends.explain_http import add_decisions_routes, loopback_peer
from inference_gateway.frontends.pd_exchange import PREFILL_TIMEOUT_S
from inference_gateway.frontends.proxy import Gateway
from inference_gateway.frontends.status import add_status_route
from inference_gateway.shared_store.client import StoreHealth, StoreSpec, connect
from inference_gateway.shared_store.ratelimit import SharedLimits
from inference_gateway.telemetry.emf import EmfEmitter
from inference_gateway.telemetry.metrics import GatewayMetrics
from inference_gateway.telemetry.tracing import Tracing
from inference_gateway.transport.http_settings import (
    BODY_TIMEOUT_S,
    GatewayAppRunner,
    server_settings,
)

__all__ = ["RUN_OPTIONS", "WATCHER", "app_runner", "build_gateway"]

WATCHER = web.AppKey("watcher", FileWatcher)  # the app's config/rewrite file watcher
# How the gateway app must be served: a client that disconnects cancels its handler, so
# its admission slot, queue place and pod request end at once (aiohttp's default lets
# the handler run on); no access log (the request metrics count every request).
RUN_OPTIONS = {"handler_cancellation": True, "access_log": None}


def app_runner(app: web.Application) -> web.AppRunner:
    """A runner for the gateway app as `igw serve` runs it, `RUN_OPTIONS` and the
    server settings (tests and embedders use this)."""
    return GatewayAppRunner(app, **RUN_OPTIONS, **server_settings())  # type: ignore[arg-type]


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
    clock: Callable[[], float] = time.monotonic,
    prefill_timeout_s: float = PREFILL_TIMEOUT_S,
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
    `seed` seeds the scheduler's tie-breaks and the rewrites' splits; `clock` is the
    core's (tests that replay a trace on a clock they step). `prefill_timeout_s` bounds a
    P/D prefill leg (frontends/pd_exchange.py); past it the request is served aggregated.
    """
    if not isinstance(endpoints, list):
        endpoints = load_endpoints_file(endpoints)
    config_path = None if config is None or isinstance(config, GatewayConfigSpec) else Path(config)
    if config_path is not None:
        config = load_config(config_path)
    assert config is None or isinstance(config, GatewayConfigSpec)
    metrics = GatewayMetrics()
    shared_limits = None
    if store_spec is not None:  # rate limits in the store, exact across replicas
        health = StoreHealth.for_spec("gateway", store_spec, metrics.registry)
        shared_limits = SharedLimits(connect(store_spec), health)
    core = build_core(
        endpoints,
        config,
        policy=policy,
        seed=seed,
        metrics=metrics,
        clock=clock,
        shared_limits=shared_limits,
    )
    store = core.store

    load = functools.partial(
        load_files,
        config_path,
        rewrites,
        config=config,
        models={m for e in endpoints for m in e.models} or None,
        seed=seed,
    )

    async def reload() -> None:
        """Read and validate off the event loop (config/reloader.py), swap in on it."""
        core.apply_config(*await load_off_loop(load))

    gateway = Gateway(
        store,
        core.director,
        expose_endpoints=expose_endpoints,
        body_timeout_s=body_timeout_s,
        prefill_timeout_s=prefill_timeout_s,
        tracing=Tracing.build(core.config.tracing, "igw-serve"),
    )
    core.director.explaining |= gateway.tracing.enabled  # spans carry the explanation
    app = gateway.app()
    # credentials first: an unauthenticated client never makes the gateway read its body
    app.middlewares.insert(0, auth_middleware(auth))
    gateway.director.trusted_client_id = True  # the middleware sets it, or strips a caller's
    gateway.director.ask_stream_usage = True  # the proxy strips what the client did not ask
    if auth is not None:  # igw_auth_refusals_total, beside the request metrics
        metrics.registry.register(auth.refusals_collector())
    add_status_route(
        app, gateway.director, store, cluster=emf_cluster, hourly_cost_usd=hourly_cost_usd
    )

    def listed_client(request: web.Request) -> bool:
        """An authenticated client the config lets see explanations."""
        listed = core.config.tracing.explain.header_clients
        return request.headers.get(CLIENT_ID_HEADER, "") in listed

    # with authentication only listed clients (a sidecar proxy makes every caller local),
    # without it only callers on this machine
    allow = listed_client if auth is not None else loopback_peer
    add_decisions_routes(app, lambda: gateway.director.decisions, allow=allow)
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
        core.apply_config(*load())  # before serving, in place: rewrites need the pods' models
        if watched:
            watcher = FileWatcher(watched, guard_reload(reload, metrics))
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
        await kv_events.stop()
        await core.close()

    app.on_startup.append(start_scraping)
    app.on_cleanup.append(stop_scraping)
    return app, gateway
