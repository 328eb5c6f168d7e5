"""Helpers for end-to-end tests: an emulated fleet and a gateway on loopback ports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from openai_clients import openai_clients_closed  # noqa: F401  (autouse)

from inference_gateway.assembly.serve import app_runner, build_gateway
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.frontends.proxy import Gateway


def fleet_endpoints(fleet: EmulatedFleet) -> list[Endpoint]:
    return [
        Endpoint(e.name, e.host, e.port, pool=e.labels["igw.dev/pool"], labels=e.labels, index=i)
        for i, e in enumerate(fleet.endpoints)
    ]


@asynccontextmanager
async def serving(app: web.Application, runner: web.AppRunner | None = None) -> AsyncIterator[str]:
    """`app` on a free loopback port (`runner`: one built with the server's own settings,
    else `igw serve`'s), its URL while the block runs."""
    runner = runner or app_runner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def running_gateway(
    fleet: EmulatedFleet, **options: Any
) -> AsyncIterator[tuple[str, Gateway, web.Application]]:
    # the tests watch where requests go: the debugging header that names the pod is on
    options.setdefault("expose_endpoints", True)
    app, gateway = build_gateway(fleet_endpoints(fleet), **options)
    async with serving(app) as url:
        yield url, gateway, app


@pytest.fixture
def app_on() -> Callable[..., Any]:
    """`async with app_on(app[, runner]) as url`: an aiohttp app on a loopback port."""
    return serving


@pytest.fixture
def gateway_on() -> Callable[..., Any]:
    """`async with gateway_on(fleet, config=..., rewrites=...) as (url, gateway, app)`."""
    return running_gateway
