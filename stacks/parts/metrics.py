"""The CloudWatch metric contract between the gateway's telemetry and the alarms.

The gateway writes these as CloudWatch embedded-metric-format records (picker: one record
per scrape/decision window; global router: per routing decision); the CloudWatch agent
turns them into metrics. Dimension `Cluster` is the EKS cluster name.
"""

from __future__ import annotations

__all__ = [
    "AGENT_NAMESPACES",
    "CLUSTER_METRICS",
    "CLUSTER_NAMESPACE",
    "FLEET_METRICS",
    "FLEET_NAMESPACE",
]

CLUSTER_NAMESPACE = "InferenceGateway"
FLEET_NAMESPACE = "InferenceGateway/Global"
AGENT_NAMESPACES = ("ContainerInsights", "CWAgent")

#: Per cluster (namespace InferenceGateway, dimension Cluster).
CLUSTER_METRICS = {
    "kv_cache": "KvCacheUtilization",  # 0..1, average over the pool's pods
    "requests": "Requests",  # count
    "errors": "Errors",  # count of 5xx answers
    "rate_limited": "RateLimited",  # count of 429 answers
    "ttft": "TimeToFirstToken",  # seconds
    "ready_pods": "ReadyPods",  # gauge
}

#: Across clusters (namespace InferenceGateway/Global, dimension Environment).
FLEET_METRICS = {
    "routing_decisions": "RoutingDecisions",
    "failovers": "FailoverEvents",
    "rate_limit_hits": "RateLimitHits",
}
