"""One admitted request, from the director's decision to its last byte.

The director hands a `RequestLifecycle` to the data plane that asked (the proxy or the
ext_proc picker); the data plane only reports what happened:

    picked(pod) ─┬─ attempt_failed() / unreachable() ─ picked(next pod) ...
                 └─ answered(status) ─ first_byte() ─ chunk(bytes)* ─ finished()
                                                      └─ broke() ─ picked(next pod) ...
    at any point: cancelled(reason)     (client gone, upstream broke, lifetime over)

and the lifecycle alone does the bookkeeping: the scheduler's per-pod state (`on_picked`,
`on_first_token`, `on_finished`, so learning plugins see every outcome), the admission
slot, the token budget (budget.py: counted as the answer streams, settled from its
`usage` or from what was counted, on every outcome), and the request metrics. It ends
exactly once, whichever report comes first; later reports are no-ops.
The director's watchdog ends it after its maximum lifetime whatever the data plane does
(`expire`, which also calls `on_expire`: the proxy cancels its handler), so nothing a
request holds can outlive it. One sweeping task per director rather than a timer per
request: arming and cancelling an event-loop timer would cost every request ~3 µs.

Every time comes from the director's clock (the event loop's monotonic clock, or the
simulator's virtual one), so a simulated request's TTFT is what a served one's would be.

Internal state is keyed by `id`, an id this process made; the client's `x-request-id`
(`client_id`) is only logged and echoed, so two requests that send the same one cannot
overwrite each other's bookkeeping.

With a decision log (`Director.decisions`) the lifecycle also keeps the names of the pods
it was sent to, and when it ends it leaves its record there (`record`: the route, band,
profile, pods tried, outcome, timings, usage and the scheduling explanation), which
`igw explain` and the trace glue (telemetry/request_trace.py) read.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inference_gateway.core.request.budget import TokenBudget
from inference_gateway.core.request.decisions import expand_record
from inference_gateway.core.request.usage import (
    UsageScanner,
    cached_tokens,
    input_tokens,
    output_tokens,
    total_tokens,
)
from inference_gateway.core.scheduling.types import Endpoint

if TYPE_CHECKING:
    from inference_gateway.core.request.director import Decision, Director

__all__ = ["RATE_LIMITED", "RequestLifecycle", "new_internal_id"]

log = logging.getLogger(__name__)

# Unique per process, cheap (one uuid4 per process, a counter per request); never
# derived from the client.
_ID_PREFIX = f"igw-{uuid.uuid4().hex[:12]}-"
_ID_COUNTER = itertools.count()

CLIENT_CANCELLED = "client_cancelled"  # the client left before the answer ended
EXPIRED = "lifetime_exceeded"  # the watchdog ended it
STREAM_BROKEN = "stream_broken"  # the pod's answer broke after its first byte
RATE_LIMITED = "rate_limited"  # the answer outgrew its token budget and the window was full
USAGE_SCAN_BYTES = 4 * 2**20


def new_internal_id() -> str:
    return f"{_ID_PREFIX}{next(_ID_COUNTER)}"


class RequestLifecycle:
    __slots__ = (
        "budget",
        "client_id",
        "decision",
        "director",
        "endpoint",
        "first_byte_at",
        "id",
        "input_counted",
        "on_expire",
        "outcome",
        "prefill_endpoint",
        "running",
        "scheduler",
        "started",
        "status",
        "trace_id",
        "tried",
        "usage",
        "usage_found",
    )

    def __init__(
        self,
        director: Director,
        decision: Decision,
        client_id: str,
        *,
        budget: TokenBudget | None = None,
    ) -> None:
        self.id = decision.llm.request_id
        self.client_id = client_id
        self.director = director
        self.decision = decision
        self.scheduler = director.scheduler  # a reload must not split one request
        self.budget = budget
        self.endpoint: Endpoint | None = None
        self.prefill_endpoint: Endpoint | None = None  # a P/D prefill leg under way
        self.started = director.clock()
        self.first_byte_at = 0.0
        self.status = 0
        self.usage: UsageScanner | None = None
        self.input_counted = False
        self.outcome: str | None = None  # set once: "ok" or why it ended early
        self.on_expire: Callable[[], object] | None = None
        self.trace_id = ""  # the request's trace (hex), set by a data plane that traces
        # pods sent to, in order (kept only when the director logs decisions)
        self.tried: list[str] | None = [] if director.decisions is not None else None
        self.usage_found: dict[str, Any] | None = None  # the answer's usage, once ended
        # inference_objective_running_requests: up now, down exactly once in `_end`
        self.running = director.child(director.metrics.running, decision.client_model)
        self.running.inc()
        director.track(self)

    # ------------------------------------------------------------------ reports

    def picked(self, endpoint: Endpoint) -> None:
        """The request goes to `endpoint` (again after `attempt_failed`, to the next)."""
        if self.outcome is not None:
            return
        if self.endpoint is not None:
            self.attempt_failed()
        decision = self.decision
        if not self.input_counted:
            self.input_counted = True
            self.director.child(
                self.director.metrics.input_tokens, decision.client_model, decision.target_model
            ).observe(decision.llm.prompt_tokens)
        self.endpoint = endpoint
        if self.tried is not None:
            self.tried.append(endpoint.name)
        self.scheduler.on_picked(decision.llm, endpoint, self.director.clock())

    def prefill_picked(self, endpoint: Endpoint) -> None:
        """A P/D prefill leg goes to `endpoint` (one of `decision.prefill`)."""
        if self.outcome is not None or self.prefill_endpoint is not None:
            return
        self.prefill_endpoint = endpoint
        self.scheduler.on_picked(self.decision.llm, endpoint, self.director.clock())

    def prefill_ended(self, ttft_s: float | None) -> None:
        """The prefill leg answered after `ttft_s` (its one token), or failed (None): then
        the decode pod prefills the prompt itself, and its bookkeeping says so."""
        endpoint, self.prefill_endpoint = self.prefill_endpoint, None
        if endpoint is None:
            return
        llm, now = self.decision.llm, self.director.clock()
        if ttft_s is not None:
            self.scheduler.on_first_token(llm, endpoint, ttft_s, now)
        else:
            llm.prefill_pod = None
        self.scheduler.on_finished(llm, endpoint, now)

    def attempt_failed(self) -> None:
        """The picked pod never started the request; its bookkeeping ends here."""
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            self.scheduler.on_finished(self.decision.llm, endpoint, self.director.clock())

    def unreachable(self) -> None:
        """The picked pod refused or dropped the connection before answering (a connect
        error, Envoy's UF / UH / UC): the store stops picking it until a fresh scrape, and
        this attempt's bookkeeping ends."""
        if self.endpoint is not None:
            self.director.connection_failed(self.endpoint)
        self.attempt_failed()

    def broke(self, *, error_event: bool) -> None:
        """The picked pod's stream broke after it started and a continuation is sought
        (core/request/resume.py): this attempt's bookkeeping ends (a pod that sent an
        error event may be picked again; one whose connection broke or went silent not
        until a fresh scrape, as `unreachable`). A continuation is a whole request: it
        carries no P/D `kv_transfer_params` (`resume.continuation`), so the pod it goes
        to prefills the prompt itself (`whole_from_here`), as when a prefill leg
        fails."""
        if error_event:
            self.attempt_failed()
        else:
            self.unreachable()
        self.whole_from_here()

    def whole_from_here(self) -> None:
        """The request goes on without its prefill leg's KV (pd_body.py `for_next_pod`,
        a continuation): the next pod picked prefills the prompt itself, and its
        bookkeeping says so."""
        self.decision.llm.prefill_pod = None

    def answered(
        self, status: int, streaming: bool, usage_scan_bytes: int = USAGE_SCAN_BYTES
    ) -> None:
        """The pod's status line and headers are in. A JSON answer is kept up to
        `usage_scan_bytes` to read its `usage` (SSE streams are never held)."""
        self.status = status
        self.usage = UsageScanner(streaming, usage_scan_bytes) if status == 200 else None
        if status >= 400:
            self._count_error(str(status))

    def first_byte(self) -> float:
        """The first byte of the answer reached the client: TTFT, reported once."""
        if self.first_byte_at or self.outcome is not None:
            return self.first_byte_at - self.started if self.first_byte_at else 0.0
        self.first_byte_at = self.director.clock()
        ttft = self.first_byte_at - self.started
        decision = self.decision
        if self.endpoint is not None:
            self.scheduler.on_first_token(decision.llm, self.endpoint, ttft, self.director.clock())
        self.director.child(
            self.director.metrics.ttft, decision.client_model, decision.target_model
        ).observe(ttft)
        return ttft

    def chunk(self, data: bytes) -> None:
        """Bytes of the answer as the client gets them (read for `usage`)."""
        if self.usage is not None:
            self.usage.feed(data)

    def finished(self) -> None:
        """The answer ended normally (whatever its status)."""
        self._end("ok")

    def cancelled(self, reason: str) -> None:
        """The request ended early: `CLIENT_CANCELLED` (counted apart, as the client's
        choice, not a failure), `RATE_LIMITED` (the client's limit, counted with the
        up-front refusals of `rejected{reason="rate_limited"}`), or an error code counted
        in the errors metric: `STREAM_BROKEN`, `EXPIRED`, `upstream_timeout`, ..."""
        if self.outcome is None:
            decision = self.decision
            if reason == CLIENT_CANCELLED:
                self.director.child(
                    self.director.metrics.cancelled, decision.client_model, decision.target_model
                ).inc()
            elif reason == RATE_LIMITED:
                self.director.child(
                    self.director.metrics.rejected, decision.client_model, RATE_LIMITED
                ).inc()
            else:
                self._count_error(reason)
        self._end(reason)

    # ------------------------------------------------------------------ end

    def _count_error(self, code: str) -> None:
        decision = self.decision
        self.director.child(
            self.director.metrics.errors, decision.client_model, decision.target_model, code
        ).inc()

    def expire(self) -> None:
        """The watchdog's call: the request outlived its maximum lifetime."""
        if self.outcome is not None:
            return
        log.warning("request %s (%s) exceeded its maximum lifetime", self.id, self.client_id)
        self.cancelled(EXPIRED)
        if self.on_expire is not None:
            self.on_expire()

    def _end(self, outcome: str) -> None:
        if self.outcome is not None:
            return
        self.outcome = outcome
        self.running.dec()
        director, decision = self.director, self.decision
        director.live.pop(self.id, None)
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            self.scheduler.on_finished(decision.llm, endpoint, self.director.clock())
        prefill, self.prefill_endpoint = self.prefill_endpoint, None
        if prefill is not None:  # a leg nobody reported the end of (the Envoy path's sidecar)
            self.scheduler.on_finished(decision.llm, prefill, self.director.clock())
        decision.gate.on_completion()
        labels = (decision.client_model, decision.target_model)
        usage = self.usage.close() if self.usage is not None and outcome == "ok" else None
        self.usage_found = usage
        if usage is not None:
            completion = output_tokens(usage)
            if completion is not None:
                director.child(director.metrics.output_tokens, *labels).observe(completion)
        if self.budget is not None:  # the usage says what it cost; else what was counted
            self.budget.close(total_tokens(usage) if usage is not None else None)
        if outcome == "ok" and 0 < self.status < 400 and self.first_byte_at:
            director.child(director.metrics.duration, *labels).observe(
                self.director.clock() - self.started
            )
        if director.decisions is not None:
            director.decisions.record(self.id, self.client_id, self.trace_id, self.compact())

    def compact(self) -> list[Any]:
        """What this request's decision was and how it went, as the decision log keeps it
        (positional, cheap to build; `decisions.expand_record` names it)."""
        decision = self.decision
        llm = decision.llm
        usage = self.usage_found
        explanation = llm.explanation
        return [
            decision.client_model,
            decision.target_model,
            decision.route.pool,
            llm.band,
            (explanation.profile if explanation is not None else "") or llm.profile or "",
            self.tried or [],
            decision.prefill[0].name if decision.prefill else None,
            self.outcome,
            self.status,
            decision.queued_s,
            decision.schedule_s,
            self.first_byte_at - self.started if self.first_byte_at else None,
            llm.prompt_tokens,
            input_tokens(usage) if usage is not None else None,
            output_tokens(usage) if usage is not None else None,
            cached_tokens(usage) if usage is not None else None,
            explanation.compact() if explanation is not None else None,
        ]

    def record(self) -> dict[str, Any]:
        """`compact`, named: the attributes of the request's trace spans and what the
        debug header returns, the same as `igw explain` shows."""
        return expand_record(self.compact())
