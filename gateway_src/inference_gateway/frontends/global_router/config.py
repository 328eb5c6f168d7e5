"""The global router's YAML file: the clusters it fronts, how it scores them, the store.

    homeRegion: us-east-1            # clients' region unless x-igw-client-region names one
    profile: latency                 # default profile: latency | cost
    pollIntervalMs: 1000             # GET /status of every cluster this often
    staleAfterMs: 3000               # no good status for this long → drained
    rampS: 30                        # a returning cluster's share grows over this window
    firstByteTimeoutMs: 60000        # a stream without its first chunk this long: 504
    streamIdleTimeoutMs: 30000       # a started stream silent this long: SSE error, drained
    drainFile: /var/run/igw/drained  # planned drains without a store (igw global drain)
    latencyBudgetMs: 2000            # cost profile: clusters slower than this are skipped
    sheddableObjectives: [batch]     # x-gateway-inference-objective values routed by cost
    clusters:
      - {name: use1-a, region: us-east-1, endpoint: "http://10.0.0.1:8080",
         priority: 0, hourlyCostUsd: 98.3, capacityTokensPerSecond: 40000}
    profiles:                        # weights per signal; missing profiles keep defaults
      cost: {kvHeadroom: 1, queue: 1, proximity: 0.5, errors: 1, cost: 4}
    store: {url: "rediss://…", passwordEnv: IGW_STORE_PASSWORD}
    rateLimitStore: {url: "rediss://…", passwordEnv: IGW_RATELIMIT_STORE_PASSWORD}  # optional
    auth: {apiKeysFile: /etc/igw/keys.yaml}   # optional; as igw serve --api-keys / --jwt-*
    rateLimits: {rules: [{requestsPerMinute: 600}], windowS: 60}

Unknown keys are errors; every problem is reported with its field path (`ConfigError`,
exit 2 from the CLI), the rules between fields (`cross_field_problems`: unique cluster
names, `homeRegion` one of the clusters' regions, `staleAfterMs` at least twice
`pollIntervalMs`, rate limits with a store)
in the same report as the field errors, not after they are fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel

from inference_gateway.config.spec import TracingSpec, format_validation_error, read_yaml
from inference_gateway.errors import ConfigError
from inference_gateway.shared_store.client import StoreSpec
from inference_gateway.shared_store.ratelimit import GlobalRateLimitSpec

__all__ = [
    "AuthSpec",
    "ClusterSpec",
    "GlobalRouterSpec",
    "JwtSpec",
    "ProfileName",
    "WeightsSpec",
    "cross_field_problems",
    "load_router_config",
    "parse_router_config",
]

ProfileName = Literal["latency", "cost"]


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class ClusterSpec(_Spec):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")
    region: str = Field(min_length=1, max_length=64)
    endpoint: str = Field(pattern=r"^https?://[^/\s]+/?$", description="Cluster gateway root URL.")
    priority: int = Field(default=0, ge=0, description="Lower wins a tie.")
    hourly_cost_usd: float = Field(default=0.0, ge=0)
    capacity_tokens_per_second: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Generated tokens per second the cluster sustains at capacity (a "
        "benchmark's or `igw simulate`'s figure): with hourlyCostUsd, its cost per million "
        "generated tokens at capacity, what cost-aware routing compares.",
    )

    @property
    def base_url(self) -> str:
        return self.endpoint.rstrip("/")

    def cost_per_million_at_capacity(self) -> float | None:
        """USD per million generated tokens when the cluster runs at capacity; None
        without a capacity. From what the cluster *can* serve, never from what it happens
        to serve now: a busy expensive cluster is not cheaper per token than an idle one."""
        if self.capacity_tokens_per_second is None:
            return None
        return self.hourly_cost_usd / (self.capacity_tokens_per_second * 3600) * 1e6


class WeightsSpec(_Spec):
    """Weight of each signal in a cluster's score (each signal is in [0, 1])."""

    kv_headroom: float = Field(default=1.0, ge=0)
    queue: float = Field(default=1.0, ge=0)
    proximity: float = Field(default=1.0, ge=0)
    errors: float = Field(default=1.0, ge=0)
    cost: float = Field(default=0.0, ge=0)


DEFAULT_PROFILES: dict[ProfileName, WeightsSpec] = {
    "latency": WeightsSpec(kv_headroom=2, queue=2, proximity=3, errors=2, cost=0.25),
    "cost": WeightsSpec(kv_headroom=0.5, queue=0.5, proximity=0.5, errors=1, cost=6),
}


class JwtSpec(_Spec):
    issuer: str = Field(min_length=1)
    audiences: list[str] = Field(min_length=1)
    jwks_file: str
    claims: dict[str, str] = Field(default_factory=dict, description="Required claim values.")
    client_claim: str = "sub"


class AuthSpec(_Spec):
    """Who may call the router: the same API key file and JWT checks as `igw serve`
    (frontends/auth.py); the client id keys the global rate limits."""

    api_keys_file: str | None = None
    jwt: JwtSpec | None = None

    @model_validator(mode="after")
    def _something(self) -> AuthSpec:
        if self.api_keys_file is None and self.jwt is None:
            raise ValueError("set apiKeysFile, jwt or both (or leave auth out)")
        return self


class GlobalRouterSpec(_Spec):
    clusters: list[ClusterSpec] = Field(min_length=1)
    home_region: str | None = None
    profile: ProfileName = "latency"
    profiles: dict[ProfileName, WeightsSpec] = Field(default_factory=dict)
    poll_interval_ms: int = Field(default=1000, ge=10, le=60_000)
    status_timeout_ms: int = Field(default=500, ge=10, le=60_000)
    stale_after_ms: int = Field(default=3000, ge=10, le=600_000)
    ramp_s: float = Field(default=30.0, ge=0, le=3600)
    latency_budget_ms: float = Field(default=2000.0, gt=0)
    saturation_max: float = Field(default=0.9, gt=0, le=1, description="Headroom line.")
    sheddable_objectives: list[str] = Field(default_factory=list)
    max_attempts: int = Field(default=3, ge=1, le=10)
    connect_timeout_ms: int = Field(default=1000, ge=10, le=60_000)
    read_timeout_ms: int = Field(
        default=300_000, ge=100, le=3_600_000, description="Longest silence from a cluster."
    )
    first_byte_timeout_ms: int = Field(
        default=60_000,
        ge=100,
        le=3_600_000,
        description="Longest wait for a stream's first chunk (then 504, never a retry).",
    )
    stream_idle_timeout_ms: int = Field(
        default=30_000,
        ge=100,
        le=600_000,
        description="Longest silence between two chunks of a started stream: it ends with "
        "an SSE error event and the cluster is drained.",
    )
    drain_file: str | None = Field(
        default=None, description="Planned drain set when no store is configured (a file)."
    )
    max_body_bytes: int = Field(default=4 * 2**20, ge=1024)
    store: StoreSpec | None = None
    rate_limit_store: StoreSpec | None = Field(
        default=None,
        description="Where the global rate limits are counted when not in `store`: one store "
        "shared by the routers of every region makes the limits exact fleet-wide.",
    )
    auth: AuthSpec | None = None
    rate_limits: GlobalRateLimitSpec = Field(default_factory=GlobalRateLimitSpec)
    tracing: TracingSpec = Field(default_factory=TracingSpec)  # docs/tracing.md

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> GlobalRouterSpec:
        """The rules between fields, for a spec built in code; `parse_router_config` has
        already checked them on the raw file (with the field errors) and says so."""
        if not (info.context or {}).get(_CHECKED):
            problems = cross_field_problems(self.model_dump(by_alias=True))
            if problems:
                raise ValueError("; ".join(problems))
        return self

    @property
    def limits_store(self) -> StoreSpec | None:
        """The store the rate limits are counted in: `rateLimitStore`, else `store`."""
        return self.rate_limit_store if self.rate_limit_store is not None else self.store

    def weights(self, profile: ProfileName) -> WeightsSpec:
        return self.profiles.get(profile) or DEFAULT_PROFILES[profile]

    @property
    def regions(self) -> frozenset[str]:
        return frozenset(c.region for c in self.clusters)


_CHECKED = "cross_checked"
_DEFAULTS = {
    name: GlobalRouterSpec.model_fields[field].default
    for name, field in (
        ("pollIntervalMs", "poll_interval_ms"),
        ("staleAfterMs", "stale_after_ms"),
    )
}


def _get(data: Mapping[str, Any], camel: str) -> Any:
    """A key as the file spells it (camelCase) or by its Python name."""
    snake = "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in camel)
    return data.get(camel, data.get(snake))


def _number(data: Mapping[str, Any], key: str) -> float | None:
    value = _get(data, key)
    value = _DEFAULTS[key] if value is None else value
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def cross_field_problems(data: Mapping[str, Any]) -> list[str]:
    """Every rule between fields that `data` (the raw mapping, or a spec dumped by alias)
    breaks, as `field: message` lines. Read from the raw values so the report comes with
    the field errors at once; a value that is itself invalid is skipped here (its own
    error says why)."""
    problems: list[str] = []
    raw_clusters = _get(data, "clusters")
    clusters = [c for c in raw_clusters if isinstance(c, Mapping)] if isinstance(
        raw_clusters, list
    ) else []  # fmt: skip
    names = [c["name"] for c in clusters if isinstance(c.get("name"), str)]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        problems.append(f"clusters: duplicate cluster names: {duplicates}")
    regions = sorted({c["region"] for c in clusters if isinstance(c.get("region"), str)})
    home = _get(data, "homeRegion")
    if isinstance(home, str) and regions and home not in regions:
        problems.append(f"homeRegion: {home!r} is no cluster's region (regions: {regions})")
    poll, stale = _number(data, "pollIntervalMs"), _number(data, "staleAfterMs")
    if poll is not None and stale is not None and stale < 2 * poll:
        problems.append(
            f"staleAfterMs: {stale:g} is less than twice pollIntervalMs ({poll:g}): one late "
            "poll would drain a healthy cluster"
        )
    limits = _get(data, "rateLimits")
    rules = _get(limits, "rules") if isinstance(limits, Mapping) else None
    if rules and _get(data, "store") is None and _get(data, "rateLimitStore") is None:
        problems.append(
            "rateLimits: rateLimits need a rateLimitStore or a store (a global limit is "
            "shared through it)"
        )
    return problems


def parse_router_config(data: Any, source: str = "<global router config>") -> GlobalRouterSpec:
    """The spec, or one `ConfigError` with every field error and every cross-field
    problem (`cross_field_problems`) at once."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, ["<root>: expected a mapping with a `clusters` list"])
    problems = cross_field_problems(data)
    try:
        spec = GlobalRouterSpec.model_validate(data, context={_CHECKED: True})
    except ValidationError as error:
        raise ConfigError(source, [*format_validation_error(error), *problems]) from None
    if problems:
        raise ConfigError(source, problems)
    return spec


def load_router_config(path: str | Path) -> GlobalRouterSpec:
    return parse_router_config(read_yaml(path), str(path))
