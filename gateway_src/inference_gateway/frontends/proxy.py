"""The standalone gateway: an OpenAI-compatible HTTP proxy over the scheduling core.

Per request: read the body (within the body deadline → 408, limit → 413: the
`body_deadline` middleware of transport/http_settings.py), parse it (→ 400), route
`model` to a pool (→ 404), charge the rate limits (→ 429), rank that pool's ready pods
(→ 503 when none), and forward to the best pod.
What may go to the next-ranked pod is the attempt plan's call (core/request/attempts.py,
the one `igw global` follows over clusters): only a request the engine never started
(connection refused, closed before any answer byte, an answer of 429/503); a timeout is
a 504, never a second generation. Once a byte has reached the client a stream that
breaks (reset, closed, silent past the migration's stream idle timeout, the pod's SSE
error event) is resumed on the next-ranked pod not tried yet, spliced into the same
stream (core/request/resume.py, `_resumer` / `_continue`: the config's `migration`); one
that cannot be resumed ends with an SSE error event rather than a silent truncation:
streams go through the gateway's one answer relay (`StreamRelay`, core/request/relay.py),
which `igw global` uses too. Responses stream
through chunk by chunk; with token limits each chunk is counted before it is relayed
(core/request/budget.py), and a stream the window has no more room for ends with the
rate-limit SSE error event. Every stream asks the engine for its `usage` (the director's
`ask_stream_usage`), which settles the charge exactly; where the client did not ask,
that event is taken out of its stream (core/request/sse.py).

A client that leaves (the handler is cancelled: run the app with
`handler_cancellation=True`, as `server.app_runner` and `igw serve` do, or a write to
it fails) ends the request at once: its admission slot is freed, the pod connection is
closed (the engine aborts the generation) and it counts as `client_cancelled`, not as
an upstream failure. Everything a request holds is released by its `RequestLifecycle`.

Pod names and addresses stay inside: 502 messages name no pod and the
`x-gateway-destination-endpoint` header is sent only with `expose_endpoints` (a
debugging switch, `igw serve --debug-destination-headers`).

P/D (a decision with `prefill` pods): the prefill leg runs first on the best prefill
pod (frontends/pd_exchange.py, shared with `igw pd-sidecar`), and the decode leg is the
request above, its body carrying the prefill pod's `kv_transfer_params`; a failed
prefill leg leaves the body as the client sent it, served aggregated. A client's own
`kv_transfer_params` never reach a pod, and a prefill pod's are read once: a decode leg
retried after its pod may have taken it, and a broken stream's continuation, are served
whole where they land (core/request/pd_body.py `for_next_pod`, resume.py).

Traces (telemetry/request_trace.py): the request's server span continues the caller's
`traceparent`, admission and scheduling are spans with the decision explained, and each
attempt and the prefill leg is a CLIENT span whose context reaches the pod; with
tracing off the caller's own `traceparent` / `tracestate` pass through to the pod. A
client listed in `tracing.explain.headerClients` that sends `x-igw-explain: true` gets
the decision back in `x-igw-explanation` (frontends/explain_http.py).

Outbound requests go through `Upstream` (transport/http1_client.py), a lean keep-alive
HTTP/1.1 client: the gateway's own cost per request is what the overhead benchmark
(bench/gateway_overhead.py) holds to <= 1 ms at p50. For the same reason a response is
written to the client before the bookkeeping that follows it (TTFT and duration
histograms, usage counting, the scheduler's feedback), which the client does not wait for.
"""

from __future__ import annotations

import asyncio
import logging
import random

from aiohttp import web
from prometheus_client import generate_latest

from inference_gateway.config.spec import MigrationSpec
from inference_gateway.core.endpoints.store import EndpointStore
from inference_gateway.core.request import refusals
from inference_gateway.core.request.admission import PoolGate
from inference_gateway.core.request.attempts import AttemptPlan, Failure
from inference_gateway.core.request.contracts import RoutingState, SchedulerLike
from inference_gateway.core.request.director import Director, Rejection
from inference_gateway.core.request.lifecycle import (
    CLIENT_CANCELLED,
    RATE_LIMITED,
    STREAM_BROKEN,
    RequestLifecycle,
)
from inference_gateway.core.request.pd_body import for_next_pod, without_client_params
from inference_gateway.core.request.relay import (
    StreamEnd,
    StreamRelay,
    is_event_stream,
)
from inference_gateway.core.request.resume import BreakReason, Resumer, unresumable
from inference_gateway.core.request.sse import ModelNameRewriter, UsageEventFilter, chained
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.core.traffic.routing import ModelRouter, Route
from inference_gateway.frontends.client_stream import LazyClientStream
from inference_gateway.frontends.explain import (
    EXPLAINED_HEADER,
    explanation_header,
    may_explain,
)
from inference_gateway.frontends.http_errors import error_response, render
from inference_gateway.frontends.pd_exchange import PREFILL_TIMEOUT_S, PrefillExchange
from inference_gateway.telemetry.request_trace import PREFILL, RequestTrace
from inference_gateway.telemetry.tracing import Tracing
from inference_gateway.transport.http1_client import (
    Upstream,
    UpstreamConnectError,
    UpstreamError,
    UpstreamResponse,
    UpstreamTimeout,
)
from inference_gateway.transport.http_settings import (
    BODY_TIMEOUT_S,
    body_deadline,
)

# RoutingState and SchedulerLike live in `contracts` (shared with the ext_proc picker)
# and are re-exported here for existing callers.
__all__ = ["DESTINATION_HEADER", "Gateway", "RoutingState", "SchedulerLike", "error_response"]

log = logging.getLogger(__name__)

DESTINATION_HEADER = "x-gateway-destination-endpoint"
DEFAULT_MIGRATION = MigrationSpec()
_request_ids = random.Random()  # ids need to be unique, not secret: no syscall per request


def new_request_id() -> str:
    """32 hex digits, like `uuid4().hex`."""
    return f"{_request_ids.getrandbits(128):032x}"


class Gateway:
    """The proxy over a core's store and director (`assembly.core.build_core`)."""

    def __init__(
        self,
        store: EndpointStore,
        director: Director,
        *,
        max_body_bytes: int = 4 * 2**20,
        plan: AttemptPlan | None = None,
        connect_timeout_s: float = 5.0,
        first_byte_timeout_s: float = 300.0,
        expose_endpoints: bool = False,
        body_timeout_s: float = BODY_TIMEOUT_S,
        prefill_timeout_s: float = PREFILL_TIMEOUT_S,
        tracing: Tracing | None = None,
    ) -> None:
        self.store = store
        self.tracing = tracing or Tracing.off()
        self.body_timeout_s = body_timeout_s
        # parse → rewrite → route → band → limits → admission → rank: shared with the picker
        self.director = director
        self.metrics = director.metrics
        self._series = self.director.child  # cached labelled series
        self.max_body_bytes = max_body_bytes
        self.plan = plan or AttemptPlan()
        self.relay = StreamRelay()  # the pod's read timeout bounds its silences
        self.connect_timeout_s = connect_timeout_s
        self.first_byte_timeout_s = first_byte_timeout_s
        self.expose_endpoints = expose_endpoints
        self.upstream: Upstream | None = None
        self.prefill_timeout_s = prefill_timeout_s
        self.prefill: PrefillExchange | None = None  # P/D prefill legs (pd_exchange.py)

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.max_body_bytes, middlewares=[body_deadline(self.body_timeout_s)]
        )
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
        self.prefill = PrefillExchange(
            timeout_s=self.prefill_timeout_s,
            connect_timeout_s=self.connect_timeout_s,
            on_outcome=lambda outcome: self._series(self.metrics.pd_prefill_legs, outcome).inc(),
        )

    async def _cleanup(self, app: web.Application) -> None:
        await self.director.close()
        for client in (self.upstream, self.prefill):
            if client is not None:
                await client.close()
        await self.tracing.close()

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
        client_id = request.headers.get("x-request-id") or new_request_id()
        headers = {"x-request-id": client_id}
        raw = await request.read()  # read by `body_deadline` already (408 / 413 there)
        trace = RequestTrace(self.tracing, request.headers, request.path)
        try:
            life = await self.director.decide(raw, request.headers, client_request_id=client_id)
        except Rejection as rejection:
            trace.refused(rejection.status, rejection.code)
            trace.finished(status=rejection.status)
            return render(rejection, headers)
        trace.decided(life)
        headers.update(life.decision.headers)
        config = self.director.state.config
        if config is not None and may_explain(config.tracing.explain, request.headers):
            headers[EXPLAINED_HEADER] = explanation_header(life.record())
        task = asyncio.current_task()
        if task is not None:
            life.on_expire = task.cancel
        try:
            return await self._forward(request, life, headers, trace)
        except asyncio.CancelledError:
            life.cancelled(CLIENT_CANCELLED)  # a no-op when the watchdog ended it
            raise
        except BaseException:
            life.cancelled("internal_error")
            raise
        finally:
            life.finished()  # every path reports its outcome; this only backs them up
            trace.finished(life)

    async def _forward(
        self,
        request: web.Request,
        life: RequestLifecycle,
        headers: dict[str, str],
        trace: RequestTrace | None = None,
    ) -> web.StreamResponse:
        assert self.upstream is not None
        trace = trace or RequestTrace(self.tracing, request.headers, request.path)
        decision = life.decision
        rewriter = ModelNameRewriter(decision.client_model) if decision.rewritten else None
        forward_headers = {"content-type": "application/json", **headers}
        forward_headers.pop(EXPLAINED_HEADER, None)  # the client's, never the pod's
        auth = request.headers.get("authorization")
        if auth:
            forward_headers["authorization"] = auth
        path = request.path
        body = without_client_params(decision.body)  # a client's are hostile (pd_body.py)
        if decision.prefill:
            body = await self._prefill_leg(life, path, body, forward_headers, trace)
        attempts = self.plan.targets(decision.ranked)
        last = attempts[-1]
        failures: list[str] = []
        tried: set[str] = set()  # pods a continuation does not go to (resume.py)
        for endpoint in attempts:
            tried.add(endpoint.hostport)
            trace.attempt(
                endpoint.name,
                endpoint.address,
                endpoint.port,
                decision.target_model,
                forward_headers,
            )
            # sent at once on a warm connection; the bookkeeping below overlaps the pod
            pending = self.upstream.post(
                endpoint.address, endpoint.port, path, body, forward_headers
            )
            try:
                life.picked(endpoint)
                upstream = await pending.response()
            except UpstreamError as error:
                if isinstance(error, UpstreamConnectError):
                    life.unreachable()  # not picked again until a fresh scrape
                else:
                    life.attempt_failed()
                failures.append(f"{endpoint.name}: {error}")
                trace.attempt_ended(error=type(error).__name__)
                failure = self.plan.failure_of(error)
                if failure is Failure.TIMEOUT:  # the engine may be generating: 504
                    return self._timeout(life, headers, error)
                if endpoint is not last and self.plan.after_failure(failure).retry:
                    retried = for_next_pod(body, error)  # a decode leg's params read once
                    if retried is not body:
                        body = retried
                        life.whole_from_here()
                    continue
                break
            except BaseException:
                pending.abandon()
                raise
            if endpoint is not last and self.plan.after_status(upstream.status).retry:
                upstream.release()
                life.attempt_failed()
                failures.append(f"{endpoint.name}: HTTP {upstream.status}")
                trace.attempt_ended(upstream.status)
                continue
            resumer = self._resumer(life, path, body, forward_headers, tried)
            try:
                return await self._relay(
                    request, upstream, life, endpoint, headers, rewriter, resumer
                )
            finally:
                upstream.release()
        log.warning(
            "request %s (x-request-id %s): every model server attempt failed: %s",
            life.id,
            life.client_id,
            failures,
        )
        life.cancelled("upstream_unavailable")
        detail = f" ({'; '.join(failures)})" if self.expose_endpoints else ""
        return error_response(
            502,
            f"No model server could take the request after {len(failures)} attempt(s){detail}.",
            "upstream_error",
            "upstream_unavailable",
            headers,
        )

    async def _prefill_leg(
        self,
        life: RequestLifecycle,
        path: str,
        body: bytes,
        headers: dict[str, str],
        trace: RequestTrace,
    ) -> bytes:
        """P/D: the prefill leg on the best prefill pod (the one exchange `igw pd-sidecar`
        runs too, pd_exchange.py); the decode leg's body, aggregated when the leg failed.
        A prefill pod that refused the connection is not picked again until a fresh
        scrape, as a decode pod would not be."""
        assert self.prefill is not None
        target = life.decision.prefill[0]
        life.prefill_picked(target)
        leg_headers = dict(headers)
        span = trace.leg(PREFILL, leg_headers, {"igw.target": target.name})
        try:
            leg = await self.prefill.run(target.address, target.port, path, body, leg_headers)
        except BaseException:  # the client left during the leg
            life.prefill_ended(None)
            span.end()
            raise
        life.prefill_ended(leg.seconds if leg.ok else None)
        span.set_attribute("igw.outcome", leg.outcome)
        span.end()
        if leg.outcome == "connect_error":
            self.director.connection_failed(target)
        return leg.body

    def _timeout(
        self, life: RequestLifecycle, headers: dict[str, str], error: Exception
    ) -> web.Response:
        """The pod went quiet: 504, and the request is not run anywhere else."""
        log.warning("request %s (x-request-id %s): %s", life.id, life.client_id, error)
        life.cancelled("upstream_timeout")
        return error_response(
            504,
            f"The model server sent nothing for {self.first_byte_timeout_s:g} s.",
            "upstream_error",
            "upstream_timeout",
            headers,
        )

    def _answer_headers(
        self, headers: dict[str, str], content_type: str, endpoint: Endpoint
    ) -> dict[str, str]:
        out = {**headers, "content-type": content_type}
        if self.expose_endpoints:
            out[DESTINATION_HEADER] = endpoint.hostport
        return out

    async def _relay(
        self,
        request: web.Request,
        upstream: UpstreamResponse,
        life: RequestLifecycle,
        endpoint: Endpoint,
        headers: dict[str, str],
        rewriter: ModelNameRewriter | None,
        resumer: Resumer | None = None,
    ) -> web.StreamResponse:
        """Stream the pod's answer through; a break after the first byte is resumed on
        the next-ranked pod (`resumer`, core/request/resume.py) or ends the stream with
        an SSE error event, never a silent truncation."""
        content_type = upstream.headers.get("content-type", "application/json")
        if not is_event_stream(content_type):
            return await self._relay_whole(
                request, upstream, life, endpoint, headers, rewriter, content_type
            )
        life.answered(upstream.status, streaming=True)
        response = web.StreamResponse(
            status=upstream.status, headers=self._answer_headers(headers, content_type, endpoint)
        )
        budget = life.budget
        # the usage event the gateway asked for is its own (read by the lifecycle)
        usage_filter = UsageEventFilter(life.chunk) if life.decision.strip_usage else None
        transform, flush = chained(usage_filter, rewriter)
        resumed = None if resumer is None else resumer.stream(upstream.chunks())
        try:
            relayed = await self.relay.pump(
                upstream.chunks() if resumed is None else resumed,
                LazyClientStream(request, response, life.first_byte),
                transform=transform,
                flush=flush,
                sent=life.chunk,
                admit=None if budget is None else budget.admit,
            )
        finally:
            if resumed is not None:
                await resumed.aclose()  # releases its continuations' connections
        if relayed.end is StreamEnd.CLIENT_LEFT:
            life.cancelled(CLIENT_CANCELLED)
        elif relayed.end is StreamEnd.COMPLETE:
            life.finished()
        elif relayed.end is StreamEnd.OVER_LIMIT:
            return self._over_budget(life, headers, started=relayed.started) or response
        else:
            return await self._broken(
                request, response, life, headers, relayed.error, started=relayed.started
            )
        return response

    def _resumer(
        self,
        life: RequestLifecycle,
        path: str,
        body: bytes,
        headers: dict[str, str],
        tried: set[str],
    ) -> Resumer | None:
        """The request's resume on break (None: off, or it cannot be resumed)."""
        config = self.director.state.config
        spec = config.migration if config is not None else DEFAULT_MIGRATION
        client_body = life.decision.llm.prompt_body
        chat = path == "/v1/chat/completions"
        if (
            not spec.resumes
            or not isinstance(client_body, dict)
            or unresumable(client_body, chat) is not None
        ):
            return None

        async def open_next(continued: bytes, reason: str) -> UpstreamResponse | None:
            return await self._continue(life, path, continued, headers, tried, reason)

        def report(reason: str, outcome: str, gap_s: float | None) -> None:
            self._series(self.metrics.migrations, "1", reason, outcome).inc()
            if gap_s is not None:
                self._series(self.metrics.resume_gap, "1").observe(gap_s)
            serving = life.endpoint  # the continuation's pod once resumed (as tier 2 names
            # its cluster): where a lost pod's streams went, read from the log
            log.warning(
                "request %s (x-request-id %s): the model server stream broke (%s): %s%s",
                life.id,
                life.client_id,
                reason,
                outcome if gap_s is None else f"resumed after {gap_s:.3f} s",
                f"; its end is on pod {serving.name}" if serving and gap_s is not None else "",
            )

        return Resumer(
            body,
            chat,
            open_next,
            report,
            idle_timeout_s=spec.stream_idle_timeout_ms / 1000,
            max_resumes=spec.max_resumes,
            deadline_s=spec.deadline_ms / 1000,
        )

    async def _continue(
        self,
        life: RequestLifecycle,
        path: str,
        body: bytes,
        headers: dict[str, str],
        tried: set[str],
        reason: str,
    ) -> UpstreamResponse | None:
        """Open the continuation on the best pod not tried yet, ranked at the break
        (`Director.rerank`: the pool as it is now, the continuations picked meanwhile
        counted, so one lost pod's streams spread); the one that broke is not picked
        again until a fresh scrape, unless it sent an error event. Each
        continuation attempt follows the attempt plan as a first attempt does: only one
        no engine started goes on to the next pod; a silent one (`Failure.TIMEOUT`: it may
        be generating) ends the resume."""
        assert self.upstream is not None
        life.broke(error_event=reason == BreakReason.ERROR_EVENT)
        for endpoint in self.director.rerank(life.decision, tried):
            tried.add(endpoint.hostport)
            life.picked(endpoint)
            pending = self.upstream.post(endpoint.address, endpoint.port, path, body, headers)
            try:
                upstream = await pending.response()
            except UpstreamError as error:
                if isinstance(error, UpstreamConnectError):
                    life.unreachable()
                else:
                    life.attempt_failed()
                if not self.plan.after_error(error).retry:
                    return None
                continue
            except BaseException:
                pending.abandon()
                raise
            content_type = upstream.headers.get("content-type", "")
            if upstream.status == 200 and is_event_stream(content_type):
                return upstream
            upstream.release()
            life.attempt_failed()
        return None

    def _over_budget(
        self, life: RequestLifecycle, headers: dict[str, str], *, started: bool
    ) -> web.StreamResponse | None:
        """The stream outgrew its token budget and the window has no room: the chunk
        that did not fit was not relayed. Before any byte: a 429 (returned); after: the
        relay has ended the stream with OpenAI's rate-limit error event (None)."""
        life.cancelled(RATE_LIMITED)
        if started:
            return None
        return self._over_window(life, headers, whole=False)

    @staticmethod
    def _over_window(
        life: RequestLifecycle, headers: dict[str, str], *, whole: bool
    ) -> web.Response:
        """The 429 of an answer refused for its size before any byte of it was sent,
        with the time until it would fit (`Retry-After`)."""
        assert life.budget is not None
        return render(refusals.over_window(life.budget.retry_after_s(), headers, whole=whole))

    async def _broken(
        self,
        request: web.Request,
        response: web.StreamResponse,
        life: RequestLifecycle,
        headers: dict[str, str],
        error: BaseException | None,
        *,
        started: bool,
    ) -> web.StreamResponse:
        """The pod's stream broke. Before any byte reached the client: a plain 504 / 502;
        after: the relay has ended it with the SSE error event."""
        log.warning(
            "request %s (x-request-id %s): the model server stream broke: %s",
            life.id,
            life.client_id,
            error,
        )
        if not started:
            if isinstance(error, (TimeoutError, UpstreamTimeout)):
                return self._timeout(life, headers, error)
            life.cancelled(STREAM_BROKEN)
            return error_response(
                502, "The model server's answer broke.", "upstream_error", STREAM_BROKEN, headers
            )
        life.cancelled(STREAM_BROKEN)
        return response

    async def _relay_whole(
        self,
        request: web.Request,
        upstream: UpstreamResponse,
        life: RequestLifecycle,
        endpoint: Endpoint,
        headers: dict[str, str],
        rewriter: ModelNameRewriter | None,
        content_type: str,
    ) -> web.StreamResponse:
        """A non-streamed answer is one JSON document: read it, rewrite it, send it, and
        only then count its usage and time it."""
        life.answered(upstream.status, streaming=False)
        try:
            body = await upstream.read()
        except (TimeoutError, UpstreamError) as error:
            if isinstance(error, (TimeoutError, UpstreamTimeout)):
                return self._timeout(life, headers, error)
            log.warning(
                "request %s (x-request-id %s): the model server's answer broke: %s",
                life.id,
                life.client_id,
                error,
            )
            life.cancelled("upstream_failed")
            message = "The model server's answer broke."
            return error_response(502, message, "upstream_error", "upstream_failed", headers)
        budget = life.budget
        if budget is not None and upstream.status == 200 and not await budget.admit_whole(body):
            life.cancelled(RATE_LIMITED)  # generated, but not delivered past the limit
            return self._over_window(life, headers, whole=True)
        if rewriter is not None:
            body = rewriter.json_body(body)
        response = web.Response(
            status=upstream.status,
            body=body,
            headers=self._answer_headers(headers, content_type, endpoint),
        )
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionResetError:
            life.cancelled(CLIENT_CANCELLED)
            return response
        # the client has its answer: the rest is bookkeeping
        life.first_byte()
        life.chunk(body)
        life.finished()
        return response
