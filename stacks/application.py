"""Wires an environment's stacks into a CDK app: one set of stacks per region.

`app.py` only calls `environment_name` and `build`; tests call `build` on their own
`App` so they synthesise exactly what `cdk synth` / `make synth` does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from aws_cdk import App, Environment, Stack, Tags, Validations
from cdk_nag import AwsSolutionsChecks

from envspec.environment import EnvironmentSpec
from inference_gateway.errors import ConfigError

from .app_context import DEFAULT_ENVIRONMENT
from .cluster import ClusterStack, ClusterStackProps
from .gitops import GitOpsStack, GitOpsStackProps, HyperPodPlacement
from .global_app import add_global_tier
from .global_dns import GlobalDnsStack
from .global_tier import GlobalTierStack
from .identity import IdentityStack, IdentityStackProps
from .images import ImagesStack, ImagesStackProps
from .ingress import IngressStack, IngressStackProps
from .network import NetworkStack, NetworkStackProps
from .network_peering import PeeringStack, add_peering
from .observability import ObservabilityStack, ObservabilityStackProps
from .parts.alarms import ClusterAlarmsProps, FleetAlarmsProps
from .parts.argocd import ArgoCdProps
from .parts.eks_cluster import KUBECTL_LAYERS, InferenceClusterProps
from .parts.eks_ref import cluster_ref
from .parts.hyperpod import HyperPodProps
from .parts.images import (
    DockerHubCacheProps,
    GatewayImageProps,
    GatewayReleaseProps,
    GatewayReplicationProps,
)
from .parts.internal_lb import InternalLoadBalancerProps
from .parts.karpenter import KarpenterProps
from .parts.network import NetworkProps
from .parts.pod_identity import PodIdentityProps
from .placement import RegionPlan, plan_regions

__all__ = [
    "DEFAULT_ENVIRONMENT",
    "FEATURE_FLAGS",
    "RegionStacks",
    "attach_nag",
    "build",
    "environment_name",
    "nag_findings",
    "new_app",
]

#: CDK feature flags, set in code rather than in cdk.json so that `python app.py`
#: (make synth, tests) and `cdk synth` build the very same templates: the ones chosen
#: here, then every other flag pinned at its unset behaviour (cdk_feature_flags.json).
PINNED_FLAGS: dict[str, object] = json.loads(
    (Path(__file__).with_name("cdk_feature_flags.json")).read_text()
)["flags"]
FEATURE_FLAGS: dict[str, object] = {
    **PINNED_FLAGS,
    "@aws-cdk/core:checkSecretUsage": True,
    "@aws-cdk/core:target-partitions": ["aws"],
    "@aws-cdk/core:validateSnapshotRemovalPolicy": True,
    "@aws-cdk/aws-iam:minimizePolicies": True,
    "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True,
    "@aws-cdk/aws-s3:createDefaultLoggingPolicy": True,
}


def new_app(outdir: str | None = None, context: dict[str, object] | None = None) -> App:
    """An `App` with the project's feature flags; `outdir` defaults to $CDK_OUTDIR.

    CDK's built-in CloudFormation validator is off: the pinned cfn-lint checks every
    template (tests/stacks), and the built-in one tripled synth time here.
    """
    return App(
        outdir=outdir,
        context={**FEATURE_FLAGS, **(context or {})},
        builtin_cloud_formation_validation=False,
    )


def environment_name(app: App) -> str:
    """CDK context `environment` (`-c environment=prod`), else $IGW_ENVIRONMENT, else dev."""
    return str(
        app.node.try_get_context("environment")
        or os.environ.get("IGW_ENVIRONMENT")
        or DEFAULT_ENVIRONMENT
    )


@dataclass
class RegionStacks:
    plan: RegionPlan
    network: NetworkStack
    cluster: ClusterStack
    ingress: IngressStack
    identity: IdentityStack
    images: ImagesStack
    observability: ObservabilityStack
    gitops: GitOpsStack
    all: list[Stack] = field(default_factory=list)
    #: The fleet tier (stacks/global_app.py), where `global_router.enabled`.
    fleet: GlobalTierStack | None = None
    dns: GlobalDnsStack | None = None  # primary region only
    #: VPC peering with the other regions (stacks/network_peering.py), where several.
    peering: PeeringStack | None = None


def nag_findings(outdir: str) -> str:
    """The unacknowledged cdk-nag findings of a failed synth, one per line."""
    report = Path(outdir) / "validation-report.json"
    if not report.is_file():
        return "(no validation report)"
    lines = []
    for plugin in json.loads(report.read_text()).get("pluginReports", []):
        for violation in plugin.get("violations", []):
            for construct in violation.get("violatingConstructs", []):
                lines.append(f"  {violation['ruleName']}  {construct['constructPath']}")
    return "\n".join(lines)


def _check(env: EnvironmentSpec, source: str) -> None:
    """What only these stacks can judge; everything else is in the environment schema."""
    problems = []
    if env.cluster.kubernetes_version not in KUBECTL_LAYERS:
        problems.append(
            f"cluster.kubernetes_version: no kubectl layer is pinned for "
            f"{env.cluster.kubernetes_version} (pinned: {sorted(KUBECTL_LAYERS)})"
        )
    for i, group in enumerate(env.node_groups):
        if group.capacity_type == "CAPACITY_BLOCK":
            problems.append(
                f"node_groups[{i}].capacity_type: CAPACITY_BLOCK needs a launch template "
                "that names the reservation, which these stacks do not build yet; use "
                "ON_DEMAND, or HyperPod with a training plan"
            )
    if problems:
        raise ConfigError(source, problems)


def build(
    app: App, env: EnvironmentSpec, *, source: str = "environment.yaml", nag: bool = True
) -> list[RegionStacks]:
    """Add every stack of `env` to `app`; cdk-nag's AwsSolutions checks on all of them."""
    _check(env, source)
    plans = plan_regions(env, source)
    built: list[RegionStacks] = []
    for plan in plans:
        built.append(_region(app, env, plan, primary=built[0] if built else None))
    add_peering(app, env, built)
    add_global_tier(app, env, built)
    Tags.of(app).add("igw.dev/environment", env.name)
    Tags.of(app).add("igw.dev/managed-by", "cdk")
    if nag:
        attach_nag(app)
    return built


def attach_nag(app: App) -> None:
    """cdk-nag's AwsSolutions pack on the whole app: an unacknowledged finding fails synth."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))


def _model_sources(env: EnvironmentSpec) -> tuple[str, ...]:
    """The `s3://` weights and adapters the model servers read."""
    sources = [s.model for s in env.model_servers]
    sources += [a for s in env.model_servers for a in s.adapter_sources.values()]
    return tuple(sorted({s for s in sources if s.startswith("s3://")}))


def _region(
    app: App, env: EnvironmentSpec, plan: RegionPlan, *, primary: RegionStacks | None
) -> RegionStacks:
    aws_env = Environment(account=env.aws.account, region=plan.region)
    prefix = f"igw-{env.name}-{plan.region}"

    def kw(what: str) -> dict[str, object]:
        return {
            "env": aws_env,
            "description": f"Inference gateway {env.name} {plan.region}: {what}",
            "termination_protection": env.name == "prod",
        }

    network = NetworkStack(
        app,
        f"{prefix}-network",
        NetworkStackProps(
            NetworkProps(
                cidr=env.cluster.vpc_cidr_of(plan.region),
                availability_zones=plan.availability_zones,
            )
        ),
        **kw("VPC, endpoints"),
    )
    cluster = ClusterStack(
        app,
        f"{prefix}-cluster",
        ClusterStackProps(
            cluster=InferenceClusterProps(
                spec=env.cluster,
                node_groups=plan.node_groups,
                node_group_zones=plan.node_group_zones,
                pull_through_cache=bool(env.aws.docker_hub_cache_credentials),
                karpenter=KarpenterProps(
                    cluster_name=env.cluster.name,
                    create_node_role=plan.primary,
                    pull_through_regions=tuple(env.aws.docker_hub_cache_credentials),
                ),
            ),
            vpc=network.vpc,
        ),
        **kw("EKS, node groups, add-ons"),
    )
    if primary is not None:
        # Karpenter's node role is created by the primary region's cluster stack.
        cluster.add_stack_dependency(primary.cluster, "Karpenter's node role exists")
    ingress = IngressStack(
        app,
        f"{prefix}-ingress",
        IngressStackProps(
            load_balancer=InternalLoadBalancerProps(
                environment=env.name,
                region=plan.region,
                domain_name=env.ingress.domain_name,
                certificate_arn=env.ingress.certificate_arns.get(plan.region),
                allowed_cidrs=tuple(env.ingress.allowed_cidrs),
                target_port=env.ingress.target_port,
                cluster_security_group_id=cluster.cluster.cluster_security_group_id,
                access_logs=network.access_logs,
            ),
            vpc=network.vpc,
        ),
        **kw("internal load balancer"),
    )
    identity = IdentityStack(
        app,
        f"{prefix}-identity",
        IdentityStackProps(
            PodIdentityProps(
                environment=env.name,
                cluster_name=env.cluster.name,
                regions=tuple(env.aws.regions),
                gateway_namespace=env.kubernetes.namespace,
                secret_ids=env.external_secret_ids,
                # The ClusterSecretStore reads the primary region's Secrets Manager.
                secrets_region=env.aws.region,
                model_sources=_model_sources(env),
                global_store=env.global_router.enabled,
                xray_collector_namespace=(
                    tracing.namespace
                    if (tracing := env.kubernetes.tracing) is not None
                    and tracing.exporter == "xray"
                    else None
                ),
            )
        ),
        **kw("Pod Identity roles"),
    )
    identity.add_stack_dependency(cluster, "associations need the cluster")
    # The repository and tag the charts' image names (cdk8s/charts/base.py gateway_image).
    repository = env.kubernetes.image_repository or f"igw-{env.name}/gateway"
    images = ImagesStack(
        app,
        f"{prefix}-images",
        ImagesStackProps(
            GatewayImageProps(repository_name=repository),
            replication=GatewayReplicationProps(
                repository_prefix=repository.rpartition("/")[0] + "/"
                if "/" in repository
                else repository,
                destination_regions=tuple(env.aws.secondary_regions),
            )
            if plan.primary and env.aws.secondary_regions
            else None,
            docker_hub=DockerHubCacheProps(env.aws.docker_hub_cache_credentials[plan.region])
            if env.aws.docker_hub_cache_credentials
            else None,
        ),
        **kw("ECR repository and gateway image"),
    )
    observability = ObservabilityStack(
        app,
        f"{prefix}-observability",
        ObservabilityStackProps(
            cluster=ClusterAlarmsProps(cluster_name=env.cluster.name, thresholds=env.alarms),
            fleet=FleetAlarmsProps(environment=env.name, thresholds=env.alarms)
            if plan.primary
            else None,
        ),
        **kw("alarms and dashboards"),
    )
    hyperpod = (
        HyperPodPlacement(
            HyperPodProps(
                spec=env.cluster.hyperpod,
                cluster_name=env.cluster.name,
                zones=plan.hyperpod_zones,
                access_logs=network.access_logs,
                pull_through_cache=plan.region in env.aws.docker_hub_cache_credentials,
            ),
            network.vpc,
        )
        if env.cluster.hyperpod.enabled and plan.hyperpod
        else None
    )
    gitops = GitOpsStack(
        app,
        f"{prefix}-gitops",
        GitOpsStackProps(
            argocd=ArgoCdProps(
                spec=env.gitops,
                environment=env.name,
                region=plan.region,
                cluster_name=env.cluster.name,
                target_group_arn=ingress.ingress.target_group.target_group_arn,
                hyperpod=hyperpod is not None,
            ),
            cluster=cluster_ref(cluster.cluster),
            # Built and pushed once, in the primary region; ECR replication copies it
            # (same digest) into the secondary regions' repositories.
            release=GatewayReleaseProps(repository_name=repository, tag=env.kubernetes.image_tag)
            if plan.primary
            else None,
            hyperpod=hyperpod,
        ),
        **kw("ArgoCD bootstrap, gateway release image, HyperPod"),
    )
    gitops.add_stack_dependency(images, "the release image is pushed into its repository")
    if primary is not None:
        gitops.add_stack_dependency(
            primary.gitops, "the release is pushed in the primary region, then replicated"
        )
    stacks: list[Stack] = [network, cluster, ingress, identity, images, observability, gitops]
    return RegionStacks(
        plan, network, cluster, ingress, identity, images, observability, gitops, stacks
    )
