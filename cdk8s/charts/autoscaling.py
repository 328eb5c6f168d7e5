"""KEDA ScaledObjects for the vLLM Deployments, all read from one Prometheus.

Every model-server Deployment scales through the same shape (`keda_spec`): up fast, two
pods a minute; down slowly, one pod per five minutes after ten quiet minutes, since a
GPU pod takes minutes to load its model. What differs is the signal:

* an aggregated pool (`scaled_object_spec`): the gateway's own saturation of the pool and
  the requests it queues for it. vLLM's queue is no signal there: admission keeps it
  short on purpose.
* a P/D pool, one ScaledObject per role (`role_scaled_object_spec`), on vLLM's series of
  that role's pods (the PodMonitor copies the pool and role labels onto them):
  - prefill pods hold a request only while they compute its prompt: compute-bound, so
    their backlog, the requests waiting in their vLLM (`vllm:num_requests_waiting`,
    per pod), is what grows when there are too few. The gateway's admission looks at
    the pool, not at the prefill legs, so this queue is not kept short for them.
  - decode pods hold every stream's KV cache until its last token: memory-bound, so
    their mean KV-cache use (`vllm:kv_cache_usage_perc`), and the requests queued at
    the gateway (the picker ranks decode pods first, so a request waits for a decode
    pod).
  llm-d's well-lit path scales its variants on these vLLM series too (llm-d guides/
  pd-disaggregation: "xPyD Ratios ... to ensure balance for your ISL|OSL ratio"; the
  metric name `vllm:kv_cache_usage_perc` is vLLM 0.10+'s, as gaie-pd/values.yaml notes).
"""

from __future__ import annotations

from typing import Any

from envspec.disaggregation import PdRole
from envspec.environment import EnvironmentSpec
from envspec.workloads import ModelServerSpec

__all__ = ["PROMETHEUS_URL", "keda_spec", "role_scaled_object_spec", "scaled_object_spec"]

#: kube-prometheus-stack's Prometheus, installed by gitops/bootstrap with release name
#: `kube-prometheus-stack` in the monitoring namespace (Service `<release>-prometheus`).
PROMETHEUS_URL = "http://kube-prometheus-stack-prometheus.{namespace}.svc:9090"


def _trigger(
    env: EnvironmentSpec, *, name: str, metric_type: str, query: str, threshold: float
) -> dict[str, Any]:
    return {
        "type": "prometheus",
        "name": name,
        "metricType": metric_type,
        "metadata": {
            "serverAddress": PROMETHEUS_URL.format(namespace=env.kubernetes.monitoring_namespace),
            "query": query,
            "threshold": str(threshold),
        },
    }


def _gateway_queue(env: EnvironmentSpec, server: ModelServerSpec) -> dict[str, Any]:
    """Requests queued at the gateway for the pool, per replica; one wakes a pool at 0."""
    trigger = _trigger(
        env,
        name="queue",
        metric_type="AverageValue",
        query=(
            "sum(max by (band) "
            f'(inference_extension_flow_control_queue_size{{name="{server.pool}"}}))'
        ),
        threshold=server.queue_depth_target,
    )
    trigger["metadata"]["activationThreshold"] = "0"
    return trigger


def keda_spec(
    *, name: str, minimum: int, maximum: int, triggers: list[dict[str, Any]]
) -> dict[str, Any]:
    """A ScaledObject's spec for Deployment `name`."""
    return {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
        "minReplicaCount": minimum,
        "maxReplicaCount": max(maximum, minimum, 1),
        # A GPU pod takes minutes to load a model: come back slowly to zero.
        "cooldownPeriod": 1800,
        "triggers": triggers,
        "advanced": {
            "horizontalPodAutoscalerConfig": {
                "behavior": {
                    "scaleUp": {
                        "stabilizationWindowSeconds": 0,
                        "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}],
                    },
                    "scaleDown": {
                        "stabilizationWindowSeconds": 600,
                        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
                    },
                }
            }
        },
    }


def scaled_object_spec(
    *, server: ModelServerSpec, name: str, env: EnvironmentSpec
) -> dict[str, Any]:
    """KEDA on the gateway's saturation (per pod, so `Value` against the current
    replicas) and on its queue for the pool (per replica, `AverageValue`)."""
    minimum = 0 if server.scale_to_zero else max(server.replicas, 1)
    saturation = _trigger(
        env,
        name="saturation",
        metric_type="Value",
        query=f'max(inference_pool_saturation{{name="{server.pool}"}})',
        threshold=server.saturation_target,
    )
    return keda_spec(
        name=name,
        minimum=minimum,
        maximum=server.max_replicas or 1,
        triggers=[saturation, _gateway_queue(env, server)],
    )


def role_scaled_object_spec(
    *, server: ModelServerSpec, role: PdRole, name: str, env: EnvironmentSpec
) -> dict[str, Any]:
    """One role of a P/D server: prefill on vLLM's waiting requests per prefill pod,
    decode on the decode pods' mean KV-cache use and the gateway's queue (see above)."""
    pd = server.disaggregation
    assert pd is not None
    spec = pd.role(role)
    pods = f'pool="{server.pool}",role="{role}"'
    if role == "prefill":
        triggers = [
            _trigger(
                env,
                name="waiting",
                metric_type="AverageValue",
                query=f"sum(vllm:num_requests_waiting{{{pods}}})",
                threshold=pd.prefill_waiting_target,
            )
        ]
    else:
        triggers = [
            _trigger(
                env,
                name="kv-cache",
                metric_type="Value",
                query=f"avg(vllm:kv_cache_usage_perc{{{pods}}})",
                threshold=pd.decode_kv_cache_target,
            ),
            _gateway_queue(env, server),
        ]
    return keda_spec(
        name=name,
        minimum=spec.min_replicas,
        maximum=spec.max_replicas or spec.min_replicas,
        triggers=triggers,
    )
