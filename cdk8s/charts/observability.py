"""Scrape targets for Prometheus Operator and Grafana dashboards as ConfigMaps, rendered
into `monitoring/` and synced by their own Application after kube-prometheus-stack.

vLLM pods are scraped by PodMonitor (no Service needed), with the pool and GPU copied
from pod labels onto every series, so dashboards and alerts group by pool. Dashboards
are generated here, from one list of panels, and picked up by the Grafana sidecar
through the `grafana_dashboard` label.
"""

from __future__ import annotations

import json
from typing import Any

from constructs import Construct

from cdk8s import Chart
from envspec.environment import EnvironmentSpec

from .base import PART_OF, PICKER, Placement, Shared, Wave, labels, manifest
from .bootstrap import PROMETHEUS_RELEASE

__all__ = ["ObservabilityChart", "dashboard"]

MONITORING_API = "monitoring.coreos.com/v1"

# (title, PromQL by pool, PromQL by pod, unit)
_PANELS: list[tuple[str, str, str, str]] = [
    (
        "KV-cache use",
        "avg by (pool) (vllm:kv_cache_usage_perc)",
        'max by (pod) (vllm:kv_cache_usage_perc{pool=~"$pool"})',
        "percentunit",
    ),
    (
        "Queue depth (waiting requests)",
        "sum by (pool) (vllm:num_requests_waiting)",
        'sum by (pod) (vllm:num_requests_waiting{pool=~"$pool"})',
        "short",
    ),
    (
        "Running requests",
        "sum by (pool) (vllm:num_requests_running)",
        'sum by (pod) (vllm:num_requests_running{pool=~"$pool"})',
        "short",
    ),
    (
        "LoRA adapters resident",
        "count by (pool, running_lora_adapters) (vllm:lora_requests_info)",
        'count by (pod, running_lora_adapters) (vllm:lora_requests_info{pool=~"$pool"})',
        "short",
    ),
    (
        "Requests per second by finish reason",
        "sum by (pool, finished_reason) (rate(vllm:request_success_total[5m]))",
        'sum by (pod) (rate(vllm:request_success_total{pool=~"$pool"}[5m]))',
        "reqps",
    ),
    (
        "Time to first token p95",
        "histogram_quantile(0.95, sum by (pool, le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",  # noqa: E501
        'histogram_quantile(0.95, sum by (pod, le) (rate(vllm:time_to_first_token_seconds_bucket{pool=~"$pool"}[5m])))',  # noqa: E501
        "s",
    ),
    (
        "End-to-end latency p95",
        "histogram_quantile(0.95, sum by (pool, le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))",  # noqa: E501
        'histogram_quantile(0.95, sum by (pod, le) (rate(vllm:e2e_request_latency_seconds_bucket{pool=~"$pool"}[5m])))',  # noqa: E501
        "s",
    ),
    (
        "Prompt tokens per second",
        "sum by (pool) (rate(vllm:prompt_tokens_total[5m]))",
        'sum by (pod) (rate(vllm:prompt_tokens_total{pool=~"$pool"}[5m]))',
        "short",
    ),
    (
        "Generated tokens per second",
        "sum by (pool) (rate(vllm:generation_tokens_total[5m]))",
        'sum by (pod) (rate(vllm:generation_tokens_total{pool=~"$pool"}[5m]))',
        "short",
    ),
]


def dashboard(*, level: str) -> dict[str, Any]:
    """A Grafana dashboard of every panel at `pool` or `pod` level."""
    by_pool = level == "pool"
    panels = []
    for i, (title, pool_query, pod_query, unit) in enumerate(_PANELS):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {
                        "refId": "A",
                        "expr": pool_query if by_pool else pod_query,
                        "legendFormat": "{{pool}}" if by_pool else "{{pod}}",
                    }
                ],
            }
        )
    variables: list[dict[str, Any]] = [
        {"name": "datasource", "type": "datasource", "query": "prometheus"}
    ]
    if not by_pool:
        variables.append(
            {
                "name": "pool",
                "type": "query",
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "query": "label_values(vllm:num_requests_running, pool)",
                "includeAll": True,
                "multi": True,
            }
        )
    return {
        "uid": f"igw-{level}s",
        "title": f"Inference gateway: {level}s",
        "tags": [PART_OF, "vllm"],
        "timezone": "utc",
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "templating": {"list": variables},
        "panels": panels,
    }


def _pod_label_copies(env: EnvironmentSpec) -> list[tuple[str, str]]:
    """Pod labels (as Prometheus names them: `.`, `/`, `-` become `_`) copied onto every
    vLLM series: the pool and GPU, and llm-d's role where a pool is P/D (its roles scale
    on their own pods' series, charts/autoscaling.py)."""
    copies = [("igw_dev_pool", "pool"), ("igw_dev_gpu", "gpu")]
    if any(s.disaggregation is not None for s in env.model_servers):
        copies.append(("llm_d_ai_role", "role"))
    return copies


class ObservabilityChart(Chart):
    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        namespace = env.kubernetes.namespace
        meta = labels(name="inference-gateway", component="observability")
        # kube-prometheus-stack's Prometheus selects monitors by its release label.
        monitor: Shared = {
            "namespace": namespace,
            "labels": {**meta, "release": PROMETHEUS_RELEASE},
        }
        common: Placement = {**monitor, "wave": Wave.CONFIG}
        manifest(
            self,
            "vllm-podmonitor",
            api_version=MONITORING_API,
            kind="PodMonitor",
            name="vllm",
            **common,
            body={
                "spec": {
                    "selector": {
                        "matchLabels": {
                            "app.kubernetes.io/name": "vllm",
                            "app.kubernetes.io/part-of": PART_OF,
                        }
                    },
                    "podMetricsEndpoints": [
                        {
                            "port": "http",
                            "path": "/metrics",
                            "interval": "15s",
                            "relabelings": [
                                {
                                    "sourceLabels": [f"__meta_kubernetes_pod_label_{key}"],
                                    "targetLabel": target,
                                }
                                for key, target in _pod_label_copies(env)
                            ],
                        }
                    ],
                }
            },
        )
        # The body-based router serves no metrics; the picker does.
        for name in (PICKER,):
            manifest(
                self,
                f"{name}-servicemonitor",
                api_version=MONITORING_API,
                kind="ServiceMonitor",
                name=name,
                **common,
                body={
                    "spec": {
                        "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                        "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s"}],
                    }
                },
            )
        for level in ("pool", "pod"):
            manifest(
                self,
                f"dashboard-{level}",
                api_version="v1",
                kind="ConfigMap",
                name=f"igw-dashboard-{level}s",
                namespace=namespace,
                labels={**meta, "grafana_dashboard": "1"},
                annotations={"grafana_folder": "Inference gateway"},
                wave=Wave.CONFIG,
                body={
                    "data": {
                        f"igw-{level}s.json": json.dumps(
                            dashboard(level=level), indent=2, sort_keys=True
                        )
                    }
                },
            )
