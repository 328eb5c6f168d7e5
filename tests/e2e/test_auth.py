"""Authentication in `igw serve`, end to end on loopback with the official openai SDK:
API keys from a digest-only key file, JWTs signed by a key of a local JWKS, per-client
rate limits, and a caller that cannot claim another client's identity. This runs the
key-file and flag example of docs/traffic-control.md ("Authentication")."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import jwt
import openai
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import rsa

from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.errors import ConfigError
from inference_gateway.frontends.auth import Authenticator, JwtSettings, load_api_keys

FLEET = {"base_port": 0, "pods": [{"name": "h", "gpu": "H100", "model": "llama-3.1-8b"}]}
MODEL = "llama-3.1-8b"
CONFIG = {
    "pools": [{"name": "h", "selector": {"igw.dev/pool": "h"}}],
    "models": [{"name": MODEL, "pool": "h"}],
    "rateLimits": [{"client": "limited", "requestsPerMinute": 2}],
}
KEYS = {"team-a": "sk-team-a-0123456789", "batch": "sk-batch-9876543210", "limited": "sk-lim-1"}
ISSUER = "https://issuer.example"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    entries = [
        {"client": "team-a", "sha256": digest(KEYS["team-a"])},
        {"client": "batch", "sha256": digest(KEYS["batch"]), "models": ["other-model"]},
        {"client": "limited", "sha256": digest(KEYS["limited"])},
    ]
    path.write_text(yaml.safe_dump({"keys": entries}))
    return path


@pytest.fixture
def signing_key(tmp_path: Path) -> tuple[Any, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]}))
    return key, path


def token(key: Any, **claims: Any) -> str:
    body = {"iss": ISSUER, "aud": "igw", "sub": "svc-1", "exp": time.time() + 300, **claims}
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": "k1"})


def client(url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


async def ask(url: str, key: str) -> Any:
    return await client(url, key).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )


async def test_api_keys_and_jwts_before_any_pod_is_touched(
    gateway_on: Any, key_file: Path, signing_key: tuple[Any, Path]
) -> None:
    key, jwks = signing_key
    auth = Authenticator(
        load_api_keys(key_file),
        JwtSettings(ISSUER, ("igw",), jwks, required_claims={"scope": "inference"}),
    )
    async with (
        EmulatedFleet(FLEET) as fleet,
        gateway_on(fleet, config=parse_config(CONFIG), auth=auth) as (url, gateway, _),
    ):
        reply = await ask(url, KEYS["team-a"])
        assert reply.choices[0].message.content

        def routed() -> float:
            value = gateway.metrics.registry.get_sample_value(
                "inference_objective_request_total",
                {"model_name": MODEL, "target_model_name": MODEL},
            )
            assert value is not None
            return value

        served_before = routed()
        with pytest.raises(openai.AuthenticationError) as unknown:
            await ask(url, "sk-not-a-key")
        assert unknown.value.status_code == 401
        assert unknown.value.code == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            await ask(url, KEYS["team-a"] + "x")

        with pytest.raises(openai.NotFoundError) as hidden:  # 404: not allowed for the model
            await ask(url, KEYS["batch"])
        assert hidden.value.code == "model_not_found"

        assert (await ask(url, token(key, scope="read inference"))).choices
        with pytest.raises(openai.AuthenticationError):  # the required claim is missing
            await ask(url, token(key, scope="read"))
        with pytest.raises(openai.AuthenticationError):  # wrong audience
            await ask(url, token(key, aud="someone-else", scope="inference"))
        with pytest.raises(openai.AuthenticationError):  # expired
            await ask(url, token(key, scope="inference", exp=time.time() - 3600))
        forged = jwt.encode(  # HS256 with the public key as secret: never accepted
            {
                "iss": ISSUER,
                "aud": "igw",
                "sub": "x",
                "exp": time.time() + 60,
                "scope": "inference",
            },
            "a-shared-secret-anyone-could-guess-32b",
            algorithm="HS256",
            headers={"kid": "k1"},
        )
        with pytest.raises(openai.AuthenticationError):
            await ask(url, forged)
        assert routed() == served_before + 1  # the one JWT let in; every rejection came first


async def test_per_client_limit_follows_the_authenticated_id(
    gateway_on: Any, key_file: Path
) -> None:
    """The limit names the client id from the key file; a caller's own fairness or
    client-id headers change nothing."""
    async with (
        EmulatedFleet(FLEET) as fleet,
        gateway_on(
            fleet, config=parse_config(CONFIG), auth=Authenticator(load_api_keys(key_file))
        ) as (url, _, _),
    ):
        spoof = {"x-igw-client-id": "team-a", "x-gateway-inference-fairness-id": "team-a"}
        limited = openai.AsyncOpenAI(
            base_url=url + "/v1", api_key=KEYS["limited"], max_retries=0, default_headers=spoof
        )
        for _ in range(2):
            await limited.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
        with pytest.raises(openai.RateLimitError) as limit:
            await limited.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
        assert int(limit.value.response.headers["retry-after"]) >= 1
        assert (await ask(url, KEYS["team-a"])).choices  # another client's bucket is full


async def test_without_authentication_a_caller_cannot_claim_a_client_id(gateway_on: Any) -> None:
    config = parse_config({**CONFIG, "rateLimits": [{"client": "vip", "requestsPerMinute": 1}]})
    async with EmulatedFleet(FLEET) as fleet, gateway_on(fleet, config=config) as (url, _, _):
        sdk = openai.AsyncOpenAI(
            base_url=url + "/v1",
            api_key="anything",
            max_retries=0,
            default_headers={"x-igw-client-id": "vip"},
        )
        for _ in range(3):  # the vip limit would stop the second one if the header counted
            await sdk.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )


def test_bad_key_files_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": [{"client": "a", "sha256": "not-hex"}]}))
    with pytest.raises(ConfigError, match=r"keys\.0\.sha256"):
        load_api_keys(path)
    path.write_text(yaml.safe_dump({"keys": [{"client": "a", "key": "sk-plain"}]}))
    with pytest.raises(ConfigError, match="key"):  # plain keys are refused outright
        load_api_keys(path)


@pytest.mark.parametrize(
    ("models", "allowed"),
    [
        ([], False),  # an empty list grants nothing (as `models: []` in the key file)
        ("", False),
        (f"other {MODEL}", True),  # a string is space-separated names (OAuth `scope`)
        (MODEL, True),  # one name: not iterated by character
        ("other", False),
        (None, False),  # any other type grants nothing
        (7, False),
    ],
)
async def test_a_jwt_models_claim_reads_as_the_key_files_models(
    gateway_on: Any, signing_key: tuple[Any, Path], models: Any, allowed: bool
) -> None:
    key, jwks = signing_key
    auth = Authenticator(jwt=JwtSettings(ISSUER, ("igw",), jwks))
    async with (
        EmulatedFleet(FLEET) as fleet,
        gateway_on(fleet, config=parse_config(CONFIG), auth=auth) as (url, _, _),
    ):
        bearer = token(key, models=models)
        if allowed:
            assert (await ask(url, bearer)).choices
        else:
            with pytest.raises(openai.NotFoundError) as hidden:
                await ask(url, bearer)
            assert hidden.value.code == "model_not_found"
        assert (await ask(url, token(key))).choices  # no claim: every model


async def test_a_numeric_string_exp_and_large_credentials_get_openais_401(
    gateway_on: Any, key_file: Path, signing_key: tuple[Any, Path]
) -> None:
    """RFC 7519 NumericDate is a JSON number: `"exp": "9999999999"` is refused (PyJWT
    alone would read it as a date). A 10 KiB bearer token is read and refused 401 in
    OpenAI's shape (aiohttp's default limit answered a plain-text 400 quoting it)."""
    key, jwks = signing_key
    auth = Authenticator(load_api_keys(key_file), JwtSettings(ISSUER, ("igw",), jwks))
    async with (
        EmulatedFleet(FLEET) as fleet,
        gateway_on(fleet, config=parse_config(CONFIG), auth=auth) as (url, _, _),
    ):
        with pytest.raises(openai.AuthenticationError) as refused:
            await ask(url, token(key, exp="9999999999"))
        assert refused.value.code == "invalid_api_key"
        big = "sk-" + "7" * 10_240
        with pytest.raises(openai.AuthenticationError) as refused:
            await ask(url, big)
        assert refused.value.code == "invalid_api_key"
        assert "777777" not in refused.value.response.text
        with pytest.raises(openai.AuthenticationError):  # over the 16 KiB token cap
            await ask(url, "sk-" + "8" * 16_500)
        with pytest.raises(openai.APIStatusError) as too_large:  # over the header limit
            await ask(url, "sk-" + "9" * 20_000)
        assert too_large.value.status_code == 431
        assert too_large.value.code == "request_header_fields_too_large"
        assert "999999" not in too_large.value.response.text
        large_jwt = token(key, groups=["g" * 40] * 200)  # an IdP's token with many groups
        assert len(large_jwt) > 10 * 1024
        assert (await ask(url, large_jwt)).choices
