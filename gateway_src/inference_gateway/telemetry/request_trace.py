"""One request's spans, for the servers that route (`igw serve`, `igw picker`, `igw global`).

The servers call a `RequestTrace` at a few points and never touch the SDK themselves:

    RequestTrace(tracing, headers, path)     the server span, under the caller's context
    .decided(life) / .routed(choice, ...)    admission and scheduling spans (tier 1), or
                                             the cluster choice (tier 2), explained
    .attempt(...) → .attempt_ended(...)      one CLIENT span per try at a pod or cluster,
                                             its context injected into that try's headers
    .leg(name, ...)                          a span of its own: the P/D prefill leg, a
                                             stream migration (`MIGRATION`)
    .finished(...)                           usage and outcome; every open span ends

Admission and scheduling happen inside the director, which knows no tracer: it measures
how long each took (`Decision.queued_s`, `schedule_s`) and `decided` lays the two spans
back-to-back ending now. Their attributes, and the root's, come from the request's
decision record (`RequestLifecycle.record`), so a span and `igw explain` say the same.

Span names and attributes: the server span and each attempt are named
`{gen_ai.operation.name} {model}` (GenAI semantic conventions v1.44.0: "chat
llama-3.1-8b"), kinds SERVER and CLIENT; the gateway's own spans are `igw.admission`,
`igw.schedule`, `igw.route` (tier 2), `igw.prefill`, `igw.migration`. The scheduling
span carries the candidates as parallel arrays (`igw.candidates.pods`, `.totals`,
`igw.scorer.<name>.scores` and `.weight`, `igw.candidates.predicted_ttft_s`), the
exclusions counted by reason (`igw.excluded.<reason>`) and the whole summary as JSON
(`igw.explanation`). Nothing is computed for a request whose trace is not sampled
(`recording` False), beyond the trace context it passes on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

import orjson
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from inference_gateway.telemetry.tracing import (
    GEN_AI_OPERATION_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    Tracing,
    operation_of,
)

if TYPE_CHECKING:
    from inference_gateway.core.request.lifecycle import RequestLifecycle

__all__ = ["MIGRATION", "PREFILL", "RequestTrace", "explanation_attributes"]

PREFILL = "igw.prefill"
MIGRATION = "igw.migration"  # a broken stream resumed on the next-ranked target


class RequestTrace:
    __slots__ = ("_attempt", "incoming", "named", "operation", "root", "tracing")

    def __init__(
        self,
        tracing: Tracing,
        incoming: Mapping[str, str],
        path: str,
        *,
        kind: SpanKind = SpanKind.SERVER,
        name: str | None = None,
    ) -> None:
        self.tracing = tracing
        self.incoming = incoming
        self.operation = operation_of(path)
        self.named = name is not None  # else named `{operation} {model}` once known
        self.root = tracing.start(name or self.operation, headers=incoming, kind=kind)
        self._attempt: Span | None = None

    @property
    def recording(self) -> bool:
        return self.root.is_recording()

    @property
    def trace_id(self) -> str:
        """The trace's id (32 hex digits), or "" when tracing is off."""
        context = self.root.get_span_context()
        return f"{context.trace_id:032x}" if context.is_valid else ""

    # ------------------------------------------------------------------ decisions

    def decided(self, life: RequestLifecycle) -> None:
        """Tier 1's decision: the admission wait and the scheduling cycle, explained."""
        life.trace_id = self.trace_id
        if not self.recording:
            return
        decision = life.decision
        record = life.record()
        end = time.time_ns()
        scheduled = end - int(decision.schedule_s * 1e9)
        admitted = scheduled - int(decision.queued_s * 1e9)
        if not self.named:
            self.root.update_name(f"{self.operation} {decision.client_model}")
        self.root.set_attributes(
            {
                GEN_AI_OPERATION_NAME: self.operation,
                GEN_AI_REQUEST_MODEL: decision.client_model,
                "igw.request_id": life.id,
                "igw.pool": record["pool"],
                "igw.band": record["band"],
                "igw.profile": record["profile"],
                "igw.endpoint": decision.ranked[0].name,
            }
        )
        self._span(
            "igw.admission",
            admitted,
            scheduled,
            {
                "igw.band": record["band"],
                "igw.pool": record["pool"],
                "igw.queued_s": record["queuedS"],
            },
        )
        attributes: dict[str, Any] = {
            "igw.profile": record["profile"],
            "igw.endpoint": decision.ranked[0].name,
            "igw.endpoint.address": decision.ranked[0].hostport,
            "igw.fallbacks": [e.name for e in decision.ranked[1:4]],
            "igw.prompt_tokens_estimate": record["promptTokensEstimate"],
        }
        if decision.prefill:
            attributes["igw.prefill_pod"] = decision.prefill[0].name
        explanation = record.get("explanation")
        if explanation is not None:
            attributes.update(explanation_attributes(explanation))
        self._span("igw.schedule", scheduled, end, attributes)

    def routed(self, name: str, model: str, attributes: dict[str, Any], took_s: float) -> None:
        """Tier 2's decision (`igw.route`): the clusters ranked, explained."""
        if not self.recording:
            return
        end = time.time_ns()
        if not self.named:
            self.root.update_name(f"{self.operation} {model}")
        self.root.set_attributes(
            {GEN_AI_OPERATION_NAME: self.operation, GEN_AI_REQUEST_MODEL: model}
        )
        self._span(name, end - int(took_s * 1e9), end, attributes)

    def refused(self, status: int, code: str) -> None:
        """Answered without a pod (4xx/5xx of the gateway's own)."""
        self.root.set_attribute("http.response.status_code", status)
        self.root.set_attribute("error.type", code)
        if status >= 500:
            self.root.set_status(Status(StatusCode.ERROR, code))

    # ------------------------------------------------------------------ attempts

    def attempt(
        self,
        target: str,
        address: str,
        port: int,
        model: str,
        headers: MutableMapping[str, str],
        attributes: dict[str, Any] | None = None,
    ) -> None:
        """A try at `target`: its CLIENT span (ending an earlier one), whose context goes
        into `headers` (the caller's own when tracing is off)."""
        self.attempt_ended()
        span = self._attempt = self.tracing.start(
            f"{self.operation} {model}", parent=self.root, kind=SpanKind.CLIENT
        )
        if span.is_recording():
            span.set_attributes(
                {
                    GEN_AI_OPERATION_NAME: self.operation,
                    GEN_AI_REQUEST_MODEL: model,
                    "server.address": address,
                    "server.port": port,
                    "igw.target": target,
                    **(attributes or {}),
                }
            )
        self.tracing.inject(span, headers, self.incoming)

    def first_byte(self) -> None:
        if self._attempt is not None and self._attempt.is_recording():
            self._attempt.add_event("first_byte")

    def attempt_ended(self, status: int | None = None, error: str | None = None) -> None:
        span, self._attempt = self._attempt, None
        if span is None or not span.is_recording():
            return
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def leg(
        self,
        name: str,
        headers: MutableMapping[str, str] | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> Span:
        """A span of its own under the request (`PREFILL`, `MIGRATION`, ...), its context
        injected into `headers` when given; the caller ends it."""
        span = self.tracing.start(name, parent=self.root, kind=SpanKind.CLIENT)
        if attributes and span.is_recording():
            span.set_attributes(attributes)
        if headers is not None:
            self.tracing.inject(span, headers, self.incoming)
        return span

    # ------------------------------------------------------------------ end

    def finished(
        self,
        life: RequestLifecycle | None = None,
        *,
        status: int | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> None:
        """The answer ended: the open attempt and the server span end, with the usage
        and outcome the lifecycle recorded."""
        self.attempt_ended(status)
        root = self.root
        if not root.is_recording():
            return
        if life is not None:
            record = life.record()
            values = {
                GEN_AI_RESPONSE_MODEL: record["targetModel"],
                GEN_AI_USAGE_INPUT_TOKENS: record["inputTokens"],
                GEN_AI_USAGE_OUTPUT_TOKENS: record["outputTokens"],
                GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: record["cachedTokens"],
                "igw.outcome": record["outcome"],
                "igw.ttft_s": record["ttftS"],
                "igw.tried": record["tried"],
                "http.response.status_code": record["status"] or status,
            }
            root.set_attributes({k: v for k, v in values.items() if v is not None})
            if record["outcome"] not in ("ok", "client_cancelled"):
                root.set_status(Status(StatusCode.ERROR, str(record["outcome"])))
        elif status is not None:
            root.set_attribute("http.response.status_code", status)
        if attributes:
            root.set_attributes(attributes)
        root.end()

    def _span(self, name: str, start_ns: int, end_ns: int, attributes: dict[str, Any]) -> None:
        span = self.tracing.start(name, parent=self.root, start_ns=start_ns, attributes=attributes)
        span.end(end_ns)


def explanation_attributes(summary: dict[str, Any]) -> dict[str, Any]:
    """A scheduling summary (`Explanation.summary`) as span attributes: parallel arrays
    over the top candidates, best first, and the summary itself as JSON."""
    top = summary["top"]
    out: dict[str, Any] = {
        "igw.candidates.count": summary["candidates"],
        "igw.candidates.considered": summary["considered"],
        "igw.candidates.pods": [row["pod"] for row in top],
        "igw.candidates.totals": [row["total"] or 0.0 for row in top],
        "igw.explanation": orjson.dumps(summary).decode(),
    }
    for scorer, weight in summary["weights"].items():
        out[f"igw.scorer.{scorer}.weight"] = weight
        out[f"igw.scorer.{scorer}.scores"] = [row["scores"].get(scorer, 0.0) for row in top]
    predicted = [row.get("predictedTtftS") for row in top]
    if all(predicted) and predicted:
        out["igw.candidates.predicted_ttft_s"] = [next(iter(p.values())) for p in predicted]
    for reason, entry in summary["excluded"].items():
        out[f"igw.excluded.{reason}"] = entry["count"]
    return out
