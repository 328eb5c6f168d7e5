"""A test OTLP/gRPC trace receiver: the collector's side of the wire, on loopback.

Built from the OpenTelemetry protocol's own service definition, as the opentelemetry-proto
package (1.45.2) generates it from open-telemetry/opentelemetry-proto
`opentelemetry/proto/collector/trace/v1/trace_service.proto`: the service
`opentelemetry.proto.collector.trace.v1.TraceService` with its one unary method `Export`
(`ExportTraceServiceRequest` → `ExportTraceServiceResponse`), and the span messages of
`opentelemetry/proto/trace/v1/trace.proto`. Every peer that exports here (Envoy's
OpenTelemetry tracer, the OpenTelemetry Python SDK's OTLP exporter in `igw` processes)
speaks exactly this, so a span the receiver decodes is one a collector would take.

`OtlpReceiver.spans` are flattened `ReceivedSpan`s (ids in hex, attributes as Python
values, the exporting service's name from the resource); `traces()` groups them.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as pb_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["OtlpReceiver", "ReceivedSpan"]


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


class _Service(pb_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, receiver: OtlpReceiver) -> None:
        self.receiver = receiver

    async def Export(  # the protocol's method name
        self, request: pb.ExportTraceServiceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.receiver.spans.append(
                        ReceivedSpan(
                            service=service,
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes={kv.key: _value(kv.value) for kv in span.attributes},
                            events=tuple(e.name for e in span.events),
                        )
                    )
        self.receiver.batches += 1
        return pb.ExportTraceServiceResponse()


class OtlpReceiver:
    """`async with OtlpReceiver() as receiver:` → `receiver.endpoint` (http://127.0.0.1:P)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.batches = 0
        self.port = 0
        self._server: grpc.aio.Server | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = grpc.aio.server()
        pb_grpc.add_TraceServiceServicer_to_server(_Service(self), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=0.5)
            self._server = None

    async def __aenter__(self) -> OtlpReceiver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        out: dict[str, list[ReceivedSpan]] = defaultdict(list)
        for span in self.spans:
            out[span.trace_id].append(span)
        return dict(out)

    async def wait_for(self, done: Any, timeout_s: float = 15.0) -> None:
        """Until `done(self)` is true (exporters batch), or `timeout_s` passed."""
        deadline = time.monotonic() + timeout_s
        while not done(self) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)


def ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[ReceivedSpan]:
    """The span's parents up to the root (nearest first); stops at a missing parent."""
    out = []
    current = span
    while current.parent_id and current.parent_id in by_id:
        current = by_id[current.parent_id]
        out.append(current)
    return out
