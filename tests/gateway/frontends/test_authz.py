"""`igw auth`'s JWKS from a URL: refused until fetched, retried while it fails, and a
failed refresh keeps the keys in use (a loopback issuer)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import jwt
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
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
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
