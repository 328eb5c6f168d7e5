"""What the project's two internal NLBs share: private, TLS 443 from allowed CIDRs only.

The regional NLB in front of Envoy (internal_lb.py) and the global router's NLB
(global_lb.py) differ in their targets, health checks and certificates; this module
holds the rest once: a security group that admits TLS on 443 from the environment's
allowed CIDRs and may only reach the target port inside the VPC, the matching ingress
rule on the cluster security group (the pods use it under the VPC CNI on managed
nodes), an internal NLB in the private subnets with access logs, and a TLS 1.3 listener.
Child construct ids are given by the caller, so the synthesised logical ids stay theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_s3 as s3
from constructs import Construct

__all__ = ["PrivateNlb", "PrivateNlbProps", "private_tls_nlb", "tls_listener"]


@dataclass(frozen=True)
class PrivateNlbProps:
    description: str  # of the NLB's security group
    allowed_cidrs: tuple[str, ...]
    target_port: int
    to_targets: str  # the egress rule's description
    cluster_security_group_id: str
    ingress_id: str  # construct id of the cluster security group's ingress rule
    ingress_description: str
    access_logs: s3.IBucket
    log_prefix: str


@dataclass(frozen=True)
class PrivateNlb:
    security_group: ec2.SecurityGroup
    load_balancer: elbv2.NetworkLoadBalancer


def private_tls_nlb(scope: Construct, vpc: ec2.IVpc, props: PrivateNlbProps) -> PrivateNlb:
    """The security groups and the NLB, as children `SecurityGroup`, `props.ingress_id`
    and `Nlb` of `scope`."""
    security_group = ec2.SecurityGroup(
        scope,
        "SecurityGroup",
        vpc=vpc,
        description=props.description,
        allow_all_outbound=False,
    )
    for cidr in props.allowed_cidrs:
        security_group.add_ingress_rule(
            ec2.Peer.ipv4(cidr), ec2.Port.tcp(443), f"inference clients in {cidr}"
        )
    security_group.add_egress_rule(
        ec2.Peer.ipv4(vpc.vpc_cidr_block), ec2.Port.tcp(props.target_port), props.to_targets
    )
    ec2.CfnSecurityGroupIngress(
        scope,
        props.ingress_id,
        group_id=props.cluster_security_group_id,
        ip_protocol="tcp",
        from_port=props.target_port,
        to_port=props.target_port,
        source_security_group_id=security_group.security_group_id,
        description=props.ingress_description,
    )
    load_balancer = elbv2.NetworkLoadBalancer(
        scope,
        "Nlb",
        vpc=vpc,
        internet_facing=False,
        vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
        security_groups=[security_group],
        cross_zone_enabled=True,
        deletion_protection=False,
    )
    load_balancer.log_access_logs(props.access_logs, prefix=props.log_prefix)
    return PrivateNlb(security_group, load_balancer)


def tls_listener(
    load_balancer: elbv2.NetworkLoadBalancer,
    certificate: acm.ICertificate,
    target_group: elbv2.INetworkTargetGroup,
) -> elbv2.NetworkListener:
    """TLS 443 on the ACM certificate (TLS 1.3 policy), to `target_group`."""
    return load_balancer.add_listener(
        "Tls",
        port=443,
        protocol=elbv2.Protocol.TLS,
        certificates=[elbv2.ListenerCertificate.from_certificate_manager(certificate)],
        ssl_policy=elbv2.SslPolicy.TLS13_RES,
        default_target_groups=[target_group],
    )
