"""Adds the fleet tier to an environment's app: a GlobalTierStack per region, then the
GlobalDnsStack in the primary region that names them all. Nothing when
`global_router.enabled` is off. Called by `stacks.application.build`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import App, Environment

from .global_dns import GlobalDnsStack, GlobalDnsStackProps, RegionalEndpoints
from .global_tier import GlobalTierStack, GlobalTierStackProps
from .parts.eks_ref import cluster_ref
from .parts.global_lb import GlobalRouterLoadBalancerProps, unhealthy_alarm_name
from .parts.valkey import GlobalStoreProps, StorePeer

if TYPE_CHECKING:
    from envspec.environment import EnvironmentSpec

    from .application import RegionStacks

__all__ = ["add_global_tier"]


def add_global_tier(app: App, env: EnvironmentSpec, regions: list[RegionStacks]) -> None:
    """Build the fleet tier into `regions`: each one's `fleet` stack, and the `dns`
    stack of the primary region's entry."""
    if not env.global_router.enabled:
        return
    for built in regions:
        built.fleet = _region(app, env, built)
        built.all.append(built.fleet)
    (primary,) = [r for r in regions if r.plan.primary]
    primary.dns = GlobalDnsStack(
        app,
        f"igw-{env.name}-{primary.plan.region}-dns",
        GlobalDnsStackProps(
            environment=env.name,
            domain_name=env.ingress.domain_name,
            regions=tuple(_endpoints(env, r) for r in regions),
            drained=tuple(env.global_router.drained_regions),
        ),
        env=Environment(account=env.aws.account, region=primary.plan.region),
        description=f"Inference gateway {env.name}: private DNS of the global tier",
        termination_protection=env.name == "prod",
        # Other regions' VPCs and load balancers; CDK carries them through SSM.
        cross_region_references=True,
    )
    primary.all.append(primary.dns)


def _region(app: App, env: EnvironmentSpec, built: RegionStacks) -> GlobalTierStack:
    region = built.plan.region
    cluster = built.cluster.cluster
    stack = GlobalTierStack(
        app,
        f"igw-{env.name}-{region}-fleet",
        GlobalTierStackProps(
            load_balancer=GlobalRouterLoadBalancerProps(
                environment=env.name,
                region=region,
                domain_name=env.ingress.domain_name,
                certificate_arn=env.ingress.certificate_arns[region],
                allowed_cidrs=tuple(env.ingress.allowed_cidrs),
                router_port=env.global_router.port,
                cluster_security_group_id=cluster.cluster_security_group_id,
                access_logs=built.network.access_logs,
            ),
            store=GlobalStoreProps(
                environment=env.name,
                spec=env.global_router.store,
                client_security_group_id=cluster.cluster_security_group_id,
                # Every region's routers count client rate limits in the primary's store.
                peers=tuple(
                    StorePeer(region=r, vpc_cidr=env.cluster.vpc_cidr_of(r))
                    for r in env.aws.secondary_regions
                )
                if built.plan.primary
                else (),
            ),
            spec=env.global_router,
            gitops=env.gitops,
            namespace=env.kubernetes.namespace,
            vpc=built.network.vpc,
            cluster=cluster_ref(cluster),
            cluster_load_balancer=built.ingress.ingress.load_balancer,
        ),
        env=Environment(account=env.aws.account, region=region),
        description=f"Inference gateway {env.name} {region}: global router, Valkey store",
        termination_protection=env.name == "prod",
        # The primary region's DNS stack reads this stack's values across regions.
        cross_region_references=True,
    )
    # The Application needs ArgoCD (and its AppProject) in the cluster first.
    stack.add_stack_dependency(built.gitops, "ArgoCD syncs the global router's folder")
    return stack


def _endpoints(env: EnvironmentSpec, built: RegionStacks) -> RegionalEndpoints:
    tier = built.fleet
    assert tier is not None  # built above for every region
    nlb = tier.ingress.load_balancer
    return RegionalEndpoints(
        region=built.plan.region,
        vpc_id=tier.published["vpc-id"],
        router_dns=nlb.load_balancer_dns_name,
        router_zone=nlb.load_balancer_canonical_hosted_zone_id,
        cluster_dns=tier.published["cluster-lb-dns"],
        cluster_zone=tier.published["cluster-lb-zone"],
        unhealthy_alarm=unhealthy_alarm_name(env.name, built.plan.region),
    )
