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

The header: a request with `x-igw-explain: true` from a client listed in
`headerClients` (the authenticated `x-igw-client-id`, which `igw serve`'s authentication
or Envoy Gateway's SecurityPolicy sets and no client can forge) gets its record back in
`x-igw-explanation` (compact JSON, at most `MAX_HEADER_BYTES`: candidates are dropped
from the end until it fits). Off by default (an empty list).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from inference_gateway.config.spec import ExplainSpec
from inference_gateway.core.request.decisions import DecisionLog
from inference_gateway.core.request.director import CLIENT_ID_HEADER

__all__ = [
    "DECISIONS_PATH",
    "EXPLAINED_HEADER",
    "EXPLAIN_HEADER",
    "MAX_HEADER_BYTES",
    "add_decisions_routes",
    "explanation_header",
    "loopback_peer",
    "may_explain",
]

DECISIONS_PATH = "/debug/decisions"
EXPLAIN_HEADER = "x-igw-explain"
EXPLAINED_HEADER = "x-igw-explanation"
MAX_HEADER_BYTES = 8192
MAX_LIMIT = 1000
Allow = Callable[[web.Request], bool]


def loopback_peer(request: web.Request) -> bool:
    """Whether the caller connected from this machine (or pod)."""
    peer = request.remote or ""
    try:
        return ipaddress.ip_address(peer.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def may_explain(spec: ExplainSpec, headers: Mapping[str, str]) -> bool:
    """The debug header's rule: asked for, by a listed, authenticated client."""
    if not spec.header_clients or headers.get(EXPLAIN_HEADER, "").lower() != "true":
        return False
    return headers.get(CLIENT_ID_HEADER, "") in spec.header_clients


def explanation_header(record: dict[str, Any]) -> str:
    """A record as one header value, within `MAX_HEADER_BYTES`."""
    record = dict(record)
    explanation = record.get("explanation")
    while True:
        value = orjson.dumps(record).decode()
        if len(value) <= MAX_HEADER_BYTES:
            return value
        if isinstance(explanation, dict) and explanation.get("top"):
            explanation = record["explanation"] = {
                **explanation,
                "top": explanation["top"][:-1],
            }
            continue
        record.pop("explanation", None)
        explanation = None
        if len(orjson.dumps(record)) > MAX_HEADER_BYTES:
            return orjson.dumps({"id": record.get("id"), "truncated": True}).decode()


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
