"""The tracer every server holds (telemetry/tracing.py), against the OpenTelemetry SDK's
own in-memory exporter and the semantic-conventions package's own constants."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as upstream
from opentelemetry.semconv.schemas import Schemas

from inference_gateway.cli.explain import describe
from inference_gateway.config.spec import TracingSpec
from inference_gateway.envoyproxy.bootstrap import TRACING_CLUSTER, render
from inference_gateway.envoyproxy.settings import Address, GatewaySettings, PoolRoute, Tracing
from inference_gateway.errors import ConfigError
from inference_gateway.telemetry import tracing as ours
from inference_gateway.telemetry.tracing import Tracing as Tracer

SAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


def traced(ratio: float, **spec: object) -> tuple[Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    settings = TracingSpec(enabled=True, sampling_ratio=ratio, **spec)  # type: ignore[arg-type]
    return Tracer.build(settings, "igw-test", exporter=exporter, environ={}), exporter


def test_the_genai_attribute_names_are_the_conventions_own() -> None:
    """semantic conventions v1.44.0, as opentelemetry-semantic-conventions 0.66b2 ships
    them (`_incubating/attributes/gen_ai_attributes.py`, `schemas.py`)."""
    for name in (
        "GEN_AI_OPERATION_NAME",
        "GEN_AI_REQUEST_MODEL",
        "GEN_AI_REQUEST_STREAM",
        "GEN_AI_RESPONSE_MODEL",
        "GEN_AI_USAGE_INPUT_TOKENS",
        "GEN_AI_USAGE_OUTPUT_TOKENS",
        "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
    ):
        assert getattr(ours, name) == getattr(upstream, name)
    assert Schemas.V1_44_0.value == ours.SEMCONV_SCHEMA_URL
    assert upstream.GenAiOperationNameValues.CHAT.value == ours.operation_of("/v1/chat/completions")
    assert upstream.GenAiOperationNameValues.TEXT_COMPLETION.value == ours.operation_of(
        "/v1/completions"
    )


def test_off_makes_no_span_and_passes_the_callers_context_through() -> None:
    off = Tracer.off()
    span = off.start("x", headers={"traceparent": SAMPLED})
    assert not span.is_recording() and not off.enabled
    out: dict[str, str] = {}
    off.inject(span, out, {"traceparent": SAMPLED, "tracestate": "a=1", "other": "no"})
    assert out == {"traceparent": SAMPLED, "tracestate": "a=1"}
    assert Tracer.build(None, "igw-test").enabled is False
    assert Tracer.build(TracingSpec(), "igw-test").enabled is False  # off by default


@pytest.mark.parametrize(
    ("ratio", "parent", "recorded"),
    [
        (0.0, SAMPLED, True),  # the caller sampled it: recorded whatever the ratio
        (1.0, UNSAMPLED, False),  # the caller did not: neither do we
        (1.0, None, True),  # a new trace at ratio 1
        (0.0, None, False),  # and at ratio 0
    ],
)
def test_sampling_follows_the_parent_then_the_ratio(
    ratio: float, parent: str | None, recorded: bool
) -> None:
    tracer, exporter = traced(ratio)
    headers = {"traceparent": parent} if parent else {}
    root = tracer.start("root", headers=headers)
    child = tracer.start("child", parent=root)
    out: dict[str, str] = {}
    tracer.inject(child, out)
    child.end()
    root.end()
    tracer.flush()
    assert root.is_recording() is False  # ended
    assert len(exporter.get_finished_spans()) == (2 if recorded else 0)
    assert out["traceparent"].split("-")[1] == (
        parent.split("-")[1] if parent else f"{root.get_span_context().trace_id:032x}"
    )
    assert int(out["traceparent"].split("-")[3], 16) & 1 == recorded  # the sampled flag


def test_the_resource_and_the_exporter_come_from_the_standard_variables() -> None:
    exporter = InMemorySpanExporter()
    tracer = Tracer.build(
        TracingSpec(enabled=True, sampling_ratio=1.0),
        "igw-picker",
        exporter=exporter,
        environ={},
    )
    tracer.start("x").end()
    tracer.flush()
    [span] = exporter.get_finished_spans()
    assert span.resource.attributes["service.name"] == "igw-picker"
    assert span.instrumentation_scope.schema_url == ours.SEMCONV_SCHEMA_URL
    disabled = Tracer.build(
        TracingSpec(enabled=True), "igw-picker", environ={"OTEL_SDK_DISABLED": "true"}
    )
    assert not disabled.enabled
    with pytest.raises(ConfigError, match="only grpc"):
        Tracer.build(
            TracingSpec(enabled=True),
            "igw-picker",
            environ={"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
        )


def test_envoys_tracing_is_what_envoy_gateway_builds() -> None:
    """envoyproxy/gateway v1.5.0 `internal/xds/translator/tracing.go` buildHCMTracing and
    its testdata `out/xds-ir/tracing.listeners.yaml`: sampling 100/100/rate, the
    OpenTelemetry provider over envoy_grpc to cluster `tracing`, the service name
    `<gateway>.<namespace>`, sorted custom tags, an upstream span per request."""
    picker = Address("127.0.0.1", 9002)
    settings = GatewaySettings(
        routes=(PoolRoute("r", "p", picker),),
        tracing=Tracing(
            Address("otel-collector.monitoring", 4317),
            sampling_percent=10.0,
            literal_tags=(("zone", "a"), ("env", "dev")),
        ),
    )
    bootstrap = render(settings)
    listener = bootstrap["static_resources"]["listeners"][0]
    tracing = listener["filter_chains"][0]["filters"][0]["typed_config"]["tracing"]
    assert tracing["random_sampling"] == {"value": 10.0}
    assert tracing["client_sampling"] == tracing["overall_sampling"] == {"value": 100.0}
    assert tracing["spawn_upstream_span"] is True
    config = tracing["provider"]["typed_config"]
    assert tracing["provider"]["name"] == "envoy.tracers.opentelemetry"
    assert config["grpc_service"]["envoy_grpc"] == {
        "cluster_name": TRACING_CLUSTER,
        "authority": "otel-collector.monitoring",
    }
    assert config["service_name"] == "igw.default"
    assert [t["tag"] for t in tracing["custom_tags"]] == ["env", "zone"]
    [cluster] = [c for c in bootstrap["static_resources"]["clusters"] if c["name"] == "tracing"]
    assert cluster["type"] == "STRICT_DNS" and "typed_extension_protocol_options" in cluster


def test_igw_explain_prints_the_candidates_and_what_was_left_out() -> None:
    record = {
        "id": "igw-1",
        "requestId": "req-1",
        "traceId": "ab" * 16,
        "model": "sql-assistant",
        "targetModel": "sql-lora",
        "pool": "a10g",
        "band": "standard",
        "profile": "latency",
        "tried": ["pod-2"],
        "outcome": "ok",
        "status": 200,
        "queuedS": 0.001,
        "scheduleS": 0.0002,
        "ttftS": 0.05,
        "inputTokens": 10,
        "outputTokens": 5,
        "explanation": {
            "profile": "latency",
            "considered": 4,
            "candidates": 3,
            "weights": {"queue-scorer": 2.0},
            "top": [
                {"pod": "pod-2", "total": 2.0, "scores": {"queue-scorer": 1.0}},
                {"pod": "pod-1", "total": 1.0, "scores": {"queue-scorer": 0.5}},
            ],
            "excluded": {"stale": {"count": 1, "pods": ["pod-0"]}},
            "picked": "pod-2",
        },
    }
    text = describe(record)
    assert "model sql-assistant, -> sql-lora, pool a10g" in text
    assert "1. pod-2  total 2.000  (queue-scorer 1.000)" in text
    assert "left out (stale): 1: pod-0" in text
    assert "TTFT 50.00 ms" in text
