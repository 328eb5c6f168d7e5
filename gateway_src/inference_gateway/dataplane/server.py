"""Assemble and run the standalone gateway: endpoints file + optional config → aiohttp app."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from aiohttp import web

from ..config import GatewayConfigSpec, load_config
from ..endpoints.discovery import load_endpoints_file
from ..endpoints.store import EndpointStore
from ..scheduling import Scheduler
from ..scheduling.types import Endpoint
from ..telemetry import GatewayMetrics
from ..traffic.routing import ModelRouter
from .baseline import RoundRobinScheduler
from .proxy import Gateway

__all__ = ["build_gateway", "http_fetch"]


def http_fetch(session_holder: dict[str, aiohttp.ClientSession]):
    """The store's fetch seam over HTTP: GET http://pod{path} → text."""

    async def fetch(endpoint: Endpoint, path: str) -> str:
        session = session_holder.get("session")
        if session is None:
            session = session_holder["session"] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0)
            )
        async with session.get(f"http://{endpoint.hostport}{path}") as response:
            response.raise_for_status()
            return await response.text()

    return fetch


def build_gateway(
    endpoints: list[Endpoint] | str | Path,
    config: GatewayConfigSpec | str | Path | None = None,
    *,
    policy: str = "gateway",
) -> tuple[web.Application, Gateway]:
    """The gateway app; scraping starts with the app and stops with it."""
    if not isinstance(endpoints, list):
        endpoints = load_endpoints_file(endpoints)
    if config is not None and not isinstance(config, GatewayConfigSpec):
        config = load_config(config)
    spec = config or GatewayConfigSpec()
    for e in endpoints:
        if not e.pool:
            e.pool = e.labels.get("igw.dev/pool", "default")
    metrics = GatewayMetrics()
    sessions: dict[str, aiohttp.ClientSession] = {}
    store = EndpointStore(
        endpoints,
        http_fetch(sessions),
        interval_s=spec.scrape.interval_ms / 1000,
        timeout_s=spec.scrape.timeout_ms / 1000,
        staleness_s=spec.scrape.staleness_ms / 1000,
    )
    scheduler = (
        RoundRobinScheduler()
        if policy == "round-robin"
        else Scheduler(spec, count_inflight=True, timer=metrics.time_plugin)
    )
    gateway = Gateway(store, scheduler, ModelRouter(config), metrics=metrics)
    app = gateway.app()

    async def start_scraping(app: web.Application) -> None:
        await store.scrape_once()
        store.start()

    async def stop_scraping(app: web.Application) -> None:
        await store.stop()
        session = sessions.pop("session", None)
        if session is not None:
            await session.close()

    app.on_startup.append(start_scraping)
    app.on_cleanup.append(stop_scraping)
    return app, gateway
