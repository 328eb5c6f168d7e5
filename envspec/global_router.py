"""The `global_router:` section of environment.yaml: the fleet tier (`igw global`).

Owned by the global tier (stacks/global_tier.py, stacks/global_dns.py on the AWS side,
cdk8s/charts/global_router.py on the Kubernetes side). Off unless `enabled`, so an
environment in one region (dev) builds nothing for it.

With no `clusters` listed, every region of the environment is one cluster: named
`<env>-<region>`, reached at `https://<region>.<ingress.domain_name>` (the regional name
of its internal load balancer, stacks/parts/internal_lb.py), priority 0, and an hourly
cost of the model servers it runs (replicas x GPUs x the pool's `hourlyUsd`: every region
runs the same rendered tree). List `clusters` to override any of that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envspec.names import regional_domain_name

if TYPE_CHECKING:
    from envspec.environment import EnvironmentSpec

__all__ = [
    "GLOBAL_ROUTER",
    "STORE_AUTH_KEY",
    "STORE_URL_KEY",
    "GlobalClusterSpec",
    "GlobalRouterSpec",
    "GlobalStoreSpec",
    "ResolvedCluster",
    "fleet_hourly_cost",
    "global_folder",
    "global_problems",
    "global_target_group_name",
    "rate_limit_store_secret_name",
    "resolved_clusters",
    "store_secret_names",
]

#: The router's Deployment, Service, TargetGroupBinding and ServiceAccount (its Pod
#: Identity, stacks/parts/pod_identity.py) on the cdk8s side.
GLOBAL_ROUTER = "igw-global-router"
#: JSON keys of the two Secrets Manager secrets the CDK writes and External Secrets reads.
STORE_AUTH_KEY = "password"
STORE_URL_KEY = "url"

_CLUSTER_NAME = r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GlobalClusterSpec(_Section):
    """One cluster gateway the router fronts (the router's `clusters[]` entry)."""

    region: str
    name: str | None = Field(default=None, pattern=_CLUSTER_NAME)
    endpoint: str | None = Field(
        default=None,
        pattern=r"^https?://[^/\s]+/?$",
        description="Cluster gateway root URL; default https://<region>.<ingress.domain_name>.",
    )
    priority: int = Field(default=0, ge=0, description="Lower wins a tie.")
    hourly_cost_usd: float | None = Field(
        default=None, ge=0, description="Default: the model servers' GPUs at pool prices."
    )


class GlobalStoreSpec(_Section):
    """ElastiCache for Valkey in each region: the router replicas' shared store."""

    node_type: str = Field(default="cache.t4g.small", pattern=r"^cache\.[a-z0-9]+\.[a-z0-9]+$")
    engine_version: str = Field(default="8.0", pattern=r"^\d+\.\d+$")
    replicas: int = Field(
        default=1, ge=1, le=5, description="Read replicas; at least one, for Multi-AZ failover."
    )
    port: int = Field(default=6380, ge=1024, le=65535, description="Not 6379, the well-known.")


class GlobalRouterSpec(_Section):
    enabled: bool = False
    replicas: int = Field(default=2, ge=2, description="Active-active, behind a PDB of 1.")
    port: int = Field(default=8000, ge=1024, le=65535, description="The router pods' HTTP port.")
    profile: Literal["latency", "cost"] = "latency"
    poll_interval_ms: int = Field(default=1000, ge=10, le=60_000)
    stale_after_ms: int = Field(default=3000, ge=10, le=600_000)
    ramp_s: float = Field(
        default=30.0, ge=0, le=3600, description="A returning cluster's share grows this long."
    )
    sheddable_objectives: list[str] = Field(default_factory=lambda: ["batch"])
    clusters: list[GlobalClusterSpec] = Field(default_factory=list)
    store: GlobalStoreSpec = GlobalStoreSpec()
    drained_regions: list[str] = Field(
        default_factory=list,
        description="Regions taken out of DNS (clients and routers stop resolving them); "
        "docs/operations.md, 'Drain a region and bring it back'.",
    )
    emf_interval_s: int = Field(
        default=60, ge=0, le=3600, description="Fleet EMF records to CloudWatch; 0: off."
    )

    @model_validator(mode="after")
    def _unique_cluster_names(self) -> GlobalRouterSpec:
        names = [c.name for c in self.clusters if c.name]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"clusters: duplicate names {duplicates}")
        return self


class ResolvedCluster(BaseModel):
    """A cluster with every default filled in, as the router's config file lists it."""

    model_config = ConfigDict(frozen=True)

    name: str
    region: str
    endpoint: str
    priority: int
    hourly_cost_usd: float


def fleet_hourly_cost(env: EnvironmentSpec) -> float:
    """What one region's model servers cost an hour: replicas x GPUs x the pool's price."""
    price = {p.name: p.hourly_usd or 0.0 for p in env.gateway.pools}
    return round(sum(s.replicas * s.gpus * price.get(s.pool, 0.0) for s in env.model_servers), 4)


def resolved_clusters(env: EnvironmentSpec) -> list[ResolvedCluster]:
    """The router's cluster list: the environment's `clusters`, else one per region."""
    spec = env.global_router
    listed = spec.clusters or [GlobalClusterSpec(region=r) for r in env.aws.regions]
    cost = fleet_hourly_cost(env)
    return [
        ResolvedCluster(
            name=c.name or f"{env.name}-{c.region}",
            region=c.region,
            endpoint=c.endpoint
            or f"https://{regional_domain_name(env.ingress.domain_name, c.region)}",
            priority=c.priority,
            hourly_cost_usd=cost if c.hourly_cost_usd is None else c.hourly_cost_usd,
        )
        for c in listed
    ]


def global_problems(env: EnvironmentSpec) -> list[str]:
    """Cross checks against the rest of the environment, as field paths."""
    problems = []
    for i, cluster in enumerate(env.global_router.clusters):
        if cluster.region not in env.aws.regions:
            problems.append(
                f"global_router.clusters[{i}].region: {cluster.region!r} is not one of the "
                f"environment's regions {env.aws.regions}"
            )
    drained = env.global_router.drained_regions
    for i, region in enumerate(drained):
        if region not in env.aws.regions:
            problems.append(
                f"global_router.drained_regions[{i}]: {region!r} is not one of the "
                f"environment's regions {env.aws.regions}"
            )
    if env.global_router.enabled and set(env.aws.regions) <= set(drained):
        problems.append("global_router.drained_regions: every region drained, nothing serves")
    missing = [r for r in env.aws.regions if r not in env.ingress.certificate_arns]
    if env.global_router.enabled and missing:
        problems.append(
            f"ingress.certificate_arns: the global router serves plain HTTP behind its "
            f"NLB, which terminates TLS on an ACM certificate for "
            f"{env.ingress.domain_name!r} in every region; none is given for "
            f"{', '.join(missing)} (docs/first-deploy.md, prerequisites)"
        )
    names = [c.name for c in resolved_clusters(env)]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"global_router.clusters: two clusters are named {name!r}")
    return problems


def global_target_group_name(environment: str) -> str:
    """The router pods' NLB target group's name, the same in every region (the
    TargetGroupBinding of cdk8s/charts/global_router.py binds it by ARN, which the
    region's global-router Application patches in)."""
    return f"igw-{environment}-global"[:32]


def store_secret_names(environment: str) -> tuple[str, str]:
    """(auth token, endpoint) secrets in each region's Secrets Manager: same names in every
    region, each holding that region's Valkey, so the per-region manifests differ only in
    the region their SecretStore reads."""
    return f"igw/{environment}/global-store/auth", f"igw/{environment}/global-store/endpoint"


def rate_limit_store_secret_name(environment: str) -> str:
    """The primary region's store (URL and AUTH token, the keys of `store_secret_names`'s
    two) under a name of its own, replicated by Secrets Manager to every secondary region:
    the routers of every region enforce client limits through that one store, and a replica
    cannot take the name of the region's own store secrets."""
    return f"igw/{environment}/global-store/rate-limit"


def global_folder(environment: str, region: str) -> str:
    """Where a region's global-router manifests render, relative to gitops/. Outside
    `rendered/` on purpose: every cluster of the environment syncs `rendered/`, while this
    folder is synced only by its own region's cluster (the Application the region's
    GlobalTierStack creates), because its store and home region are that region's."""
    return f"environments/{environment}/global/{region}"
