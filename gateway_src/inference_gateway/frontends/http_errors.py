"""Refusals as aiohttp answers: the one way `igw serve`, its authentication and `igw
global` put an OpenAI-shaped error on the wire.

The words and headers are the core's (core/request/refusals.py); this module only
renders them, so the HTTP front ends and the picker's `ImmediateResponse`
(frontends/extproc/wire.py) answer the same request with the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from inference_gateway.core.request.contracts import openai_error
from inference_gateway.core.request.refusals import Rejection

__all__ = ["error_response", "render"]


def error_response(
    status: int,
    message: str,
    kind: str,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
    param: str | None = None,
) -> web.Response:
    """An OpenAI-shaped error (`contracts.openai_error`) for what went wrong past the
    refusals (an upstream that failed, a cluster that could not answer)."""
    return web.Response(
        status=status,
        body=openai_error(message, kind, code, param),
        content_type="application/json",
        headers=dict(headers or {}),
    )


def render(rejection: Rejection, headers: Mapping[str, str] | None = None) -> web.Response:
    """A refusal with its own headers over `headers` (e.g. the request id)."""
    return web.Response(
        status=rejection.status,
        body=rejection.body(),
        content_type="application/json",
        headers={**(headers or {}), **rejection.headers},
    )
