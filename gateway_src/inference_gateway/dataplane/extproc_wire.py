"""The ext_proc messages of the endpoint-picker protocol, built and read in one place.

Envoy's `envoy.service.ext_proc.v3` types (generated code from the pinned `xds-protos`)
are verbose to fill; the handlers in `extproc.py` and `bbr.py` only call these helpers,
so every message shape the picker sends is written once and pinned by the tests.

Protocol facts kept here (Gateway API Inference Extension, endpoint picker protocol):

* the chosen pods travel both as the request header `x-gateway-destination-endpoint`
  and as dynamic metadata `envoy.lb` / `x-gateway-destination-endpoint`;
* the data plane may restrict the choice with filter metadata
  `envoy.lb.subset_hint` / `x-gateway-destination-endpoint-subset` (a list of strings);
* a streamed body mutation is sent in chunks of at most 62,000 bytes, the last one
  flagged `end_of_stream`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

__all__ = [
    "BODY_CHUNK_BYTES",
    "DESTINATION_HEADER",
    "DESTINATION_NAMESPACE",
    "SUBSET_KEY",
    "SUBSET_NAMESPACE",
    "body_chunks",
    "body_replacement",
    "header_map",
    "header_mutation",
    "headers_response",
    "immediate_response",
    "read_headers",
    "read_subset",
    "trailers_response",
]

DESTINATION_HEADER = "x-gateway-destination-endpoint"
DESTINATION_NAMESPACE = "envoy.lb"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
BODY_CHUNK_BYTES = 62_000


def read_headers(headers: pb.HttpHeaders) -> dict[str, str]:
    """Header map → lower-case dict (Envoy fills `raw_value`; older ones `value`)."""
    out: dict[str, str] = {}
    for h in headers.headers.headers:
        out[h.key.lower()] = h.raw_value.decode("utf-8", "replace") if h.raw_value else h.value
    return out


def read_subset(request: pb.ProcessingRequest) -> list[str] | None:
    """The subset hint, or None when the data plane sent none."""
    if not request.HasField("metadata_context"):
        return None
    namespace = request.metadata_context.filter_metadata.get(SUBSET_NAMESPACE)
    if namespace is None or SUBSET_KEY not in namespace.fields:
        return None
    value = namespace.fields[SUBSET_KEY]
    kind = value.WhichOneof("kind")
    if kind == "list_value":
        return [v.string_value for v in value.list_value.values if v.string_value]
    if kind == "string_value":  # tolerated: one comma-separated string
        return [s.strip() for s in value.string_value.split(",") if s.strip()]
    return []


def header_map(headers: Mapping[str, str]) -> base_pb2.HeaderMap:
    """For tests and clients: a HeaderMap the way Envoy sends it (raw values)."""
    return base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()]
    )


def header_mutation(
    set_headers: Mapping[str, str] | None = None, remove: list[str] | None = None
) -> pb.HeaderMutation:
    return pb.HeaderMutation(
        set_headers=[
            base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=k, raw_value=v.encode()))
            for k, v in (set_headers or {}).items()
        ],
        remove_headers=list(remove or []),
    )


def _destination_metadata(destination: str) -> struct_pb2.Struct:
    metadata = struct_pb2.Struct()
    metadata.fields[DESTINATION_NAMESPACE].struct_value.fields[
        DESTINATION_HEADER
    ].string_value = destination
    return metadata


def headers_response(
    *,
    request: bool = True,
    set_headers: Mapping[str, str] | None = None,
    remove: list[str] | None = None,
    clear_route_cache: bool = False,
    destination: str | None = None,
) -> pb.ProcessingResponse:
    """A request- or response-headers answer; with `destination`, the picker's choice
    as header and `envoy.lb` metadata."""
    headers = dict(set_headers or {})
    if destination is not None:
        headers[DESTINATION_HEADER] = destination
    common = pb.CommonResponse(clear_route_cache=clear_route_cache)
    if headers or remove:
        common.header_mutation.CopyFrom(header_mutation(headers, remove))
    answer = pb.HeadersResponse(response=common)
    response = (
        pb.ProcessingResponse(request_headers=answer)
        if request
        else pb.ProcessingResponse(response_headers=answer)
    )
    if destination is not None:
        response.dynamic_metadata.CopyFrom(_destination_metadata(destination))
    return response


def body_chunks(
    body: bytes, *, request: bool = True, end_of_stream: bool = True
) -> Iterator[pb.ProcessingResponse]:
    """A streamed body mutation (FULL_DUPLEX_STREAMED) in chunks of ≤ 62,000 bytes.

    An empty body still yields one message, so the end of the stream is always said.
    """
    size = len(body)
    offsets = range(0, size, BODY_CHUNK_BYTES) if size else [0]
    last = offsets[-1]
    for offset in offsets:
        streamed = pb.StreamedBodyResponse(
            body=body[offset : offset + BODY_CHUNK_BYTES],
            end_of_stream=end_of_stream and offset == last,
        )
        answer = pb.BodyResponse(
            response=pb.CommonResponse(body_mutation=pb.BodyMutation(streamed_response=streamed))
        )
        yield (
            pb.ProcessingResponse(request_body=answer)
            if request
            else pb.ProcessingResponse(response_body=answer)
        )


def body_replacement(
    body: bytes | None,
    *,
    request: bool = True,
    set_headers: Mapping[str, str] | None = None,
    clear_route_cache: bool = False,
    destination: str | None = None,
) -> pb.ProcessingResponse:
    """A BUFFERED (or STREAMED) body answer: the whole body replaced when `body` is not
    None; in buffered request mode it also carries the routing headers and metadata."""
    headers = dict(set_headers or {})
    if destination is not None:
        headers[DESTINATION_HEADER] = destination
    common = pb.CommonResponse(clear_route_cache=clear_route_cache)
    if headers:
        common.header_mutation.CopyFrom(header_mutation(headers))
    if body is not None:
        common.body_mutation.CopyFrom(pb.BodyMutation(body=body))
    answer = pb.BodyResponse(response=common)
    response = (
        pb.ProcessingResponse(request_body=answer)
        if request
        else pb.ProcessingResponse(response_body=answer)
    )
    if destination is not None:
        response.dynamic_metadata.CopyFrom(_destination_metadata(destination))
    return response


def trailers_response(*, request: bool = True) -> pb.ProcessingResponse:
    answer = pb.TrailersResponse()
    return (
        pb.ProcessingResponse(request_trailers=answer)
        if request
        else pb.ProcessingResponse(response_trailers=answer)
    )


def immediate_response(
    status: int, body: bytes, headers: Mapping[str, str] | None = None, details: str = ""
) -> pb.ProcessingResponse:
    """Envoy answers the client itself: status, JSON body, headers (e.g. Retry-After)."""
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=status),  # type: ignore[arg-type]
            headers=header_mutation({"content-type": "application/json", **(headers or {})}),
            body=body,
            details=details,
        )
    )
