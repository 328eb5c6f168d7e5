"""The standalone gateway: an OpenAI-compatible HTTP proxy over the scheduling core.

Per request: read the body (limit → 413), parse it (→ 400), route `model` to a pool
(→ 404), rank that pool's ready pods (→ 503 when none), and forward to the best pod.
A pod that refuses the connection or answers 5xx/429 before the first byte is retried
on the next-ranked pod (at most `max_attempts` pods); once a byte has reached the
client nothing is retried, and a stream that breaks ends with an SSE error event rather
than a silent truncation. Responses stream through chunk by chunk, unbuffered.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import generate_latest

from ..config import GatewayConfigSpec
from ..endpoints.store import EndpointStore
from ..errors import NoCapacityError, NoEndpointError, UnknownModelError
from ..scheduling.plugins.prefix import prompt_block_hashes
from ..scheduling.types import Endpoint, LLMRequest
from ..telemetry import GatewayMetrics
from ..traffic.objectives import band_for
from ..traffic.ratelimit import RateLimiter
from ..traffic.rewrites import RewriteSet
from ..traffic.routing import ModelRouter, Route
from .admission import PoolGate, QueueTimeoutError
from .sse import ModelNameRewriter

__all__ = ["Gateway", "RoutingState", "SchedulerLike", "error_response"]

log = logging.getLogger(__name__)
DEFAULT_MAX_TOKENS = 256  # charged to token buckets when a request sets none

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class SchedulerLike(Protocol):
    """What the proxy needs of a scheduler (the real one, or a baseline for comparison)."""

    def schedule(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[Endpoint]: ...
    def on_picked(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None: ...
    def on_first_token(
        self, request: LLMRequest, endpoint: Endpoint, ttft_s: float, now: float
    ) -> None: ...
    def on_finished(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None: ...


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


def prompt_text(body: dict[str, Any]) -> str:
    """The text the prefix index and token estimate see: messages or prompt, in order."""
    messages = body.get("messages")
    if isinstance(messages, list):
        parts = []
        for m in messages:
            if isinstance(m, dict):
                content = m.get("content")
                if isinstance(content, list):  # content parts
                    content = "".join(
                        str(p.get("text", "")) for p in content if isinstance(p, dict)
                    )
                parts.append(f"{m.get('role', '')}:{content or ''}\n")
        return "".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return "".join(str(p) for p in prompt)
    return str(prompt or "")


@dataclass(frozen=True)
class RoutingState:
    """Everything a reload replaces at once; a request keeps the state it started with."""

    config: GatewayConfigSpec | None
    router: ModelRouter
    rewrites: RewriteSet = field(default_factory=RewriteSet.empty)
    limiter: RateLimiter = field(default_factory=lambda: RateLimiter([]))

    @classmethod
    def build(
        cls, config: GatewayConfigSpec | None, rewrites: RewriteSet | None = None
    ) -> RoutingState:
        return cls(
            config,
            ModelRouter(config),
            rewrites or RewriteSet.empty(),
            RateLimiter(config.rate_limits if config else []),
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
        self.scheduler = scheduler
        self.state = (
            router if isinstance(router, RoutingState) else RoutingState(router.config, router)
        )
        self.gates: dict[str, PoolGate] = {}
        self.metrics = metrics or GatewayMetrics()
        self.max_body_bytes = max_body_bytes
        self.max_attempts = max_attempts
        self.timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_s, sock_read=first_byte_timeout_s
        )
        self._session: aiohttp.ClientSession | None = None

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
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            timeout=self.timeout,
            auto_decompress=False,
        )

    async def _cleanup(self, app: web.Application) -> None:
        for gate in self.gates.values():
            await gate.close()
        if self._session is not None:
            await self._session.close()

    @property
    def router(self) -> ModelRouter:
        return self.state.router

    def reload(self, state: RoutingState) -> None:
        """Swap config, rewrites and limits; requests in flight keep their old state."""
        self.state = state
        flow = state.config.flow_control if state.config else None
        for gate in self.gates.values():
            if flow is not None:
                gate.spec = gate.controller.spec = flow

    def gate(self, route: Route) -> PoolGate:
        key = route.pool or "*"
        gate = self.gates.get(key)
        if gate is None:
            config = self.state.config or GatewayConfigSpec()
            gate = self.gates[key] = PoolGate(
                config.flow_control,
                lambda: self.state.router.candidates(route, self.store.endpoints),
            )
        return gate

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
        for pool, endpoints in self.store.pools().items():
            ready = [e for e in endpoints if not e.stale and e.metrics is not None]
            self.metrics.pool_ready.labels(pool).set(len(ready))
            if ready:
                self.metrics.pool_kv.labels(pool).set(
                    sum(e.metrics.kv_usage for e in ready) / len(ready)
                )  # type: ignore[union-attr]
                self.metrics.pool_queue.labels(pool).set(
                    sum(e.metrics.waiting for e in ready) / len(ready)
                )  # type: ignore[union-attr]
        return web.Response(
            body=generate_latest(self.metrics.registry), content_type="text/plain", charset="utf-8"
        )

    # ------------------------------------------------------------------ completions

    async def completions(self, request: web.Request) -> web.StreamResponse:
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
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
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            return error_response(
                400,
                f"Malformed JSON body: {error}",
                "invalid_request_error",
                "invalid_json",
                headers,
            )
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return error_response(
                400,
                "The request body must be a JSON object with a string `model` field.",
                "invalid_request_error",
                "missing_model",
                headers,
            )
        state = self.state
        client_model = body["model"]
        model = state.rewrites.rewrite(client_model)
        endpoints = self.store.endpoints
        try:
            route = state.router.route(model, endpoints)
        except UnknownModelError:
            return error_response(
                404,
                f"The model `{client_model}` does not exist.",
                "invalid_request_error",
                "model_not_found",
                headers,
            )
        text = prompt_text(body)
        llm = LLMRequest(
            request_id=request_id,
            model=route.model,
            prompt_tokens=len(text) // 4 + 1,
            prefix_hashes=prompt_block_hashes(route.model, text),
            adapter=route.adapter,
            band=band_for(
                state.config, request.headers.get("x-gateway-inference-objective"), route.model
            ),
            profile=request.headers.get("x-gateway-inference-profile") or route.profile,
            fairness_id=request.headers.get("x-gateway-inference-fairness-id", ""),
        )
        limit = state.limiter.check(
            api_key(request),
            client_model,
            llm.prompt_tokens
            + int(
                body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS
            ),
            time.monotonic(),
        )
        headers.update(limit.headers)
        if not limit.allowed:
            self.metrics.rejected.labels(client_model, "rate_limited").inc()
            return error_response(
                429,
                f"Rate limit reached for `{client_model}`; retry after {limit.retry_after_s} s.",
                "rate_limit_exceeded",
                "rate_limited",
                {**headers, "retry-after": str(limit.retry_after_s)},
            )
        gate = self.gate(route)
        try:
            await gate.admit(llm.band, llm.fairness_id)
        except NoCapacityError as error:
            self.metrics.rejected.labels(client_model, "pool_saturated").inc()
            return error_response(
                429,
                str(error),
                "rate_limit_exceeded",
                "pool_saturated",
                {**headers, "retry-after": str(error.retry_after_s)},
            )
        except QueueTimeoutError as error:
            self.metrics.rejected.labels(client_model, "queue_timeout").inc()
            return error_response(503, str(error), "service_unavailable", "queue_timeout", headers)
        try:
            ranked = self._rank(llm, route, endpoints)
            if not ranked:
                self.metrics.rejected.labels(client_model, "no_ready_endpoint").inc()
                return error_response(
                    503,
                    f"No ready model server for `{client_model}`: every pod of the pool "
                    "is stale or none serves the model.",
                    "service_unavailable",
                    "no_ready_endpoint",
                    headers,
                )
            self.metrics.requests.labels(client_model, route.model).inc()
            self.metrics.input_tokens.labels(client_model, route.model).observe(llm.prompt_tokens)
            if model != client_model:
                body["model"] = model
                raw = orjson.dumps(body)
            rewriter = ModelNameRewriter(client_model) if model != client_model else None
            return await self._forward(
                request, raw, llm, ranked[: self.max_attempts], client_model, headers, rewriter
            )
        finally:
            gate.on_completion()

    def _rank(self, llm: LLMRequest, route: Route, endpoints: list[Endpoint]) -> list[Endpoint]:
        """Ranked pods; when all are stale, a `FailOpen` pool picks at random."""
        candidates = self.state.router.candidates(route, endpoints)
        started = time.perf_counter()
        try:
            ranked = self.scheduler.schedule(llm, candidates)
        except NoEndpointError:
            config = self.state.config
            fail_open = bool(
                config
                and route.pool
                and any(p.name == route.pool and p.failure_mode == "FailOpen" for p in config.pools)
            )
            serving = [e for e in candidates if e.serves(llm.model)]
            if not fail_open or not serving:
                return []
            log.warning("pool %s has no fresh pod; FailOpen picks at random", route.pool)
            return random.sample(serving, len(serving))
        self.metrics.scheduler_e2e.observe(time.perf_counter() - started)
        return ranked

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
        assert self._session is not None
        started = time.perf_counter()
        forward_headers = {"content-type": "application/json", **headers}
        auth = request.headers.get("authorization")
        if auth:
            forward_headers["authorization"] = auth
        last_error = "no attempt made"
        for endpoint in ranked:
            self.scheduler.on_picked(llm, endpoint, time.monotonic())
            url = f"http://{endpoint.hostport}{request.path}"
            try:
                upstream = await self._session.post(url, data=raw, headers=forward_headers)
            except (TimeoutError, aiohttp.ClientError, OSError) as error:
                self.scheduler.on_finished(llm, endpoint, time.monotonic())
                last_error = f"{endpoint.name}: {error!r}"
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
        self.metrics.errors.labels(model, llm.model, "502").inc()
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
        upstream: aiohttp.ClientResponse,
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
        streaming = content_type.startswith("text/event-stream")
        if not streaming:
            return await self._relay_whole(
                upstream, llm, endpoint, model, started, headers, rewriter, content_type
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
            async for chunk in upstream.content.iter_any():
                if first:
                    first = False
                    self._first_token(llm, endpoint, model, started)
                    await response.prepare(request)
                await response.write(rewriter.stream_chunk(chunk) if rewriter else chunk)
            if rewriter is not None:
                tail = rewriter.flush()
                if tail:
                    await response.write(tail)
        except (TimeoutError, aiohttp.ClientError) as error:
            self.metrics.errors.labels(model, llm.model, "stream_broken").inc()
            if first:  # nothing reached the client yet: the caller retries elsewhere
                raise _BrokeBeforeFirstByte(repr(error)) from error
            event = {
                "error": {
                    "message": f"The model server stream broke: {error!r}",
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
        self.metrics.duration.labels(model, llm.model).observe(time.perf_counter() - started)
        return response

    async def _relay_whole(
        self,
        upstream: aiohttp.ClientResponse,
        llm: LLMRequest,
        endpoint: Endpoint,
        model: str,
        started: float,
        headers: dict[str, str],
        rewriter: ModelNameRewriter | None,
        content_type: str,
    ) -> web.Response:
        """A non-streamed answer is one JSON document: read it, count usage, rewrite."""
        try:
            body = await upstream.read()
        except (TimeoutError, aiohttp.ClientError) as error:
            self.metrics.errors.labels(model, llm.model, "upstream_failed").inc()
            return error_response(
                502,
                f"Model server {endpoint.name} failed: {error!r}",
                "upstream_error",
                "upstream_failed",
                headers,
            )
        self._first_token(llm, endpoint, model, started)
        if rewriter is not None:
            body = rewriter.json_body(body)
        if upstream.status == 200:
            try:
                usage = orjson.loads(body).get("usage") or {}
                self.metrics.output_tokens.labels(model, llm.model).observe(
                    int(usage.get("completion_tokens") or 0)
                )
            except (orjson.JSONDecodeError, AttributeError):
                pass
        self.metrics.duration.labels(model, llm.model).observe(time.perf_counter() - started)
        return web.Response(
            status=upstream.status,
            body=body,
            headers={
                **headers,
                "content-type": content_type,
                "x-gateway-destination-endpoint": endpoint.hostport,
            },
        )

    def _first_token(self, llm: LLMRequest, endpoint: Endpoint, model: str, started: float) -> None:
        ttft = time.perf_counter() - started
        self.scheduler.on_first_token(llm, endpoint, ttft, time.monotonic())
        self.metrics.ttft.labels(model, llm.model).observe(ttft)


class _BrokeBeforeFirstByte(Exception):
    """The pod's answer broke before any byte reached the client: safe to retry."""


def api_key(request: web.Request) -> str:
    """The bearer token, or "anonymous" (limits without an apiKey apply per key)."""
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else "anonymous"
