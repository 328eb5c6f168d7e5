"""The body-based router (`igw bbr`): an ext_proc that lifts `model` into a header.

HTTPRoutes match headers, not JSON bodies, so the first ext_proc in Envoy's chain reads
the body's `model` and sets `X-Gateway-Model-Name` and `X-Gateway-Base-Model-Name` (the
base model of a LoRA adapter the config lists, else the model itself: upstream sets it
on every request, so a route matching it serves base-model requests too), clearing the
route cache so the route of the pool that serves the model matches. The body itself
passes through unchanged. A body without a `model` string passes through without the
headers: the default route's picker then answers 400 in OpenAI shape, so there is one
place that words errors.

It sits in front of every request and fails closed, so what a client sends must not
reach Envoy as something it refuses with a 500, nor grow the router: a `model` no route
could carry (too long, control characters: `body.check_model`, the rule the picker
and `igw serve` apply) is answered here with the same OpenAI-shaped 400, and the body is
collected by the shared ext_proc driver (`extproc/stream.py`): the picker's cap (413),
one budget for all streams (503), nothing kept once a stream ends.

Traces: with `tracing.enabled` in its config, each stream is one SERVER span `igw.bbr`
under the trace context of the stream's gRPC metadata (Envoy's ext_proc span), from the
request headers until the routing headers are answered, with the model it read
(`gen_ai.request.model`) and the base model it set.
"""

from __future__ import annotations

import ssl
from typing import Any

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from grpc_health.v1 import health_pb2

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.request.body import check_model, model_of
from inference_gateway.frontends.extproc.stream import (
    FULL_DUPLEX,
    MAX_BODY_BYTES,
    BodyBudget,
    CallChannel,
    Processor,
    Responses,
    drive,
    max_message,
)
from inference_gateway.frontends.extproc.wire import (
    body_chunks,
    body_replacement,
    headers_response,
    trailers_response,
)
from inference_gateway.telemetry.tracing import GEN_AI_REQUEST_MODEL, SpanKind, Tracing
from inference_gateway.transport.http2_server import (
    Call,
    ConnectionPolicy,
    HealthService,
    Http2GrpcServer,
    Method,
)

__all__ = [
    "BASE_MODEL_HEADER",
    "MODEL_HEADER",
    "BodyRouter",
    "model_headers",
    "serve_call",
    "start_bbr",
]

MODEL_HEADER = "X-Gateway-Model-Name"
BASE_MODEL_HEADER = "X-Gateway-Base-Model-Name"
SERVICE_NAME = "envoy.service.ext_proc.v3.ExternalProcessor"
PROCESS_PATH = f"/{SERVICE_NAME}/Process"


class BodyRouter:
    """Model name → routing headers; adapters map to their base model via the config."""

    def __init__(self, config: GatewayConfigSpec | None = None) -> None:
        self.base: dict[str, str] = {}
        for model in config.models if config else []:
            for adapter in model.adapters:
                self.base[adapter] = model.name

    def headers(self, body: bytes) -> dict[str, str]:
        """The routing headers of a body; none without a `model` string; a 400
        `Rejection` for a `model` no header can carry (`check_model`)."""
        model = model_of(body)
        if not model:
            return {}
        check_model(model)
        return {MODEL_HEADER: model, BASE_MODEL_HEADER: self.base.get(model, model)}


def model_headers(body: bytes, config: GatewayConfigSpec | None = None) -> dict[str, str]:
    return BodyRouter(config).headers(body)


class _Exchange(Processor):
    """One request's stream: the body collected by the driver, then the headers."""

    def __init__(
        self,
        router: BodyRouter,
        budget: BodyBudget,
        mode: int,
        max_body_bytes: int,
        span: Any = None,
    ) -> None:
        super().__init__(budget, max_body_bytes, mode, mode)
        self.router = router
        self.routed = False  # the headers answer went out
        self.span = span  # this stream's `igw.bbr` span, ended once routed

    async def on_request_headers(self, request: pb.ProcessingRequest) -> Responses:
        if request.request_headers.end_of_stream or self.request_mode != FULL_DUPLEX:
            self.routed = True
            return [headers_response()]
        return []  # full duplex: the answer waits for the body

    async def on_request_body(self, request: pb.ProcessingRequest) -> Responses:
        part = request.request_body
        body = self.collect(part.body, part.end_of_stream)
        return self.pending() if body is None else self._route(body, part.end_of_stream)

    async def on_request_trailers(self, request: pb.ProcessingRequest) -> Responses:
        # The body ended without end_of_stream (trailers follow): answer it now.
        out = [] if self.routed else self._route(self.collect(b"", True) or b"", False)
        return out if self.closed else [*out, trailers_response()]

    def _route(self, body: bytes, end_of_stream: bool) -> Responses:
        headers = self.router.headers(body)  # a Rejection is answered by `handle`
        self.routed = True
        self.end_span(headers)
        if self.request_mode == FULL_DUPLEX:
            return [
                headers_response(set_headers=headers, clear_route_cache=bool(headers)),
                *body_chunks(body, end_of_stream=end_of_stream),
            ]
        return [body_replacement(None, set_headers=headers, clear_route_cache=bool(headers))]

    def end_span(self, headers: dict[str, str] | None = None) -> None:
        span, self.span = self.span, None
        if span is None:
            return
        if headers:
            span.set_attribute(GEN_AI_REQUEST_MODEL, headers[MODEL_HEADER])
            span.set_attribute("igw.base_model", headers[BASE_MODEL_HEADER])
        span.end()

    async def on_response_headers(self, request: pb.ProcessingRequest) -> Responses:
        return [headers_response(request=False)]

    async def on_response_body(self, request: pb.ProcessingRequest) -> Responses:
        part = request.response_body
        if self.response_mode == FULL_DUPLEX:
            return list(body_chunks(part.body, request=False, end_of_stream=part.end_of_stream))
        return [body_replacement(None, request=False)]

    async def on_response_trailers(self, request: pb.ProcessingRequest) -> Responses:
        return [trailers_response(request=False)]


async def serve_call(
    router: BodyRouter,
    call: Call,
    default_mode: int = FULL_DUPLEX,
    budget: BodyBudget | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    tracing: Tracing | None = None,
) -> None:
    """One `Process` stream on `Http2GrpcServer`, run by the shared ext_proc driver."""
    span = None
    if tracing is not None and tracing.enabled:
        span = tracing.start("igw.bbr", headers=call.headers, kind=SpanKind.SERVER)
    exchange = _Exchange(router, budget or BodyBudget(), default_mode, max_body_bytes, span)
    try:
        await drive(exchange, CallChannel(call))
    finally:
        exchange.end_span()


async def start_bbr(
    config: GatewayConfigSpec | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 9004,
    ssl_context: ssl.SSLContext | None = None,
    policy: ConnectionPolicy | None = None,
    budget: BodyBudget | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> tuple[Http2GrpcServer, int]:
    """A started server with the body router and a SERVING health service, on the
    picker's own HTTP/2 server (grpc.aio cost about 0.8 ms of CPU per request).
    `budget`: what its streams may hold at once of bodies still arriving; a body over
    `max_body_bytes` is a 413, the picker's own limit."""
    router = BodyRouter(config)
    tracing = Tracing.build(config.tracing if config else None, "igw-bbr")
    budget = budget or BodyBudget()
    health = HealthService()
    for service in ("", SERVICE_NAME):
        await health.set(service, health_pb2.HealthCheckResponse.SERVING)

    async def process(call: Call) -> None:
        await serve_call(
            router, call, budget=budget, max_body_bytes=max_body_bytes, tracing=tracing
        )

    handlers = {
        PROCESS_PATH: Method(process, max_message=max_message(max_body_bytes)),
        **health.handlers(),
    }
    server = Http2GrpcServer(handlers, ssl_context=ssl_context, policy=policy)
    bound = await server.start(host, port)
    return server, bound
