"""Traces through `igw global` → `igw serve` → emulated pods, and the explanation on demand.

Every tier exports over OTLP/gRPC (the SDK's exporter, set by the standard OTEL_*
variables) to one receiver built from opentelemetry-proto's `TraceService`
(tests/otlp_receiver.py); the pods make vLLM's `llm_request` span. In one process, as
tests/e2e/test_global_fleet.py runs the same tiers (each server has its own tracer and
resource, so the spans say which server made them).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from otlp_receiver import OtlpReceiver, ReceivedSpan, ancestors

from inference_gateway.assembly.serve import build_gateway
from inference_gateway.config.spec import TracingSpec
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.frontends.auth import Authenticator, Identity
from inference_gateway.frontends.global_router import build_global_router, parse_router_config
from inference_gateway.telemetry.tracing import Tracing

pytestmark = pytest.mark.asyncio
MODEL = "llama-3.1-8b"
FLEET = {"base_port": 0, "pods": [{"name": "c1", "gpu": "H100", "model": MODEL, "replicas": 2}]}
KEY = "team-a-key"
CLIENT_SPAN = "00f067aa0ba902b7"
CLIENT_TRACEPARENT = f"00-4bf92f3577b34da6a3ce929d0e0e4736-{CLIENT_SPAN}-01"


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


@asynccontextmanager
async def tier_one(
    receiver: OtlpReceiver, tracing: dict[str, Any], **options: Any
) -> AsyncIterator[tuple[str, Tracing]]:
    """Traced pods behind `igw serve` (in process); yields its URL and the pods' tracer."""
    pods = Tracing.build(
        TracingSpec(enabled=True),
        "vllm",
        exporter=OTLPSpanExporter(endpoint=f"127.0.0.1:{receiver.port}", insecure=True),
    )
    fleet = EmulatedFleet(FLEET, tracing=pods)
    async with fleet:
        endpoints = [
            Endpoint(e.name, e.host, e.port, pool="default", labels=e.labels, index=i)
            for i, e in enumerate(fleet.endpoints)
        ]
        config = parse_config({"tracing": tracing})
        app, _ = build_gateway(endpoints, config, emf_cluster="c1", **options)
        async with serving(app) as url:
            yield url, pods
    await pods.close()


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")


def _by_service(spans: list[ReceivedSpan], service: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.service == service]


async def test_global_and_serve_spans_form_one_trace_per_request(
    otel_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        # tier 1 samples 1 in 10 new traces: tier 2's sampled flag decides for it
        async with tier_one(receiver, {"enabled": True, "samplingRatio": 0.1}) as (cluster, _):
            spec = parse_router_config(
                {
                    "clusters": [{"name": "c1", "region": "r1", "endpoint": cluster}],
                    "tracing": {"enabled": True, "samplingRatio": 1.0},
                }
            )
            app, router = build_global_router(spec)
            async with serving(app) as url:
                for _ in range(50):  # the router polls the cluster's heartbeat first
                    if router.registry.routable():
                        break
                    await asyncio.sleep(0.05)
                client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
                for i in range(10):
                    await client.chat.completions.create(
                        model=MODEL,
                        messages=[{"role": "user", "content": f"hello {i}"}],
                        max_tokens=3,
                        stream=bool(i % 2),
                        extra_headers={"traceparent": CLIENT_TRACEPARENT} if i == 0 else None,
                    )
                await receiver.wait_for(
                    lambda r: (
                        len(_by_service(r.spans, "vllm")) >= 10
                        and len([s for s in r.spans if s.name == "igw.schedule"]) >= 10
                        and len(_by_service(r.spans, "igw-global")) >= 30
                    ),
                )
                async with aiohttp.ClientSession() as session:
                    trace_id = CLIENT_TRACEPARENT.split("-")[1]
                    async with session.get(f"{url}/debug/decisions/{trace_id}") as answer:
                        assert answer.status == 200
                        [tier2] = (await answer.json())["decisions"]
                    async with session.get(f"{cluster}/debug/decisions/{trace_id}") as answer:
                        assert answer.status == 200
                        [tier1] = (await answer.json())["decisions"]
        traces = receiver.traces()

    assert len(traces) == 10
    usage: list[int | None] = []
    for trace_id, spans in traces.items():
        by_id = {s.span_id: s for s in spans}
        roots = [s for s in spans if s.parent_id not in by_id]
        assert len(roots) == 1, [(s.service, s.name) for s in roots]
        [root] = roots
        assert root.service == "igw-global" and root.name == f"chat {MODEL}"
        # a client's sampled traceparent is continued, not replaced
        if trace_id == CLIENT_TRACEPARENT.split("-")[1]:
            assert root.parent_id == CLIENT_SPAN
        else:
            assert root.parent_id == ""
        for span in spans:
            assert span is root or ancestors(span, by_id)[-1] is root
        [route] = [s for s in spans if s.name == "igw.route"]
        explained = orjson.loads(route.attributes["igw.explanation"])
        assert (
            explained["top"][0]["cluster"] == "c1"
            and "kv_headroom" in (explained["top"][0]["signals"])
        )
        [attempt] = [s for s in _by_service(spans, "igw-global") if s.kind == 3]  # CLIENT
        [serve] = [s for s in _by_service(spans, "igw-serve") if s.kind == 2]
        assert serve.parent_id == attempt.span_id  # tier 2's traceparent reached tier 1
        assert serve.attributes["gen_ai.request.model"] == MODEL
        usage.append(serve.attributes.get("gen_ai.usage.output_tokens"))
        [schedule] = [s for s in spans if s.name == "igw.schedule"]
        assert schedule.parent_id == serve.span_id
        assert len(schedule.attributes["igw.candidates.pods"]) == 2
        [pod_attempt] = [s for s in _by_service(spans, "igw-serve") if s.kind == 3]
        [pod] = _by_service(spans, "vllm")
        assert pod.parent_id == pod_attempt.span_id  # and tier 1's reached the pod
        assert pod_attempt.attributes["igw.target"] == schedule.attributes["igw.endpoint"]
    assert usage.count(3) >= 5  # every answer that reported its usage (the JSON ones)
    assert tier2["explanation"]["picked"] == "c1" and tier2["tried"] == ["c1"]
    assert tier1["explanation"]["top"] and tier1["outcome"] == "ok"


async def test_untraced_gateway_passes_the_callers_context_to_the_pod(
    otel_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tracing off (the default) in `igw serve`: no span of its own, and the client's
    traceparent reaches the traced pod unchanged, so their spans still join up."""
    async with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        async with tier_one(receiver, {}) as (url, _):
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
            await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=2,
                extra_headers={"traceparent": CLIENT_TRACEPARENT},
            )
            await receiver.wait_for(lambda r: len(r.spans) >= 1)
    [pod] = receiver.spans
    assert pod.service == "vllm" and pod.parent_id == CLIENT_SPAN
    assert pod.trace_id == CLIENT_TRACEPARENT.split("-")[1]


async def test_the_debug_header_answers_listed_clients_only(otel_env: None) -> None:
    """`x-igw-explain: true` returns the decision to a client `headerClients` lists;
    another authenticated client asking gets nothing, nor may it read /debug/decisions."""
    keys = {
        hashlib.sha256(k.encode()).digest(): Identity(c)
        for k, c in ((KEY, "team-a"), ("other-key", "team-b"))
    }
    tracing = {"explain": {"headerClients": ["team-a"]}}
    async with (
        OtlpReceiver() as receiver,
        tier_one(receiver, tracing, auth=Authenticator(keys)) as (url, _),
        aiohttp.ClientSession() as session,
    ):
        body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
        answers = {}
        for key in (KEY, "other-key"):
            headers = {"authorization": f"Bearer {key}", "x-igw-explain": "true"}
            async with session.post(f"{url}/v1/completions", json=body, headers=headers) as answer:
                assert answer.status == 200
                answers[key] = answer.headers.get("x-igw-explanation")
        # the decisions endpoint: a listed client may read it, another may not
        for key, status in ((KEY, 200), ("other-key", 404)):
            async with session.get(
                f"{url}/debug/decisions?limit=5",
                headers={"authorization": f"Bearer {key}"},
            ) as answer:
                assert answer.status == status
    explained = orjson.loads(answers[KEY] or "{}")
    assert explained["explanation"]["picked"] in ("c1-0", "c1-1")
    assert len(explained["explanation"]["top"]) == 2
    assert answers["other-key"] is None
