"""`igw global`: one OpenAI-compatible endpoint over several cluster gateways.

Per request: read the body (limit → 413), parse it (→ 400), charge the global rate limit
(→ 429 with `Retry-After` and `x-ratelimit-*`), rank the clusters (choice.py) and send
it to the first. A cluster that refuses the connection (or drops it before answering) is
drained at once (failover) and the request goes to the next; one that answers 429/5xx,
stays silent past `readTimeoutMs` or breaks before the first byte is skipped the same
way without being drained. Once a byte has reached the client nothing
is retried; a stream that breaks later ends with an SSE error event. Token buckets are
settled from the answer's `usage` (the JSON body, or the last SSE chunk that has one).

With an `auth` section the router checks the credential first (401 / 404 as `igw serve`
does, with the same code) and keys the rate limits by the authenticated client id; the
credential is forwarded, so every cluster gateway checks it again. Client-supplied values
are checked before use: `x-igw-client-region` counts only when it names a configured
region, `x-igw-routing-profile` only when it names a profile, `x-igw-latency-budget-ms`
only as whole milliseconds up to 600,000.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import generate_latest
from redis.asyncio import Redis

from inference_gateway.frontends.global_router.choice import Choice, RequestTraits, rank_clusters
from inference_gateway.frontends.global_router.clusters import ClusterRegistry, ClusterState
from inference_gateway.frontends.global_router.config import GlobalRouterSpec, ProfileName
from inference_gateway.frontends.global_router.drains import PlannedDrains
from inference_gateway.frontends.global_router.metrics import FleetEmfEmitter, GlobalMetrics
from inference_gateway.frontends.global_router.requests import (
    api_key_of,
    budget_s,
    build_authenticator,
    error_response,
    sse_usage,
    token_estimate,
    usage_of,
)
from inference_gateway.store.client import StoreHealth, StoreSpec, connect
from inference_gateway.store.ratelimit import GlobalRateLimiter, Ticket

__all__ = ["GlobalRouter", "build_global_router"]

REGION_HEADER = "x-igw-client-region"
PROFILE_HEADER = "x-igw-routing-profile"
OBJECTIVE_HEADER = "x-gateway-inference-objective"
CLUSTER_HEADER = "x-igw-cluster"
BUDGET_HEADER = "x-igw-latency-budget-ms"
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
_FORWARDED = ("authorization", OBJECTIVE_HEADER, "x-gateway-inference-fairness-id", "x-request-id")
_PROFILES: dict[str, ProfileName] = {"latency": "latency", "cost": "cost"}
_PASSED_BACK = ("x-request-id", "retry-after")  # a cluster's 429 keeps its Retry-After


def _end_now(waiting: asyncio.Timeout, loop: asyncio.AbstractEventLoop) -> None:
    """Make a first-byte wait time out now (a drain's call back), unless it already has:
    its own deadline and a drain can race, and a second reschedule would raise."""
    if not waiting.expired():
        waiting.reschedule(loop.time())


class _Skip(Exception):
    """An attempt given up before any byte reached the client: safe to retry elsewhere."""

    def __init__(self, reason: str, status: int, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.status, self.detail = reason, status, detail


class GlobalRouter:
    def __init__(
        self,
        spec: GlobalRouterSpec,
        *,
        metrics: GlobalMetrics | None = None,
        seed: int | None = None,
    ) -> None:
        self.spec = spec
        self.metrics = metrics or GlobalMetrics()
        self.registry = ClusterRegistry(spec, self.metrics)
        self.limiter: GlobalRateLimiter | None = None
        self._stores: list[Redis] = []  # every client this router opened, closed at cleanup
        redis, health = None, None
        if spec.store is not None:
            redis, health = self._open_store(spec.store, "global-router")
        if spec.rate_limit_store is not None:  # limits apart, e.g. one store for every region
            limits = self._open_store(spec.rate_limit_store, "global-ratelimit")
            self.limiter = GlobalRateLimiter(spec.rate_limits, *limits)
        elif redis is not None and health is not None:
            self.limiter = GlobalRateLimiter(spec.rate_limits, redis, health)
        if redis is not None or spec.drain_file is not None:
            self.registry.planned = PlannedDrains(spec, redis, health).current
        self.auth = build_authenticator(spec.auth)
        self._rng = random.Random(seed)
        self._session: aiohttp.ClientSession | None = None

    def _open_store(self, store: StoreSpec, component: str) -> tuple[Redis, StoreHealth]:
        """A client and its own health state (`igw_store_up{component=...}`), so a regional
        store and a rate-limit store fall back, and say so, each on its own."""
        health = StoreHealth(
            component, retry_s=store.retry_ms / 1000, registry=self.metrics.registry
        )
        redis = connect(store)
        self._stores.append(redis)
        return redis, health

    # ------------------------------------------------------------------ app

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.spec.max_body_bytes)
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _startup(self, app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=self.spec.connect_timeout_ms / 1000,
            sock_read=self.spec.read_timeout_ms / 1000,  # a silent cluster frees the request
        )
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=timeout, auto_decompress=False
        )
        await self.registry.start()

    async def _cleanup(self, app: web.Application) -> None:
        await self.registry.stop()
        if self._session is not None:
            await self._session.close()
        for redis in self._stores:
            await redis.aclose()

    async def health(self, request: web.Request) -> web.Response:
        routable = [s.name for s in self.registry.routable()]
        return web.json_response(
            {"status": "ok" if routable else "no routable cluster", "clusters": routable},
            status=200 if routable else 503,
        )

    async def prometheus(self, request: web.Request) -> web.Response:
        self.registry.check_staleness()
        return web.Response(
            body=generate_latest(self.metrics.registry), content_type="text/plain", charset="utf-8"
        )

    async def models(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        for state in self._ranked(self._traits(request.headers)).ranked:
            try:
                async with self._session.get(state.spec.base_url + "/v1/models") as upstream:
                    if upstream.status == 200:
                        body = await upstream.read()
                        return web.Response(body=body, content_type="application/json")
            except (aiohttp.ClientError, TimeoutError, OSError):
                self.registry.drain(state.name, "connect_failed")
        return error_response(
            503, "No cluster is routable.", "service_unavailable", "no_routable_cluster"
        )

    # ------------------------------------------------------------------ completions

    def _traits(self, headers: Mapping[str, str]) -> RequestTraits:
        region = headers.get(REGION_HEADER)
        if region not in self.spec.regions:
            region = self.spec.home_region
        profile = _PROFILES.get(headers.get(PROFILE_HEADER, ""), self.spec.profile)
        objective = headers.get(OBJECTIVE_HEADER)
        sheddable = objective is not None and objective in self.spec.sheddable_objectives
        return RequestTraits(region, profile, sheddable, budget_s(headers.get(BUDGET_HEADER)))

    def _ranked(self, traits: RequestTraits) -> Choice:
        return rank_clusters(
            self.spec, self.registry.routable(), traits, time.monotonic(), self._rng.random
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return error_response(
                413,
                f"Request body exceeds {self.spec.max_body_bytes} bytes.",
                "invalid_request_error",
                "request_too_large",
            )
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            return error_response(
                400, f"Malformed JSON body: {error}", "invalid_request_error", "invalid_json"
            )
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return error_response(
                400,
                "The request body must be a JSON object with a string `model` field.",
                "invalid_request_error",
                "missing_model",
            )
        client = api_key_of(request.headers)
        if self.auth is not None:
            identity = self.auth.identify(request.headers.get("authorization"))
            if identity is None:
                return error_response(
                    401,
                    "Incorrect API key provided, or no valid bearer token.",
                    "invalid_request_error",
                    "invalid_api_key",
                    {"WWW-Authenticate": 'Bearer realm="igw"'},
                )
            if not identity.may_use(body["model"]):  # 404, as OpenAI answers: no existence leak
                return error_response(
                    404,
                    f"The model `{body['model']}` does not exist.",
                    "invalid_request_error",
                    "model_not_found",
                )
            client = identity.client
        extra: dict[str, str] = {}
        ticket = Ticket()
        if self.limiter is not None:
            admission = await self.limiter.check(client, body["model"], token_estimate(body))
            extra = admission.headers
            if not admission.allowed:
                self.metrics.rate_limit_hits.labels(admission.scope).inc()
                return error_response(
                    429,
                    f"Rate limit reached for `{body['model']}`; "
                    f"retry after {admission.retry_after_s} s.",
                    "rate_limit_exceeded",
                    "rate_limited",
                    {**extra, "retry-after": str(admission.retry_after_s)},
                )
            ticket = admission.ticket
        response, used = await self._forward(request, raw, extra, body.get("stream") is True)
        if self.limiter is not None and used is not None:
            await self.limiter.settle(ticket, used)
        return response

    async def _forward(
        self, request: web.Request, raw: bytes, extra: dict[str, str], stream: bool = False
    ) -> tuple[web.StreamResponse, int | None]:
        assert self._session is not None
        traits = self._traits(request.headers)
        choice = self._ranked(traits)
        headers = {"content-type": "application/json"}
        for name in _FORWARDED:
            value = request.headers.get(name)
            if value is not None:
                headers[name] = value
        last_error = "no routable cluster"
        last_status = 503
        ranked = choice.ranked
        tried = 0
        for index, state in enumerate(ranked):
            if tried >= self.spec.max_attempts:
                break
            if not state.routable:  # drained since the ranking was made: skip, no timeout
                continue
            name = state.name
            last = tried + 1 >= self.spec.max_attempts or not any(
                s.routable for s in ranked[index + 1 :]
            )
            self.metrics.decisions.labels(
                name, choice.profile, "first" if tried == 0 else "retry"
            ).inc()
            tried += 1
            started = time.perf_counter()
            try:
                upstream, first = await self._open(state, request.path, raw, headers, stream)
            except _Skip as skip:
                self.metrics.retries.labels(name, skip.reason).inc()
                last_error, last_status = f"{name}: {skip.detail}", skip.status
                continue
            try:
                self.registry.observe_outcome(name, failed=upstream.status >= 500)
                if upstream.status in RETRYABLE_STATUS and not last:
                    self.metrics.retries.labels(name, str(upstream.status)).inc()
                    last_error, last_status = f"{name}: HTTP {upstream.status}", upstream.status
                    continue
                cross = "true" if state.spec.region != traits.home_region else "false"
                return await self._relay(request, upstream, first, state, cross, started, extra)
            finally:
                upstream.release()
        self.metrics.failed.labels(str(last_status)).inc()
        return (
            error_response(
                502 if last_status < 500 and last_status != 429 else last_status,
                f"Every cluster attempt failed ({last_error}).",
                "upstream_error" if last_status != 429 else "rate_limit_exceeded",
                "no_cluster_answered",
                extra,
            ),
            None,
        )

    async def _open(
        self, state: ClusterState, path: str, raw: bytes, headers: dict[str, str], stream: bool
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        """Send the request to one cluster and wait for its first byte (a stream's first
        chunk; a JSON answer whole, as it arrives whole). Until then the attempt is
        retryable: `_Skip` says why it was given up. A drain of the cluster meanwhile
        ends the wait at once (the registry calls back); a stream silent for
        `firstByteTimeoutMs` is skipped without draining (slow is not gone)."""
        assert self._session is not None
        name = state.name
        loop = asyncio.get_running_loop()
        delay = self.spec.first_byte_timeout_ms / 1000 if stream else None
        upstream: aiohttp.ClientResponse | None = None
        try:
            async with asyncio.timeout(delay) as waiting:
                key = self.registry.hold(name, lambda: _end_now(waiting, loop))
                try:
                    upstream = await self._session.post(
                        state.spec.base_url + path, data=raw, headers=headers
                    )
                    try:
                        first = await (upstream.content.readany() if stream else upstream.read())
                    except (aiohttp.ClientError, TimeoutError) as error:
                        self.registry.observe_outcome(name, failed=True)
                        raise _Skip("broke_before_first_byte", 502, str(error)) from error
                except aiohttp.SocketTimeoutError as error:  # slow, not gone: skip, keep it
                    self.registry.observe_outcome(name, failed=True)
                    raise _Skip("read_timeout", 504, str(error)) from error
                except (aiohttp.ClientConnectionError, TimeoutError, OSError) as error:
                    self.registry.release(name, key)
                    self.registry.drain(name, "connect_failed")
                    raise _Skip("connect_failed", 502, str(error)) from error
                except BaseException:
                    if upstream is not None:
                        upstream.release()
                    raise
                finally:
                    self.registry.release(name, key)
        except TimeoutError as error:  # only the wait above ends this way (the rest is _Skip)
            if not state.routable:  # the drain called us back: retry now, loses nothing
                raise _Skip("cluster_drained", 502, "drained while waiting") from error
            self.registry.observe_outcome(name, failed=True)
            raise _Skip("first_byte_timeout", 504, "no first byte in time") from error
        return upstream, first

    async def _relay(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        first: bytes,
        state: ClusterState,
        cross: str,
        started: float,
        extra: dict[str, str],
    ) -> tuple[web.StreamResponse, int | None]:
        """Relay an answer whose first byte is in (`first`): nothing is retried from here."""
        name = state.name
        content_type = upstream.headers.get("content-type", "application/json")
        headers = {**extra, CLUSTER_HEADER: name, "content-type": content_type}
        for passed in _PASSED_BACK:
            value = upstream.headers.get(passed)
            if value is not None:
                headers[passed] = value
        self._answered(state, cross, upstream.status, time.perf_counter() - started)
        if not content_type.startswith("text/event-stream"):
            try:  # the rest, when a stream was asked for and JSON came (empty otherwise)
                body = first + await upstream.content.read()
            except (aiohttp.ClientError, TimeoutError) as error:
                return error_response(
                    502, f"The cluster's answer broke: {error}", "upstream_error", "broken"
                ), None
            whole = web.Response(status=upstream.status, body=body, headers=headers)
            await whole.prepare(request)  # sent before the bookkeeping (settling usage)
            await whole.write_eof()
            return whole, usage_of(body) if upstream.status == 200 else None
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await response.prepare(request)
        last_data = first if b'"usage"' in first else b""
        try:
            if first:
                await response.write(first)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                    if b'"usage"' in chunk:
                        last_data = chunk
        except (aiohttp.ClientError, TimeoutError) as error:
            event = {
                "error": {
                    "message": f"The cluster's stream broke: {error}",
                    "type": "upstream_error",
                    "code": "stream_broken",
                }
            }
            await response.write(b"data: " + orjson.dumps(event) + b"\n\n")
            await response.write_eof()
            return response, None
        await response.write_eof()
        return response, sse_usage(last_data)

    def _answered(self, state: ClusterState, cross: str, status: int, ttft: float) -> None:
        self.metrics.requests.labels(state.name, state.spec.region, cross, str(status)).inc()
        self.metrics.ttft.labels(state.name, cross).observe(ttft)
        self.registry.observe_ttft(state.name, ttft)


def build_global_router(
    spec: GlobalRouterSpec,
    *,
    emf_interval_s: float = 0.0,
    environment: str = "igw",
    seed: int | None = None,
) -> tuple[web.Application, GlobalRouter]:
    router = GlobalRouter(spec, seed=seed)
    app = router.app()
    if emf_interval_s > 0:
        emitter = FleetEmfEmitter(
            router.metrics, environment=environment, interval_s=emf_interval_s
        )

        async def start_emf(app: web.Application) -> None:
            emitter.start()

        async def stop_emf(app: web.Application) -> None:
            await emitter.stop()

        app.on_startup.append(start_emf)
        app.on_cleanup.append(stop_emf)
    return app, router
