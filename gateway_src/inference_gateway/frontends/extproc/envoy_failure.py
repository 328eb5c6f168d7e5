"""Did Envoy fail to reach the picked pod? Read from what ext_proc shows the picker.

When the pod the picker named refuses the connection (a killed pod: Envoy's response flag
UF), drops it before answering (UC) or is no host at all (UH), Envoy's router answers a
local `503` itself, and that answer passes through the picker's ext_proc filter like any
other: response headers, then body. Two ways to tell it from a pod's own 503:

* the `response.flags` / `response.code_details` attributes, when the filter's
  `response_attributes` ask for them (envoy `api/envoy/extensions/filters/http/ext_proc/v3/
  ext_proc.proto` `response_attributes`; sent in `ProcessingRequest.attributes` under the
  filter's name `envoy.filters.http.ext_proc`; `response.flags` is the legacy bit vector
  of `envoy/stream_info/stream_info.h` `LegacyResponseFlag`: NoHealthyUpstream 0x2,
  UpstreamConnectionFailure 0x20, UpstreamConnectionTermination 0x40);
* the local reply's body, which Envoy AI Gateway's picker filter (no attributes asked,
  v0.4 `internal/extensionserver/inferencepool.go`) still shows: the router writes
  `upstream connect error or disconnect/reset before headers. reset reason: connection
  failure` (UF; `connection termination` for UC) or `no healthy upstream` (UH)
  (envoy `source/common/router/router.cc`, `upstream_reset_before_response_started`,
  and `source/common/http/utility.cc` local replies).

A pod never writes these texts; the picker reads them only on a 503.
"""

from __future__ import annotations

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

__all__ = [
    "ATTRIBUTES_KEY",
    "FLAG_ATTRIBUTE",
    "SNIFF_BYTES",
    "UNREACHABLE_FLAGS",
    "body_says_unreachable",
    "flags_say_unreachable",
]

ATTRIBUTES_KEY = "envoy.filters.http.ext_proc"
FLAG_ATTRIBUTE = "response.flags"
DETAILS_ATTRIBUTE = "response.code_details"
NO_HEALTHY_UPSTREAM = 0x2  # UH
UPSTREAM_CONNECTION_FAILURE = 0x20  # UF
UPSTREAM_CONNECTION_TERMINATION = 0x40  # UC
UNREACHABLE_FLAGS = (
    NO_HEALTHY_UPSTREAM | UPSTREAM_CONNECTION_FAILURE | UPSTREAM_CONNECTION_TERMINATION
)
# substrings of the code details Envoy sets for the three cases
UNREACHABLE_DETAILS = ("connection_failure", "connection_termination", "no_healthy_upstream")
_RESET = b"upstream connect error or disconnect/reset before headers."
# the reset reason, after "reset reason: " ("remote connection failure" and "connection
# failure" alike, per Envoy version and side)
_UNREACHABLE_RESETS = (b"connection failure", b"connection termination")
_NO_HOST = b"no healthy upstream"
SNIFF_BYTES = 512  # the local reply's first line is well within this


def flags_say_unreachable(request: pb.ProcessingRequest) -> bool | None:
    """True / False when Envoy sent `response.flags` or `response.code_details` with the
    message, None when it sent neither (then the body decides)."""
    attributes = request.attributes.get(ATTRIBUTES_KEY)
    if attributes is None:
        return None
    fields = attributes.fields
    flags = fields.get(FLAG_ATTRIBUTE)
    if flags is not None:
        kind = flags.WhichOneof("kind")
        try:
            value = int(flags.number_value if kind == "number_value" else flags.string_value)
        except ValueError:
            value = 0
        return bool(value & UNREACHABLE_FLAGS)
    details = fields.get(DETAILS_ATTRIBUTE)
    if details is not None:
        return any(part in details.string_value for part in UNREACHABLE_DETAILS)
    return None


def body_says_unreachable(head: bytes) -> bool:
    """Whether a 503 body begins like Envoy's local reply for UF, UC or UH."""
    head = head.lstrip()
    if head.startswith(_NO_HOST):
        return True
    if not head.startswith(_RESET):
        return False
    line = head.split(b"\n", 1)[0]
    _, _, reason = line.partition(b"reset reason: ")
    reason = reason.split(b",", 1)[0]
    return any(r in reason for r in _UNREACHABLE_RESETS)
