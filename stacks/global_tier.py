"""GlobalTierStack: the fleet tier of one region (when `global_router.enabled`).

* the region's Valkey store, reachable only from the cluster security group
  (stacks/parts/valkey.py);
* the global router's internal NLB and its health alarm (stacks/parts/global_lb.py);
* the ArgoCD Application that syncs `gitops/environments/<env>/global/<region>/` into
  this region's cluster: the router's manifests, whose store and home region are this
  region's, so no other cluster syncs them (cdk8s/charts/global_router.py), with the
  router's target group patched in by ARN (envspec/argocd_manifests.py
  `global_application`);
* what the primary region's DNS stack needs, published as SSM parameters of this stack:
  a cross-region reference to a value this stack owns stays in the fleet tier's stacks
  instead of adding export writers to the network and ingress stacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from envspec.argocd_manifests import global_application
from envspec.global_router import GLOBAL_ROUTER, GlobalRouterSpec
from envspec.infra import GitOpsSpec

from .parts.global_lb import GlobalRouterLoadBalancer, GlobalRouterLoadBalancerProps
from .parts.valkey import GlobalStore, GlobalStoreProps

__all__ = ["GlobalTierStack", "GlobalTierStackProps"]


@dataclass(frozen=True)
class GlobalTierStackProps:
    load_balancer: GlobalRouterLoadBalancerProps
    store: GlobalStoreProps
    spec: GlobalRouterSpec
    gitops: GitOpsSpec
    namespace: str
    vpc: ec2.IVpc
    cluster: eks.ICluster
    #: This region's cluster endpoint (Envoy's NLB, stacks/parts/internal_lb.py).
    cluster_load_balancer: elbv2.INetworkLoadBalancer


class GlobalTierStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, props: GlobalTierStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        lb = props.load_balancer
        vpc = props.vpc
        self.store = GlobalStore(self, "Store", vpc, props.store)
        self.ingress = GlobalRouterLoadBalancer(self, "Ingress", vpc, lb)
        self.application = eks.KubernetesManifest(
            self,
            "GlobalRouterApplication",
            cluster=props.cluster,
            manifest=[
                global_application(
                    environment=lb.environment,
                    region=lb.region,
                    gitops=props.gitops,
                    namespace=props.namespace,
                    binding=GLOBAL_ROUTER,
                    target_group_arn=self.ingress.target_group.target_group_arn,
                )
            ],
            overwrite=True,
        )
        prefix = f"/igw/{lb.environment}/{lb.region}/global"
        published = {
            "vpc-id": (vpc.vpc_id, "VPC the private zone is associated with"),
            "cluster-lb-dns": (
                props.cluster_load_balancer.load_balancer_dns_name,
                "regional cluster endpoint (Envoy's NLB) the router calls",
            ),
            "cluster-lb-zone": (
                props.cluster_load_balancer.load_balancer_canonical_hosted_zone_id,
                "hosted zone of that NLB, for a Route 53 alias",
            ),
        }
        self.published: dict[str, str] = {}
        for key, (value, description) in published.items():
            parameter = ssm.StringParameter(
                self,
                "".join(p.capitalize() for p in key.split("-")),
                parameter_name=f"{prefix}/{key}",
                string_value=value,
                description=description,
            )
            self.published[key] = parameter.string_value
        CfnOutput(
            self, "RouterLoadBalancerDns", value=self.ingress.load_balancer.load_balancer_dns_name
        )
        CfnOutput(self, "StoreAuthSecretArn", value=self.store.auth_token.secret_arn)
