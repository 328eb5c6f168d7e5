"""What a client's request says, read once for every front end: its JSON body, its
model, its prompt text, its output bound and the client it comes from.

`igw serve` and the ext_proc picker read a body through the director (`Intake.parse`),
`igw bbr` checks the model it copies into a header, and `igw global` parses and
bounds the body before it charges the global rate limit; all of them call this module,
so a body one front end refuses is refused by every other with the same words
(core/request/refusals.py). Every value here is hostile until checked: a malformed
body, a `model` no header can carry, a negative, fractional or absurd output bound is
a 400 naming the field, never a crash or a credit to a token bucket. (Envoy's subset
hint, the other thing a request carries to the picker, is read by subset_hint.py.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from inference_gateway.core.request import refusals
from inference_gateway.core.traffic.ratelimit import DEFAULT_MAX_TOKENS

__all__ = [
    "CLIENT_ID_HEADER",
    "MAX_MODEL_BYTES",
    "OutputBound",
    "api_key_of",
    "check_model",
    "model_of",
    "output_bound",
    "parse_body",
    "prompt_text",
]

# The longest `model`: an HTTPRoute header match's longest value (Gateway API v1.3
# HTTPHeaderMatch.value maxLength, cdk8s/crds/external/gateway-api.yaml).
MAX_MODEL_BYTES = 4096
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Output bounds past this are refused (400): no model's context comes near it, and a
# bound is what a token limit charges up front.
MAX_OUTPUT_TOKENS = 2**21
MAX_CHOICES = 128  # `n`: completions generated per request
OUTPUT_BOUND_FIELDS = ("max_tokens", "max_completion_tokens")
# The authenticated client: set by `igw serve`'s authentication (frontends/auth.py) or by
# Envoy Gateway's SecurityPolicy (API key `forwardClientIDHeader`, JWT `claimToHeaders`);
# the key of per-client rate limits.
CLIENT_ID_HEADER = "x-igw-client-id"


def parse_body(raw: bytes) -> dict[str, Any]:
    """The client's body as a JSON object with a string `model` a header can carry
    (`check_model`), else a 400 `Rejection`."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise refusals.malformed_json(error) from None
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise refusals.missing_model()
    check_model(body["model"])
    return body


def model_of(raw: bytes) -> str | None:
    """The body's `model`, or None when the body cannot say, without refusing anything:
    for a front end that only looks (authentication's model check, `igw bbr`'s header),
    where whoever parses the body next answers a malformed one."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None


def check_model(model: str) -> str:
    """`model` as a client may send it, else a 400 that does not echo it: at most
    `MAX_MODEL_BYTES` of UTF-8 and no control character. The body-based router carries
    the name in a header, and Envoy answers 500 to a header with CR, LF or NUL or past
    its 60 KiB header limit; no HTTPRoute can match a longer value anyway. One rule for
    every front end (`igw serve`, the picker, `igw bbr`, `igw global`)."""
    if len(model) > MAX_MODEL_BYTES or len(model.encode()) > MAX_MODEL_BYTES:
        problem = f"at most {MAX_MODEL_BYTES} bytes long"
    elif _CONTROL.search(model):
        problem = "free of control characters"
    else:
        return model
    raise refusals.invalid_value("model", problem)


def prompt_text(body: dict[str, Any]) -> str:
    """The text the prefix index sees: messages or prompt, in order (the token estimate
    counts more: prompt_cost.py)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        parts = []
        for m in messages:
            if isinstance(m, dict):
                content = m.get("content")
                if isinstance(content, list):  # content parts
                    content = "".join(
                        str(p.get("text", "")) for p in content if isinstance(p, dict)
                    )
                parts.append(f"{m.get('role', '')}:{content or ''}\n")
        return "".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return "".join(str(p) for p in prompt)
    return str(prompt or "")


class OutputBound(NamedTuple):
    tokens: int
    explicit: bool  # the request set it (else the default, which a small limit may cut)


def output_bound(body: dict[str, Any]) -> OutputBound:
    """The most output tokens the engine may generate for this body: the largest of
    `max_tokens` and `max_completion_tokens` (engines honour one or the other, so a token
    limit must charge the larger), times `n`. A negative, fractional or absurd value is a
    400 naming the field, never a credit to a token bucket."""
    bound = 0
    for name in OUTPUT_BOUND_FIELDS:
        value = body.get(name)
        if value is not None:
            bound = max(bound, _bounded_int(name, value, 1, MAX_OUTPUT_TOKENS))
    n = body.get("n")
    choices = 1 if n is None else _bounded_int("n", n, 1, MAX_CHOICES)
    return OutputBound((bound or DEFAULT_MAX_TOKENS) * choices, bool(bound))


def _bounded_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        problem = f"an integer from {low} to {high}, got {repr(value)[:40]}"
        raise refusals.invalid_value(name, problem)
    return value


def api_key_of(headers: Mapping[str, str], trusted_client_id: bool = False) -> str:
    """The client the rate limits count: the authenticated client id (`trusted_client_id`:
    the header was set by an authenticating filter, `Director.trusted_client_id`), else
    the bearer token, else "anonymous" (limits without a client or apiKey apply to each
    caller separately). A caller's own `x-igw-client-id` counts for nothing."""
    client = headers.get(CLIENT_ID_HEADER) if trusted_client_id else None
    if client:
        return client
    auth = headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else "anonymous"
