"""The body-based router (`igw bbr`): an ext_proc that lifts `model` into a header.

HTTPRoutes match headers, not JSON bodies, so the first ext_proc in Envoy's chain reads
the body's `model` and sets `X-Gateway-Model-Name` and `X-Gateway-Base-Model-Name` (the
base model of a LoRA adapter the config lists, else the model itself: upstream sets it
on every request, so a route matching it serves base-model requests too), clearing the
route cache so the route of the pool that serves the model matches. The body itself
passes through unchanged. A body without a usable `model` passes through without the
headers: the default route's picker then answers 400 in OpenAI shape, so there is one
place that words errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import orjson
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.frontends.extproc.wire import (
    body_chunks,
    body_replacement,
    headers_response,
    trailers_response,
)

__all__ = [
    "BASE_MODEL_HEADER",
    "MODEL_HEADER",
    "BodyRouter",
    "BodyRouterServicer",
    "model_headers",
    "start_bbr",
]

MODEL_HEADER = "X-Gateway-Model-Name"
BASE_MODEL_HEADER = "X-Gateway-Base-Model-Name"
FULL_DUPLEX = ProcessingMode.FULL_DUPLEX_STREAMED


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
        self.handlers = {
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
        headers = self.router.headers(body)
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


class BodyRouterServicer(pb_grpc.ExternalProcessorServicer):
    """`envoy.service.ext_proc.v3.ExternalProcessor` for the body-based router."""

    def __init__(self, router: BodyRouter, default_mode: int = FULL_DUPLEX) -> None:
        self.router = router
        self.default_mode = default_mode

    async def Process(  # gRPC's method name
        self,
        request_iterator: AsyncIterator[pb.ProcessingRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        stream = _Stream(self.router, self.default_mode)
        while True:
            request = await context.read()
            if request is grpc.aio.EOF:
                return
            for response in stream.handle(request):
                await context.write(response)


async def start_bbr(
    config: GatewayConfigSpec | None = None,
    *,
    host: str = "0.0.0.0",
    port: int = 9004,
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[grpc.aio.Server, int]:
    """A started gRPC server with the body router and a SERVING health service."""
    server = grpc.aio.server()
    pb_grpc.add_ExternalProcessorServicer_to_server(BodyRouterServicer(BodyRouter(config)), server)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    address = f"{host}:{port}"
    bound = (
        server.add_secure_port(address, credentials)
        if credentials is not None
        else server.add_insecure_port(address)
    )
    for service in ("", "envoy.service.ext_proc.v3.ExternalProcessor"):
        await health.set(service, health_pb2.HealthCheckResponse.SERVING)
    await server.start()
    return server, bound
