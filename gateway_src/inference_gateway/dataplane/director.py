"""The director: one request's way from raw body bytes to a ranked list of pods.

Both data planes need the same steps before a byte goes to a model server — parse the
body (→ 400), apply a canary rewrite, route the model to a pool (→ 404), pick the
priority band, charge the rate limits (→ 429), pass admission (→ 429 / 503), rank the
pool's ready pods (→ 503) — and only differ in how they answer. The ext_proc server
(`extproc.py`) drives them through `Director.decide`; failures come back as one
exception type, `Rejection`, that carries the HTTP status, the OpenAI error fields and
the headers (`Retry-After`, rate-limit state), so each data plane renders it in its own
wire format without a second copy of the rules.

The pieces themselves are the shared core: `RoutingState` (config, router, rewrites,
limiter, swapped whole on reload), `PoolGate` admission, `band_for`, the `Scheduler`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from ..config import GatewayConfigSpec
from ..errors import InferenceGatewayError, NoCapacityError, NoEndpointError, UnknownModelError
from ..scheduling.plugins.prefix import prompt_block_hashes
from ..scheduling.types import Endpoint, LLMRequest
from ..telemetry import GatewayMetrics
from ..traffic.flow_control import BANDS, FlowController
from ..traffic.objectives import band_for
from ..traffic.ratelimit import RateLimiter
from ..traffic.rewrites import RewriteSet
from ..traffic.routing import ModelRouter, Route
from .admission import PoolGate, QueueTimeoutError

__all__ = [
    "CLIENT_ID_HEADER",
    "Decision",
    "Director",
    "Rejection",
    "RoutingState",
    "SchedulerLike",
    "Series",
    "api_key_of",
    "prompt_text",
    "subset_hostports",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 256  # charged to token buckets when a request sets none

OBJECTIVE_HEADER = "x-gateway-inference-objective"
FAIRNESS_HEADER = "x-gateway-inference-fairness-id"
# The authenticated client: set by `igw serve`'s authentication (dataplane/auth.py) or by
# Envoy Gateway's SecurityPolicy (API key `forwardClientIDHeader`, JWT `claimToHeaders`);
# the key of per-client rate limits.
CLIENT_ID_HEADER = "x-igw-client-id"
PROFILE_HEADER = "x-gateway-inference-profile"


class SchedulerLike(Protocol):
    """What a data plane needs of a scheduler (the real one, or a baseline for comparison)."""

    def schedule(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[Endpoint]: ...
    def on_picked(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None: ...
    def on_first_token(
        self, request: LLMRequest, endpoint: Endpoint, ttft_s: float, now: float
    ) -> None: ...
    def on_finished(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None: ...


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


class Rejection(InferenceGatewayError):
    """A request refused before any pod saw it: an HTTP status and an OpenAI error."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str,
        code: str,
        *,
        retry_after_s: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code
        self.retry_after_s = retry_after_s
        self.headers = dict(headers or {})
        if retry_after_s is not None:
            self.headers["retry-after"] = str(retry_after_s)

    def body(self) -> bytes:
        """`{"error": {"message", "type", "code"}}`, as the OpenAI API answers errors."""
        return orjson.dumps(
            {"error": {"message": self.message, "type": self.kind, "code": self.code}}
        )


@dataclass(slots=True)
class Decision:
    """Where a request goes and what it carries there."""

    llm: LLMRequest
    ranked: list[Endpoint]
    client_model: str  # what the client asked for; responses are written back to it
    route: Route
    body: bytes  # the body for the pod: the client's bytes, or rewritten for a canary
    gate: PoolGate
    headers: dict[str, str] = field(default_factory=dict)  # e.g. rate-limit state
    released: bool = False

    @property
    def target_model(self) -> str:
        return self.llm.model

    @property
    def rewritten(self) -> bool:
        return self.client_model != self.route.model


def api_key_of(headers: Mapping[str, str]) -> str:
    """The authenticated client id, else the bearer token, else "anonymous" (limits
    without a client or apiKey apply to each caller separately)."""
    client = headers.get(CLIENT_ID_HEADER)
    if client:
        return client
    auth = headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else "anonymous"


def subset_hostports(hint: list[str] | None, endpoints: list[Endpoint]) -> frozenset[str] | None:
    """Envoy's subset hint as `ip:port`s; an entry without a port allows every port of
    that address (the protocol lets a data plane send bare IPs). None: no hint."""
    if hint is None:
        return None
    out = {h for h in hint if ":" in h}
    bare = {h for h in hint if ":" not in h}
    if bare:
        out.update(e.hostport for e in endpoints if e.address in bare)
    return frozenset(out)


class Series:
    """Cached labelled series of the gateway metrics: prometheus_client's `labels()` takes
    a lock and builds keys on every call, and one request touches half a dozen series."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def time_plugin(self, kind: str, name: str, seconds: float) -> None:
        """The scheduler's plugin timer (`Scheduler(timer=...)`)."""
        self.child(self.metrics.plugin_duration, kind, name).observe(seconds)


class Director:
    """Runs the shared request pipeline over the live routing state.

    `state` is read once per request, so a reload never changes a request half way.
    """

    def __init__(
        self,
        endpoints: Callable[[], list[Endpoint]],
        scheduler: SchedulerLike,
        state: RoutingState,
        *,
        metrics: GatewayMetrics | None = None,
        series: Series | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.scheduler = scheduler
        self.state = state
        self.metrics = metrics or GatewayMetrics()
        self.gates: dict[str, PoolGate] = {}
        self.series = series or Series(self.metrics)
        self.child = self.series.child

    def reload(self, state: RoutingState) -> None:
        """Swap config, rewrites and limits; requests in flight keep their old state."""
        self.state = state
        if state.config is not None:
            for gate in self.gates.values():
                gate.spec = gate.controller.spec = state.config.flow_control

    async def close(self) -> None:
        for gate in self.gates.values():
            await gate.close()

    def gate(self, route: Route) -> PoolGate:
        key = route.pool or "*"
        gate = self.gates.get(key)
        if gate is None:
            config = self.state.config or GatewayConfigSpec()
            gate = self.gates[key] = PoolGate(
                config.flow_control,
                lambda: self.state.router.candidates(route, self.endpoints()),
            )
        return gate

    def refresh_gauges(self, pools: Mapping[str, list[Endpoint]]) -> None:
        """Pool gauges, computed when `/metrics` is read: ready pods, mean KV use and
        queue, and the autoscaling signals, saturation (mean per-pod load at the critical
        thresholds, 1 = full) and the admission queue per band."""
        metrics = self.metrics
        spec = (self.state.config or GatewayConfigSpec()).flow_control
        for pool, endpoints in pools.items():
            ready = [e.metrics for e in endpoints if not e.stale and e.metrics is not None]
            metrics.pool_ready.labels(pool).set(len(ready))
            if ready:
                metrics.pool_kv.labels(pool).set(sum(m.kv_usage for m in ready) / len(ready))
                metrics.pool_queue.labels(pool).set(sum(m.waiting for m in ready) / len(ready))
            gate = self.gates.get(pool)
            controller = gate.controller if gate is not None else FlowController(spec)
            metrics.pool_saturation.labels(pool).set(controller.saturation(endpoints))
        for pool, gate in self.gates.items():
            for band in BANDS:
                metrics.queue_size.labels(pool, band).set(gate.controller.queued(band))

    def release(self, decision: Decision) -> None:
        """The request is over: give its admission slot back (idempotent)."""
        if not decision.released:
            decision.released = True
            decision.gate.on_completion()

    async def decide(
        self,
        raw: bytes,
        headers: Mapping[str, str],
        *,
        request_id: str,
        subset: list[str] | None = None,
    ) -> Decision:
        """Parse, rewrite, route, limit, admit and rank; `Rejection` on any refusal.

        `headers` must have lower-case names. On success the caller owns the admission
        slot and must call `release(decision)` when the request ends.
        """
        body = self._parse(raw)
        state = self.state
        client_model: str = body["model"]
        model = state.rewrites.rewrite(client_model)
        endpoints = self.endpoints()
        try:
            route = state.router.route(model, endpoints)
        except UnknownModelError:
            raise Rejection(
                404,
                f"The model `{client_model}` does not exist.",
                "invalid_request_error",
                "model_not_found",
            ) from None
        text = prompt_text(body)
        llm = LLMRequest(
            request_id=request_id,
            model=route.model,
            prompt_tokens=len(text) // 4 + 1,
            prefix_hashes=prompt_block_hashes(route.model, text),
            adapter=route.adapter,
            band=band_for(state.config, headers.get(OBJECTIVE_HEADER), route.model),
            profile=headers.get(PROFILE_HEADER) or route.profile,
            fairness_id=headers.get(FAIRNESS_HEADER, ""),
            subset=subset_hostports(subset, endpoints),
        )
        extra = self._charge(state, headers, client_model, llm, body)
        gate = self.gate(route)
        await self._admit(gate, llm, client_model, extra)
        try:
            ranked = self._rank(state, llm, route, endpoints)
        except BaseException:
            gate.on_completion()
            raise
        if not ranked:
            gate.on_completion()
            self.child(self.metrics.rejected, client_model, "no_ready_endpoint").inc()
            raise Rejection(
                503,
                f"No ready model server for `{client_model}`: every pod of the pool is "
                "stale, outside the subset hint, or none serves the model.",
                "service_unavailable",
                "no_ready_endpoint",
                headers=extra,
            )
        self.child(self.metrics.requests, client_model, route.model).inc()
        if model != client_model:
            body["model"] = model
            raw = orjson.dumps(body)
        return Decision(llm, ranked, client_model, route, raw, gate, extra)

    # ------------------------------------------------------------------ steps

    @staticmethod
    def _parse(raw: bytes) -> dict[str, Any]:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            raise Rejection(
                400, f"Malformed JSON body: {error}", "invalid_request_error", "invalid_json"
            ) from None
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise Rejection(
                400,
                "The request body must be a JSON object with a string `model` field.",
                "invalid_request_error",
                "missing_model",
            )
        return body

    def _charge(
        self,
        state: RoutingState,
        headers: Mapping[str, str],
        client_model: str,
        llm: LLMRequest,
        body: dict[str, Any],
    ) -> dict[str, str]:
        if not state.limiter.rules:  # nothing to charge (the common case): no headers
            return {}
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        tokens = llm.prompt_tokens + (
            max_tokens if isinstance(max_tokens, int) else DEFAULT_MAX_TOKENS
        )
        limit = state.limiter.check(api_key_of(headers), client_model, tokens, time.monotonic())
        if not limit.allowed:
            self.child(self.metrics.rejected, client_model, "rate_limited").inc()
            raise Rejection(
                429,
                f"Rate limit reached for `{client_model}`; retry after {limit.retry_after_s} s.",
                "rate_limit_exceeded",
                "rate_limited",
                retry_after_s=limit.retry_after_s,
                headers=limit.headers,
            )
        return dict(limit.headers)

    async def _admit(
        self, gate: PoolGate, llm: LLMRequest, client_model: str, extra: dict[str, str]
    ) -> None:
        try:
            await gate.admit(llm.band, llm.fairness_id)
        except NoCapacityError as error:
            self.child(self.metrics.rejected, client_model, "pool_saturated").inc()
            raise Rejection(
                429,
                str(error),
                "rate_limit_exceeded",
                "pool_saturated",
                retry_after_s=error.retry_after_s,
                headers=extra,
            ) from None
        except QueueTimeoutError as error:
            self.child(self.metrics.rejected, client_model, "queue_timeout").inc()
            raise Rejection(
                503, str(error), "service_unavailable", "queue_timeout", headers=extra
            ) from None

    def _rank(
        self, state: RoutingState, llm: LLMRequest, route: Route, endpoints: list[Endpoint]
    ) -> list[Endpoint]:
        """Ranked pods; when all are stale, a `FailOpen` pool picks at random."""
        candidates = state.router.candidates(route, endpoints)
        started = time.perf_counter()
        try:
            ranked = self.scheduler.schedule(llm, candidates)
        except NoEndpointError:
            config = state.config
            fail_open = bool(
                config
                and route.pool
                and any(p.name == route.pool and p.failure_mode == "FailOpen" for p in config.pools)
            )
            serving = [
                e
                for e in candidates
                if e.serves(llm.model) and (llm.subset is None or e.hostport in llm.subset)
            ]
            if not fail_open or not serving:
                return []
            log.warning("pool %s has no fresh pod; FailOpen picks at random", route.pool)
            return random.sample(serving, len(serving))
        self.metrics.scheduler_e2e.observe(time.perf_counter() - started)
        return ranked
