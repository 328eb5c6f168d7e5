"""`igw global`: one OpenAI-compatible endpoint over several cluster gateways.

Per request: read the body (limit → 413), check the credential (→ 401 / 404), parse it
(→ 400), charge the global rate limit (→ 429 with `Retry-After` and `x-ratelimit-*`),
rank the clusters (core/scheduling/cluster_choice.py) and send it to the first. Which
cluster comes next after an attempt that ends before a byte reached the client is the
`AttemptPlan`'s call (core/request/attempts.py, shared with the fleet simulator): a
refused connection drains the cluster and moves on, a drain
while waiting moves on, a 429/503 refusal moves on; a timeout or a broken answer is
never retried (the cluster may be generating it: 504 / 502). A streamed answer is
relayed by the shared `StreamRelay` (core/request/relay.py, as `igw serve` does). Once a
byte has reached the client only a continuation follows (tier 2 of resume on break,
docs/migration.md): a stream that breaks (reset, closed, the cluster gateway's SSE error
event) or stays silent for `streamIdleTimeoutMs` between chunks is, by the plan's
`after_break`, a failed attempt in the cluster's error score (a stalled cluster is
drained), and where the config's `migration` is on and the request can be resumed, the
core's `Resumer` (core/request/resume.py, tier 1's own) re-issues it with the text
delivered to the best routable cluster not tried yet, ranked at the break, and splices
it into the client's stream (`_resumer`, `_continue`); otherwise it ends with the SSE
error event. Every ranking counts what this router sent since each cluster's last
status (`ClusterState.sent_requests`), so a burst (a lost cluster's continuations, or
new requests between two polls) spreads.
Token limits follow each answer with the gateway's one token budget (core/request/
budget.py, as `igw serve`): counted as it streams, ended with the rate-limit SSE error
event when the window is full, and settled once from the answer's `usage` (the one usage
parser, `UsageScanner`: chat/completions and Responses API shapes, SSE lines split
across chunks).

A client that leaves ends its request at once: the router runs with handler
cancellation (`server_settings`), so the handler is cancelled and the cluster's
connection closed, which the cluster gateway sees as a cancel (`igw serve` aborts the
generation).

With an `auth` section the router checks the credential first, by `igw serve`'s own rule
(frontends/auth.py `admit`: 401 / 404, the same bytes, before the body is parsed), and
keys the rate limits by the authenticated client id; the credential is forwarded, so
every cluster gateway checks it again. The body is read by the core's body module and
every refusal is worded by core/request/refusals.py. Client-supplied values
are checked before use: `x-igw-client-region` counts only when it names a configured
region, `x-igw-routing-profile` only when it names a profile, `x-igw-latency-budget-ms`
only as whole milliseconds up to 600,000.

Traces and explanations (docs/tracing.md): the request's server span continues the
caller's `traceparent`; `igw.route` carries the clusters ranked with every signal behind
their scores (explain.py); each attempt is a CLIENT span whose context goes to the
cluster gateway, so tier 1's spans join the same trace (with tracing off the caller's
own context passes through). The last `tracing.explain.recent` decisions answer
`/debug/decisions` (frontends/explain_http.py, loopback callers only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import generate_latest
from redis.asyncio import Redis

from inference_gateway.config.global_router import GlobalRouterSpec
from inference_gateway.config.store import StoreSpec
from inference_gateway.core.request import refusals
from inference_gateway.core.request.attempts import AttemptPlan, Failure
from inference_gateway.core.request.body import api_key_of, output_bound, parse_body
from inference_gateway.core.request.budget import TokenBudget, store_budget
from inference_gateway.core.request.decisions import DecisionLog
from inference_gateway.core.request.lifecycle import new_internal_id
from inference_gateway.core.request.prompt_cost import prompt_estimate
from inference_gateway.core.request.refusals import Rejection
from inference_gateway.core.request.relay import (
    StreamEnd,
    StreamRelay,
    is_event_stream,
    stream_error_event,
)
from inference_gateway.core.request.resume import BreakReason, Resumer, unresumable
from inference_gateway.core.request.sse import UsageEventFilter, ask_for_usage
from inference_gateway.core.request.usage import UsageScanner, total_tokens
from inference_gateway.core.scheduling.cluster_choice import (
    Choice,
    ProfileName,
    RequestTraits,
    rank_clusters,
)
from inference_gateway.core.scheduling.cluster_registry import ClusterRegistry, ClusterState
from inference_gateway.core.traffic import retry_after
from inference_gateway.frontends.auth import admit
from inference_gateway.frontends.explain_http import add_decisions_routes
from inference_gateway.frontends.global_router.clusters import ClusterPoller
from inference_gateway.frontends.global_router.drains import PlannedDrains
from inference_gateway.frontends.global_router.explain import explain_choice
from inference_gateway.frontends.global_router.requests import budget_s, build_authenticator
from inference_gateway.frontends.http_errors import error_response, render
from inference_gateway.shared_store.client import StoreHealth, connect
from inference_gateway.shared_store.ratelimit import GlobalRateLimiter
from inference_gateway.telemetry.global_metrics import FleetEmfEmitter, GlobalMetrics
from inference_gateway.telemetry.request_trace import RequestTrace
from inference_gateway.telemetry.tracing import Tracing
from inference_gateway.transport.aiohttp_errors import OUTBOUND_ERRORS, translate
from inference_gateway.transport.http_settings import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    body_deadline,
    server_settings,
)

__all__ = ["GlobalRouter", "build_global_router", "runner_settings"]

log = logging.getLogger(__name__)

REGION_HEADER = "x-igw-client-region"
PROFILE_HEADER = "x-igw-routing-profile"
OBJECTIVE_HEADER = "x-gateway-inference-objective"
CLUSTER_HEADER = "x-igw-cluster"
BUDGET_HEADER = "x-igw-latency-budget-ms"
USAGE_SCAN_BYTES = 4 * 2**20  # a JSON answer larger than this settles at its estimate
_FORWARDED = ("authorization", OBJECTIVE_HEADER, "x-gateway-inference-fairness-id", "x-request-id")
_PROFILES: dict[str, ProfileName] = {"latency": "latency", "cost": "cost"}
_PASSED_BACK = ("x-request-id", retry_after.HEADER)  # a cluster's 429 keeps its Retry-After


def _end_now(waiting: asyncio.Timeout, loop: asyncio.AbstractEventLoop) -> None:
    """Make a first-byte wait time out now (a drain's call back), unless it already has:
    its own deadline and a drain can race, and a second reschedule would raise."""
    if not waiting.expired():
        waiting.reschedule(loop.time())


class _Skip(Exception):
    """An attempt that ended before any byte reached the client, and why."""

    def __init__(self, failure: Failure, detail: str) -> None:
        super().__init__(detail)
        self.failure, self.detail = failure, detail


@dataclass(slots=True)
class _Serving:
    """The cluster serving a stream now (`made` attempts so far): a continuation moves
    it on. `booked`: its break is counted."""

    state: ClusterState
    cross: str
    made: int
    booked: bool = False


@dataclass(frozen=True, slots=True)
class _Resume:
    """What a continuation is sent with: the request's path, the body sent (`body`),
    headers, trace and traits (it is ranked at the break), and the clusters tried (the
    decision log's)."""

    path: str
    body: bytes
    headers: dict[str, str]
    trace: RequestTrace
    model: str
    traits: RequestTraits
    tried: list[str]
    client_id: str


@dataclass(frozen=True, slots=True)
class _ClusterStream:
    """A cluster's streamed answer as resume.py reads it: its chunks (`first` already
    read), and `release` (the connection back to the pool at its end, else closed)."""

    upstream: aiohttp.ClientResponse
    first: bytes

    async def chunks(self) -> AsyncIterator[bytes]:
        if self.first:
            yield self.first
        async for chunk in self.upstream.content.iter_any():
            yield chunk

    def release(self) -> None:
        if self.upstream.content.at_eof():
            self.upstream.release()
        else:
            self.upstream.close()


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
        self.poller = ClusterPoller(self.registry)  # feeds it: GET /status of each cluster
        self.plan = AttemptPlan(spec.max_attempts, resume=spec.migration.resumes)
        self.relay = StreamRelay(spec.stream_idle_timeout_ms / 1000)
        self.resuming_relay = StreamRelay()  # the Resumer watches the silences itself
        self.limiter: GlobalRateLimiter | None = None
        self._settling: set[asyncio.Task[None]] = set()  # token settlements being written
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
            self.poller.planned = PlannedDrains(spec, redis, health).current
        self.auth = build_authenticator(spec.auth)
        if self.auth is not None:  # igw_auth_refusals_total, as igw serve and igw auth
            self.metrics.registry.register(self.auth.refusals_collector())
        self._rng = random.Random(seed)
        self._session: aiohttp.ClientSession | None = None
        self.body_timeout_s = BODY_TIMEOUT_S  # a request body must arrive within this
        self.in_flight = 0  # completions being answered: what a stop signal drains
        self.tracing = Tracing.build(spec.tracing, "igw-global")
        self.decisions = DecisionLog(spec.tracing.explain.recent, expand=dict)

    def _open_store(self, store: StoreSpec, component: str) -> tuple[Redis, StoreHealth]:
        """A client and its own health state (`igw_store_up{component=...}`), so a regional
        store and a rate-limit store fall back, and say so, each on its own."""
        health = StoreHealth.for_spec(component, store, self.metrics.registry)
        redis = connect(store)
        self._stores.append(redis)
        return redis, health

    # ------------------------------------------------------------------ app

    def app(self) -> web.Application:
        # the body deadline (408) and the 413 over `maxBodyBytes`: transport/http_settings.py
        app = web.Application(
            client_max_size=self.spec.max_body_bytes,
            middlewares=[body_deadline(self.body_timeout_s)],
        )
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        add_decisions_routes(app, lambda: self.decisions)
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
        await self.poller.start()

    async def _cleanup(self, app: web.Application) -> None:
        await self.poller.stop()
        if self._session is not None:
            await self._session.close()
        if self._settling:  # the last answers' settlements, written in the background
            await asyncio.gather(*self._settling, return_exceptions=True)
        for redis in self._stores:
            await redis.aclose()
        await self.tracing.close()

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
            except OUTBOUND_ERRORS:
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

    def _ranked(self, traits: RequestTraits, exclude: Collection[str] = ()) -> Choice[ClusterState]:
        return rank_clusters(
            self.spec,
            self.registry.routable(),
            traits,
            time.monotonic(),
            self._rng.random,
            exclude,
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        trace = RequestTrace(self.tracing, request.headers, request.path)
        status: int | None = None
        try:
            response = await self._complete(request, trace)
            status = response.status
            return response
        finally:
            self.in_flight -= 1
            trace.finished(status=status)

    async def _complete(
        self, request: web.Request, trace: RequestTrace | None = None
    ) -> web.StreamResponse:
        raw = await request.read()  # read by `body_deadline` already (408 / 413 there)
        client = api_key_of(request.headers)  # a caller's own x-igw-client-id counts for nothing
        if self.auth is not None:  # igw serve's one rule, in its order: credential first
            identity = await admit(
                self.auth, request.headers.get("authorization"), request.method, request.read
            )
            if isinstance(identity, web.Response):
                return identity
            client = identity.client
        try:  # the same body rules, estimate and output bound as tier 1 (core/request/body.py)
            body = parse_body(raw)
            bound = output_bound(body)
        except Rejection as rejection:
            return render(rejection)
        extra: dict[str, str] = {}
        budget: TokenBudget | None = None
        if self.limiter is not None:
            request_id = new_internal_id()
            admission = await self.limiter.check(
                client,
                body["model"],
                prompt_estimate(body),
                bound.tokens,
                request_id=request_id,
                bounded=bound.explicit,
            )
            extra = admission.headers
            if admission.too_large is not None:  # can never fit: OpenAI's answer, no retry
                self.metrics.rate_limit_hits.labels(admission.scope).inc()
                return render(
                    refusals.request_too_large(admission.too_large.message(body["model"]))
                )
            if not admission.allowed:
                self.metrics.rate_limit_hits.labels(admission.scope).inc()
                return render(refusals.rate_limited(body["model"], admission.retry_after_s, extra))
            # follows the answer: counted as it streams, settled once whatever the outcome
            budget = store_budget(
                self.limiter, admission, request_id, client, body["model"], self._settling
            )
        used: int | None = None
        asked = ask_for_usage(raw, body)  # the stream's usage settles its charge exactly
        try:
            response, used = await self._forward(
                request,
                raw if asked is None else asked,
                extra,
                body.get("stream") is True,
                budget,
                trace,
                body["model"],
                strip_usage=asked is not None,
                client_body=body,
            )
        finally:
            if budget is not None:
                budget.close(used)
        return response

    async def _forward(
        self,
        request: web.Request,
        raw: bytes,
        extra: dict[str, str],
        stream: bool = False,
        budget: TokenBudget | None = None,
        trace: RequestTrace | None = None,
        model: str = "",
        *,
        strip_usage: bool = False,
        client_body: Mapping[str, Any] | None = None,
    ) -> tuple[web.StreamResponse, int | None]:
        assert self._session is not None
        trace = trace or RequestTrace(self.tracing, request.headers, request.path)
        traits = self._traits(request.headers)
        ranking = time.perf_counter()
        choice = self._ranked(traits)
        took = time.perf_counter() - ranking
        tried_clusters: list[str] = []
        explanation: dict[str, Any] | None = None
        if trace.recording or self.decisions.capacity:
            routable = self.registry.routable()
            explanation = explain_choice(self.spec, routable, choice, traits, time.monotonic())
            if trace.recording:
                trace.routed(
                    "igw.route",
                    model,
                    {
                        "igw.profile": choice.profile,
                        "igw.clusters": [s.name for s in choice.ranked],
                        "igw.explanation": orjson.dumps(explanation).decode(),
                    },
                    took,
                )
        try:
            return await self._attempts(
                request,
                raw,
                extra,
                stream,
                budget,
                trace,
                traits,
                choice,
                tried_clusters,
                model,
                strip_usage=strip_usage,
                client_body=client_body,
            )
        finally:
            if explanation is not None:
                self.decisions.record(
                    new_internal_id(),
                    request.headers.get("x-request-id", ""),
                    trace.trace_id,
                    {"model": model, "tried": tried_clusters, "explanation": explanation},
                )

    async def _attempts(
        self,
        request: web.Request,
        raw: bytes,
        extra: dict[str, str],
        stream: bool,
        budget: TokenBudget | None,
        trace: RequestTrace,
        traits: RequestTraits,
        choice: Choice[ClusterState],
        tried_clusters: list[str],
        model: str,
        *,
        strip_usage: bool = False,
        client_body: Mapping[str, Any] | None = None,
    ) -> tuple[web.StreamResponse, int | None]:
        """Try the ranked clusters in turn (module docstring)."""
        headers = {"content-type": "application/json"}
        for name in _FORWARDED:
            value = request.headers.get(name)
            if value is not None:
                headers[name] = value
        ranked = choice.ranked
        plan = self.plan
        verdict = plan.nothing_routable()
        tried: list[str] = []
        made = 0
        index = plan.next_index(ranked, -1, made, _routable)
        while index is not None:
            state = ranked[index]
            name = state.name
            self.metrics.decisions.labels(
                name, choice.profile, "first" if made == 0 else "retry"
            ).inc()
            made += 1
            started = time.perf_counter()
            tried_clusters.append(name)
            url = urlsplit(state.spec.base_url)
            trace.attempt(
                name, url.hostname or "", url.port or 0, model, headers, {"igw.cluster": name}
            )
            try:
                upstream, first = await self._open(state, request.path, raw, headers, stream)
            except _Skip as skip:
                trace.attempt_ended(error=skip.failure.value)
                verdict = plan.after_failure(skip.failure)
                self.registry.learn(name, verdict, skip.failure.value)
                tried.append(f"{name}: {skip.failure.value}")
                log.info("cluster %s: %s (%s)", name, skip.failure.value, skip.detail)
                index = plan.next_index(ranked, index, made, _routable) if verdict.retry else None
                if index is not None:
                    self.metrics.retries.labels(name, skip.failure.value).inc()
                continue
            complete = False
            try:
                answer = plan.after_status(upstream.status)
                after = plan.next_index(ranked, index, made, _routable) if answer.retry else None
                if after is not None:
                    trace.attempt_ended(upstream.status)
                    self.registry.learn(name, answer, str(upstream.status))
                    self.metrics.retries.labels(name, str(upstream.status)).inc()
                    tried.append(f"{name}: HTTP {upstream.status}")
                    index = after
                    continue
                cross = "true" if state.spec.region != traits.home_region else "false"
                serving = _Serving(state, cross, made)
                resume = _Resume(
                    request.path,
                    raw,
                    headers,
                    trace,
                    model,
                    traits,
                    tried_clusters,
                    request.headers.get("x-request-id", ""),
                )
                result = await self._relay(
                    request,
                    upstream,
                    first,
                    serving,
                    started,
                    extra,
                    budget,
                    strip_usage,
                    self._resumer(resume, serving, client_body, stream),
                )
                complete = True
                return result
            finally:
                if complete:
                    upstream.release()
                else:  # cancelled, or moved on: the cluster sees the connection close
                    upstream.close()
        self.metrics.failed.labels(str(verdict.status)).inc()
        detail = "; ".join(tried) or "no routable cluster"
        return (
            error_response(
                verdict.status,
                f"No cluster could answer the request ({detail}).",
                "upstream_error",
                verdict.code,
                extra,
            ),
            None,
        )

    async def _open(
        self, state: ClusterState, path: str, raw: bytes, headers: dict[str, str], stream: bool
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        """Send the request to one cluster and wait for its first byte (a stream's first
        chunk; a JSON answer whole, as it arrives whole). `_Skip` says why an attempt
        ended before: refused (nothing listens, or the connection dropped before an
        answer), drained (the registry drained the cluster meanwhile: it calls back and
        the wait ends at once), timeout (`firstByteTimeoutMs` for a stream, else
        `readTimeoutMs` of silence) or broken (the answer began and failed): aiohttp's
        error in the pod client's tree (transport/aiohttp_errors.py), read by the plan."""
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
                    first = await (upstream.content.readany() if stream else upstream.read())
                except OUTBOUND_ERRORS as error:
                    failure = self.plan.failure_of(translate(error, answered=upstream is not None))
                    raise _Skip(failure, str(error)) from error
                except BaseException:
                    if upstream is not None:
                        upstream.close()
                    raise
                finally:
                    self.registry.release(name, key)
        except TimeoutError as error:  # only the wait above ends this way (the rest is _Skip)
            if not state.routable:  # the drain called us back: the connection is closed
                raise _Skip(Failure.DRAINED, "drained while waiting") from error
            raise _Skip(Failure.TIMEOUT, "no first byte in time") from error
        except _Skip:
            if upstream is not None:
                upstream.close()
            raise
        assert upstream is not None
        return upstream, first

    async def _relay(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        first: bytes,
        serving: _Serving,
        started: float,
        extra: dict[str, str],
        budget: TokenBudget | None = None,
        strip_usage: bool = False,
        resumer: Resumer | None = None,
    ) -> tuple[web.StreamResponse, int | None]:
        """Relay an answer whose first byte is in (`first`): no new attempt from here,
        but a stream that breaks is resumed on the next cluster (`resumer`, core/request/
        resume.py; `_continue`) when the request can be, else it ends with the SSE error
        event. `budget` follows its tokens: a stream that outgrows the client's window
        ends with the rate-limit SSE error event, a whole answer larger than what is left
        is a 429. `strip_usage`: the usage event was asked for by the router, not the
        client: it is read, not relayed."""
        state, cross = serving.state, serving.cross
        name = state.name
        status = upstream.status
        content_type = upstream.headers.get("content-type", "application/json")
        headers = {**extra, CLUSTER_HEADER: name, "content-type": content_type}
        for passed in _PASSED_BACK:
            value = upstream.headers.get(passed)
            if value is not None:
                headers[passed] = value
        self._first_byte(state, cross, time.perf_counter() - started)
        streaming = is_event_stream(content_type)
        usage = UsageScanner(streaming, USAGE_SCAN_BYTES) if status == 200 else None
        if not streaming:
            try:  # the rest, when a stream was asked for and JSON came (empty otherwise)
                body = first + await upstream.content.read()
            except OUTBOUND_ERRORS as error:
                log.info("cluster %s: the answer broke (%s)", name, error)
                self._ended(state, cross, StreamEnd.BROKEN.value, failed=True)
                return error_response(
                    502, "The cluster's answer broke.", "upstream_error", "cluster_answer_broken"
                ), None
            # generated, not delivered past the limit
            if budget is not None and status == 200 and not await budget.admit_whole(body):
                self._ended(state, cross, str(status), failed=False)
                return render(refusals.over_window(budget.retry_after_s(), extra, whole=True)), None
            whole = web.Response(status=status, body=body, headers=headers)
            self._ended(state, cross, str(status), failed=status >= 500)
            try:
                await whole.prepare(request)  # sent before the bookkeeping (settling usage)
                await whole.write_eof()
            except ConnectionError:
                return whole, None  # the client left: the answer's charge stays as estimated
            if usage is None:
                return whole, None
            usage.feed(body)
            return whole, _tokens(usage)
        response = web.StreamResponse(status=status, headers=headers)
        try:
            await response.prepare(request)
        except ConnectionError:
            return response, None
        own = UsageEventFilter(None if usage is None else usage.feed) if strip_usage else None
        relay = self.relay
        chunks: AsyncIterator[bytes] = upstream.content.iter_any()
        resumed = None
        if resumer is not None and status == 200:
            resumed = resumer.stream(_ClusterStream(upstream, first).chunks())
            relay, chunks, first = self.resuming_relay, resumed, b""
        try:
            relayed = await relay.pump(
                chunks,
                response,
                first=first,
                transform=None if own is None else own.stream_chunk,
                flush=None if own is None else own.flush,
                sent=None if usage is None else usage.feed,
                admit=None if budget is None or status != 200 else budget.admit,
            )
        finally:
            if resumed is not None:
                await resumed.aclose()  # releases its continuations' connections
        state, cross = serving.state, serving.cross  # the cluster that served the end
        end = relayed.end
        if end is StreamEnd.OVER_LIMIT:  # the window is full: no byte past the limit
            if not relayed.started:  # the headers went out with `prepare`: end it as an event
                with contextlib.suppress(ConnectionError):
                    await response.write(stream_error_event(end))
                    await response.write_eof()
            self._ended(state, cross, str(status), failed=False)
            return response, None
        if end in (StreamEnd.BROKEN, StreamEnd.STALLED) and serving.booked:
            return response, None  # counted by `_continue`, where no cluster took it on
        if end in (StreamEnd.BROKEN, StreamEnd.STALLED) and self.plan.after_break(end).drain:
            self.registry.drain(state.name, "stream_stalled")
        if end is not StreamEnd.CLIENT_LEFT:
            failed = end is not StreamEnd.COMPLETE or status >= 500
            code = str(status) if end is StreamEnd.COMPLETE else end.value
            self._ended(state, cross, code, failed=failed)
        if end is not StreamEnd.COMPLETE or usage is None:
            return response, None
        return response, _tokens(usage)

    def _resumer(
        self,
        resume: _Resume,
        serving: _Serving,
        client_body: Mapping[str, Any] | None,
        stream: bool,
    ) -> Resumer | None:
        """The request's resume on break at tier 2 (None: the plan does not resume, or
        the request cannot be resumed faithfully: resume.py `unresumable`)."""
        chat = resume.path == "/v1/chat/completions"
        if (
            not self.plan.resume
            or not stream
            or client_body is None
            or unresumable(client_body, chat) is not None
        ):
            return None

        async def open_next(body: bytes, reason: str) -> _ClusterStream | None:
            return await self._continue(resume, serving, body, reason)

        internal = new_internal_id()  # the request's, in its log lines

        def report(reason: str, outcome: str, gap_s: float | None) -> None:
            self.metrics.migrations.labels("2", reason, outcome).inc()
            if gap_s is not None:
                self.metrics.resume_gap.labels("2").observe(gap_s)
            log.warning(
                "request %s (x-request-id %s): a cluster's stream broke (%s): %s; its end "
                "is on cluster %s",
                internal,
                resume.client_id,
                reason,
                outcome if gap_s is None else f"resumed after {gap_s:.3f} s",
                serving.state.name,
            )

        migration = self.spec.migration
        return Resumer(
            resume.body,
            chat,
            open_next,
            report,
            idle_timeout_s=self.spec.stream_idle_timeout_ms / 1000,
            max_resumes=migration.max_resumes,
            deadline_s=migration.deadline_ms / 1000,
        )

    async def _continue(
        self, resume: _Resume, serving: _Serving, body: bytes, reason: str
    ) -> _ClusterStream | None:
        """The cluster serving the stream broke (`reason`): the plan's `after_break`
        says what it learns (a failed attempt; drained if it stalled) and whether the
        request goes on; the continuation (`body`, resume.py) goes to the best routable
        cluster not tried yet, ranked at the break (`rank_clusters` over the clusters as
        they are now, each continuation sent meanwhile counted in its cluster's load,
        so a lost cluster's streams spread, as tier 1's `Director.rerank`), then down
        that ranking (`next_index`), each attempt read by the plan as a first attempt
        is (`_open`: refused or drained moves on, a timeout ends it)."""
        end = StreamEnd.STALLED if reason == BreakReason.STALL else StreamEnd.BROKEN
        verdict = self.plan.after_break(end)
        broken = serving.state
        if verdict.drain:
            self.registry.drain(broken.name, "stream_stalled")
        self._ended(broken, serving.cross, end.value, failed=verdict.failed)
        serving.booked = True
        resume.trace.attempt_ended(error=end.value)
        if not verdict.retry:
            return None
        plan, choice = self.plan, self._ranked(resume.traits, resume.tried)
        ranked = choice.ranked
        index = plan.next_index(ranked, -1, serving.made, _routable)
        while index is not None:
            state = ranked[index]
            name = state.name
            self.metrics.decisions.labels(name, choice.profile, "resume").inc()
            serving.made += 1
            resume.tried.append(name)
            url = urlsplit(state.spec.base_url)
            resume.trace.attempt(
                name, url.hostname or "", url.port or 0, resume.model, resume.headers,
                {"igw.cluster": name},
            )  # fmt: skip
            try:
                upstream, first = await self._open(
                    state, resume.path, body, resume.headers, stream=True
                )
            except _Skip as skip:
                resume.trace.attempt_ended(error=skip.failure.value)
                failed = plan.after_failure(skip.failure)
                self.registry.learn(name, failed, skip.failure.value)
                log.info("cluster %s: continuation %s (%s)", name, skip.failure.value, skip.detail)
                index = (
                    plan.next_index(ranked, index, serving.made, _routable)
                    if failed.retry
                    else None
                )
                continue
            if upstream.status == 200 and is_event_stream(upstream.headers.get("content-type", "")):
                cross = "true" if state.spec.region != resume.traits.home_region else "false"
                serving.state, serving.cross = state, cross
                serving.booked = False
                return _ClusterStream(upstream, first)
            answer = plan.after_status(upstream.status)
            resume.trace.attempt_ended(upstream.status)
            self.registry.learn(name, answer, str(upstream.status))
            upstream.close()
            index = (
                plan.next_index(ranked, index, serving.made, _routable) if answer.retry else None
            )
        return None

    def _first_byte(self, state: ClusterState, cross: str, ttft: float) -> None:
        self.metrics.ttft.labels(state.name, cross).observe(ttft)
        self.registry.observe_ttft(state.name, ttft)

    def _ended(self, state: ClusterState, cross: str, code: str, *, failed: bool) -> None:
        """An answer relayed to its end: counted once, with how it ended (`code`: the
        status, or `stream_broken` / `stream_stalled`), and learnt by the error score."""
        self.metrics.requests.labels(state.name, state.spec.region, cross, code).inc()
        self.registry.observe_outcome(state.name, failed=failed)


def _routable(state: ClusterState) -> bool:
    return state.routable


def _tokens(usage: UsageScanner) -> int | None:
    found = usage.close()
    return None if found is None else total_tokens(found)


def runner_settings(header_timeout_s: float = HEADER_TIMEOUT_S) -> dict[str, Any]:
    """The aiohttp server settings `igw global` runs with (`web.run_app` / `AppRunner`):
    handler cancellation, so a client that leaves cancels its request and the cluster sees
    its connection close, and the gateway's one set of slow-client deadlines and quiet
    client-error logs (transport/http_settings.py, as `igw serve`)."""
    return {"handler_cancellation": True, **server_settings(header_timeout_s)}


def build_global_router(
    spec: GlobalRouterSpec,
    *,
    emf_interval_s: float = 0.0,
    environment: str = "igw",
    seed: int | None = None,
    body_timeout_s: float = BODY_TIMEOUT_S,
) -> tuple[web.Application, GlobalRouter]:
    router = GlobalRouter(spec, seed=seed)
    router.body_timeout_s = body_timeout_s
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
