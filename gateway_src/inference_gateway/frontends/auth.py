"""Who may call `igw serve`: API keys and JWT/OIDC bearer tokens, checked before any pod
is touched, the same checks Envoy Gateway's `SecurityPolicy` makes in the cluster.

* **API keys** come from a file (in the cluster, a Secret synced from AWS Secrets
  Manager and mounted read-only), never from the gateway config or `environment.yaml`,
  and are stored there as SHA-256 digests, so the file reveals no key:

      keys:
        - {client: team-a, sha256: 5e88…}                       # every model
        - {client: batch, sha256: 9f86…, models: [llama-3.1-8b]}  # only these

  `printf %s "$KEY" | sha256sum` gives the digest. A key is looked up by its digest
  (a dictionary of SHA-256 values leaks nothing through timing about the key).
* **JWT / OIDC**: a bearer token with three dot-separated parts is verified against a
  JWKS (a file, as a mounted ConfigMap or the issuer's keys copied at deploy time):
  signature (RS/ES/PS algorithms only: a shared-secret HS token could be forged by
  anyone holding the public JWKS), `iss`, `aud` (one of the configured audiences),
  `exp` / `nbf` (numbers, as RFC 7519's NumericDate is: `"exp": "9999999999"` is
  refused), and any required claim values. The client id is the `sub` claim (or
  another claim, configured). A `models` claim, when present, is the list of models
  the token may use, as `models` in the key file is: a JSON list of names, or one
  string of space-separated names (as OAuth's `scope` is written, RFC 6749 §3.3); an
  empty list or string grants no model, and any other value (a number, null, an
  object) grants none either. Without the claim every model is allowed.

The authenticated client id replaces whatever the caller sent as its fairness id and
becomes the key of per-client rate limits (`rateLimits[].client`), so one client cannot
spend another's share; the caller's credential is not forwarded to the model servers.
Unknown credentials get an OpenAI-shaped 401; a model the credential may not use gets
404 `model_not_found`, as OpenAI answers for a model a key has no access to (a 403 would
confirm that the model exists). No credential is ever logged or echoed: a refusal is
counted by reason (`igw_auth_refusals_total{reason}`) and summed into at most one log
line per 10 s (telemetry/tally.py), since any client can cause one at will. A bearer
token longer than `MAX_TOKEN_CHARS` (16 KiB: large identity-provider JWTs fit) is
refused like an unknown one; the servers read header values up to a little more
(transport/http_settings.py) and answer a larger one 431 without echoing it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inference_gateway.config.spec import read_yaml
from inference_gateway.core.request import refusals
from inference_gateway.core.request.body import model_of
from inference_gateway.core.request.director import CLIENT_ID_HEADER, FAIRNESS_HEADER
from inference_gateway.errors import ConfigError
from inference_gateway.frontends.http_errors import render
from inference_gateway.telemetry.tally import Tally

__all__ = [
    "MAX_TOKEN_CHARS",
    "REFUSALS_METRIC",
    "Authenticator",
    "Identity",
    "JwtSettings",
    "admit",
    "auth_middleware",
    "load_api_keys",
    "models_claim",
]

log = logging.getLogger(__name__)

# Paths a probe or a scraper reads without a credential (/status: the global router's
# heartbeat, the same operational numbers /metrics shows).
OPEN_PATHS = frozenset({"/health", "/healthz", "/ready", "/metrics", "/status"})
ASYMMETRIC_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384"]
#: The longest bearer token looked at (identity providers' JWTs with many groups run to
#: a few KiB; 16 KiB is what Envoy Gateway's and most proxies' header limits leave).
MAX_TOKEN_CHARS = 16 * 1024
#: The counter of refused credentials, by reason (`Authenticator.refusals`).
REFUSALS_METRIC = "igw_auth_refusals"
#: RFC 7519 §2 NumericDate claims: JSON numbers, never strings.
_DATE_CLAIMS = ("exp", "nbf", "iat")


@dataclass(frozen=True, slots=True)
class Identity:
    client: str
    models: frozenset[str] | None = None  # None: every model

    def may_use(self, model: str) -> bool:
        return self.models is None or model in self.models


class _KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    client: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9._:@/-]+$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of the key")
    models: list[str] | None = None


class _KeyFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: list[_KeyEntry] = Field(min_length=1)


def load_api_keys(path: str | Path) -> dict[bytes, Identity]:
    """Digest → identity, from a key file; ConfigError (exit 2) names the bad field."""
    source = f"API key file {path}"
    try:
        parsed = _KeyFile.model_validate(read_yaml(path))
    except ValidationError as error:
        raise ConfigError(
            source, [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()]
        ) from None
    out: dict[bytes, Identity] = {}
    for i, entry in enumerate(parsed.keys):
        digest = bytes.fromhex(entry.sha256)
        if digest in out:
            raise ConfigError(source, [f"keys[{i}].sha256: the same key is listed twice"])
        models = frozenset(entry.models) if entry.models is not None else None
        out[digest] = Identity(entry.client, models)
    return out


@dataclass(frozen=True)
class JwtSettings:
    """The accepted issuer's tokens. Its keys come from `jwks_path` (a file, read once)
    or, in `igw auth`, from `jwks_url` (fetched and kept fresh by `frontends.authz`)."""

    issuer: str
    audiences: tuple[str, ...]
    jwks_path: Path | None
    required_claims: Mapping[str, str] = None  # type: ignore[assignment]
    client_claim: str = "sub"
    leeway_s: float = 30.0


class Authenticator:
    def __init__(
        self, api_keys: Mapping[bytes, Identity] | None = None, jwt: JwtSettings | None = None
    ) -> None:
        if not api_keys and jwt is None:
            raise ValueError("an Authenticator needs API keys, JWT settings or both")
        self.api_keys = dict(api_keys or {})
        self.jwt = jwt
        self._jwks: Any = None  # no keys yet: every JWT is refused
        # every refusal by reason (a fixed set of words, never what the client sent)
        self.refusals = Tally(log, "refused credentials")
        if jwt is not None and jwt.jwks_path is not None:
            source = f"JWKS {jwt.jwks_path}"
            try:
                text = jwt.jwks_path.read_text()
            except OSError as error:
                raise ConfigError(source, [f"<root>: cannot read file: {error.strerror}"]) from None
            try:
                self.load_jwks(text)
            except ValueError as error:
                raise ConfigError(source, [f"<root>: {error}"]) from None

    def load_jwks(self, text: str) -> None:
        """Take the issuer's keys from a JWKS document; ValueError when it holds none
        usable (the keys in use stay as they were)."""
        import jwt as pyjwt

        try:
            self._jwks = pyjwt.PyJWKSet.from_json(text)
        except pyjwt.PyJWKSetError as error:
            raise ValueError(str(error)) from None

    def identify(self, authorization: str | None) -> Identity | None:
        """The caller's identity, or None for a missing or unknown credential (counted
        in `refusals` by reason)."""
        verdict = self._identify(authorization)
        if isinstance(verdict, str):
            self.refusals.record(verdict)
            return None
        return verdict

    def refusals_collector(self) -> Any:
        """`igw_auth_refusals_total{reason}`, for the server's metrics registry."""
        return self.refusals.collector(REFUSALS_METRIC, "Credentials refused, by reason.")

    def _identify(self, authorization: str | None) -> Identity | str:
        if not authorization:
            return "missing"
        if authorization[:7].lower() != "bearer ":
            return "not_bearer"
        token = authorization[7:].strip()
        if not token:
            return "missing"
        if len(token) > MAX_TOKEN_CHARS:
            return "too_large"
        if self.jwt is not None and token.count(".") == 2:
            return self._verify_jwt(token)
        identity = self.api_keys.get(hashlib.sha256(token.encode("utf-8", "replace")).digest())
        return identity if identity is not None else "unknown_key"

    def _verify_jwt(self, token: str) -> Identity | str:
        import jwt as pyjwt

        settings = self.jwt
        assert settings is not None
        if self._jwks is None:
            return "jwks_not_loaded"
        try:
            header = pyjwt.get_unverified_header(token)
            key = self._jwks[header["kid"]] if "kid" in header else self._only_key()
            claims = pyjwt.decode(
                token,
                key=key,
                algorithms=ASYMMETRIC_ALGORITHMS,
                audience=list(settings.audiences),
                issuer=settings.issuer,
                leeway=settings.leeway_s,
                options={"require": ["exp", "iss", "aud", settings.client_claim]},
            )
        except pyjwt.ExpiredSignatureError:
            return "jwt_expired"
        except pyjwt.InvalidSignatureError:
            return "jwt_bad_signature"
        except (pyjwt.InvalidAudienceError, pyjwt.InvalidIssuerError):
            return "jwt_wrong_issuer_or_audience"
        except (pyjwt.PyJWTError, KeyError, TypeError, ValueError):
            return "jwt_invalid"
        if not isinstance(claims, dict):
            return "jwt_invalid"
        # PyJWT reads a numeric string as a date (`int("9999999999")`); RFC 7519 does not
        if any(_not_a_number(claims[name]) for name in _DATE_CLAIMS if name in claims):
            return "jwt_invalid"
        for name, wanted in (settings.required_claims or {}).items():
            value = claims.get(name)
            values = value if isinstance(value, list) else str(value or "").split()
            if wanted not in values:
                return "jwt_claim_missing"
        client = claims.get(settings.client_claim)
        if not isinstance(client, str) or not client:
            return "jwt_invalid"
        return Identity(client, models_claim(claims))

    def _only_key(self) -> Any:
        keys = self._jwks.keys
        if len(keys) != 1:
            raise KeyError("a token without kid needs a JWKS of exactly one key")
        return keys[0]


def models_claim(claims: Mapping[str, Any]) -> frozenset[str] | None:
    """The models a token's `models` claim allows (module docstring): None (every model)
    only when the claim is absent; a list's strings, or a string's space-separated
    names; nothing for an empty list or string or a value of any other type."""
    if "models" not in claims:
        return None
    value = claims["models"]
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(m for m in value if isinstance(m, str) and m)
    return frozenset()


def _not_a_number(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int | float)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


BodyReader = Callable[[], Awaitable[bytes]]


def unknown_credential() -> web.Response:
    """401 for a missing or unknown credential, as OpenAI answers a bad API key."""
    return render(refusals.unknown_credential())


async def refuse_model(
    identity: Identity, method: str, read_body: BodyReader
) -> web.Response | None:
    """404 `model_not_found` for a model the credential may not use (a 403 would confirm
    that the model exists), 413 for a body too large to read; None when it may go on.
    The body is read only when the credential is restricted to some models."""
    if identity.models is None or method != "POST":
        return None
    try:
        model = model_of(await read_body())
    except web.HTTPRequestEntityTooLarge:
        return render(refusals.too_large_body())
    if model is not None and not identity.may_use(model):
        return render(refusals.model_not_found(model))
    return None


async def admit(
    auth: Authenticator, authorization: str | None, method: str, read_body: BodyReader
) -> Identity | web.Response:
    """The one rule `igw serve` and `igw auth` both apply: the caller's identity, or the
    OpenAI-shaped answer that refuses it."""
    identity = auth.identify(authorization)
    if identity is None:
        return unknown_credential()
    return await refuse_model(identity, method, read_body) or identity


def auth_middleware(auth: Authenticator | None) -> Any:
    """The aiohttp middleware: authenticate, then hand the handler a request whose headers
    carry the client id (as the client-id and fairness headers) and no credential. Without
    an Authenticator it still strips a client id a caller sent, so nobody can claim one."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if auth is None:
            if CLIENT_ID_HEADER not in request.headers:
                return await handler(request)
            headers = request.headers.copy()
            del headers[CLIENT_ID_HEADER]
            return await handler(request.clone(headers=headers))
        if request.path in OPEN_PATHS:
            return await handler(request)
        identity = auth.identify(request.headers.get("authorization"))
        if identity is None:
            return unknown_credential()
        headers = request.headers.copy()
        headers.popall("authorization", None)
        headers[CLIENT_ID_HEADER] = identity.client
        headers[FAIRNESS_HEADER] = identity.client
        # the handler gets this request: its body, once read for the model check, is cached
        authed = request.clone(headers=headers)
        refusal = await refuse_model(identity, request.method, authed.read)
        return refusal if refusal is not None else await handler(authed)

    return middleware
