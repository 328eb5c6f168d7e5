"""The global router's YAML file: the clusters it fronts, how it scores them, the store.

    homeRegion: us-east-1            # clients' region unless x-igw-client-region names one
    profile: latency                 # default profile: latency | cost
    pollIntervalMs: 1000             # GET /status of every cluster this often
    staleAfterMs: 3000               # no good status for this long → drained
    rampS: 30                        # a returning cluster's share grows over this window
    firstByteTimeoutMs: 60000        # a stream without its first chunk this long: 504
    streamIdleTimeoutMs: 30000       # a started stream silent this long: stalled, drained
    migration: {enabled: true, maxResumes: 2, deadlineMs: 30000}   # resume a broken stream
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

The managed Global Inference Gateway's terms are accepted too (its API,
CreateGlobalInferenceGateway; docs/managed-gateway.md): members listed as it lists them,
and its routing weights, which then are the `latency` profile's:

    routing:
      weights: {KVHeadroom: 0.4, QueueDepth: 0.3, RegionProximity: 0.2, ErrorRate: 0.1}
    gateways:                        # 1 to 10 members, instead of `clusters`
      - {name: igw, namespace: igw, clusterArn: "arn:aws:sagemaker:us-east-1:…:cluster/…",
         endpoint: "https://us-east-1.inference.example.com"}

Each weight is 0 to 1, all four or none, summing to 1 within 0.001 (the API's rules); they
weigh this router's signals of the same meaning (`cluster_choice.py`: free KV cache, queued
requests, the caller's region, recent errors) and cost weighs 0. A member becomes a
cluster: its region from its cluster's ARN, its name the member's name (qualified by the
cluster's id when two members share one); `endpoint` is this router's own addition,
since the managed service finds a member's load balancer itself.

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

from inference_gateway.config.spec import (
    MigrationSpec,
    TracingSpec,
    format_validation_error,
    read_yaml,
)
from inference_gateway.config.store import GlobalRateLimitSpec, StoreSpec
from inference_gateway.errors import ConfigError

__all__ = [
    "AuthSpec",
    "ClusterSpec",
    "GatewayMember",
    "GlobalRouterSpec",
    "JwtSpec",
    "ManagedRouting",
    "ManagedRoutingWeights",
    "ProfileName",
    "WeightsSpec",
    "cross_field_problems",
    "load_router_config",
    "parse_router_config",
]

#: The scoring profiles (`core/scheduling/cluster_choice.py` weighs a cluster by one).
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


class ManagedRoutingWeights(BaseModel):
    """The managed Global Inference Gateway's weights (GlobalInferenceGatewayRoutingWeights),
    by its names: each 0 to 1; all four together sum to 1 within 0.001."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    KVHeadroom: float = Field(ge=0, le=1, description="Free KV cache capacity.")
    QueueDepth: float = Field(ge=0, le=1, description="Requests waiting.")
    RegionProximity: float = Field(ge=0, le=1, description="Closeness to the caller.")
    ErrorRate: float = Field(ge=0, le=1, description="Recent error rate.")

    @model_validator(mode="after")
    def _sum_to_one(self) -> ManagedRoutingWeights:
        total = self.KVHeadroom + self.QueueDepth + self.RegionProximity + self.ErrorRate
        if abs(total - 1.0) > 0.001:
            raise ValueError(f"the four weights must sum to 1.0 within 0.001, not {total:g}")
        return self

    def as_profile(self) -> WeightsSpec:
        """The same weights on this router's signals of the same meaning; cost off."""
        return WeightsSpec(
            kv_headroom=self.KVHeadroom,
            queue=self.QueueDepth,
            proximity=self.RegionProximity,
            errors=self.ErrorRate,
            cost=0.0,
        )


class ManagedRouting(_Spec):
    weights: ManagedRoutingWeights | None = None


_CLUSTER_ARN = r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:cluster/[a-z0-9]+$"


class GatewayMember(_Spec):
    """A member as the managed API lists it (GlobalInferenceGatewayMember: the
    InferenceGatewayConfig's name and namespace and its HyperPod cluster's ARN), with
    where this router reaches it and the cluster fields of `clusters`."""

    name: str = Field(min_length=1, max_length=253)
    namespace: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    cluster_arn: str = Field(pattern=_CLUSTER_ARN)
    endpoint: str = Field(pattern=r"^https?://[^/\s]+/?$")
    priority: int = Field(default=0, ge=0)
    hourly_cost_usd: float = Field(default=0.0, ge=0)
    capacity_tokens_per_second: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @property
    def region(self) -> str:
        return self.cluster_arn.split(":")[3]

    @property
    def cluster_id(self) -> str:
        return self.cluster_arn.rsplit("/", 1)[1]


def _member_clusters(members: list[GatewayMember]) -> list[ClusterSpec]:
    names = [m.name for m in members]
    shared = {n for n in names if names.count(n) > 1}
    return [
        ClusterSpec(
            name=f"{m.name}.{m.cluster_id}" if m.name in shared else m.name,
            region=m.region,
            endpoint=m.endpoint,
            priority=m.priority,
            hourly_cost_usd=m.hourly_cost_usd,
            capacity_tokens_per_second=m.capacity_tokens_per_second,
        )
        for m in members
    ]


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
    clusters: list[ClusterSpec] = Field(default_factory=list)
    gateways: list[GatewayMember] = Field(
        default_factory=list,
        max_length=10,
        description="The managed API's members (1 to 10), instead of clusters.",
    )
    routing: ManagedRouting | None = Field(
        default=None, description="The managed API's routing weights: the latency profile."
    )
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
        description="Longest silence between two chunks of a started stream: the cluster "
        "is drained and the stream resumed on the next cluster (`migration`), else it ends "
        "with an SSE error event.",
    )
    migration: MigrationSpec = Field(
        default_factory=MigrationSpec,
        description="Resume on break at tier 2 (docs/migration.md): a stream that breaks "
        "after its first byte goes on at the next-ranked cluster. Its stall is "
        "`streamIdleTimeoutMs` above.",
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
    def _members_are_clusters(self) -> GlobalRouterSpec:
        """`gateways` (the managed members) or `clusters`, one of them; members become
        clusters, so the rest of the router reads `clusters` only."""
        if self.gateways and self.clusters:
            raise ValueError("list the clusters as `clusters` or as `gateways`, not both")
        if self.gateways:
            clusters = _member_clusters(self.gateways)
            for i, cluster in enumerate(clusters):
                if len(cluster.name) > 63:
                    raise ValueError(f"gateways[{i}].name: {cluster.name!r} is too long a name")
            object.__setattr__(self, "clusters", clusters)  # frozen: set once, here
        if not self.clusters:
            raise ValueError("clusters: list at least one cluster (or 1 to 10 `gateways`)")
        if self.routing is not None and self.routing.weights and "latency" in self.profiles:
            raise ValueError(
                "routing.weights and profiles.latency both set the latency profile; keep one"
            )
        return self

    @model_validator(mode="after")
    def _one_stall(self) -> GlobalRouterSpec:
        """One silence defines a stalled cluster here, `streamIdleTimeoutMs`: the
        migration section's own (igw serve's, for pods) is refused, not ignored."""
        if "stream_idle_timeout_ms" in self.migration.model_fields_set:
            raise ValueError(
                "migration.streamIdleTimeoutMs: igw global's stall is streamIdleTimeoutMs "
                "(set that)"
            )
        return self

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
        if profile == "latency" and self.routing is not None and self.routing.weights:
            return self.routing.weights.as_profile()
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
    clusters += _raw_member_clusters(_get(data, "gateways"))
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


def _raw_member_clusters(raw: Any) -> list[dict[str, Any]]:
    """The region of each raw member that has a well-formed cluster ARN (for homeRegion)."""
    out = []
    for member in raw if isinstance(raw, list) else []:
        arn = member.get("clusterArn") if isinstance(member, Mapping) else None
        parts = arn.split(":") if isinstance(arn, str) else []
        if len(parts) >= 6:
            out.append({"region": parts[3]})
    return out


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
