"""IngressStack: the private load balancer in front of Envoy Gateway."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from .parts.internal_lb import InternalLoadBalancer, InternalLoadBalancerProps

__all__ = ["IngressStack", "IngressStackProps"]


@dataclass(frozen=True)
class IngressStackProps:
    load_balancer: InternalLoadBalancerProps
    vpc: ec2.IVpc


class IngressStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, props: IngressStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.ingress = InternalLoadBalancer(self, "Ingress", props.vpc, props.load_balancer)
        CfnOutput(self, "LoadBalancerDns", value=self.ingress.load_balancer.load_balancer_dns_name)
        CfnOutput(self, "TargetGroupArn", value=self.ingress.target_group.target_group_arn)
