"""ObservabilityStack: cluster alarms and dashboard; fleet ones in the primary region."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Stack
from constructs import Construct

from .parts.alarms import ClusterAlarms, ClusterAlarmsProps, FleetAlarms, FleetAlarmsProps

__all__ = ["ObservabilityStack", "ObservabilityStackProps"]


@dataclass(frozen=True)
class ObservabilityStackProps:
    cluster: ClusterAlarmsProps
    fleet: FleetAlarmsProps | None = None


class ObservabilityStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, props: ObservabilityStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.cluster_alarms = ClusterAlarms(self, "Cluster", props.cluster)
        self.fleet_alarms = FleetAlarms(self, "Fleet", props.fleet) if props.fleet else None
