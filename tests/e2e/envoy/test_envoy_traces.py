"""One trace per request through real Envoy, every routing decision explained on it.

Envoy 1.40 with its OpenTelemetry tracer configured as Envoy Gateway v1.5 configures it
(EnvoyProxy `telemetry.tracing`, envoyproxy/bootstrap.py `_tracing`), `igw bbr` and
`igw picker` as processes exporting over OTLP/gRPC (the SDK's exporter, set by the
standard OTEL_* variables), and emulated vLLM pods making vLLM's `llm_request` span, all
export to one receiver built from opentelemetry-proto's `TraceService` (tests/
otlp_receiver.py). The picker and the body-based router sample parent-based at 0.1:
Envoy's sampled flag, not their own ratio, decides, so every request is recorded.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import aiohttp
import pytest
from envoy_harness import CONFIG, FLEET, EnvoyStack
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from otlp_receiver import OtlpReceiver, ReceivedSpan, ancestors

from inference_gateway.config.spec import TracingSpec
from inference_gateway.envoyproxy.settings import Address
from inference_gateway.envoyproxy.settings import Tracing as EnvoyTracing
from inference_gateway.telemetry.tracing import Tracing

pytestmark = pytest.mark.asyncio

REQUESTS = 100
#: the harness's fleet with two pods in every pool, so every decision has candidates
TRACED_FLEET: dict[str, Any] = {
    **FLEET,
    "pods": [{**p, "replicas": max(2, p["replicas"])} for p in FLEET["pods"]],
}
ENVOY_SERVICE = "igw.default"  # `<gateway>.<namespace>`, Envoy Gateway's default name


def _components(spans: list[ReceivedSpan]) -> dict[str, list[ReceivedSpan]]:
    out: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        key = {
            "igw-bbr": "bbr",
            "igw-picker": "picker",
            "vllm": "pod",
            ENVOY_SERVICE: "envoy",
        }.get(span.service, span.service)
        out.setdefault(key, []).append(span)
    return out


def _complete(trace: list[ReceivedSpan]) -> bool:
    parts = _components(trace)
    names = {s.name for s in trace}
    return {"envoy", "bbr", "picker", "pod"} <= set(parts) and "igw.schedule" in names


async def test_every_request_is_one_trace_from_envoy_to_the_pod() -> None:
    async with OtlpReceiver() as receiver:
        pod_tracing = Tracing.build(
            TracingSpec(enabled=True, sampling_ratio=0.1),
            "vllm",
            exporter=OTLPSpanExporter(endpoint=f"127.0.0.1:{receiver.port}", insecure=True),
        )
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test",
        }
        config: dict[str, Any] = {**CONFIG, "tracing": {"enabled": True, "samplingRatio": 0.1}}
        stack = EnvoyStack(
            TRACED_FLEET,
            config,
            env=env,
            pod_tracing=pod_tracing,
            tracing=EnvoyTracing(collector=Address("127.0.0.1", receiver.port)),
        )
        async with stack:
            client = stack.client()
            limit = asyncio.Semaphore(10)

            async def one(i: int) -> None:
                async with limit:
                    model = "llama-3.1-8b" if i % 4 else "qwen3-32b"
                    await client.chat.completions.create(
                        model=model,
                        messages=[{"role": "user", "content": f"request {i}"}],
                        max_tokens=3,
                        stream=bool(i % 2),
                    )

            await asyncio.gather(*(one(i) for i in range(REQUESTS)))
            await receiver.wait_for(
                lambda r: sum(_complete(t) for t in r.traces().values()) >= REQUESTS, 20.0
            )
            await pod_tracing.close()
            traces = receiver.traces()
            # the picker keeps the same decisions for `igw explain`, found by trace id
            some_trace = next(iter(traces))
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{stack.metrics_port}/debug/decisions/{some_trace}"
                async with session.get(url) as answer:
                    assert answer.status == 200
                    kept = (await answer.json())["decisions"]

    assert len(traces) == REQUESTS, f"{len(traces)} traces for {REQUESTS} requests"
    for trace_id, spans in traces.items():
        by_id = {s.span_id: s for s in spans}
        roots = [s for s in spans if not s.parent_id]
        assert len(roots) == 1, f"{trace_id}: roots {[(r.service, r.name) for r in roots]}"
        root = roots[0]
        assert root.service == ENVOY_SERVICE and root.kind == 2  # SERVER: Envoy's ingress
        for span in spans:  # every span hangs from that one root
            assert span is root or ancestors(span, by_id)[-1] is root, (span.service, span.name)
        parts = _components(spans)
        assert {"envoy", "bbr", "picker", "pod"} <= set(parts), sorted(parts)
        [schedule] = [s for s in spans if s.name == "igw.schedule"]
        assert by_id[schedule.parent_id].service == "igw-picker"
        pods = schedule.attributes["igw.candidates.pods"]
        assert pods and pods[0] == schedule.attributes["igw.endpoint"]
        scorers = [k for k in schedule.attributes if k.startswith("igw.scorer.")]
        assert any(k.endswith(".scores") for k in scorers) and any(
            k.endswith(".weight") for k in scorers
        )
        for key in (k for k in scorers if k.endswith(".scores")):
            assert len(schedule.attributes[key]) == len(pods)
        # the traceparent reached the pod: its span is in this trace, under Envoy's
        # upstream span (spawn_upstream_span), and the pod is the one the picker chose
        [pod] = parts["pod"]
        assert pod.name == "llm_request"
        assert by_id[pod.parent_id].service == ENVOY_SERVICE
        model = pod.attributes["gen_ai.response.model"]
        assert model in ("llama-3.1-8b", "qwen3-32b")
        [bbr] = parts["bbr"]
        assert bbr.attributes["gen_ai.request.model"] == model
        [picker] = [s for s in parts["picker"] if s.name == "igw.picker"]
        assert picker.attributes["gen_ai.request.model"] == model
        assert picker.attributes["igw.pool"] in ("plain", "small")
    assert kept and kept[0]["traceId"] == some_trace and kept[0]["explanation"]["top"]
    picture = os.environ.get("IGW_TRACE_PICTURE")
    if picture:  # docs/tracing.md's picture: one streamed request's trace
        from tools.trace_picture import render

        render(traces[some_trace], picture)
