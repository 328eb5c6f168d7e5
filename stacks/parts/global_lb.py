"""The global router's internal NLB in one region, and the alarm DNS fails over on.

Clients reach `igw global` at `ingress.domain_name`: TLS 443 on this NLB, terminated on
the ACM certificate of that name, then plain HTTP to the router pods (IP targets, bound
by the TargetGroupBinding of cdk8s/charts/global_router.py to the target group named
`igw-<env>-global`). The hop from the NLB to a pod stays inside the VPC: `igw global`
serves no TLS itself, unlike Envoy behind the regional NLB (stacks/parts/internal_lb.py).

The target group's health check is the router's readiness, `GET /health`, which answers
503 while no cluster is routable. The `GlobalRouterUnhealthy` alarm goes off when no
target is healthy; its name is derived, not generated, so the primary region's DNS stack
can name it in a Route 53 health check without a cross-region reference.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_s3 as s3
from constructs import Construct

from envspec.global_router import global_target_group_name

from .private_nlb import PrivateNlbProps, private_tls_nlb, tls_listener

__all__ = ["GlobalRouterLoadBalancer", "GlobalRouterLoadBalancerProps", "unhealthy_alarm_name"]


def unhealthy_alarm_name(environment: str, region: str) -> str:
    return f"igw-{environment}-{region}-GlobalRouterUnhealthy"


@dataclass(frozen=True)
class GlobalRouterLoadBalancerProps:
    environment: str
    region: str
    domain_name: str
    certificate_arn: str
    allowed_cidrs: tuple[str, ...]
    router_port: int
    cluster_security_group_id: str
    access_logs: s3.IBucket


class GlobalRouterLoadBalancer(Construct):
    """Internal NLB, TLS 443 -> router pods (IP targets) with /health checks, alarm."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        vpc: ec2.IVpc,
        props: GlobalRouterLoadBalancerProps,
    ) -> None:
        super().__init__(scope, construct_id)
        nlb = private_tls_nlb(
            self,
            vpc,
            PrivateNlbProps(
                description="Global inference endpoint: TLS from allowed CIDRs only",
                allowed_cidrs=props.allowed_cidrs,
                target_port=props.router_port,
                to_targets="to the global router pods",
                cluster_security_group_id=props.cluster_security_group_id,
                ingress_id="ToRouter",
                ingress_description="global NLB to the global router pods",
                access_logs=props.access_logs,
                log_prefix="global-nlb",
            ),
        )
        self.security_group, self.load_balancer = nlb.security_group, nlb.load_balancer
        # The router serves plain HTTP, so its NLB must terminate TLS: on the region's
        # ACM certificate, a prerequisite (envspec/global_router.py global_problems).
        certificate = acm.Certificate.from_certificate_arn(
            self, "Certificate", props.certificate_arn
        )
        self.target_group = elbv2.NetworkTargetGroup(
            self,
            "Router",
            vpc=vpc,
            target_group_name=global_target_group_name(props.environment),
            port=props.router_port,
            protocol=elbv2.Protocol.TCP,
            target_type=elbv2.TargetType.IP,
            # Streams drain: a router pod leaving finishes its relayed responses.
            deregistration_delay=Duration.seconds(120),
            health_check=elbv2.HealthCheck(
                protocol=elbv2.Protocol.HTTP,
                path="/health",
                healthy_http_codes="200",
                interval=Duration.seconds(10),
                healthy_threshold_count=2,
                unhealthy_threshold_count=2,
            ),
        )
        self.listener = tls_listener(self.load_balancer, certificate, self.target_group)
        self.unhealthy = cw.Alarm(
            self,
            "Unhealthy",
            alarm_name=unhealthy_alarm_name(props.environment, props.region),
            alarm_description="no global router pod of this region passes /health "
            "(Route 53 sends clients to another region while this is in ALARM)",
            metric=self.target_group.metrics.healthy_host_count(
                period=Duration.minutes(1), statistic="Minimum"
            ),
            threshold=1,
            comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=2,
            datapoints_to_alarm=2,
            # No data: the NLB reports nothing, which is no healthy router either.
            treat_missing_data=cw.TreatMissingData.BREACHING,
        )
