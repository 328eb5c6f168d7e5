"""AWS-side sections of environment.yaml (owned by the CDK stacks)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AwsSpec(_Section):
    account: str = Field(pattern=r"^\d{12}$")
    region: str
    secondary_regions: list[str] = Field(default_factory=list)


class HyperPodInstanceGroupSpec(_Section):
    name: str
    instance_type: str
    instance_count: int = Field(ge=1)


class HyperPodSpec(_Section):
    enabled: bool = False
    instance_groups: list[HyperPodInstanceGroupSpec] = Field(default_factory=list)


class SystemNodeGroupSpec(_Section):
    instance_type: str = "m6i.large"
    min_size: int = Field(default=2, ge=1)
    max_size: int = Field(default=4, ge=1)
    desired_size: int = Field(default=2, ge=1)


class ClusterSpec(_Section):
    name: str
    kubernetes_version: str = "1.32"
    vpc_cidr: str = "10.40.0.0/16"
    max_azs: int = Field(default=3, ge=2, le=6)
    admin_role_arns: list[str] = Field(default_factory=list)
    system_node_group: SystemNodeGroupSpec = SystemNodeGroupSpec()
    hyperpod: HyperPodSpec = HyperPodSpec()


class NodeGroupSpec(_Section):
    """A GPU managed node group of one generation."""

    name: str
    instance_type: str
    gpu: str = Field(description="GPU profile name, e.g. H100, A10G, L4.")
    gpus_per_node: int = Field(ge=1)
    min_size: int = Field(default=0, ge=0)
    max_size: int = Field(default=2, ge=0)
    desired_size: int = Field(default=1, ge=0)
    availability_zones: list[str] = Field(default_factory=list)
    capacity_type: Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"] = "ON_DEMAND"


class IngressSpec(_Section):
    certificate_arn: str | None = None
    domain_name: str = "inference.internal.example.com"
    allowed_cidrs: list[str] = Field(default_factory=lambda: ["10.0.0.0/8"])


class AlarmSpec(_Section):
    kv_cache_utilization_max: float = Field(default=0.9, gt=0, le=1)
    error_rate_max: float = Field(default=0.02, gt=0, le=1)
    ttft_p99_max_s: float = Field(default=2.0, gt=0)
    rate_limited_max: float = Field(default=0.05, gt=0, le=1)
    ready_pods_min: int = Field(default=1, ge=0)


class GitOpsSpec(_Section):
    repo_url: str
    revision: str = "main"
    argocd_chart_version: str = "7.7.10"
