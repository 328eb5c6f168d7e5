"""A VPC for an inference cluster: private subnets across the environment's zones.

Nodes, pods and the internal load balancer live in private subnets only; the public
subnets hold just the NAT gateways. Interface endpoints for ECR, STS and CloudWatch and a
gateway endpoint for S3 keep image pulls, Pod Identity token exchange and telemetry off
the NAT path (cheaper, and it keeps working while a NAT gateway's zone is impaired).
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from ..nag import acknowledge

__all__ = ["INTERFACE_ENDPOINTS", "Network", "NetworkProps"]

#: Interface endpoints every cluster needs (service name suffix -> construct id).
INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "CloudWatchLogs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "CloudWatchMonitoring": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING,
    "EksAuth": ec2.InterfaceVpcEndpointAwsService.EKS_AUTH,
}


@dataclass(frozen=True)
class NetworkProps:
    cidr: str
    availability_zones: tuple[str, ...]
    nat_gateways: int = 2
    flow_log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH


class Network(Construct):
    """VPC + endpoints + flow logs."""

    def __init__(self, scope: Construct, construct_id: str, props: NetworkProps) -> None:
        super().__init__(scope, construct_id)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(props.cidr),
            availability_zones=list(props.availability_zones),
            nat_gateways=min(props.nat_gateways, len(props.availability_zones)),
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24
                ),
                # /19 per zone: pods take VPC addresses (VPC CNI), GPU nodes many each.
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=19
                ),
            ],
        )
        flow_logs = logs.LogGroup(
            self,
            "FlowLogs",
            retention=props.flow_log_retention,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
            traffic_type=ec2.FlowLogTrafficType.REJECT,
        )
        private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.vpc.add_gateway_endpoint(
            "S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[private]
        )
        for endpoint_id, service in INTERFACE_ENDPOINTS.items():
            endpoint = self.vpc.add_interface_endpoint(
                endpoint_id, service=service, subnets=private, private_dns_enabled=True
            )
            acknowledge(
                endpoint,
                "EC23",
                "The endpoint's security group admits 443 from this VPC's CIDR only; "
                "cdk-nag cannot resolve the CIDR token (Fn::GetAtt Vpc.CidrBlock) and "
                "reports the rule as unevaluable rather than open.",
            )

    def private_subnets_in(self, zones: tuple[str, ...]) -> ec2.SubnetSelection:
        """The private subnets of some zones: how capacity-aware groups are placed."""
        return ec2.SubnetSelection(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=list(zones)
        )
