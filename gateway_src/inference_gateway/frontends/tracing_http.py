"""Traces for the small HTTP servers without a config file (`igw auth`, `igw pd-sidecar`).

`--trace-sampling RATIO` turns tracing on (cli/process.py; parent-based: these servers
sit inside a trace Envoy or the picker started, so the caller's sampled flag decides;
RATIO only samples a request that arrives without one); the exporter is set by the
OTEL_* variables, as for every server (telemetry/tracing.py). `server_span` is the
aiohttp middleware that makes each request one SERVER span under its `traceparent`
(`SPAN` on the request, for a handler that passes the context on), with the status it
answered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from opentelemetry.trace import Span, Status, StatusCode

from inference_gateway.telemetry.tracing import SpanKind, Tracing

__all__ = ["SPAN", "server_span"]

SPAN = web.RequestKey("igw_span", Span)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def server_span(tracing: Tracing, name: str, *, skip: frozenset[str] = frozenset()) -> Any:
    """The middleware (none of its work happens with tracing off); `skip`: paths with no
    span (probes)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not tracing.enabled or request.path in skip:
            return await handler(request)
        span = tracing.start(name, headers=request.headers, kind=SpanKind.SERVER)
        request[SPAN] = span
        try:
            response = await handler(request)
        except BaseException as error:
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.end()
            raise
        span.set_attribute("http.response.status_code", response.status)
        span.end()
        return response

    return middleware
