"""The body-based router (`igw bbr`): an ext_proc that lifts `model` into a header.

HTTPRoutes match headers, not JSON bodies, so the first ext_proc in Envoy's chain reads
the body's `model` and sets `X-Gateway-Model-Name` and `X-Gateway-Base-Model-Name` (the
base model of a LoRA adapter the config lists, else the model itself: upstream sets it
on every request, so a route matching it serves base-model requests too), clearing the
route cache so the route of the pool that serves the model matches. The body itself
passes through unchanged. A body without a usable `model` passes through without the
headers: the default route's picker then answers 400 in OpenAI shape, so there is one
place that words errors.

Traces: with `tracing.enabled` in its config, each stream is one SERVER span `igw.bbr`
under the trace context of the stream's gRPC metadata (Envoy's ext_proc span), from the
request headers until the routing headers are answered, with the model it read
(`gen_ai.request.model`) and the base model it set.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

import orjson
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from grpc_health.v1 import health_pb2

from inference_gateway.config.spec import GatewayConfigSpec
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
FULL_DUPLEX = ProcessingMode.FULL_DUPLEX_STREAMED
SERVICE_NAME = "envoy.service.ext_proc.v3.ExternalProcessor"
PROCESS_PATH = f"/{SERVICE_NAME}/Process"
#: Envoy sends a body in chunks (FULL_DUPLEX_STREAMED) of at most its buffer size; a
#: message is one chunk plus headers. A larger one is refused before it is buffered.
MAX_MESSAGE = 4 * 2**20 + 64 * 1024


class BodyRouter:
    """Model name → routing headers; adapters map to their base model via the config."""

    def __init__(self, config: GatewayConfigSpec | None = None) -> None:
        self.base: dict[str, str] = {}
        for model in config.models if config else []:
            for adapter in model.adapters:
                self.base[adapter] = model.name

    def headers(self, body: bytes) -> dict[str, str]:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            return {}
        model = parsed.get("model") if isinstance(parsed, dict) else None
        if not isinstance(model, str) or not model:
            return {}
        return {MODEL_HEADER: model, BASE_MODEL_HEADER: self.base.get(model, model)}


def model_headers(body: bytes, config: GatewayConfigSpec | None = None) -> dict[str, str]:
    return BodyRouter(config).headers(body)


class _Stream:
    """One request's stream: the body so far, and one handler per message kind."""

    def __init__(self, router: BodyRouter, mode: int) -> None:
        self.router = router
        self.mode = mode
        self.response_mode = mode  # its own: Envoy answers 500 to a mode it did not send
        self.body = bytearray()
        self.routed: dict[str, str] | None = None  # the headers set, once decided
        self.handlers: dict[str, Callable[[Any], list[Any]]] = {
            "request_headers": self.on_request_headers,
            "request_body": self.on_request_body,
            "request_trailers": lambda r: [trailers_response()],
            "response_headers": lambda r: [headers_response(request=False)],
            "response_body": self.on_response_body,
            "response_trailers": lambda r: [trailers_response(request=False)],
        }

    def handle(self, request: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        if request.HasField("protocol_config"):
            config = request.protocol_config
            self.mode = config.request_body_mode or self.mode
            self.response_mode = config.response_body_mode or self.response_mode
        handler = self.handlers.get(request.WhichOneof("request") or "")
        return handler(request) if handler is not None else []

    def on_request_headers(self, request: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        if request.request_headers.end_of_stream or self.mode != FULL_DUPLEX:
            return [headers_response()]
        return []  # full duplex: the answer waits for the body

    def on_request_body(self, request: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        self.body += request.request_body.body
        if not request.request_body.end_of_stream:
            return []
        body = bytes(self.body)
        headers = self.routed = self.router.headers(body)
        if self.mode == FULL_DUPLEX:
            return [
                headers_response(set_headers=headers, clear_route_cache=bool(headers)),
                *body_chunks(body),
            ]
        return [body_replacement(None, set_headers=headers, clear_route_cache=bool(headers))]

    def on_response_body(self, request: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        part = request.response_body
        if self.response_mode == FULL_DUPLEX:
            return list(body_chunks(part.body, request=False, end_of_stream=part.end_of_stream))
        return [body_replacement(None, request=False)]


async def serve_call(
    router: BodyRouter,
    call: Call,
    default_mode: int = FULL_DUPLEX,
    tracing: Tracing | None = None,
) -> None:
    """One `Process` stream on `Http2GrpcServer`: raw messages in, raw answers out, one
    socket write per batch of answers (the picker's loop, `ExtProcServicer.serve_call`)."""
    stream = _Stream(router, default_mode)
    parse = pb.ProcessingRequest.FromString
    span = None
    if tracing is not None and tracing.enabled:
        span = tracing.start("igw.bbr", headers=call.headers, kind=SpanKind.SERVER)
    try:
        while True:
            raw = await call.read()
            if raw is None:
                return
            responses = stream.handle(parse(raw))
            if responses:
                call.send([r.SerializeToString() for r in responses])
            if span is not None and stream.routed is not None:
                _routed(span, stream.routed)
                span = None
    finally:
        if span is not None:
            span.end()


def _routed(span: Any, headers: dict[str, str]) -> None:
    if headers:
        span.set_attribute(GEN_AI_REQUEST_MODEL, headers[MODEL_HEADER])
        span.set_attribute("igw.base_model", headers[BASE_MODEL_HEADER])
    span.end()


async def start_bbr(
    config: GatewayConfigSpec | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 9004,
    ssl_context: ssl.SSLContext | None = None,
    policy: ConnectionPolicy | None = None,
) -> tuple[Http2GrpcServer, int]:
    """A started server with the body router and a SERVING health service, on the
    picker's own HTTP/2 server (grpc.aio cost about 0.8 ms of CPU per request)."""
    router = BodyRouter(config)
    tracing = Tracing.build(config.tracing if config else None, "igw-bbr")
    health = HealthService()
    for service in ("", SERVICE_NAME):
        await health.set(service, health_pb2.HealthCheckResponse.SERVING)

    async def process(call: Call) -> None:
        await serve_call(router, call, tracing=tracing)

    handlers = {PROCESS_PATH: Method(process, max_message=MAX_MESSAGE), **health.handlers()}
    server = Http2GrpcServer(handlers, ssl_context=ssl_context, policy=policy)
    bound = await server.start(host, port)
    return server, bound
