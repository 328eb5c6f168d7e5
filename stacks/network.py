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
    def __init__(
        self, scope: Construct, construct_id: str, props: NetworkStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.network = Network(self, "Network", props.network)
        self.vpc = self.network.vpc
        self.access_logs = AccessLogBucket(self, "AccessLogs").bucket
