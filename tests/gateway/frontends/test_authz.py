"""`igw auth`'s JWKS from a URL: refused until fetched, retried while it fails, a
failed refresh keeps the keys in use (a loopback issuer), only https (or loopback http
when asked) and no redirect; refusals counted, not logged one by one."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from inference_gateway.frontends.auth import Authenticator, JwtSettings
from inference_gateway.frontends.authz import keep_jwks_fresh

ISSUER = "https://issuer.example"


def _jwks(key: Any) -> dict[str, Any]:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]}


def _token(key: Any) -> str:
    claims = {"iss": ISSUER, "aud": "igw", "sub": "svc", "exp": time.time() + 300}
    return "Bearer " + jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


async def _serve(app: web.Application) -> tuple[web.AppRunner, int]:
    """`app` on a loopback port (an issuer stand-in); the runner, to clean up."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def test_jwts_wait_for_the_first_fetch_and_survive_a_failed_refresh() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    answers = [500, 200, 500, 500]  # down at start, up, then down again
    served: list[int] = []

    async def handler(_: web.Request) -> web.Response:
        status = answers[min(len(served), len(answers) - 1)]
        served.append(status)
        return web.json_response(_jwks(key), status=status)

    app = web.Application()
    app.router.add_get("/jwks", handler)
    runner, port = await _serve(app)
    auth = Authenticator(jwt=JwtSettings(issuer=ISSUER, audiences=("igw",), jwks_path=None))
    assert auth.identify(_token(key)) is None  # no keys yet: refused, never unchecked
    first = asyncio.Event()
    task = asyncio.create_task(
        keep_jwks_fresh(
            auth, f"http://127.0.0.1:{port}/jwks", interval_s=0.05, retry_s=0.05, first=first
        )
    )
    try:
        await asyncio.wait_for(first.wait(), timeout=10)
        assert served[:2] == [500, 200]
        identity = auth.identify(_token(key))
        assert identity is not None and identity.client == "svc"
        deadline = time.monotonic() + 10
        while len(served) < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert served[2:4] == [500, 500]
        assert auth.identify(_token(key)) is not None  # the keys in use stay
    finally:
        task.cancel()
        await runner.cleanup()


def test_a_jwks_url_must_be_https_or_loopback_http_when_asked() -> None:
    """Keys fetched over plain HTTP could be swapped on the way."""
    from inference_gateway.frontends.authz import jwks_url

    assert jwks_url("https://login.example/jwks.json") == "https://login.example/jwks.json"
    for bad in ("http://login.example/jwks.json", "ftp://x/j", "https:///j", "file:///j"):
        with pytest.raises(ValueError):
            jwks_url(bad, allow_loopback_http=True)
    with pytest.raises(ValueError, match="--jwks-allow-loopback-http"):
        jwks_url("http://127.0.0.1:9/jwks.json")
    for loopback in ("http://127.0.0.1:9/j", "http://[::1]:9/j", "http://localhost/j"):
        assert jwks_url(loopback, allow_loopback_http=True) == loopback
    with pytest.raises(ValueError, match="loopback only"):
        jwks_url("http://10.0.0.1/jwks.json", allow_loopback_http=True)


def test_igw_auth_refuses_a_plain_http_jwks_url() -> None:
    """The flags `igw auth` starts from (exit 2 with the reason, before serving)."""
    from inference_gateway.cli.auth import authenticator
    from inference_gateway.cli.main import build_parser
    from inference_gateway.errors import ConfigError

    flags = ["auth", "--jwt-issuer", ISSUER, "--jwt-audience", "igw", "--jwt-jwks"]
    parser = build_parser("auth")
    for url in ("http://login.example/jwks.json", "http://127.0.0.1:9/jwks.json"):
        with pytest.raises(ConfigError) as refused:
            authenticator(parser.parse_args([*flags, url]), "igw auth", jwks_url_allowed=True)
        assert "https" in refused.value.problems[0]
    args = parser.parse_args([*flags, "http://127.0.0.1:9/j", "--jwks-allow-loopback-http"])
    assert authenticator(args, "igw auth", jwks_url_allowed=True) is not None


async def test_a_jwks_redirect_is_not_followed() -> None:
    """An https URL that answers a redirect to http (or anywhere) loads no keys."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    fetched: list[str] = []

    async def moved(_: web.Request) -> web.Response:
        fetched.append("moved")
        raise web.HTTPFound("/real")

    async def real(_: web.Request) -> web.Response:
        fetched.append("real")
        return web.json_response(_jwks(key))

    app = web.Application()
    app.router.add_get("/jwks", moved)
    app.router.add_get("/real", real)
    runner, port = await _serve(app)
    auth = Authenticator(jwt=JwtSettings(issuer=ISSUER, audiences=("igw",), jwks_path=None))
    task = asyncio.create_task(
        keep_jwks_fresh(auth, f"http://127.0.0.1:{port}/jwks", interval_s=60, retry_s=0.05)
    )
    try:
        deadline = time.monotonic() + 10
        while len(fetched) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert fetched[:3] == ["moved"] * 3
        assert auth.identify(_token(key)) is None
    finally:
        task.cancel()
        await runner.cleanup()


async def test_refusals_are_counted_and_summed_into_one_log_line(caplog: Any) -> None:
    """`igw auth`'s app: 200 refused checks make the counter 200 and one log line, and
    no line names what was sent."""
    import logging

    from aiohttp.test_utils import TestClient, TestServer

    from inference_gateway.frontends.authz import authz_app

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    auth = Authenticator(jwt=JwtSettings(issuer=ISSUER, audiences=("igw",), jwks_path=None))
    auth.load_jwks(json.dumps(_jwks(key)))
    async with TestClient(TestServer(authz_app(auth, max_body_bytes=1024))) as client:
        with caplog.at_level(logging.DEBUG):
            for i in range(200):
                r = await client.get("/authz/v1/x", headers={"authorization": f"Bearer sk-{i}"})
                assert r.status == 401
        metrics = await (await client.get("/metrics")).text()
    assert 'igw_auth_refusals_total{reason="unknown_key"} 200.0' in metrics
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1 and "unknown_key 1" in lines[0], lines
    assert not [r for r in caplog.records if "sk-1" in r.getMessage()]
