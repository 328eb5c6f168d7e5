"""The standalone gateway: an OpenAI-compatible HTTP proxy over the scheduling core.

Per request: read the body (limit → 413), parse it (→ 400), route `model` to a pool
(→ 404), rank that pool's ready pods (→ 503 when none), and forward to the best pod.
A pod that refuses the connection or answers 5xx/429 before the first byte is retried
on the next-ranked pod (at most `max_attempts` pods); once a byte has reached the
client nothing is retried, and a stream that breaks ends with an SSE error event rather
than a silent truncation. Responses stream through chunk by chunk, unbuffered.

Outbound requests go through `Upstream` (upstream.py), a lean keep-alive HTTP/1.1 client:
the gateway's own cost per request is what the overhead benchmark
(bench/gateway_overhead.py) holds to <= 1 ms at p50. For the same reason a response is
written to the client before the bookkeeping that follows it (TTFT and duration
histograms, usage counting, the scheduler's feedback), which the client does not wait for.
"""

from __future__ import annotations

import logging
import random
import time

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import generate_latest

from ..endpoints.store import EndpointStore
from ..scheduling.types import Endpoint, LLMRequest
from ..telemetry import GatewayMetrics
from ..traffic.routing import ModelRouter, Route
from .admission import PoolGate
from .director import Director, Rejection, RoutingState, SchedulerLike, prompt_text
from .sse import ModelNameRewriter
from .upstream import Upstream, UpstreamError, UpstreamResponse

# RoutingState, SchedulerLike and prompt_text live in `director` (shared with the ext_proc
# picker) and are re-exported here for existing callers.
__all__ = ["Gateway", "RoutingState", "SchedulerLike", "error_response", "prompt_text"]

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
_request_ids = random.Random()  # ids need to be unique, not secret: no syscall per request


def new_request_id() -> str:
    """32 hex digits, like `uuid4().hex`."""
    return f"{_request_ids.getrandbits(128):032x}"


def error_response(
    status: int,
    message: str,
    kind: str,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """An OpenAI-shaped error: `{"error": {"message", "type", "code"}}`."""
    body = {"error": {"message": message, "type": kind, "code": code}}
    return web.Response(
        status=status, body=orjson.dumps(body), content_type="application/json", headers=headers
    )


class Gateway:
    def __init__(
        self,
        store: EndpointStore,
        scheduler: SchedulerLike,
        router: ModelRouter | RoutingState,
        *,
        metrics: GatewayMetrics | None = None,
        max_body_bytes: int = 4 * 2**20,
        max_attempts: int = 3,
        connect_timeout_s: float = 5.0,
        first_byte_timeout_s: float = 300.0,
    ) -> None:
        self.store = store
        self.metrics = metrics or GatewayMetrics()
        state = router if isinstance(router, RoutingState) else RoutingState(router.config, router)
        # parse → rewrite → route → band → limits → admission → rank: shared with the picker
        self.director = Director(
            lambda: self.store.endpoints, scheduler, state, metrics=self.metrics
        )
        self._series = self.director.child  # cached labelled series
        self.max_body_bytes = max_body_bytes
        self.max_attempts = max_attempts
        self.connect_timeout_s = connect_timeout_s
        self.first_byte_timeout_s = first_byte_timeout_s
        self.upstream: Upstream | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _startup(self, app: web.Application) -> None:
        self.upstream = Upstream(
            connect_timeout_s=self.connect_timeout_s, read_timeout_s=self.first_byte_timeout_s
        )

    async def _cleanup(self, app: web.Application) -> None:
        await self.director.close()
        if self.upstream is not None:
            await self.upstream.close()

    @property
    def scheduler(self) -> SchedulerLike:
        return self.director.scheduler

    @property
    def state(self) -> RoutingState:
        return self.director.state

    @property
    def gates(self) -> dict[str, PoolGate]:
        return self.director.gates

    @property
    def router(self) -> ModelRouter:
        return self.director.state.router

    def reload(self, state: RoutingState) -> None:
        """Swap config, rewrites and limits; requests in flight keep their old state."""
        self.director.reload(state)

    def gate(self, route: Route) -> PoolGate:
        return self.director.gate(route)

    # ------------------------------------------------------------------ small handlers

    async def health(self, request: web.Request) -> web.Response:
        ready = len(self.store.ready())
        status = 200 if ready else 503
        return web.json_response(
            {"status": "ok" if ready else "no ready pods", "ready_pods": ready}, status=status
        )

    async def models(self, request: web.Request) -> web.Response:
        names = self.router.models(self.store.endpoints)
        data = [{"id": n, "object": "model", "owned_by": "inference-gateway"} for n in names]
        return web.json_response({"object": "list", "data": data})

    async def prometheus(self, request: web.Request) -> web.Response:
        self.director.refresh_gauges(self.store.pools())
        return web.Response(
            body=generate_latest(self.metrics.registry), content_type="text/plain", charset="utf-8"
        )

    # ------------------------------------------------------------------ completions

    async def completions(self, request: web.Request) -> web.StreamResponse:
        request_id = request.headers.get("x-request-id") or new_request_id()
        headers = {"x-request-id": request_id}
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return error_response(
                413,
                f"Request body exceeds {self.max_body_bytes} bytes.",
                "invalid_request_error",
                "request_too_large",
                headers,
            )
        try:
            decision = await self.director.decide(raw, request.headers, request_id=request_id)
        except Rejection as rejection:
            return error_response(
                rejection.status,
                rejection.message,
                rejection.kind,
                rejection.code,
                {**headers, **rejection.headers},
            )
        headers.update(decision.headers)
        llm = decision.llm
        try:
            rewriter = ModelNameRewriter(decision.client_model) if decision.rewritten else None
            return await self._forward(
                request,
                decision.body,
                llm,
                decision.ranked[: self.max_attempts],
                decision.client_model,
                headers,
                rewriter,
            )
        finally:
            self.director.release(decision)

    async def _forward(
        self,
        request: web.Request,
        raw: bytes,
        llm: LLMRequest,
        ranked: list[Endpoint],
        model: str,
        headers: dict[str, str],
        rewriter: ModelNameRewriter | None = None,
    ) -> web.StreamResponse:
        assert self.upstream is not None
        started = time.perf_counter()
        forward_headers = {"content-type": "application/json", **headers}
        auth = request.headers.get("authorization")
        if auth:
            forward_headers["authorization"] = auth
        path = request.path
        last_error = "no attempt made"
        observed_input = False
        for endpoint in ranked:
            # sent at once on a warm connection; the bookkeeping below overlaps the pod
            pending = self.upstream.post(
                endpoint.address, endpoint.port, path, raw, forward_headers
            )
            try:
                self.scheduler.on_picked(llm, endpoint, time.monotonic())
                if not observed_input:
                    observed_input = True
                    self._series(self.metrics.input_tokens, model, llm.model).observe(
                        llm.prompt_tokens
                    )
            except BaseException:
                pending.abandon()
                raise
            try:
                upstream = await pending.response()
            except UpstreamError as error:
                self.scheduler.on_finished(llm, endpoint, time.monotonic())
                last_error = f"{endpoint.name}: {error}"
                continue
            if upstream.status in RETRYABLE_STATUS and endpoint is not ranked[-1]:
                upstream.release()
                self.scheduler.on_finished(llm, endpoint, time.monotonic())
                last_error = f"{endpoint.name}: HTTP {upstream.status}"
                continue
            try:
                return await self._relay(
                    request, upstream, llm, endpoint, model, started, headers, rewriter
                )
            except _BrokeBeforeFirstByte as error:
                last_error = f"{endpoint.name}: {error}"
                continue
            finally:
                upstream.release()
                self.scheduler.on_finished(llm, endpoint, time.monotonic())
        self._series(self.metrics.errors, model, llm.model, "502").inc()
        return error_response(
            502,
            f"Every model server attempt failed ({last_error}).",
            "upstream_error",
            "upstream_unavailable",
            headers,
        )

    async def _relay(
        self,
        request: web.Request,
        upstream: UpstreamResponse,
        llm: LLMRequest,
        endpoint: Endpoint,
        model: str,
        started: float,
        headers: dict[str, str],
        rewriter: ModelNameRewriter | None,
    ) -> web.StreamResponse:
        """Stream the pod's answer through; a break after the first byte ends the stream
        with an SSE error event, never a silent truncation."""
        content_type = upstream.headers.get("content-type", "application/json")
        if not content_type.startswith("text/event-stream"):
            return await self._relay_whole(
                request, upstream, llm, endpoint, model, started, headers, rewriter, content_type
            )
        response = web.StreamResponse(
            status=upstream.status,
            headers={
                **headers,
                "content-type": content_type,
                "x-gateway-destination-endpoint": endpoint.hostport,
            },
        )
        first = True
        try:
            async for chunk in upstream.chunks():
                if rewriter is not None:
                    chunk = rewriter.stream_chunk(chunk)
                if first:
                    first = False
                    ttft = time.perf_counter() - started
                    await response.prepare(request)
                    await response.write(chunk)
                    self._first_token(llm, endpoint, model, ttft)
                    continue
                await response.write(chunk)
            if rewriter is not None:
                tail = rewriter.flush()
                if tail:
                    await response.write(tail)
        except (TimeoutError, UpstreamError, aiohttp.ClientError) as error:
            self._series(self.metrics.errors, model, llm.model, "stream_broken").inc()
            if first:  # nothing reached the client yet: the caller retries elsewhere
                raise _BrokeBeforeFirstByte(str(error)) from error
            event = {
                "error": {
                    "message": f"The model server stream broke: {error}",
                    "type": "upstream_error",
                    "code": "stream_broken",
                }
            }
            await response.write(b"data: " + orjson.dumps(event) + b"\n\n")
            await response.write_eof()
            return response
        if first:
            await response.prepare(request)
        await response.write_eof()
        self._series(self.metrics.duration, model, llm.model).observe(time.perf_counter() - started)
        return response

    async def _relay_whole(
        self,
        request: web.Request,
        upstream: UpstreamResponse,
        llm: LLMRequest,
        endpoint: Endpoint,
        model: str,
        started: float,
        headers: dict[str, str],
        rewriter: ModelNameRewriter | None,
        content_type: str,
    ) -> web.StreamResponse:
        """A non-streamed answer is one JSON document: read it, rewrite it, send it, and
        only then count its usage and time it."""
        try:
            body = await upstream.read()
        except (TimeoutError, UpstreamError) as error:
            self._series(self.metrics.errors, model, llm.model, "upstream_failed").inc()
            return error_response(
                502,
                f"Model server {endpoint.name} failed: {error}",
                "upstream_error",
                "upstream_failed",
                headers,
            )
        ttft = time.perf_counter() - started
        if rewriter is not None:
            body = rewriter.json_body(body)
        response = web.Response(
            status=upstream.status,
            body=body,
            headers={
                **headers,
                "content-type": content_type,
                "x-gateway-destination-endpoint": endpoint.hostport,
            },
        )
        await response.prepare(request)
        await response.write_eof()
        # the client has its answer: the rest is bookkeeping
        self._first_token(llm, endpoint, model, ttft)
        if upstream.status == 200:
            try:
                usage = orjson.loads(body).get("usage") or {}
                self._series(self.metrics.output_tokens, model, llm.model).observe(
                    int(usage.get("completion_tokens") or 0)
                )
            except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
                pass
        self._series(self.metrics.duration, model, llm.model).observe(time.perf_counter() - started)
        return response

    def _first_token(self, llm: LLMRequest, endpoint: Endpoint, model: str, ttft: float) -> None:
        self.scheduler.on_first_token(llm, endpoint, ttft, time.monotonic())
        self._series(self.metrics.ttft, model, llm.model).observe(ttft)


class _BrokeBeforeFirstByte(Exception):
    """The pod's answer broke before any byte reached the client: safe to retry."""
