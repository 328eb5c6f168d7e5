"""One side of an inter-region VPC peering: routes to the peer VPC, and who may cross.

* Routes: every private route table of this VPC sends the peer VPC's CIDR through the
  peering connection (nodes and pods live in the private subnets only; the public
  subnets hold NAT gateways, which never talk to the peer).
* The Envoy NLB's security group admits the peer VPC's CIDR on the listener port only:
  the peer region's global routers are its clients. A security group cannot name a
  group of a VPC peered across regions ("VPC peering limitations", Amazon VPC Peering
  Guide: "You cannot reference the security group of a peer VPC that's in a different
  Region. Instead, use the CIDR block of the peer VPC."), so the rule names the CIDR.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

__all__ = ["ENVOY_LISTENER_PORT", "PeerSide", "PeerSideProps", "region_id"]

#: The Envoy NLB's TLS listener (stacks/parts/internal_lb.py), which the routers call.
ENVOY_LISTENER_PORT = 443


def region_id(region: str) -> str:
    """`us-west-2` -> `UsWest2`: a construct id per peer region."""
    return "".join(part.capitalize() for part in region.split("-"))


@dataclass(frozen=True)
class PeerSideProps:
    peer_region: str
    peer_cidr: str
    connection_id: str
    #: The Envoy NLB's security group, opened to the peer CIDR; None: no rule (no
    #: global routers in the peer region to call this one).
    envoy_security_group_id: str | None


class PeerSide(Construct):
    """Routes for the peer CIDR in each private route table; the Envoy listener rule."""

    def __init__(
        self, scope: Construct, construct_id: str, vpc: ec2.IVpc, props: PeerSideProps
    ) -> None:
        super().__init__(scope, construct_id)
        self.routes = [
            ec2.CfnRoute(
                self,
                f"Route{i}",
                route_table_id=subnet.route_table.route_table_id,
                destination_cidr_block=props.peer_cidr,
                vpc_peering_connection_id=props.connection_id,
            )
            for i, subnet in enumerate(vpc.private_subnets)
        ]
        if props.envoy_security_group_id is not None:
            ec2.CfnSecurityGroupIngress(
                self,
                "RoutersToEnvoy",
                group_id=props.envoy_security_group_id,
                ip_protocol="tcp",
                from_port=ENVOY_LISTENER_PORT,
                to_port=ENVOY_LISTENER_PORT,
                cidr_ip=props.peer_cidr,
                description=f"global routers of {props.peer_region} (peered VPC)",
            )
