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

The JWKS URL is https (`jwks_url`): keys fetched over plain HTTP could be swapped by
anyone on the path, and every token they sign would then be accepted. Plain HTTP is
allowed only to a loopback address and only when asked for (`allow_loopback_http`, the
flag `--jwks-allow-loopback-http`: an issuer stand-in in a test or a sidecar on the same
host); redirects are not followed, so an https URL cannot hand the fetch to http.

Refusals are answered without an access-log line (the server runs without one) and
counted (`igw_auth_refusals_total`, served on `/metrics` with the rest of the registry
`authz_app` is given).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from inference_gateway.core.request.director import CLIENT_ID_HEADER, FAIRNESS_HEADER
from inference_gateway.frontends.auth import Authenticator, admit
from inference_gateway.frontends.tracing_http import server_span
from inference_gateway.telemetry.tracing import Tracing

__all__ = [
    "AUTHZ_PATH_PREFIX",
    "MAX_BODY_BYTES",
    "UPSTREAM_HEADERS",
    "authz_app",
    "jwks_url",
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


def jwks_url(url: str, *, allow_loopback_http: bool = False) -> str:
    """`url` when keys may be fetched from it (module docstring); ValueError says why not."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"the JWKS URL must be https://…, got {url[:200]!r}")
    if not allow_loopback_http:
        raise ValueError(
            "the JWKS URL must be https (plain http only to a loopback address, with "
            "--jwks-allow-loopback-http)"
        )
    if not _loopback(parts.hostname):
        raise ValueError(f"plain http JWKS is allowed to loopback only, not {parts.hostname!r}")
    return url


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def authz_app(
    auth: Authenticator,
    *,
    max_body_bytes: int,
    registry: CollectorRegistry | None = None,
    tracing: Tracing | None = None,
) -> web.Application:
    """The check endpoint under `AUTHZ_PATH_PREFIX` (any method: Envoy forwards the
    original one), `/healthz` for probes and `/metrics` (the refusal counter, in
    `registry` or a registry of its own). With `tracing`, each check is a span
    `igw.auth` under the trace context Envoy's ext_authz client sends."""
    skip = frozenset({"/healthz", "/metrics"})
    middlewares = [server_span(tracing, "igw.auth", skip=skip)] if tracing else []
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)
    metrics = registry if registry is not None else CollectorRegistry()
    metrics.register(auth.refusals_collector())

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

    async def prometheus(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(metrics), content_type="text/plain", charset="utf-8"
        )

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", prometheus)
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
    where = urlsplit(url).hostname  # the log names the host, never a URL's userinfo
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            try:
                async with session.get(url, allow_redirects=False) as response:
                    if response.status != 200:  # a redirect is a failure, not followed
                        raise ValueError(f"HTTP {response.status}")
                    auth.load_jwks(await response.text())
            except (aiohttp.ClientError, TimeoutError, ValueError) as error:
                why = error if isinstance(error, ValueError) else type(error).__name__
                log.warning("JWKS from %s: fetch failed (%s); retrying", where, why)
                await asyncio.sleep(retry_s)
                continue
            if first is not None:
                first.set()
            await asyncio.sleep(interval_s)
