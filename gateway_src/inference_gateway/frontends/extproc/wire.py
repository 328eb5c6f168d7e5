"""The ext_proc messages of the endpoint-picker protocol, built and read in one place.

Envoy's `envoy.service.ext_proc.v3` types (generated code from the pinned `xds-protos`)
are verbose to fill; the handlers in `picker.py` and `frontends/bbr.py` only call these helpers,
so every message shape the picker sends is written once and pinned by the tests.

Protocol facts kept here (Gateway API Inference Extension, endpoint picker protocol):

* the chosen pods travel both as the request header `x-gateway-destination-endpoint`
  and as dynamic metadata `envoy.lb` / `x-gateway-destination-endpoint`;
* the data plane may restrict the choice with filter metadata
  `envoy.lb.subset_hint` / `x-gateway-destination-endpoint-subset` (a list of strings,
  read here, matched by `core/request/subset_hint.py`);
* a streamed body mutation is sent in chunks of at most 62,000 bytes, the last one
  flagged `end_of_stream`;
* an endpoint is written `ip:port`, `[ip]:port` for IPv6 (upstream joins them with Go's
  `net.JoinHostPort`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2

__all__ = [
    "BODY_CHUNK_BYTES",
    "DESTINATION_HEADER",
    "DESTINATION_NAMESPACE",
    "SUBSET_KEY",
    "SUBSET_NAMESPACE",
    "body_chunks",
    "body_replacement",
    "endpoint_address",
    "header_map",
    "header_mutation",
    "headers_response",
    "immediate_response",
    "read_headers",
    "read_subset",
    "timeout_override",
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


def endpoint_address(address: str, port: int) -> str:
    """`ip:port` as Envoy parses it: an IPv6 address in brackets (RFC 3986 3.2.2)."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def timeout_override(seconds: float) -> pb.ProcessingResponse:
    """A ProcessingResponse that only extends Envoy's timer for the pending message
    (`override_message_timeout`; honoured up to the filter's `max_message_timeout`)."""
    response = pb.ProcessingResponse()
    response.override_message_timeout.FromNanoseconds(int(seconds * 1e9))
    return response


def header_map(headers: Mapping[str, str]) -> base_pb2.HeaderMap:
    """For tests and clients: a HeaderMap the way Envoy sends it (raw values)."""
    return base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()]
    )


def header_mutation(
    set_headers: Mapping[str, str] | None = None, remove: list[str] | None = None
) -> pb.HeaderMutation:
    mutation = pb.HeaderMutation()
    _fill_mutation(mutation, set_headers, remove)
    return mutation


def _fill_mutation(
    mutation: pb.HeaderMutation,
    set_headers: Mapping[str, str] | None,
    remove: list[str] | None = None,
) -> None:
    """Fill in place: nested protobuf constructors copy, and this runs per request."""
    for key, value in (set_headers or {}).items():
        header = mutation.set_headers.add().header
        header.key = key
        header.raw_value = value.encode()
    if remove:
        mutation.remove_headers.extend(remove)


def _common(response: pb.ProcessingResponse, field: str) -> pb.CommonResponse:
    """The CommonResponse of `response.<field>` (request_headers, response_body, …),
    marked present so an empty answer still reads as "continue"."""
    common: pb.CommonResponse = getattr(response, field).response
    common.SetInParent()
    return common


def _set_destination(response: pb.ProcessingResponse, destination: str) -> None:
    lb = response.dynamic_metadata.fields[DESTINATION_NAMESPACE].struct_value
    lb.fields[DESTINATION_HEADER].string_value = destination


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
    response = pb.ProcessingResponse()
    field = "request_headers" if request else "response_headers"
    common = _common(response, field)
    if clear_route_cache:
        common.clear_route_cache = True
    if destination is not None:
        set_headers = {**(set_headers or {}), DESTINATION_HEADER: destination}
        _set_destination(response, destination)
    if set_headers or remove:
        _fill_mutation(common.header_mutation, set_headers, remove)
    return response


def body_chunks(
    body: bytes, *, request: bool = True, end_of_stream: bool = True
) -> Iterator[pb.ProcessingResponse]:
    """A streamed body mutation (FULL_DUPLEX_STREAMED) in chunks of ≤ 62,000 bytes.

    An empty body still yields one message, so the end of the stream is always said.
    """
    field = "request_body" if request else "response_body"
    size = len(body)
    offsets = range(0, size, BODY_CHUNK_BYTES) if size else [0]
    last = offsets[-1]
    for offset in offsets:
        response = pb.ProcessingResponse()
        streamed = _common(response, field).body_mutation.streamed_response
        streamed.body = (
            body if size <= BODY_CHUNK_BYTES else body[offset : offset + BODY_CHUNK_BYTES]
        )
        streamed.end_of_stream = end_of_stream and offset == last
        yield response


def body_replacement(
    body: bytes | None,
    *,
    request: bool = True,
    set_headers: Mapping[str, str] | None = None,
    remove: list[str] | None = None,
    clear_route_cache: bool = False,
    destination: str | None = None,
    clear: bool = False,
) -> pb.ProcessingResponse:
    """A BUFFERED (or STREAMED) body answer: the whole body replaced when `body` is not
    None (`clear`: emptied); in buffered request mode it also carries the routing
    headers and metadata."""
    response = pb.ProcessingResponse()
    field = "request_body" if request else "response_body"
    common = _common(response, field)
    if clear_route_cache:
        common.clear_route_cache = True
    if destination is not None:
        set_headers = {**(set_headers or {}), DESTINATION_HEADER: destination}
        _set_destination(response, destination)
    if set_headers or remove:
        _fill_mutation(common.header_mutation, set_headers, remove)
    if clear:
        common.body_mutation.clear_body = True
    elif body is not None:
        common.body_mutation.body = body
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
            status=http_status_pb2.HttpStatus(code=status),
            headers=header_mutation({"content-type": "application/json", **(headers or {})}),
            body=body,
            details=details,
        )
    )
