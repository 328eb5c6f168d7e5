"""`igw auth`: the external authorization service Envoy Gateway calls for every
inference request in the cluster, so API keys and JWTs are accepted together.

Why a service of ours: Envoy Gateway v1.5 orders its auth filters ext_authz (3),
api_key_auth (4), basic_auth, oauth2, jwt_authn (7), then ext_proc (100+)
(`internal/xds/translator/httpfilters.go`, `newOrderedHTTPFilter`), and Envoy's
api_key_auth answers 401 for any bearer it does not know, a JWT included
(`source/extensions/filters/http/api_key_auth/api_key_auth.cc`). A SecurityPolicy with
both `apiKeyAuth` and `jwt` therefore rejects every JWT client. `extAuth` alone, with
the same checks `igw serve` makes (`frontends.auth.admit`: key digests, JWT signature,
issuer, audience, expiry, claims, per-credential models), accepts both.

The wire (Envoy's HTTP ext_authz, `envoy.extensions.filters.http.ext_authz.v3`, as Envoy
Gateway's `HTTPExtAuthService` configures it in `internal/xds/translator/extauth.go`):
the check request carries the original method, the path behind `path_prefix`
(`/authz`), the Authorization header and, with `bodyToExtAuth`, the buffered body. A
200 lets the request through, with the headers the policy lists in `headersToBackend`
copied onto it (overriding any a client sent): the client id, as the rate-limit and
fairness key. `x-envoy-auth-headers-to-remove: authorization` drops the credential, so
it never reaches the picker or a pod. Any other status is the client's answer, body
included: the OpenAI-shaped 401 / 404 / 413 of `admit`.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from aiohttp import web

from inference_gateway.core.request.director import CLIENT_ID_HEADER, FAIRNESS_HEADER
from inference_gateway.frontends.auth import Authenticator, admit
from inference_gateway.frontends.tracing_http import server_span
from inference_gateway.telemetry.tracing import Tracing

__all__ = [
    "AUTHZ_PATH_PREFIX",
    "MAX_BODY_BYTES",
    "UPSTREAM_HEADERS",
    "authz_app",
    "keep_jwks_fresh",
]

log = logging.getLogger(__name__)

#: Envoy prepends this to the original path of every check request (`path_prefix`).
AUTHZ_PATH_PREFIX = "/authz"
#: The headers a granted check sets on the request (the SecurityPolicy's headersToBackend).
UPSTREAM_HEADERS = (CLIENT_ID_HEADER, FAIRNESS_HEADER)
REMOVE_HEADER = "x-envoy-auth-headers-to-remove"
#: The largest body a check buffers: the picker's own request limit, so a request the
#: picker would take is never refused here (Envoy answers 413 past it).
MAX_BODY_BYTES = 4 * 2**20


def authz_app(
    auth: Authenticator, *, max_body_bytes: int, tracing: Tracing | None = None
) -> web.Application:
    """The check endpoint under `AUTHZ_PATH_PREFIX` (any method: Envoy forwards the
    original one) and `/healthz` for probes. With `tracing`, each check is a span
    `igw.auth` under the trace context Envoy's ext_authz client sends."""
    middlewares = (
        [server_span(tracing, "igw.auth", skip=frozenset({"/healthz"}))] if tracing else []
    )
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)

    async def check(request: web.Request) -> web.StreamResponse:
        verdict = await admit(
            auth, request.headers.get("authorization"), request.method, request.read
        )
        if isinstance(verdict, web.Response):
            return verdict
        headers = dict.fromkeys(UPSTREAM_HEADERS, verdict.client)
        headers[REMOVE_HEADER] = "authorization"
        return web.Response(status=200, headers=headers)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/healthz", healthz)
    app.router.add_route("*", AUTHZ_PATH_PREFIX + "/{tail:.*}", check)
    return app


async def keep_jwks_fresh(
    auth: Authenticator,
    url: str,
    *,
    interval_s: float = 300.0,
    retry_s: float = 5.0,
    first: asyncio.Event | None = None,
) -> None:
    """Fetch the issuer's JWKS from `url` now and every `interval_s` (a key rotation
    reaches us within that), retrying every `retry_s` while it fails. Until the first
    fetch succeeds every JWT is refused (never accepted unchecked); after that a failed
    fetch keeps the keys in use and says so. Runs until cancelled; sets `first` once the
    keys are loaded."""
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            try:
                async with session.get(url) as response:
                    response.raise_for_status()
                    auth.load_jwks(await response.text())
            except (aiohttp.ClientError, TimeoutError, ValueError) as error:
                log.warning("JWKS %s: fetch failed (%s); retrying", url, type(error).__name__)
                await asyncio.sleep(retry_s)
                continue
            if first is not None:
                first.set()
            await asyncio.sleep(interval_s)
