"""`igw auth --port 9010 [--api-keys KEYS.yaml] [--jwt-issuer … --jwt-audience …
--jwt-jwks FILE-OR-URL]`: the ext_authz service of the cluster (`frontends/authz.py`).

The authentication flags are the same as `igw serve`'s (both build one `Authenticator`
from them here), except that `igw auth` also takes the issuer's JWKS as an https URL,
fetched and kept fresh, since in the cluster the issuer publishes its keys there.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from inference_gateway.cli.process import (
    add_tracing_argument,
    start_server_process,
    tracing_from_args,
)
from inference_gateway.errors import ConfigError
from inference_gateway.frontends.auth import Authenticator, JwtSettings, load_api_keys
from inference_gateway.frontends.authz import MAX_BODY_BYTES
from inference_gateway.transport.ports import DEFAULTS

__all__ = ["add_auth_arguments", "authenticator", "register"]


def add_auth_arguments(parser: argparse.ArgumentParser, *, jwks_help: str) -> None:
    auth = parser.add_argument_group(
        "authentication", "checked before any pod is touched (docs/traffic-control.md)"
    )
    auth.add_argument(
        "--api-keys",
        metavar="FILE",
        help="API key file: keys: [{client, sha256, models?}] (a mounted Secret; digests only)",
    )
    auth.add_argument("--jwt-issuer", help="accept JWTs from this issuer (the iss claim)")
    auth.add_argument(
        "--jwt-audience", action="append", default=[], help="an accepted aud (repeatable)"
    )
    auth.add_argument("--jwt-jwks", metavar="JWKS", help=jwks_help)
    auth.add_argument(
        "--jwt-claim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a claim the token must carry (repeatable; list and space-separated claims match "
        "any element)",
    )
    auth.add_argument(
        "--jwt-client-claim", default="sub", help="the claim naming the client (default sub)"
    )


def authenticator(
    args: argparse.Namespace, command: str, *, jwks_url_allowed: bool = False
) -> Authenticator | None:
    """The Authenticator the flags describe, or None; ConfigError on inconsistent flags."""
    jwt_flags = [args.jwt_issuer, args.jwt_jwks, args.jwt_audience]
    if not args.api_keys and not any(jwt_flags):
        return None
    jwt = None
    if any(jwt_flags):
        names = ("--jwt-issuer", "--jwt-jwks", "--jwt-audience")
        missing = [flag for flag, value in zip(names, jwt_flags, strict=True) if not value]
        if missing:
            raise ConfigError(command, [f"{m}: required with JWT authentication" for m in missing])
        claims = {}
        for i, pair in enumerate(args.jwt_claim):
            name, sep, value = pair.partition("=")
            if not sep or not name:
                raise ConfigError(command, [f"--jwt-claim[{i}]: expected NAME=VALUE"])
            claims[name] = value
        is_url = "://" in args.jwt_jwks
        if is_url and not jwks_url_allowed:
            raise ConfigError(command, ["--jwt-jwks: a JSON file here, not a URL"])
        if is_url:
            from inference_gateway.frontends.authz import jwks_url

            try:
                jwks_url(args.jwt_jwks, allow_loopback_http=args.jwks_allow_loopback_http)
            except ValueError as error:
                raise ConfigError(command, [f"--jwt-jwks: {error}"]) from None
        jwt = JwtSettings(
            issuer=args.jwt_issuer,
            audiences=tuple(args.jwt_audience),
            jwks_path=None if is_url else Path(args.jwt_jwks),
            required_claims=claims,
            client_claim=args.jwt_client_claim,
        )
    keys = load_api_keys(args.api_keys) if args.api_keys else None
    return Authenticator(keys, jwt)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "auth",
        help="run the ext_authz service that checks API keys and JWTs for Envoy Gateway",
        description="Envoy's HTTP external authorization service: the same credential "
        "checks as `igw serve` (API key digests, JWTs, per-credential models), answering "
        "under /authz, so one SecurityPolicy accepts API keys and JWTs together.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="default loopback (charts: 0.0.0.0)")
    parser.add_argument("--port", type=int, default=DEFAULTS["igw auth", "--port"])
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        help="the largest body a check reads (SecurityPolicy bodyToExtAuth; default %(default)s)",
    )
    add_auth_arguments(parser, jwks_help="the issuer's JWKS: a JSON file or an https URL")
    parser.add_argument(
        "--jwks-allow-loopback-http",
        action="store_true",
        help="accept a plain http:// JWKS URL to a loopback address (tests, a local "
        "issuer); any other JWKS URL must be https",
    )
    parser.add_argument(
        "--jwks-refresh",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="with a JWKS URL: how often the keys are fetched again (default %(default)s)",
    )
    add_tracing_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    auth = authenticator(args, "igw auth", jwks_url_allowed=True)  # ConfigError → exit 2
    if auth is None:
        print("igw auth: give --api-keys, JWT settings (--jwt-issuer …) or both", file=sys.stderr)
        return 2
    if args.max_body_bytes <= 0 or args.jwks_refresh <= 0:
        print("igw auth: --max-body-bytes and --jwks-refresh must be positive", file=sys.stderr)
        return 2
    start_server_process()
    return asyncio.run(_serve(args, auth))


async def _serve(args: argparse.Namespace, auth: Authenticator) -> int:
    from inference_gateway.frontends.authz import authz_app, keep_jwks_fresh
    from inference_gateway.transport.http_settings import server_settings
    from inference_gateway.transport.signals import serve_http

    tracing = tracing_from_args(args, "igw-auth")
    refresher = None
    if auth.jwt is not None and auth.jwt.jwks_path is None:
        refresher = asyncio.create_task(
            keep_jwks_fresh(auth, args.jwt_jwks, interval_s=args.jwks_refresh)
        )

    def listening(port: int) -> None:
        print(f"igw auth: ext_authz on http://{args.host}:{port}/authz", flush=True)

    try:
        await serve_http(
            authz_app(auth, max_body_bytes=args.max_body_bytes, tracing=tracing),
            name="igw auth",
            host=args.host,
            port=args.port,
            in_flight=lambda: 0,  # a check is one quick answer: nothing to wait for
            grace_s=1.0,
            on_listening=listening,
            access_log=None,  # no line per check: refusals are counted on /metrics
            **server_settings(),
        )
    finally:
        if refresher is not None:
            refresher.cancel()
        await tracing.close()
    return 0
