"""The body-based router (`igw bbr`): an ext_proc that lifts `model` into a header.

HTTPRoutes match headers, not JSON bodies, so the first ext_proc in Envoy's chain reads
the body's `model` and sets `X-Gateway-Model-Name` (and, for a LoRA adapter the config
lists, `X-Gateway-Base-Model-Name`), clearing the route cache so the route of the pool
that serves the model matches. The body itself passes through unchanged. A body without
a usable `model` passes through without the header: the default route's picker then
answers 400 in OpenAI shape, so there is one place that words errors.
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

from ..config import GatewayConfigSpec
from .extproc_wire import body_chunks, body_replacement, headers_response, trailers_response

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
        headers = {MODEL_HEADER: model}
        if model in self.base:
            headers[BASE_MODEL_HEADER] = self.base[model]
        return headers


def model_headers(body: bytes, config: GatewayConfigSpec | None = None) -> dict[str, str]:
    return BodyRouter(config).headers(body)


class BodyRouterServicer(pb_grpc.ExternalProcessorServicer):
    """One stream per request: collect the body, answer headers, pass the body on."""

    def __init__(self, router: BodyRouter, default_mode: int = FULL_DUPLEX) -> None:
        self.router = router
        self.default_mode = default_mode

    async def Process(  # the gRPC method name, as generated
        self,
        request_iterator: AsyncIterator[pb.ProcessingRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.ProcessingResponse]:
        mode = self.default_mode
        body = bytearray()
        async for request in request_iterator:
            if request.HasField("protocol_config"):
                mode = request.protocol_config.request_body_mode or mode
            kind = request.WhichOneof("request")
            if kind == "request_headers":
                if request.request_headers.end_of_stream or mode != FULL_DUPLEX:
                    yield headers_response()
            elif kind == "request_body":
                body += request.request_body.body
                if not request.request_body.end_of_stream:
                    continue
                headers = self.router.headers(bytes(body))
                if mode == FULL_DUPLEX:
                    yield headers_response(set_headers=headers, clear_route_cache=bool(headers))
                    for message in body_chunks(bytes(body)):
                        yield message
                else:
                    yield body_replacement(
                        None, set_headers=headers, clear_route_cache=bool(headers)
                    )
            elif kind == "request_trailers":
                yield trailers_response()
            elif kind == "response_headers":
                yield headers_response(request=False)
            elif kind == "response_body":
                part = request.response_body
                if mode == FULL_DUPLEX:
                    for message in body_chunks(
                        part.body, request=False, end_of_stream=part.end_of_stream
                    ):
                        yield message
                else:
                    yield body_replacement(None, request=False)
            elif kind == "response_trailers":
                yield trailers_response(request=False)


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
