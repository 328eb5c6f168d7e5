"""The CloudWatch metric contract between the gateway's telemetry and the alarms.

The names live in one place, `inference_gateway.telemetry.emf`, which writes them as
CloudWatch embedded-metric-format records (`igw picker` in the cluster and `igw serve`
standalone, `--emf-interval`: one record per interval; global router: `fleet_record`);
the CloudWatch agent turns them into metrics.
This module re-exports them for the alarms, so a renamed metric changes both sides at
once. Dimension `Cluster` is the EKS cluster name, `Environment` the environment's.
"""

from __future__ import annotations

from inference_gateway.telemetry.emf import (
    CLUSTER_DIMENSION,
    CLUSTER_METRICS,
    CLUSTER_NAMESPACE,
    FLEET_DIMENSION,
    FLEET_METRICS,
    FLEET_NAMESPACE,
)

__all__ = [
    "AGENT_NAMESPACES",
    "CLUSTER_DIMENSION",
    "CLUSTER_METRICS",
    "CLUSTER_NAMESPACE",
    "FLEET_DIMENSION",
    "FLEET_METRICS",
    "FLEET_NAMESPACE",
]

#: Namespaces the CloudWatch agent writes to (Container Insights, the agent's own).
AGENT_NAMESPACES = ("ContainerInsights", "CWAgent")
