"""The standalone gateway: an OpenAI-compatible HTTP proxy over the scheduling core.

Per request: read the body (limit → 413), parse it (→ 400), route `model` to a pool
(→ 404), rank that pool's ready pods (→ 503 when none), and forward to the best pod.
A pod that refuses the connection or answers 5xx/429 before the first byte is retried
on the next-ranked pod (at most `max_attempts` pods); once a byte has reached the
client nothing is retried, and a stream that breaks ends with an SSE error event rather
than a silent truncation. Responses stream through chunk by chunk, unbuffered.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Protocol

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import generate_latest

from ..endpoints.store import EndpointStore
from ..errors import NoEndpointError, UnknownModelError
from ..scheduling.plugins.prefix import prompt_block_hashes
from ..scheduling.types import Endpoint, LLMRequest
from ..telemetry import GatewayMetrics
from ..traffic.routing import ModelRouter

__all__ = ["Gateway", "SchedulerLike", "error_response"]

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


class Gateway:
    def __init__(
        self,
        store: EndpointStore,
        scheduler: SchedulerLike,
        router: ModelRouter,
        *,
        metrics: GatewayMetrics | None = None,
        max_body_bytes: int = 4 * 2**20,
        max_attempts: int = 3,
        connect_timeout_s: float = 5.0,
        first_byte_timeout_s: float = 300.0,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.router = router
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
        if self._session is not None:
            await self._session.close()

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
        model = body["model"]
        endpoints = self.store.endpoints
        try:
            route = self.router.route(model, endpoints)
        except UnknownModelError as error:
            return error_response(
                404, str(error), "invalid_request_error", "model_not_found", headers
            )
        text = prompt_text(body)
        llm = LLMRequest(
            request_id=request_id,
            model=route.model,
            prompt_tokens=len(text) // 4 + 1,
            prefix_hashes=prompt_block_hashes(route.model, text),
            adapter=route.adapter,
            profile=request.headers.get("x-gateway-inference-profile") or route.profile,
            fairness_id=request.headers.get("x-gateway-inference-fairness-id", ""),
        )
        started = time.perf_counter()
        try:
            ranked = self.scheduler.schedule(llm, self.router.candidates(route, endpoints))
        except NoEndpointError as error:
            self.metrics.errors.labels(model, route.model, "503").inc()
            return error_response(
                503,
                f"No ready model server for `{model}`: {error}",
                "service_unavailable",
                "no_ready_endpoint",
                headers,
            )
        self.metrics.scheduler_e2e.observe(time.perf_counter() - started)
        self.metrics.requests.labels(model, route.model).inc()
        self.metrics.input_tokens.labels(model, route.model).observe(llm.prompt_tokens)
        return await self._forward(request, raw, llm, ranked[: self.max_attempts], model, headers)

    async def _forward(
        self,
        request: web.Request,
        raw: bytes,
        llm: LLMRequest,
        ranked: list[Endpoint],
        model: str,
        headers: dict[str, str],
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
                return await self._relay(request, upstream, llm, endpoint, model, started, headers)
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
    ) -> web.StreamResponse:
        content_type = upstream.headers.get("content-type", "application/json")
        response = web.StreamResponse(
            status=upstream.status,
            headers={
                **headers,
                "content-type": content_type,
                "x-gateway-destination-endpoint": endpoint.hostport,
            },
        )
        streaming = content_type.startswith("text/event-stream")
        first = True
        try:
            async for chunk in upstream.content.iter_any():
                if first:
                    first = False
                    ttft = time.perf_counter() - started
                    self.scheduler.on_first_token(llm, endpoint, ttft, time.monotonic())
                    self.metrics.ttft.labels(model, llm.model).observe(ttft)
                    await response.prepare(request)
                await response.write(chunk)
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            self.metrics.errors.labels(model, llm.model, "stream_broken").inc()
            if first:
                return error_response(
                    502,
                    f"Model server {endpoint.name} failed: {error!r}",
                    "upstream_error",
                    "upstream_failed",
                    headers,
                )
            if streaming:
                event = {
                    "error": {
                        "message": f"upstream stream broke: {error!r}",
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
