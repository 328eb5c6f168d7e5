"""One typed loader for `gitops/environments/<env>/environment.yaml`.

Both the CDK app (`app.py`, `stacks/`) and the cdk8s synth (`cdk8s/main.py`) read an
environment through `load_environment`, so the AWS side and the Kubernetes side can never
disagree about node groups, GPU types or pools. A bad file fails with the field path.

Sections and their owners:
  aws, cluster, node_groups, ingress, alarms, gitops   → envspec/infra.py (CDK)
  gateway                                             → inference_gateway.config (the CRD)
  model_servers, canaries, kubernetes                 → envspec/workloads.py (cdk8s)
  global_router                                       → envspec/global_router.py (both sides)
This module stays free of aws_cdk and cdk8s imports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from envspec.convert import is_managed_environment, to_native
from envspec.disaggregation import PD_ROLES, pd_gateway_config
from envspec.global_router import GlobalRouterSpec, global_problems
from envspec.infra import AlarmSpec, AwsSpec, ClusterSpec, GitOpsSpec, IngressSpec, NodeGroupSpec
from envspec.network import network_problems
from envspec.workloads import (
    CanarySpec,
    KubernetesSpec,
    ModelServerSpec,
    model_server_node_group,
    workload_problems,
)
from inference_gateway.config.convert import translate_problems
from inference_gateway.config.spec import GatewayConfigSpec, format_validation_error
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.errors import ConfigError

__all__ = ["ENVIRONMENTS_DIR", "EnvironmentSpec", "load_environment", "validate_environment"]

REPO_ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENTS_DIR = REPO_ROOT / "gitops" / "environments"


class EnvironmentSpec(BaseModel):
    """Everything that describes one environment, AWS and Kubernetes sides together."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")
    aws: AwsSpec
    cluster: ClusterSpec
    node_groups: list[NodeGroupSpec] = Field(min_length=1)
    ingress: IngressSpec = IngressSpec()
    alarms: AlarmSpec = AlarmSpec()
    gitops: GitOpsSpec
    gateway: GatewayConfigSpec
    model_servers: list[ModelServerSpec] = Field(default_factory=list)
    canaries: list[CanarySpec] = Field(default_factory=list)
    kubernetes: KubernetesSpec = KubernetesSpec()
    global_router: GlobalRouterSpec = GlobalRouterSpec()

    @property
    def external_secret_ids(self) -> tuple[str, ...]:
        """The Secrets Manager secrets (primary region) External Secrets copies into the
        cluster: prerequisites, made by hand (docs/first-deploy.md)."""
        ids = [s.hf_token_secret_id for s in self.model_servers if s.hf_token_secret_id]
        if self.kubernetes.auth is not None and self.kubernetes.auth.api_keys_secret_id:
            ids.append(self.kubernetes.auth.api_keys_secret_id)
        return tuple(sorted(set(ids)))

    @model_validator(mode="after")
    def _cross_references(self) -> EnvironmentSpec:
        problems: list[str] = []
        groups = {g.name: g for g in self.node_groups}
        pools = {p.name: p for p in self.gateway.pools}
        models = {m.name for m in self.gateway.models}
        adapters = {a for m in self.gateway.models for a in m.adapters}
        for i, server in enumerate(self.model_servers):
            where = f"model_servers[{i}]"
            if server.pool not in pools:
                problems.append(f"{where}.pool: unknown pool {server.pool!r}")
            placements = [(f"{where}.node_group", server.node_group)]
            if server.disaggregation is not None:
                placements += [
                    (f"{where}.disaggregation.{role}.node_group", group)
                    for role in PD_ROLES
                    if (group := server.disaggregation.role(role).node_group) is not None
                ]
            for path, group in placements:
                if group not in groups:
                    problems.append(f"{path}: unknown node group {group!r}")
                elif (gpu := pools.get(server.pool)) and gpu.gpu and gpu.gpu != groups[group].gpu:
                    problems.append(
                        f"{path}: pool {server.pool!r} expects GPU {gpu.gpu}, "
                        f"node group {group!r} has {groups[group].gpu}"
                    )
        for i, canary in enumerate(self.canaries):
            for j, target in enumerate(canary.targets):
                if target.model not in models | adapters:
                    problems.append(
                        f"canaries[{i}].targets[{j}].model: unknown model {target.model!r}"
                    )
        problems += workload_problems(
            gateway=self.gateway,
            model_servers=self.model_servers,
            canaries=self.canaries,
            gpu_of_node_group={g.name: g.gpu for g in self.node_groups},
        )
        if not self.kubernetes.bbr.enabled and len(self.gateway.pools) > 1:
            problems.append(
                "kubernetes.bbr.enabled: the body-based router is what tells the pools' "
                f"models apart; it must run with {len(self.gateway.pools)} pools"
            )
        problems += _picker_config_problems(self)
        problems += _idle_gpu_problems(self)
        problems += global_problems(self)
        problems += network_problems(self)
        problems += _tracing_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _tracing_problems(env: EnvironmentSpec) -> list[str]:
    """The cluster's tracing and the gateway's must agree: a collector with nothing but
    Envoy's spans, or spans with no collector to take them, is a half-configured trace."""
    tracing = env.kubernetes.tracing
    problems = []
    if tracing is not None and not env.gateway.tracing.enabled:
        problems.append("kubernetes.tracing: needs gateway.tracing.enabled: true")
    if tracing is None and env.gateway.tracing.enabled:
        problems.append("gateway.tracing.enabled: needs kubernetes.tracing (the collector)")
    if tracing is not None and (tracing.exporter == "otlp") != bool(tracing.otlp_endpoint):
        problems.append("kubernetes.tracing.otlp_endpoint: set it exactly with exporter otlp")
    return problems


def _idle_gpu_problems(env: EnvironmentSpec) -> list[str]:
    """A GPU node group whose model servers all scale to zero must start with no node.

    Nothing in this tree changes a managed node group's size: EKS keeps `desiredSize`
    nodes until something (the Cluster Autoscaler, which this tree does not run) changes
    it (EKS API Reference, NodegroupScalingConfig), and Karpenter adds and consolidates
    only the nodes of its own NodePools. So `desired_size` nodes of such a group would
    stay up, idle, after KEDA removed every replica; Karpenter's NodePool `gpu-<group>`
    (cdk8s/charts/node_pools.py) adds the nodes the replicas need and removes them empty.
    """
    problems = []
    for i, group in enumerate(env.node_groups):
        servers = [
            s
            for s in env.model_servers
            if group.name in {model_server_node_group(s, role) for role in (None, *PD_ROLES)}
        ]
        if servers and all(s.scale_to_zero for s in servers) and group.desired_size > 0:
            problems.append(
                f"node_groups[{i}].desired_size: every model server on {group.name!r} scales "
                f"to zero, but nothing scales a managed node group: its {group.desired_size} "
                "node(s) would stay up idle; set min_size and desired_size to 0 (Karpenter's "
                f"NodePool gpu-{group.name} adds the nodes replicas need and removes them empty)"
            )
    return problems


def _picker_config_problems(env: EnvironmentSpec) -> list[str]:
    """The picker config the charts render (with the P/D pools' plugins and profiles)
    must parse with the gateway's own parser, or the picker would refuse it in the
    cluster; checked only where it differs from `gateway`, which parsed already."""
    if all(s.disaggregation is None for s in env.model_servers):
        return []
    try:
        parse_config(pd_gateway_config(env.gateway, env.model_servers), "picker config")
    except ConfigError as error:
        return [f"model_servers.disaggregation: the picker config: {p}" for p in error.problems]
    return []


def load_environment(name_or_path: str | Path) -> EnvironmentSpec:
    """Load an environment by name (`dev`) or by the path of its environment.yaml."""
    path = Path(name_or_path)
    if not path.suffix:
        path = ENVIRONMENTS_DIR / str(name_or_path) / "environment.yaml"
    try:
        data: Any = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        known = (
            sorted(p.name for p in ENVIRONMENTS_DIR.iterdir()) if ENVIRONMENTS_DIR.is_dir() else []
        )
        raise ConfigError(str(path), [f"<file>: no such environment (known: {known})"]) from None
    except yaml.YAMLError as error:
        raise ConfigError(str(path), [f"<yaml>: {error}"]) from None
    return validate_environment(data, str(path))


def validate_environment(data: Any, source: str = "<environment>") -> EnvironmentSpec:
    """An environment mapping, validated. A `gateway:` in the managed add-on's shape is
    converted on the way in (envspec/convert.py); a problem the native checks find in
    what one of its schedulers became is shown at the scheduler's path."""
    schedulers = 0
    if is_managed_environment(data):
        schedulers = len(((data["gateway"].get("spec") or {}).get("schedulers")) or [])
        data, _ = to_native(data, source)
    try:
        return EnvironmentSpec.model_validate(data)
    except ValidationError as error:
        problems = format_validation_error(error)
        raise ConfigError(source, translate_problems(problems, schedulers, "gateway.")) from None
