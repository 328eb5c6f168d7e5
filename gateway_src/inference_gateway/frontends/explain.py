"""The `x-igw-explain` debug header: who may ask, and the decision as one header value.

A request with `x-igw-explain: true` from a client listed in `tracing.explain.
headerClients` (the authenticated `x-igw-client-id`, which `igw serve`'s authentication
or Envoy Gateway's SecurityPolicy sets and no client can forge) gets its record back in
`x-igw-explanation` (compact JSON, at most `MAX_HEADER_BYTES`: candidates are dropped
from the end until it fits). Off by default (an empty list). No web framework here: the
ext_proc picker answers with it too (`/debug/decisions` is explain_http.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from inference_gateway.config.spec import ExplainSpec
from inference_gateway.core.request.director import CLIENT_ID_HEADER

__all__ = [
    "EXPLAINED_HEADER",
    "EXPLAIN_HEADER",
    "MAX_HEADER_BYTES",
    "explanation_header",
    "may_explain",
]

EXPLAIN_HEADER = "x-igw-explain"
EXPLAINED_HEADER = "x-igw-explanation"
MAX_HEADER_BYTES = 8192


def may_explain(spec: ExplainSpec, headers: Mapping[str, str]) -> bool:
    """The debug header's rule: asked for, by a listed, authenticated client."""
    if not spec.header_clients or headers.get(EXPLAIN_HEADER, "").lower() != "true":
        return False
    return headers.get(CLIENT_ID_HEADER, "") in spec.header_clients


def explanation_header(record: dict[str, Any]) -> str:
    """A record as one header value, within `MAX_HEADER_BYTES`."""
    record = dict(record)
    explanation = record.get("explanation")
    while True:
        value = orjson.dumps(record).decode()
        if len(value) <= MAX_HEADER_BYTES:
            return value
        if isinstance(explanation, dict) and explanation.get("top"):
            explanation = record["explanation"] = {
                **explanation,
                "top": explanation["top"][:-1],
            }
            continue
        record.pop("explanation", None)
        explanation = None
        if len(orjson.dumps(record)) > MAX_HEADER_BYTES:
            return orjson.dumps({"id": record.get("id"), "truncated": True}).decode()
