"""GlobalDnsStack: the private name clients resolve, in the primary region.

One private hosted zone, `ingress.domain_name`, associated with every region's VPC:

* `<domain>`: one latency record per region, an alias to that region's global-router
  NLB, so a client gets the nearest region whose routers are healthy;
* `<region>.<domain>`: an alias to that region's cluster endpoint (Envoy's NLB), the
  name the global routers call (`envspec.global_router.resolved_clusters`).

Health, and what a private zone's health check can reach: Route 53's health checkers
run outside every VPC, so an endpoint or HTTP health check cannot reach an internal
NLB's private addresses; Route 53 documents, for private hosted zones, a health check
on the state of a CloudWatch alarm instead ("Configuring failover in a private hosted
zone", Route 53 Developer Guide). Each latency record therefore carries a
CLOUDWATCH_METRIC health check on its region's `GlobalRouterUnhealthy` alarm (no
router passes `/health` through the NLB), named by convention so this stack needs no
cross-region reference for it; the alias also evaluates the NLB's own target health.

Values of other regions (their VPC and NLBs) arrive through CDK's cross-region
references (`cross_region_references=True` on this stack), from the GlobalTierStack of
each region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_route53 as route53
from constructs import Construct

__all__ = ["GlobalDnsStack", "GlobalDnsStackProps", "RegionalEndpoints"]


@dataclass(frozen=True)
class RegionalEndpoints:
    region: str
    vpc_id: str
    router_dns: str
    router_zone: str
    cluster_dns: str
    cluster_zone: str
    unhealthy_alarm: str


@dataclass(frozen=True)
class GlobalDnsStackProps:
    environment: str
    domain_name: str
    regions: tuple[RegionalEndpoints, ...]
    #: Regions whose records are left out: clients resolve the others, and the routers'
    #: calls to `<region>.<domain>` fail, so they drain its clusters at once and ramp
    #: them back when the record returns (docs/operations.md).
    drained: tuple[str, ...] = ()


class GlobalDnsStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, props: GlobalDnsStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        domain = props.domain_name
        self.zone = route53.CfnHostedZone(
            self,
            "Zone",
            name=domain,
            hosted_zone_config=route53.CfnHostedZone.HostedZoneConfigProperty(
                comment=f"igw {props.environment}: global router and regional endpoints"
            ),
            vpcs=[
                route53.CfnHostedZone.VPCProperty(vpc_id=r.vpc_id, vpc_region=r.region)
                for r in props.regions
            ],
        )
        self.health_checks: dict[str, route53.CfnHealthCheck] = {}
        for r in props.regions:
            if r.region in props.drained:
                continue
            name = "".join(part.capitalize() for part in r.region.split("-"))
            check = route53.CfnHealthCheck(
                self,
                f"{name}Health",
                health_check_config=route53.CfnHealthCheck.HealthCheckConfigProperty(
                    type="CLOUDWATCH_METRIC",
                    alarm_identifier=route53.CfnHealthCheck.AlarmIdentifierProperty(
                        name=r.unhealthy_alarm, region=r.region
                    ),
                    # Before the alarm has data (a fresh deploy), keep the last verdict.
                    insufficient_data_health_status="LastKnownStatus",
                ),
                health_check_tags=[
                    route53.CfnHealthCheck.HealthCheckTagProperty(
                        key="Name", value=f"igw-{props.environment}-{r.region}-global-router"
                    )
                ],
            )
            self.health_checks[r.region] = check
            route53.CfnRecordSet(
                self,
                f"{name}Router",
                hosted_zone_id=self.zone.ref,
                name=domain,
                type="A",
                set_identifier=r.region,
                region=r.region,
                health_check_id=check.attr_health_check_id,
                alias_target=route53.CfnRecordSet.AliasTargetProperty(
                    dns_name=r.router_dns,
                    hosted_zone_id=r.router_zone,
                    evaluate_target_health=True,
                ),
            )
            route53.CfnRecordSet(
                self,
                f"{name}Cluster",
                hosted_zone_id=self.zone.ref,
                name=f"{r.region}.{domain}",
                type="A",
                alias_target=route53.CfnRecordSet.AliasTargetProperty(
                    dns_name=r.cluster_dns,
                    hosted_zone_id=r.cluster_zone,
                    evaluate_target_health=True,
                ),
            )
        CfnOutput(self, "HostedZoneId", value=self.zone.ref)
