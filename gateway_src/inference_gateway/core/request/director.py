"""The director: one request's way from raw body bytes to a ranked list of pods.

Both data planes need the same steps before a byte goes to a model server — parse the
body (→ 400, body.py), apply a canary rewrite, route the model to a pool (→ 404), pick
the priority band, charge the rate limits (→ 429), pass admission (→ 429 / 503), rank
the pool's ready pods (→ 503) — and only differ in how they answer. `igw serve`
(frontends/proxy.py) and the ext_proc picker (frontends/extproc/picker.py) drive them
through `Director.decide`; failures come back as one exception type, `Rejection`
(refusals.py, where every refusal's words live), that carries the HTTP status, the
OpenAI error fields and the headers (`Retry-After`, rate-limit state), so each data
plane renders it in its own wire format without a second copy of the rules.

A request that passes gets a `RequestLifecycle` (lifecycle.py): from then on the data
plane only reports what happens to it, and the lifecycle gives back everything the
request holds. Bookkeeping is keyed by an id made here; the client's `x-request-id` is
kept only for logs and the response header.

The pieces themselves are the shared core: `RoutingState` (config, router, rewrites,
limiter, swapped whole on reload), `PoolGate` admission, `band_for`, the `Scheduler`.

`decide` is the asyncio driver of the pipeline. Its steps are also public, without any
waiting in them, for the simulator, which drives the same director on its virtual clock
(`clock`): `begin` (from an `Intake`: the parsed body, or the simulator's request),
`offer` / `resume` (admission), `start` (rank and a lifecycle). So `igw serve`,
`igw picker` and `igw simulate` run one request path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import random
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from inference_gateway.background import cancel_and_wait
from inference_gateway.config.spec import FlowControlSpec, GatewayConfigSpec
from inference_gateway.core.request import refusals
from inference_gateway.core.request.admission import PoolGate, QueueTimeoutError
from inference_gateway.core.request.body import (
    CLIENT_ID_HEADER,
    OutputBound,
    api_key_of,
    output_bound,
    parse_body,
    prompt_text,
)
from inference_gateway.core.request.budget import (
    LocalBackend,
    TokenBudget,
    grow_step,
    store_budget,
)
from inference_gateway.core.request.contracts import RoutingState, SchedulerLike
from inference_gateway.core.request.decisions import DecisionLog
from inference_gateway.core.request.lifecycle import RequestLifecycle, new_internal_id
from inference_gateway.core.request.prompt_cost import prompt_estimate
from inference_gateway.core.request.refusals import Rejection
from inference_gateway.core.request.sse import ask_for_usage
from inference_gateway.core.request.subset_hint import hinted_hostports
from inference_gateway.core.scheduling.explain import Explanation
from inference_gateway.core.scheduling.plugins.prefix import prompt_block_hashes
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest
from inference_gateway.core.traffic.flow_control import BANDS, FlowController, Waiter
from inference_gateway.core.traffic.objectives import band_for
from inference_gateway.core.traffic.ratelimit import TooLarge
from inference_gateway.core.traffic.routing import Route
from inference_gateway.core.traffic.shared_limits import SharedLimitsView
from inference_gateway.errors import (
    NoCapacityError,
    NoEndpointError,
    UnknownModelError,
)
from inference_gateway.telemetry.metrics import GatewayMetrics

__all__ = [
    "CLIENT_ID_HEADER",
    "Decision",
    "Director",
    "Intake",
    "Pending",
    "Rejection",
    "RequestLifecycle",
    "RoutingState",
    "SchedulerLike",
    "Series",
]

log = logging.getLogger(__name__)

OBJECTIVE_HEADER = "x-gateway-inference-objective"
FAIRNESS_HEADER = "x-gateway-inference-fairness-id"
PROFILE_HEADER = "x-gateway-inference-profile"
DEFAULT_FLOW_CONTROL = FlowControlSpec()  # frozen: one instance serves every read


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
    # P/D: ranked prefill pods for a prefill leg before `ranked[0]` decodes; [] = aggregated
    prefill: list[Endpoint] = field(default_factory=list)
    queued_s: float = 0.0  # the wait for admission (0: admitted at once)
    schedule_s: float = 0.0  # ranking the pods (every profile the request ran)
    # the body asks the engine for the stream's usage for the gateway's own count: the
    # data plane takes the usage event out of the client's stream (sse.UsageEventFilter)
    strip_usage: bool = False

    @property
    def target_model(self) -> str:
        return self.llm.model

    @property
    def rewritten(self) -> bool:
        return self.client_model != self.route.model


@dataclass(frozen=True, slots=True)
class Intake:
    """What the pipeline needs of a request body: `decide` reads it from the client's
    bytes (`Intake.parse`); the simulator, whose prompts are token counts and prefix
    block ids rather than text, builds it from its workload."""

    model: str  # what the client asked for
    prompt_tokens: int  # estimated
    output_bound: OutputBound  # the most output tokens it may cost (token limits charge it)
    # the prompt's prefix-index hashes for the model the pod is sent (after rewrites)
    prefix_hashes: Callable[[str], Sequence[int]]
    body: dict[str, Any] | None = None  # the parsed body, re-encoded if a rewrite applies
    # the engine's own block hashes, where the driver knows them (the simulator's blocks);
    # a live request's come from a precise prefix scorer tokenizing `body`
    kv_hashes: Sequence[int] | None = None

    @classmethod
    def parse(cls, raw: bytes) -> Intake:
        """The client's body (→ 400 `Rejection` when malformed)."""
        body = parse_body(raw)
        bound = output_bound(body)
        text = prompt_text(body)
        return cls(
            body["model"],
            prompt_estimate(body),
            bound,
            lambda model: prompt_block_hashes(model, text),
            body,
        )


@dataclass(slots=True)
class Pending:
    """A request between `Director.begin` and `Director.start`: routed, limited,
    waiting for (or past) admission."""

    state: RoutingState
    intake: Intake
    model: str  # after rewrites
    route: Route
    llm: LLMRequest
    endpoints: list[Endpoint]
    gate: PoolGate
    headers: dict[str, str]  # answered with (rate-limit state)
    budget: TokenBudget | None  # follows the answer and settles the token charge
    waiter: Waiter | None = None

    @property
    def client_model(self) -> str:
        return self.intake.model


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
        max_lifetime_s: float | None = 3600.0,
        clock: Callable[[], float] = time.monotonic,
        soon: Callable[[Callable[[], Any]], Any] | None = None,
        shared_limits: SharedLimitsView | None = None,
        connection_failed: Callable[[Endpoint], None] | None = None,
        decisions: DecisionLog | None = None,
    ) -> None:
        """`max_lifetime_s` None: no watchdog (the simulator ends every request itself).
        `clock` and `soon` are the admission gates' (see `PoolGate`); `clock` also times
        lifecycles and rate limits. `shared_limits` (igw serve --store): the token
        buckets live in the store. `connection_failed`: where a data plane's report that
        a pod could not be reached goes (the endpoint store's `connection_failed`, one
        rule for both). `decisions`: every request is explained (its scheduling cycle
        kept, `LLMRequest.explanation`) and its record kept there when it ends, for
        traces and `igw explain`; None: nothing is kept (the simulator)."""
        self.endpoints = endpoints
        self.connection_failed = connection_failed or (lambda endpoint: None)
        self.scheduler = scheduler
        self.state = state
        self.max_lifetime_s = max_lifetime_s  # the watchdog ends requests older than this
        self.live: dict[str, RequestLifecycle] = {}  # admitted, not ended, by internal id
        self._watchdog: asyncio.Task[None] | None = None
        self.metrics = metrics or GatewayMetrics()
        self.gates: dict[str, PoolGate] = {}
        self.series = series or Series(self.metrics)
        self.child = self.series.child
        self.shared_limits = shared_limits
        self.clock = clock
        self.soon = soon
        self.decisions = decisions
        # keep each request's scheduling cycle (`LLMRequest.explanation`): for the
        # decision log, and for traces (the data plane sets it when it traces)
        self.explaining = decisions is not None
        self._gauged_pools: set[str] = set()  # pools whose gauges /metrics shows
        # Whether the data plane takes the usage event out of a stream whose client did
        # not ask for it (igw serve does): then every stream asks the engine for usage,
        # which settles its token charge exactly (sse.ask_for_usage).
        self.ask_stream_usage = False
        # Whether a request's `x-igw-client-id` was set by an authenticating filter in
        # front (igw serve's auth middleware sets or strips it; in the cluster Envoy
        # Gateway's ext_authz sets it, `igw picker --client-id-from-auth`). Otherwise a
        # client could name itself `team-a` and spend team-a's limits: it is ignored.
        self.trusted_client_id = False
        self._watch_limiter(state)

    def _watch_limiter(self, state: RoutingState) -> None:
        limiter = state.limiter
        limiter.on_evict = self.metrics.ratelimit_evictions.inc
        self.metrics.ratelimit_buckets.set_function(lambda: len(self.state.limiter))

    def reload(self, state: RoutingState) -> None:
        """Swap config, rewrites and limits; requests in flight keep their old state.
        Unchanged rate-limit rules keep their buckets (a reload must not hand every
        client a fresh window, nor drop the reservations of streams in flight)."""
        if state.limiter.rules == self.state.limiter.rules:
            state = dataclasses.replace(state, limiter=self.state.limiter)
        self._watch_limiter(state)
        self.state = state
        if state.config is not None:
            for gate in self.gates.values():
                gate.spec = gate.controller.spec = state.config.flow_control

    @property
    def active(self) -> int:
        """Requests admitted and not ended yet."""
        return len(self.live)

    def track(self, life: RequestLifecycle) -> None:
        """A new lifecycle: watched until it ends (it removes itself from `live`)."""
        self.live[life.id] = life
        if self.max_lifetime_s is None:
            return
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """End what outlived `max_lifetime_s`, checking a few times per lifetime (at most
        once a second); the task ends when nothing is live."""
        assert self.max_lifetime_s is not None
        while self.live:
            await asyncio.sleep(min(1.0, self.max_lifetime_s / 4))
            oldest = self.clock() - self.max_lifetime_s
            for life in [life for life in self.live.values() if life.started < oldest]:
                life.expire()

    async def close(self) -> None:
        await cancel_and_wait(self._watchdog)
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
                clock=self.clock,
                soon=self.soon,
            )
        return gate

    def sweep_idle(self) -> None:
        """Drop the rate-limit buckets that went idle, traffic or not: every gauge read
        does, and the picker's health loop, so a replica nobody scrapes lets go too."""
        self.state.limiter.sweep(time.monotonic())

    def refresh_gauges(self, pools: Mapping[str, list[Endpoint]]) -> None:
        """Pool gauges, computed when `/metrics` is read (which also sweeps idle
        rate-limit buckets): ready pods, mean KV use and queue, and the autoscaling
        signals, saturation (mean per-pod load of the ready pods at the critical
        thresholds, 1 = full) and the admission queue per band.

        Every configured pool is measured, pods or none: a pool whose last pod went away
        reads 0 everywhere rather than what its last pod said (`pools` only lists pools
        with pods). A pool with no ready pod reads saturation 0: there is no load to
        measure, and KEDA's Prometheus scaler keeps a target active while any trigger
        reads above its activation threshold (kedacore/keda v2.17 `pkg/scalers/
        prometheus_scaler.go`: `val > activationThreshold`, default 0), so a 1 there
        would hold a scale-to-zero pool at one replica for ever. Demand for an empty
        pool is the admission queue, the trigger that wakes it. (Admission itself still
        treats such a pool as saturated: `FlowController.saturation`.) A pool gone
        from the config and from discovery has its series removed."""
        metrics = self.metrics
        self.sweep_idle()
        config = self.state.config
        # a pool without a gate yet is measured at the configured (or default) thresholds;
        # building the default config on every read cost ~0.3 ms of each /metrics
        spec = config.flow_control if config is not None else DEFAULT_FLOW_CONTROL
        measured = set(pools)
        if config is not None:
            measured |= {p.name for p in config.pools}
        pool_gauges = (
            metrics.pool_ready,
            metrics.pool_kv,
            metrics.pool_queue,
            metrics.pool_saturation,
        )
        for gone in self._gauged_pools - measured:
            for gauge in pool_gauges:
                gauge.remove(gone)
        self._gauged_pools = measured
        for pool in measured:
            endpoints = pools.get(pool, [])
            ready = [e.metrics for e in endpoints if not e.stale and e.metrics is not None]
            metrics.pool_ready.labels(pool).set(len(ready))
            # no ready pod: 0, not the value of the last pod that was (a stale gauge)
            n = len(ready) or 1
            metrics.pool_kv.labels(pool).set(sum(m.kv_usage for m in ready) / n)
            metrics.pool_queue.labels(pool).set(sum(m.waiting for m in ready) / n)
            saturation = 0.0
            if ready:
                gate = self.gates.get(pool)
                controller = gate.controller if gate is not None else FlowController(spec)
                saturation = controller.saturation(endpoints)
            metrics.pool_saturation.labels(pool).set(saturation)
        for pool, gate in self.gates.items():
            for band in BANDS:
                metrics.queue_size.labels(pool, band).set(gate.controller.queued(band))

    async def decide(
        self,
        raw: bytes,
        headers: Mapping[str, str],
        *,
        client_request_id: str = "",
        subset: list[str] | None = None,
    ) -> RequestLifecycle:
        """Parse, rewrite, route, limit, admit and rank; `Rejection` on any refusal.

        `headers` must have lower-case names. On success the caller reports the
        request's course to the returned lifecycle, which releases what it holds.
        `client_request_id` (the client's `x-request-id`) is only logged.
        """
        intake = Intake.parse(raw)
        if self.shared_limits is None:  # local buckets: no await on the hot path
            pending = self.begin(intake, headers, subset)
        else:
            pending = self._route(intake, headers, subset)
            pending.headers, pending.budget = await self._charge_shared(pending, headers)
        arrived = self.clock()
        try:
            await pending.gate.admit(
                pending.llm.band,
                pending.llm.fairness_id,
                hold_empty=not _fail_open(pending.state, pending.route),
            )
        except (NoCapacityError, QueueTimeoutError) as error:
            raise self._refused(pending, error) from None
        except BaseException:  # the client left while queued: nothing was delivered
            if pending.budget is not None:
                pending.budget.close(0)
            raise
        life = self.start(pending, raw, client_request_id)
        life.decision.queued_s = self.clock() - arrived - life.decision.schedule_s
        return life

    def begin(
        self, intake: Intake, headers: Mapping[str, str], subset: list[str] | None = None
    ) -> Pending:
        """Rewrite, route and charge the local token buckets (`Rejection` on a refusal):
        the steps before admission."""
        pending = self._route(intake, headers, subset)
        pending.headers, pending.budget = self._charge(pending, headers)
        return pending

    def offer(self, pending: Pending) -> bool:
        """Admission without waiting: True when admitted now; False when queued (the
        caller sets `pending.waiter.handle`, which the gate's `pump` resolves, and then
        calls `resume`); `Rejection` when refused."""
        try:
            pending.waiter = pending.gate.offer(
                pending.llm.band,
                pending.llm.fairness_id,
                hold_empty=not _fail_open(pending.state, pending.route),
            )
        except NoCapacityError as error:
            raise self._refused(pending, error) from None
        return pending.waiter is None

    def resume(self, pending: Pending, released: bool) -> None:
        """A queued request's wait ended: released, or its band's TTL passed (→ 503)."""
        waiter = pending.waiter
        assert waiter is not None
        pending.gate.resumed(waiter, released)
        if not released:
            raise self._refused(pending, pending.gate.timeout_error(waiter.band))

    def start(
        self, pending: Pending, raw: bytes = b"", client_request_id: str = ""
    ) -> RequestLifecycle:
        """Rank the pool's pods and open the request's lifecycle (503 when none is
        ready). `raw` is the client's body, re-encoded when a rewrite changed the model."""
        gate, llm, client_model = pending.gate, pending.llm, pending.client_model
        budget = pending.budget
        started = time.perf_counter()
        try:
            ranked, prefill = self._rank(pending.state, llm, pending.route, pending.endpoints)
        except BaseException:
            gate.on_completion()
            if budget is not None:
                budget.close(0)
            raise
        if not ranked:
            gate.on_completion()
            if budget is not None:
                budget.close(0)
            self.child(self.metrics.rejected, client_model, "no_ready_endpoint").inc()
            raise refusals.no_ready_endpoint(client_model, pending.headers)
        self.child(self.metrics.requests, client_model, pending.route.model).inc()
        body = pending.intake.body
        if pending.model != client_model and body is not None:
            body["model"] = pending.model
            raw = orjson.dumps(body)
        asked = ask_for_usage(raw, body) if self.ask_stream_usage and body else None
        decision = Decision(
            llm,
            ranked,
            client_model,
            pending.route,
            raw if asked is None else asked,
            gate,
            pending.headers,
            prefill,
            strip_usage=asked is not None,
        )
        decision.schedule_s = time.perf_counter() - started
        if llm.explanation is not None:
            llm.explanation.picked = ranked[0].name
        return RequestLifecycle(self, decision, client_request_id, budget=pending.budget)

    # ------------------------------------------------------------------ steps

    def _route(
        self, intake: Intake, headers: Mapping[str, str], subset: list[str] | None
    ) -> Pending:
        state = self.state
        client_model = intake.model
        model = state.rewrites.rewrite(client_model)
        endpoints = self.endpoints()
        try:
            route = state.router.route(model, endpoints)
        except UnknownModelError:
            raise refusals.model_not_found(client_model) from None
        llm = LLMRequest(
            request_id=new_internal_id(),
            model=route.model,
            prompt_tokens=intake.prompt_tokens,
            prefix_hashes=intake.prefix_hashes(route.model),
            prompt_body=intake.body,  # tokenized by a precise prefix scorer, only if it needs it
            kv_hashes=intake.kv_hashes,
            adapter=route.adapter,
            band=band_for(state.config, headers.get(OBJECTIVE_HEADER), route.model),
            profile=headers.get(PROFILE_HEADER) or route.profile,
            fairness_id=headers.get(FAIRNESS_HEADER, ""),
            subset=_allowed(subset, endpoints),
            explanation=Explanation() if self.explaining else None,
        )
        return Pending(state, intake, model, route, llm, endpoints, self.gate(route), {}, None)

    def _charge(
        self, pending: Pending, headers: Mapping[str, str]
    ) -> tuple[dict[str, str], TokenBudget | None]:
        """Charge the prompt estimate and reserve the output bound; the lifecycle's
        budget follows the answer and settles it."""
        state, client_model, llm = pending.state, pending.client_model, pending.llm
        output_bound = pending.intake.output_bound
        if not state.limiter.rules:  # nothing to charge (the common case): no headers
            return {}, None
        api_key = api_key_of(headers, self.trusted_client_id)
        limit = state.limiter.check(
            api_key,
            client_model,
            llm.prompt_tokens,
            output_bound.tokens,
            self.clock(),
            request_id=llm.request_id,
            bounded=output_bound.explicit,
        )
        if limit.too_large is not None:
            raise self._too_large(client_model, limit.too_large)
        if not limit.allowed:
            raise self._limited(client_model, limit.retry_after_s, limit.headers)
        backend = LocalBackend(
            state.limiter, llm.request_id, api_key, client_model, llm.prompt_tokens
        )
        return dict(limit.headers), self._budget(backend, llm, limit.reserved, limit.headers)

    async def _charge_shared(
        self, pending: Pending, headers: Mapping[str, str]
    ) -> tuple[dict[str, str], TokenBudget | None]:
        """`_charge` against the store, exact across replicas (one round trip); with the
        store away, this replica's own buckets (`igw_store_up` says so, one log line)."""
        assert self.shared_limits is not None
        state, client_model, llm = pending.state, pending.client_model, pending.llm
        output_bound = pending.intake.output_bound
        if not state.limiter.rules:
            return {}, None
        api_key = api_key_of(headers, self.trusted_client_id)
        limiter = self.shared_limits.limiter(state.limiter.rules)
        admission = await limiter.check_shared(
            api_key,
            client_model,
            llm.prompt_tokens,
            output_bound.tokens,
            request_id=llm.request_id,
            bounded=output_bound.explicit,
        )
        if admission is None:
            return self._charge(pending, headers)
        if admission.too_large is not None:
            raise self._too_large(client_model, admission.too_large)
        if not admission.allowed:
            raise self._limited(client_model, admission.retry_after_s, admission.headers)
        budget = store_budget(
            limiter,
            admission,
            llm.request_id,
            api_key,
            client_model,
            self.shared_limits.pending,
        )
        return dict(admission.headers), budget

    @staticmethod
    def _budget(
        backend: LocalBackend,
        llm: LLMRequest,
        reserved: int,
        headers: Mapping[str, str],
    ) -> TokenBudget | None:
        """The budget that follows the answer (`reserved`: the output bound, or less when
        the request set none and the limit is small)."""
        limit = headers.get("x-ratelimit-limit-tokens")
        if limit is None:  # request limits only: nothing to follow
            return None
        return TokenBudget(backend, llm.prompt_tokens, reserved, grow_step(int(limit)))

    def _limited(
        self, client_model: str, retry_after_s: int, headers: Mapping[str, str]
    ) -> Rejection:
        self.child(self.metrics.rejected, client_model, "rate_limited").inc()
        return refusals.rate_limited(client_model, retry_after_s, headers)

    def _too_large(self, client_model: str, too_large: TooLarge) -> Rejection:
        """OpenAI's answer to a request bigger than a whole window's limit (refusals.py)."""
        self.child(self.metrics.rejected, client_model, "request_too_large").inc()
        return refusals.request_too_large(too_large.message(client_model))

    def _refused(self, pending: Pending, error: NoCapacityError | QueueTimeoutError) -> Rejection:
        """Admission's refusal as the client's answer: 429 with Retry-After for a
        saturated pool, 503 for a wait past the band's TTL."""
        client_model, extra = pending.client_model, pending.headers
        if pending.budget is not None:  # refused after the charge: nothing was delivered
            pending.budget.close(0)
        if isinstance(error, NoCapacityError):
            self.child(self.metrics.rejected, client_model, "pool_saturated").inc()
            return refusals.pool_saturated(str(error), error.retry_after_s, extra)
        refusal = refusals.queue_timeout(str(error), error.retry_after_s, extra, empty=error.empty)
        self.child(self.metrics.rejected, client_model, refusal.code).inc()
        return refusal

    def rerank(self, decision: Decision, exclude: Collection[str]) -> list[Endpoint]:
        """Where a broken stream's continuation may go now (resume.py): the request ranked
        again over its pool as it stands at the break, minus the pods in `exclude` (tried
        already). The ranking made at admission is stale by then: a pod that came back is
        missing from it, and the continuations of one lost pod would all land on its
        next pod and prefill there together; ranked afresh, each continuation picked
        meanwhile counts in the scorers (`on_picked`), so they spread. Empty when no pod
        is left; the request's explanation keeps the admission's ranking.

        A continuation is a whole request (no prefill leg, no `kv_transfer_params`:
        resume.py), so with a P/D split it is ranked as a decode-only request is
        (`_rank`): by the handler's `aggregatedProfile` where it names one (pods of
        either role), else by the decode profile (decode pods only)."""
        candidates = [
            e
            for e in self.state.router.candidates(decision.route, self.endpoints())
            if e.hostport not in exclude
        ]
        if not candidates:
            return []
        llm = dataclasses.replace(decision.llm, explanation=None, prefill_pod=None)
        whole = self.scheduler.schedule_aggregated(llm, candidates)
        if whole:
            return whole
        try:
            return self.scheduler.schedule(llm, candidates)
        except NoEndpointError:
            return []

    def _rank(
        self, state: RoutingState, llm: LLMRequest, route: Route, endpoints: list[Endpoint]
    ) -> tuple[list[Endpoint], list[Endpoint]]:
        """Ranked pods and, for a P/D request, ranked prefill pods ([] = aggregated);
        when all are stale, a `FailOpen` pool picks at random, aggregated."""
        candidates = state.router.candidates(route, endpoints)
        started = time.perf_counter()
        try:
            ranked = self.scheduler.schedule(llm, candidates)
        except NoEndpointError:
            fail_open = _fail_open(state, route)
            serving = [
                e
                for e in candidates
                if e.serves(llm.model) and (llm.subset is None or e.hostport in llm.subset)
            ]
            if not fail_open or not serving:
                return [], []
            log.warning("pool %s has no fresh pod; FailOpen picks at random", route.pool)
            return random.sample(serving, len(serving)), []
        prefill = self.scheduler.schedule_prefill(llm, candidates, ranked[0])
        self.metrics.scheduler_e2e.observe(time.perf_counter() - started)
        age = self.clock() - ranked[0].scraped_at
        if 0.0 <= age < math.inf:  # (a pod the driver never scraped has no view to age)
            self.metrics.view_age.observe(age)
        if prefill is None:
            return ranked, []
        decision = "prefill-decode" if prefill else "decode-only"
        self.child(self.metrics.pd_decisions, llm.model, decision).inc()
        if not prefill:  # whole, on the decode pod or by the handler's aggregatedProfile
            ranked = self.scheduler.schedule_aggregated(llm, candidates) or ranked
        return ranked, prefill


def _fail_open(state: RoutingState, route: Route) -> bool:
    """Whether the route's pool is `FailOpen`: with no fresh pod it picks at random
    rather than holding or refusing the request."""
    return route.pool in state.router.fail_open_pools


def _allowed(hint: list[str] | None, endpoints: list[Endpoint]) -> frozenset[str] | None:
    """Envoy's subset hint as the `ip:port`s it allows (None: no hint)."""
    hostports = hinted_hostports(hint, endpoints)
    return None if hostports is None else frozenset(hostports)
