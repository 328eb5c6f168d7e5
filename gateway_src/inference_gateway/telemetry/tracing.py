"""Traces: W3C trace context in and out of every server, OpenTelemetry spans out over OTLP.

Each server (`igw serve`, `picker`, `bbr`, `auth`, `global`, `pd-sidecar`, and the
emulated vLLM pod, as vLLM's `--otlp-traces-endpoint` does) holds one `Tracing`:

* **off** (`Tracing.off()`, the default): no SDK object exists; `start` hands back the
  API's invalid span, on which every call is a no-op, and `inject` copies the caller's
  own `traceparent` / `tracestate` to the next hop unchanged, so a traced client and a
  traced model server still share one trace through an untraced gateway;
* **on** (`tracing.enabled` in the config, or the flag of a server without one): spans
  from the OpenTelemetry SDK, sampled parent-based by a trace-id ratio (`samplingRatio`,
  default 0.1): a request whose caller sampled it is recorded, one whose caller did not
  is not, and a new trace is recorded with that probability. Spans leave in batches on
  the SDK's own thread (`BatchSpanProcessor`, tuned by the standard `OTEL_BSP_*`
  variables), so a request never waits for an export.

The exporter is OTLP over gRPC, configured only by the standard variables:
`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (default
`http://localhost:4317`), `..._HEADERS`, `..._TIMEOUT`, `..._COMPRESSION`,
`..._CERTIFICATE`, `..._INSECURE`; the resource from `OTEL_RESOURCE_ATTRIBUTES` and
`OTEL_SERVICE_NAME` (which override the server's default name, `igw-<command>`).
`OTEL_EXPORTER_OTLP_PROTOCOL` other than `grpc` is refused with a clear error rather
than ignored. `OTEL_SDK_DISABLED=true` turns tracing off whatever the config says.

Attributes follow the OpenTelemetry semantic conventions v1.44.0 (`SEMCONV_SCHEMA_URL`;
the GenAI attributes are at "development" status there) and add the gateway's own under
`igw.` (telemetry/request_trace.py puts them on the spans).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from opentelemetry.context import Context
from opentelemetry.trace import (
    INVALID_SPAN,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    TraceFlags,
    Tracer,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from inference_gateway.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from inference_gateway.config.spec import TracingSpec

__all__ = [
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_REQUEST_STREAM",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "SEMCONV_SCHEMA_URL",
    "TRACEPARENT",
    "TRACESTATE",
    "SpanKind",
    "Tracing",
    "operation_of",
]

log = logging.getLogger(__name__)

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
SEMCONV_SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
# GenAI attributes, semantic conventions v1.44.0 (opentelemetry-semantic-conventions
# 0.66b2, `_incubating/attributes/gen_ai_attributes.py`; a test holds them equal)
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
# the convention's well-known `gen_ai.operation.name` values, by OpenAI path
_OPERATIONS = {"/v1/chat/completions": "chat", "/v1/completions": "text_completion"}
_PROPAGATOR = TraceContextTextMapPropagator()
_RANDOM = random.Random()  # sampling draws and ids need to be unique, not secret
_draw = _RANDOM.random
_bits = _RANDOM.getrandbits
_UNSAMPLED = TraceFlags(TraceFlags.DEFAULT)


def operation_of(path: str) -> str:
    return _OPERATIONS.get(path, "chat")


class Tracing:
    """One server's tracer (module docstring); `enabled` says whether spans are made."""

    def __init__(
        self,
        tracer: Tracer | None = None,
        provider: TracerProvider | None = None,
        root_ratio: float | None = None,
    ) -> None:
        """`root_ratio`: parent-based sampling whose root decision `start` makes itself
        (the provider's sampler then records every root it is asked for)."""
        self._tracer = tracer
        self._provider = provider
        self._root_ratio = root_ratio
        self.enabled = tracer is not None

    @classmethod
    def off(cls) -> Tracing:
        return cls()

    @classmethod
    def build(
        cls,
        spec: TracingSpec | None,
        service: str,
        *,
        exporter: SpanExporter | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> Tracing:
        """Tracing as `spec` says (None or disabled: off). `exporter` replaces the OTLP
        one (tests); ConfigError for an OTLP protocol other than gRPC."""
        if spec is None or not spec.enabled:
            return cls.off()
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            log.info("%s: OTEL_SDK_DISABLED=true, tracing off", service)
            return cls.off()
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

        from inference_gateway import __version__

        # Parent-based: `start` draws the root decision itself and asks the SDK only for
        # the spans it records, so an unsampled request costs no SDK span (~10 us each)
        ratio = TraceIdRatioBased(spec.sampling_ratio)
        sampler = ParentBased(ALWAYS_ON) if spec.parent_based else ratio
        resource = Resource.create({"service.name": service, "service.version": __version__}).merge(
            OTELResourceDetector().detect()
        )  # OTEL_SERVICE_NAME / _RESOURCE_ATTRIBUTES win
        provider = TracerProvider(sampler=sampler, resource=resource)
        provider.add_span_processor(BatchSpanProcessor(exporter or _otlp_exporter(environ)))
        tracer = provider.get_tracer("inference_gateway", schema_url=SEMCONV_SCHEMA_URL)
        log.info(
            "%s: tracing on, %s sampling ratio %g",
            service,
            "parent-based" if spec.parent_based else "root",
            spec.sampling_ratio,
        )
        return cls(tracer, provider, spec.sampling_ratio if spec.parent_based else None)

    # ------------------------------------------------------------------ spans

    def start(
        self,
        name: str,
        *,
        headers: Mapping[str, str] | None = None,
        parent: Span | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: dict[str, Any] | None = None,
        start_ns: int | None = None,
    ) -> Span:
        """A span under `parent`, else under the trace context `headers` carry (W3C
        `traceparent` / `tracestate`), else a new trace's root. Off: the invalid span."""
        tracer = self._tracer
        if tracer is None:
            return INVALID_SPAN
        context: Context | None = None
        if parent is not None:
            if not parent.is_recording():
                # an unsampled trace: its children would be dropped too, so the parent
                # stands in for them (its context is all the next hop needs: the trace
                # id and "not sampled"), saving the SDK's ~10 us per span
                return parent
            context = set_span_in_context(parent)
        elif headers is not None:
            context = _PROPAGATOR.extract(headers)
        if self._root_ratio is not None:
            caller = get_current_span(context).get_span_context() if context else None
            if caller is not None and caller.is_valid:
                if not caller.trace_flags.sampled:  # the caller's "no" holds, at no cost
                    return NonRecordingSpan(caller)
            elif _draw() >= self._root_ratio:  # a new trace, not sampled: its ids only
                return NonRecordingSpan(
                    SpanContext(_bits(128), _bits(64), is_remote=False, trace_flags=_UNSAMPLED)
                )
        return tracer.start_span(
            name, context=context, kind=kind, attributes=attributes, start_time=start_ns
        )

    def inject(
        self,
        span: Span,
        headers: MutableMapping[str, str],
        incoming: Mapping[str, str] | None = None,
    ) -> None:
        """The trace context for the next hop: `span`'s (sampled or not) when tracing,
        else the caller's own headers, passed through unchanged."""
        if self._tracer is None:
            if incoming is not None:
                for name in (TRACEPARENT, TRACESTATE):
                    value = incoming.get(name)
                    if value is not None:
                        headers[name] = value
            return
        _PROPAGATOR.inject(headers, context=set_span_in_context(span))

    # ------------------------------------------------------------------ export

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued now (blocking); True when it all went."""
        if self._provider is None:
            return True
        return self._provider.force_flush(int(timeout_s * 1000))

    async def close(self) -> None:
        """Export what is left and stop the exporter thread (on a worker thread: the
        SDK blocks while it flushes)."""
        provider, self._provider, self._tracer = self._provider, None, None
        self.enabled = False
        if provider is not None:
            await asyncio.to_thread(provider.shutdown)


def _otlp_exporter(environ: Mapping[str, str]) -> SpanExporter:
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    )
    if protocol.strip().lower() != "grpc":
        raise ConfigError(
            "tracing",
            [f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: only grpc is supported (OTLP/gRPC)"],
        )
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, TLS, timeout: the OTEL_* variables
