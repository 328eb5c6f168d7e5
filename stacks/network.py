"""NetworkStack: the region's VPC, endpoints, flow logs and access-log bucket."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Stack
from constructs import Construct

from .parts.log_bucket import AccessLogBucket
from .parts.network import Network, NetworkProps

__all__ = ["NetworkStack", "NetworkStackProps"]


@dataclass(frozen=True)
class NetworkStackProps:
    network: NetworkProps


class NetworkStack(Stack):
    """The VPC's zones come from the environment file, so synth looks nothing up."""

    def __init__(
        self, scope: Construct, construct_id: str, props: NetworkStackProps, **kwargs: Any
    ) -> None:
        self._zones = list(props.network.availability_zones)
        super().__init__(scope, construct_id, **kwargs)
        self.network = Network(self, "Network", props.network)
        self.vpc = self.network.vpc
        self.access_logs = AccessLogBucket(self, "AccessLogs").bucket

    @property
    def availability_zones(self) -> list[str]:
        """The environment's zones, not CDK's `availability-zones` context lookup.

        `ec2.Vpc` checks the zones it is given against the stack's; the default property
        asks AWS for them (a lookup that needs credentials and writes cdk.context.json).
        """
        return self._zones
