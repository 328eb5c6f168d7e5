"""The shared store's schema: where it is (`StoreSpec`) and the global limits counted in it
(`GlobalRateLimitSpec`).

Schema only, so a config file that names a store (`igw global`'s `store` and
`rateLimitStore`, `igw serve --store`) is read without the store's client;
`shared_store/client.py` connects to what `StoreSpec` says and
`shared_store/ratelimit.py` counts what `GlobalRateLimitSpec` says.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from inference_gateway.config.spec import RateLimitSpec

__all__ = ["GlobalRateLimitSpec", "StoreSpec"]


class StoreSpec(BaseModel):
    """Where the shared store is and how to reach it; unknown keys are errors."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    url: str = Field(description="redis://host:port/db or rediss://… (TLS).")
    username: str | None = None
    password_env: str | None = Field(
        default=None, description="Environment variable that holds the password (AUTH)."
    )
    ca_file: str | None = Field(default=None, description="CA bundle for rediss:// (TLS).")
    timeout_ms: int = Field(default=250, gt=0, le=10_000)
    max_connections: int = Field(default=64, ge=1, le=10_000, description="Per replica.")
    retry_ms: int = Field(default=1000, gt=0, le=60_000, description="Probe period when down.")

    @field_validator("url")
    @classmethod
    def _redis_scheme(cls, url: str) -> str:
        if not url.startswith(("redis://", "rediss://")):
            raise ValueError("must start with redis:// or rediss:// (TLS)")
        return url


class GlobalRateLimitSpec(BaseModel):
    """The global limits; `rules` have the gateway's `RateLimitSpec` shape, their
    per-minute numbers counting per `windowS` (60 by default, a minute)."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    rules: list[RateLimitSpec] = Field(default_factory=list)
    window_s: float = Field(default=60.0, gt=0, le=3600)
    slots: int = Field(default=60, ge=1, le=600)
    fallback_replicas: int = Field(
        default=1, ge=1, description="Replicas sharing the limit when each falls back locally."
    )
    key_prefix: str = Field(default="igw", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
