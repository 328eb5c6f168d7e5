"""AWS-side sections of environment.yaml (owned by the CDK stacks).

Availability zones are written in full (`us-east-1a`), so one list can name zones of the
primary and of the secondary regions: a node group is built in a region only where it
lists a zone of that region (or everywhere when it lists none). That list is also what
the capacity preflight (`stacks/preflight`) checks against EC2 offerings before a deploy.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
_CERT = re.compile(r"^arn:aws[a-z-]*:acm:([a-z0-9-]+):\d{12}:certificate/[0-9a-f-]+$")
_PTC_SECRET = re.compile(
    r"^arn:aws[a-z-]*:secretsmanager:([a-z0-9-]+):(\d{12}):secret:ecr-pullthroughcache/"
    r"[A-Za-z0-9/_+=.@-]+$"
)
_AZ = re.compile(r"^([a-z]{2}(-gov)?-[a-z]+-\d)[a-z]$")


def vpc_network(cidr: str) -> ipaddress.IPv4Network:
    """An IPv4 network a VPC may have: /16 to /28 (VPC quotas), host bits zero."""
    try:
        network = ipaddress.IPv4Network(cidr, strict=True)
    except ValueError as error:
        raise ValueError(f"{cidr!r} is not an IPv4 network like 10.50.0.0/16 ({error})") from None
    if not 16 <= network.prefixlen <= 28:
        raise ValueError(f"{cidr!r}: a VPC's CIDR is between /16 and /28")
    return network


def region_of_zone(zone: str) -> str:
    """`us-east-1a` -> `us-east-1`."""
    match = _AZ.match(zone)
    if match is None:
        raise ValueError(f"{zone!r} is not an availability-zone name like us-east-1a")
    return match.group(1)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AwsSpec(_Section):
    """Where the environment lives: one account, a primary region, optional secondaries."""

    account: str = Field(pattern=r"^\d{12}$")
    region: str = Field(pattern=_REGION.pattern)
    secondary_regions: list[str] = Field(default_factory=list)
    docker_hub_cache_credentials: dict[str, str] = Field(
        default_factory=dict,
        description="Region -> ARN of the Secrets Manager secret (`ecr-pullthroughcache/"
        "...`, {username, accessToken}) of that region's ECR pull-through cache rule for "
        "Docker Hub; model-server images from Docker Hub are pulled through the ECR of "
        "each region listed here, and straight from Docker Hub elsewhere.",
    )
    availability_zones: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Region -> zones its VPC spans; default: the first cluster.max_azs "
        "letters (a, b, c) of the region.",
    )

    @field_validator("secondary_regions")
    @classmethod
    def _regions_well_formed(cls, regions: list[str]) -> list[str]:
        for region in regions:
            if not _REGION.match(region):
                raise ValueError(f"{region!r} is not a region name like us-west-2")
        if len(set(regions)) != len(regions):
            raise ValueError("a region is listed twice")
        return regions

    @model_validator(mode="after")
    def _zones_match_regions(self) -> AwsSpec:
        problems = []
        if self.region in self.secondary_regions:
            problems.append(f"secondary_regions: {self.region} is the primary region")
        cache = self.docker_hub_cache_credentials
        for region in sorted(set(cache) - set(self.regions)):
            problems.append(f"docker_hub_cache_credentials.{region}: not one of {self.regions}")
        for region, arn in cache.items():
            match = _PTC_SECRET.match(arn)
            if match is None or match.group(1) != region or match.group(2) != self.account:
                problems.append(
                    f"docker_hub_cache_credentials.{region}: {arn!r} is not the ARN of an "
                    f"ecr-pullthroughcache/ secret of account {self.account} in {region}"
                )
        for region, zones in self.availability_zones.items():
            if region not in self.regions:
                problems.append(f"availability_zones.{region}: not one of {self.regions}")
            for zone in zones:
                if not zone.startswith(region) or not _AZ.match(zone):
                    problems.append(f"availability_zones.{region}: {zone!r} is not in {region}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def regions(self) -> list[str]:
        """Primary first, then the secondaries in the order written."""
        return [self.region, *self.secondary_regions]


class HyperPodInstanceGroupSpec(_Section):
    name: str = Field(pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
    instance_type: str = Field(pattern=r"^ml\.[a-z0-9]+\.[a-z0-9]+$")
    instance_count: int = Field(ge=1)
    threads_per_core: Literal[1, 2] = 1
    gpu: str | None = Field(
        default=None,
        description="GPU profile of the instance type (e.g. H100): the model servers of "
        "every node group with this GPU may also run on this group's nodes, found by "
        "HyperPod's own labels (sagemaker.amazonaws.com/instance-group-name).",
    )


class HyperPodSpec(_Section):
    """A SageMaker HyperPod cluster orchestrated by the EKS cluster (primary region)."""

    enabled: bool = False
    instance_groups: list[HyperPodInstanceGroupSpec] = Field(default_factory=list)
    availability_zones: list[str] = Field(
        default_factory=list,
        description="Zones whose private subnets HyperPod nodes use; default all.",
    )
    node_recovery: Literal["Automatic", "None"] = "Automatic"

    @model_validator(mode="after")
    def _groups_when_enabled(self) -> HyperPodSpec:
        if self.enabled and not self.instance_groups:
            raise ValueError("instance_groups: HyperPod is enabled but lists no group")
        return self


class SystemNodeGroupSpec(_Section):
    """The untainted nodes every non-GPU pod runs on: the gateway's own (picker, bbr,
    auth, Envoy) and the add-ons' (CoreDNS, KEDA, Envoy Gateway, Argo CD, Karpenter,
    the CloudWatch and VPC CNI DaemonSets, ...). Nothing scales this group (Karpenter's
    NodePools are for GPUs), so `desired_size` nodes must hold them all, a rollout's
    surge pod included: tests/gitops/test_gitops_schedule.py places them on the EKS
    allocatable of the instance type. 2 x m6i.large (1.93 vCPUs allocatable each) could
    not; 2 x m6i.xlarge hold them with room for a picker rollout, and two nodes in two
    zones are what Karpenter's controller needs (required anti-affinity per node, zone
    spread)."""

    instance_type: str = "m6i.xlarge"
    min_size: int = Field(default=2, ge=1)
    max_size: int = Field(default=4, ge=1)
    desired_size: int = Field(default=2, ge=1)


class ClusterSpec(_Section):
    name: str = Field(pattern=r"^[a-zA-Z][a-zA-Z0-9-]{0,62}$")
    kubernetes_version: str = "1.32"
    vpc_cidr: str = Field(
        default="10.40.0.0/16",
        description="The VPC CIDR of every region not listed in vpc_cidrs.",
    )
    vpc_cidrs: dict[str, str] = Field(
        default_factory=dict,
        description="Region -> its VPC's CIDR. The regions' VPCs are peered "
        "(stacks/network_peering.py), so no two may overlap: an environment of several "
        "regions lists all but one of them here.",
    )
    max_azs: int = Field(default=3, ge=2, le=6)
    admin_role_arns: list[str] = Field(default_factory=list)
    system_node_group: SystemNodeGroupSpec = SystemNodeGroupSpec()
    hyperpod: HyperPodSpec = HyperPodSpec()
    node_ami: str = Field(
        default="al2023@latest",
        pattern=r"^al2023@(latest|v\d{8})$",
        description="AMI alias of the GPU nodes Karpenter launches (EC2NodeClass "
        "amiSelectorTerms; Karpenter picks the NVIDIA variant for GPU instance types). Pin "
        "a version (al2023@vYYYYMMDD) to roll AMIs on purpose rather than on release.",
    )

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, cidr: str) -> str:
        return vpc_network(cidr).with_prefixlen

    @field_validator("vpc_cidrs")
    @classmethod
    def _cidrs(cls, cidrs: dict[str, str]) -> dict[str, str]:
        for region, cidr in cidrs.items():
            if not _REGION.match(region):
                raise ValueError(f"{region!r} is not a region name like us-west-2")
            try:
                vpc_network(cidr)
            except ValueError as error:
                raise ValueError(f"{region}: {error}") from None
        return {region: vpc_network(cidr).with_prefixlen for region, cidr in cidrs.items()}

    def vpc_cidr_of(self, region: str) -> str:
        """The CIDR of `region`'s VPC."""
        return self.vpc_cidrs.get(region, self.vpc_cidr)

    @field_validator("admin_role_arns")
    @classmethod
    def _arns(cls, arns: list[str]) -> list[str]:
        for arn in arns:
            if not re.match(r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$", arn):
                raise ValueError(f"{arn!r} is not an IAM role ARN")
        return arns


class NodeGroupSpec(_Section):
    """A GPU managed node group of one generation."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,40}$")
    instance_type: str = Field(pattern=r"^[a-z0-9]+\.[a-z0-9]+$")
    gpu: str = Field(description="GPU profile name, e.g. H100, A10G, L4.")
    gpus_per_node: int = Field(ge=1)
    min_size: int = Field(default=0, ge=0)
    max_size: int = Field(default=2, ge=0)
    desired_size: int = Field(default=1, ge=0)
    availability_zones: list[str] = Field(default_factory=list)
    capacity_type: Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"] = "ON_DEMAND"
    disk_size_gib: int = Field(default=200, ge=20)

    @field_validator("availability_zones")
    @classmethod
    def _zones(cls, zones: list[str]) -> list[str]:
        for zone in zones:
            region_of_zone(zone)
        return zones

    @model_validator(mode="after")
    def _sizes(self) -> NodeGroupSpec:
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError("sizes must satisfy min_size <= desired_size <= max_size")
        return self


class IngressSpec(_Section):
    """The internal load balancer in front of Envoy Gateway."""

    certificate_arns: dict[str, str] = Field(
        default_factory=dict,
        description="Region -> ARN of an ACM certificate (certificates are regional) for "
        "domain_name and <region>.<domain_name>, a prerequisite: the internal NLB "
        "terminates TLS on it. A region without one passes TCP through to Envoy, which "
        "presents the certificate cert-manager issues in the cluster; the global router "
        "needs one in every region.",
    )
    domain_name: str = "inference.internal.example.com"
    allowed_cidrs: list[str] = Field(default_factory=lambda: ["10.0.0.0/8"])
    target_port: int = Field(
        default=10443, ge=1, le=65535, description="Envoy's HTTPS listener port in the pod."
    )

    @field_validator("certificate_arns")
    @classmethod
    def _certificates(cls, arns: dict[str, str]) -> dict[str, str]:
        for region, arn in arns.items():
            match = _CERT.match(arn)
            if match is None:
                raise ValueError(f"{region}: {arn!r} is not an ACM certificate ARN")
            if match.group(1) != region:
                raise ValueError(f"{region}: certificate {arn!r} lives in {match.group(1)}")
        return arns


class AlarmSpec(_Section):
    kv_cache_utilization_max: float = Field(default=0.9, gt=0, le=1)
    error_rate_max: float = Field(default=0.02, gt=0, le=1)
    ttft_p99_max_s: float = Field(default=2.0, gt=0)
    rate_limited_max: float = Field(default=0.05, gt=0, le=1)
    ready_pods_min: int = Field(default=1, ge=0)
    failover_events_max: int = Field(default=0, ge=0)
    email: str | None = Field(default=None, pattern=r"^[^@\s]+@[^@\s]+$")


class GitOpsSpec(_Section):
    repo_url: str
    revision: str = "main"
    path: str = "gitops/bootstrap"
    argocd_chart_version: str = "7.7.10"
