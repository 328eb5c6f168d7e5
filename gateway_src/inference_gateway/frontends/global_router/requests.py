"""What a request to `igw global` carries, checked: its credential (the cluster gateways'
own `Authenticator`) and its latency budget. Its body, model, output bound and client id
are read by the core's one body module (core/request/body.py), its refusals worded by
core/request/refusals.py, and the answer's `usage`, which settles the charge, by the
gateway's one usage parser (core/request/usage.py), as at tier 1.

Every value here comes from a client or a cluster and is hostile until checked: a
malformed number, a wrong type or a boolean where a count belongs reads as absent.
"""

from __future__ import annotations

from pathlib import Path

from inference_gateway.config.global_router import AuthSpec
from inference_gateway.frontends.auth import Authenticator, JwtSettings, load_api_keys

__all__ = ["budget_s", "build_authenticator"]


def build_authenticator(spec: AuthSpec | None) -> Authenticator | None:
    """The `auth` section as the cluster gateways' own Authenticator (ConfigError on a bad
    key file or JWKS, before the router listens)."""
    if spec is None:
        return None
    keys = load_api_keys(spec.api_keys_file) if spec.api_keys_file else None
    jwt = None
    if spec.jwt is not None:
        jwt = JwtSettings(
            issuer=spec.jwt.issuer,
            audiences=tuple(spec.jwt.audiences),
            jwks_path=Path(spec.jwt.jwks_file),
            required_claims=dict(spec.jwt.claims),
            client_claim=spec.jwt.client_claim,
        )
    return Authenticator(keys, jwt)


def budget_s(value: str | None) -> float | None:
    """A client's latency budget: whole milliseconds, 1 to 600,000; anything else is ignored."""
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > 6:
        return None
    ms = int(value)
    return ms / 1000 if 0 < ms <= 600_000 else None
