"""PeeringStack: a region's share of the environment's full mesh of VPC peerings.

Every pair of regions is joined by one inter-region VPC peering connection, requested by
the region listed first (`aws.regions`: primary, then the secondaries in order) and
accepted by the other. Each region has one `igw-<env>-<region>-peering` stack holding:

* the connections it requests (`AWS::EC2::VPCPeeringConnection` with `PeerRegion`);
  within one account CloudFormation accepts them itself ("If the requester and acceptor
  VPCs are in the same account, the peering request is accepted without a peering
  role", CloudFormation reference, AWS::EC2::VPCPeeringConnection), so there is no
  accepter resource to manage;
* for every peer, requested or accepted, its side (stacks/parts/peering.py): routes to
  the peer CIDR in each private route table, and the Envoy NLB rule for the peer's
  routers.

Why peering, not a Transit Gateway: the mesh is small (one connection for two regions,
three for three), peering has no hourly or per-GB processing charge (a TGW has both, per
attachment, on top of the same inter-region transfer), and CloudFormation accepts a
same-account peering, while a TGW peering attachment must be accepted out of band (an API
call or a custom resource). The cross-region values are the peer's VPC ID (requester
side) and the connection ID (accepter side), carried by CDK's cross-region references
(`cross_region_references=True`, SSM parameters written in the consumer's region); the
CIDRs come from the environment file, so routes and rules need no lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_cdk import App, Environment, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from .parts.peering import PeerSide, PeerSideProps, region_id

if TYPE_CHECKING:
    from envspec.environment import EnvironmentSpec

    from .application import RegionStacks

__all__ = ["PeerLink", "PeerRequest", "PeeringStack", "PeeringStackProps", "add_peering"]


@dataclass(frozen=True)
class PeerRequest:
    """A connection this region requests: to `region`'s VPC."""

    region: str
    vpc_id: str
    cidr: str


@dataclass(frozen=True)
class PeerLink:
    """A peer region, its CIDR, and the connection joining its VPC to this one."""

    region: str
    cidr: str
    connection_id: str


@dataclass(frozen=True)
class PeeringStackProps:
    environment: str
    account: str
    region: str
    vpc: ec2.IVpc
    requests: tuple[PeerRequest, ...]
    #: The connections regions listed earlier requested to this region's VPC.
    accepts: tuple[PeerLink, ...]
    envoy_security_group_id: str | None


class PeeringStack(Stack):
    """The connections this region requests, and its side of every connection."""

    def __init__(
        self, scope: Construct, construct_id: str, props: PeeringStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        #: Peer region -> the connection this stack requested.
        self.connections: dict[str, ec2.CfnVPCPeeringConnection] = {}
        peers = list(props.accepts)
        for request in props.requests:
            connection = ec2.CfnVPCPeeringConnection(
                self,
                f"To{region_id(request.region)}",
                vpc_id=props.vpc.vpc_id,
                peer_vpc_id=request.vpc_id,
                peer_region=request.region,
                peer_owner_id=props.account,
            )
            Tags.of(connection).add(
                "Name", f"igw-{props.environment}-{props.region}-{request.region}"
            )
            self.connections[request.region] = connection
            peers.append(PeerLink(request.region, request.cidr, connection.ref))
        #: Peer region -> this VPC's side of the connection with it.
        self.sides = {
            peer.region: PeerSide(
                self,
                f"Peer{region_id(peer.region)}",
                props.vpc,
                PeerSideProps(
                    peer_region=peer.region,
                    peer_cidr=peer.cidr,
                    connection_id=peer.connection_id,
                    envoy_security_group_id=props.envoy_security_group_id,
                ),
            )
            for peer in peers
        }


def add_peering(app: App, env: EnvironmentSpec, regions: list[RegionStacks]) -> None:
    """A PeeringStack per region when the environment has several; `regions` in
    `aws.regions` order. The Envoy rule only where global routers call across regions."""
    if len(regions) < 2:
        return
    routers = env.global_router.enabled
    for i, built in enumerate(regions):
        region = built.plan.region
        accepts = tuple(
            PeerLink(
                region=earlier.plan.region,
                cidr=env.cluster.vpc_cidr_of(earlier.plan.region),
                connection_id=earlier.peering.connections[region].ref,
            )
            for earlier in regions[:i]
            if earlier.peering is not None
        )
        requests = tuple(
            PeerRequest(
                region=later.plan.region,
                vpc_id=later.network.vpc.vpc_id,
                cidr=env.cluster.vpc_cidr_of(later.plan.region),
            )
            for later in regions[i + 1 :]
        )
        built.peering = PeeringStack(
            app,
            f"igw-{env.name}-{region}-peering",
            PeeringStackProps(
                environment=env.name,
                account=env.aws.account,
                region=region,
                vpc=built.network.vpc,
                requests=requests,
                accepts=accepts,
                envoy_security_group_id=built.ingress.ingress.security_group.security_group_id
                if routers
                else None,
            ),
            env=Environment(account=env.aws.account, region=region),
            description=f"Inference gateway {env.name} {region}: VPC peering with the "
            "other regions",
            termination_protection=env.name == "prod",
            # Requests name the peer's VPC; accepts name the peer's connection.
            cross_region_references=True,
        )
        built.all.append(built.peering)
