"""Decisions on demand: `GET /debug/decisions[/ID]` and the `x-igw-explain` debug header.

`/debug/decisions/<id>` answers the records (core/request/decisions.py) whose internal
id, `x-request-id` or trace id is `<id>` (404 when none is kept); `/debug/decisions?
limit=N` the newest N (at most 1,000). `igw explain REQUEST_ID` reads them. They name
pods and their scores, which stay inside the cluster, so only a caller on loopback is
answered (`kubectl port-forward` arrives there; so does a local `igw explain`), or, on
an `igw serve` with authentication, only an authenticated client listed in
`tracing.explain.headerClients` (a sidecar proxy would make every caller local); anyone
else gets 404, as if the path did not exist. The picker serves them on its metrics port,
`igw serve` and `igw global` on their one port.

The debug header that returns a request's own decision is explain.py.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from inference_gateway.core.request.decisions import DecisionLog

__all__ = ["DECISIONS_PATH", "add_decisions_routes", "loopback_peer"]

DECISIONS_PATH = "/debug/decisions"
MAX_LIMIT = 1000
Allow = Callable[[web.Request], bool]


def loopback_peer(request: web.Request) -> bool:
    """Whether the caller connected from this machine (or pod)."""
    peer = request.remote or ""
    try:
        return ipaddress.ip_address(peer.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def add_decisions_routes(
    app: web.Application,
    decisions: Callable[[], DecisionLog | None],
    *,
    allow: Allow = loopback_peer,
) -> None:
    """`GET /debug/decisions` and `/debug/decisions/{id}` on `app` (module docstring).
    `decisions` is read per call, so a reload that replaces the log is seen."""

    async def recent(request: web.Request) -> web.Response:
        log = decisions()
        if log is None or not allow(request):
            raise web.HTTPNotFound()
        try:
            limit = max(1, min(MAX_LIMIT, int(request.query.get("limit", "20"))))
        except ValueError:
            limit = 20
        return _json({"capacity": log.capacity, "kept": len(log), "decisions": log.recent(limit)})

    async def one(request: web.Request) -> web.Response:
        log = decisions()
        if log is None or not allow(request):
            raise web.HTTPNotFound()
        found = log.find(request.match_info["id"])
        if not found:
            return _json({"error": "no such decision is kept here", "decisions": []}, 404)
        return _json({"decisions": found})

    app.router.add_get(DECISIONS_PATH, recent)
    app.router.add_get(DECISIONS_PATH + "/{id}", one)


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
