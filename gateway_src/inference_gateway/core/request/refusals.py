"""Every refusal a client can get before a model server answers, and its words.

A refusal is one exception, `Rejection`: the HTTP status, OpenAI's error fields
(`message`, `type`, `param`, `code`) and the headers it carries (`Retry-After` through
the one policy, core/traffic/retry_after.py; rate-limit state). `igw serve`
(frontends/proxy.py, frontends/auth.py), the ext_proc picker (an `ImmediateResponse`)
and `igw global` only render it, so the same bad request gets the same bytes from each
(tests/e2e/test_refusal_parity.py holds them to it). Each text lives here once:
changing what a refusal says is a change to this file.

Texts follow the OpenAI API's where it has one (a bad key, an unknown model, "Request
too large") so clients and SDKs that match on them keep working; none echoes a client
value at length (a model name is cut at `ECHO_CHARS`).
"""

from __future__ import annotations

from collections.abc import Mapping

from inference_gateway.core.request.contracts import openai_error
from inference_gateway.core.request.relay import StreamEnd, end_error
from inference_gateway.core.traffic import retry_after
from inference_gateway.errors import InferenceGatewayError

__all__ = [
    "ECHO_CHARS",
    "Rejection",
    "busy",
    "invalid_value",
    "malformed_json",
    "missing_model",
    "model_not_found",
    "no_ready_endpoint",
    "over_window",
    "pool_saturated",
    "queue_timeout",
    "queue_timeout_text",
    "rate_limited",
    "request_too_large",
    "saturated_text",
    "too_large_body",
    "unknown_credential",
]

#: The most characters of a client's model name a refusal repeats.
ECHO_CHARS = 200
#: What a 401 carries, as an OpenAI-style bearer realm.
WWW_AUTHENTICATE = {"WWW-Authenticate": 'Bearer realm="igw"'}


class Rejection(InferenceGatewayError):
    """A request refused before any pod saw it: an HTTP status and an OpenAI error."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str,
        code: str,
        *,
        retry_after_s: int | None = None,
        headers: Mapping[str, str] | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code
        self.param = param
        self.retry_after_s = retry_after_s
        self.headers = dict(headers or {})
        if retry_after_s is not None:
            self.headers.update(retry_after.header(retry_after_s))

    def body(self) -> bytes:
        """`{"error": {"message", "type", "param", "code"}}`, as the OpenAI API answers."""
        return openai_error(self.message, self.kind, self.code, self.param)


def malformed_json(detail: object) -> Rejection:
    """400: the body is not JSON (`detail`: the parser's own words, no client bytes)."""
    return Rejection(400, f"Malformed JSON body: {detail}", "invalid_request_error", "invalid_json")


def missing_model() -> Rejection:
    return Rejection(
        400,
        "The request body must be a JSON object with a string `model` field.",
        "invalid_request_error",
        "missing_model",
    )


def invalid_value(name: str, problem: str) -> Rejection:
    """400 naming the request field `name` and what it must be."""
    return Rejection(
        400, f"`{name}` must be {problem}.", "invalid_request_error", "invalid_value", param=name
    )


def model_not_found(model: str) -> Rejection:
    """404 for a model no pool serves or the credential may not use: one text for both,
    as OpenAI answers (a 403 would confirm that the model exists)."""
    return Rejection(
        404,
        f"The model `{model[:ECHO_CHARS]}` does not exist or you do not have access to it.",
        "invalid_request_error",
        "model_not_found",
    )


def unknown_credential() -> Rejection:
    """401 for a missing or unknown credential, as OpenAI answers a bad API key."""
    return Rejection(
        401,
        "Incorrect API key provided, or no valid bearer token.",
        "invalid_request_error",
        "invalid_api_key",
        headers=WWW_AUTHENTICATE,
    )


def too_large_body(limit: int | None = None) -> Rejection:
    """413 for a body over the server's limit (`limit` in bytes, where the reader knows it)."""
    message = (
        "The request body is too large."
        if limit is None
        else f"Request body exceeds {limit} bytes."
    )
    return Rejection(413, message, "invalid_request_error", "request_too_large")


def rate_limited(model: str, retry_after_s: int, headers: Mapping[str, str]) -> Rejection:
    """429: the client's window has no room now; it will in `retry_after_s`."""
    return Rejection(
        429,
        f"Rate limit reached for `{model}`; retry after {retry_after_s} s.",
        "rate_limit_exceeded",
        "rate_limited",
        retry_after_s=retry_after_s,
        headers=headers,
    )


def request_too_large(message: str) -> Rejection:
    """OpenAI's answer to a request bigger than a whole window's limit (`message`:
    `TooLarge.message`): 429, type `tokens`, code `rate_limit_exceeded`, and
    `x-should-retry: false` (the `openai` SDK's retry switch), as waiting can never make
    it fit."""
    return Rejection(
        429, message, "tokens", "rate_limit_exceeded", headers={"x-should-retry": "false"}
    )


def over_window(retry_after_s: int, headers: Mapping[str, str], *, whole: bool) -> Rejection:
    """429 for an answer refused for its size before any byte of it went out (the token
    budget's window is full; `whole`: the answer did not stream), with the time until
    it would fit. The words are the stream's rate-limit event's (relay.end_error)."""
    end = StreamEnd.OVER_LIMIT
    message, kind = end_error(end, whole=whole)
    return Rejection(429, message, kind, end.value, retry_after_s=retry_after_s, headers=headers)


def no_ready_endpoint(
    model: str | None = None, headers: Mapping[str, str] | None = None
) -> Rejection:
    """503: no pod may take the request (`model` None: a request without a body)."""
    message = (
        "No ready model server."
        if model is None
        else f"No ready model server for `{model}`: every pod of the pool is stale, outside "
        "the subset hint, or none serves the model."
    )
    return Rejection(503, message, "service_unavailable", "no_ready_endpoint", headers=headers)


def saturated_text(reason: str, retry_after_s: int) -> str:
    """Why admission refused a request at once (`reason`: the flow controller's word)."""
    return f"The pool is saturated ({reason.replace('_', ' ')}); retry after {retry_after_s} s."


def queue_timeout_text(band: str, ttl_s: float, *, empty: bool) -> str:
    """Why a request that waited its band's whole TTL is refused."""
    reason = "for a ready model server" if empty else "without capacity"
    return f"Waited {ttl_s:g} s in the {band} queue {reason}."


def pool_saturated(message: str, retry_after_s: int, headers: Mapping[str, str]) -> Rejection:
    """429 for a saturated pool (`message`: `saturated_text`)."""
    return Rejection(
        429,
        message,
        "rate_limit_exceeded",
        "pool_saturated",
        retry_after_s=retry_after_s,
        headers=headers,
    )


def queue_timeout(
    message: str, retry_after_s: int, headers: Mapping[str, str], *, empty: bool
) -> Rejection:
    """503 for a wait past the band's TTL (`message`: `queue_timeout_text`); `empty`: the
    pool still had no ready pod (a scale from zero that took too long)."""
    code = "no_ready_endpoint" if empty else "queue_timeout"
    return Rejection(
        503, message, "service_unavailable", code, retry_after_s=retry_after_s, headers=headers
    )


def busy() -> Rejection:
    """503 when the server holds as many request bodies as its budget allows."""
    return Rejection(
        503,
        "The gateway is receiving too many request bodies at once; retry shortly.",
        "service_unavailable",
        "server_busy",
        retry_after_s=retry_after.FLOOR_S,
    )
