"""vLLM model servers: one Deployment per pool and GPU generation, scaled by KEDA on the
gateway's own signals.

Scaling reads what the picker exports (scraped by kube-prometheus-stack):
`inference_pool_saturation` of the pool, and the requests queued at the gateway for it
(`inference_extension_flow_control_queue_size`, summed over bands). vLLM's own queue is not
a signal: admission keeps it short on purpose. With `scale_to_zero` the pool may go to no
pod at all; a request then waits in the gateway's queue, which activates KEDA.

The pod labels come from `envspec.workloads.model_server_pod_labels`, the same
function the environment validation uses to prove that each pool's selector selects
these pods. Pods drain before they stop: readiness fails first (the picker stops
picking the pod), then `preStop` sleeps `drain_seconds` so streams in flight finish,
and the grace period covers both.
"""

from __future__ import annotations

from typing import Any

from constructs import Construct

from cdk8s import Chart
from envspec.environment import EnvironmentSpec
from envspec.infra import NodeGroupSpec
from envspec.workloads import ModelServerSpec, model_server_name, model_server_pod_labels

from .base import Wave, manifest, model_server_image, selector_labels
from .workloads import (
    CPU_LIMIT_SKIP,
    DIGEST_SKIP,
    container_security_context,
    empty_dir,
    pod_security_context,
    spread,
)

__all__ = [
    "HTTP_PORT",
    "PROMETHEUS_URL",
    "ModelServersChart",
    "hf_token_secret",
    "scaled_object_spec",
    "vllm_args",
]

HTTP_PORT = 8000
SERVICE_ACCOUNT = "vllm"
HF_TOKEN_DIR = "/var/run/secrets/huggingface"
#: kube-prometheus-stack's Prometheus, installed by gitops/bootstrap with release name
#: `kube-prometheus-stack` in the monitoring namespace (Service `<release>-prometheus`).
PROMETHEUS_URL = "http://kube-prometheus-stack-prometheus.{namespace}.svc:9090"
#: The ClusterSecretStore gitops/bootstrap declares for AWS Secrets Manager.
SECRET_STORE = "aws-secrets-manager"
#: Startup probe budget: 180 × 10 s, weights download and load.
STARTUP_PROBE_S = 180 * 10


def hf_token_secret(server: ModelServerSpec) -> str | None:
    """The Secret the pods mount the token from: named, or synced from Secrets Manager."""
    if server.hf_token_secret:
        return server.hf_token_secret
    if server.hf_token_secret_id:
        return f"hf-token-{model_server_name(server)}"
    return None


def vllm_args(server: ModelServerSpec) -> list[str]:
    """The vLLM command line, flag by flag from the environment."""
    args = [
        server.model,
        "--served-model-name",
        server.served_name,
        "--port",
        str(HTTP_PORT),
        "--tensor-parallel-size",
        str(server.gpus),
        "--max-model-len",
        str(server.max_model_len),
        "--gpu-memory-utilization",
        str(server.gpu_memory_utilization),
        "--disable-uvicorn-access-log",
    ]
    if server.model.startswith("s3://"):
        # Weights streamed straight from S3 (vLLM's Run:ai model streamer).
        args += ["--load-format", "runai_streamer"]
    if server.enable_prefix_caching:
        args.append("--enable-prefix-caching")
    if server.max_loras:
        args += ["--enable-lora", "--max-loras", str(server.max_loras)]
        if server.adapters:
            sources = server.adapter_sources
            args += ["--lora-modules", *(f"{a}={sources[a]}" for a in server.adapters)]
    if server.tool_call_parser:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", server.tool_call_parser]
    return args


class ModelServersChart(Chart):
    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        namespace = env.kubernetes.namespace
        groups = {g.name: g for g in env.node_groups}
        manifest(
            self,
            "sa",
            api_version="v1",
            kind="ServiceAccount",
            name=SERVICE_ACCOUNT,
            namespace=namespace,
            labels={
                "app.kubernetes.io/name": "vllm",
                "app.kubernetes.io/part-of": "inference-gateway",
            },
            wave=Wave.WORKLOADS,
            body={"automountServiceAccountToken": False},
        )
        for server in env.model_servers:
            self._server(server=server, group=groups[server.node_group], env=env)

    def _server(
        self, *, server: ModelServerSpec, group: NodeGroupSpec, env: EnvironmentSpec
    ) -> None:
        namespace = env.kubernetes.namespace
        name = model_server_name(server)
        pod_labels = model_server_pod_labels(server, gpu=group.gpu)
        meta = {**pod_labels, "app.kubernetes.io/managed-by": "cdk8s"}
        selector = selector_labels(pod_labels)
        common = {"namespace": namespace, "labels": meta, "wave": Wave.WORKLOADS}
        scaled = server.max_replicas is not None
        spec: dict[str, Any] = {}
        if not scaled:
            spec["replicas"] = server.replicas
        spec |= {
            # Past the startup probe's budget, or a slow first load reads as a failed rollout.
            "progressDeadlineSeconds": STARTUP_PROBE_S + 600,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": selector},
            # GPUs are scarce: with several replicas replace one at a time in place,
            # with one replica surge so the model never goes dark.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": (
                    {"maxSurge": 0, "maxUnavailable": 1}
                    if server.replicas > 1
                    else {"maxSurge": 1, "maxUnavailable": 0}
                ),
            },
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": _pod_spec(
                    server=server,
                    group=group,
                    selector=selector,
                    image=model_server_image(env, image=server.image, digest=server.image_digest),
                ),
            },
        }
        manifest(
            self,
            name,
            api_version="apps/v1",
            kind="Deployment",
            name=name,
            **common,
            checkov_skips={**CPU_LIMIT_SKIP, **DIGEST_SKIP},
            body={"spec": spec},
        )
        if scaled:
            manifest(
                self,
                f"{name}-scaledobject",
                api_version="keda.sh/v1alpha1",
                kind="ScaledObject",
                name=name,
                **common,
                body={"spec": scaled_object_spec(server=server, name=name, env=env)},
            )
        secret = hf_token_secret(server)
        if server.hf_token_secret_id and secret:
            manifest(
                self,
                f"{name}-hf-token",
                api_version="external-secrets.io/v1",
                kind="ExternalSecret",
                name=secret,
                **common,
                body={"spec": _hf_token_external_secret(server.hf_token_secret_id, secret)},
            )
        manifest(
            self,
            f"{name}-pdb",
            api_version="policy/v1",
            kind="PodDisruptionBudget",
            name=name,
            **common,
            body={"spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}}},
        )


def scaled_object_spec(
    *, server: ModelServerSpec, name: str, env: EnvironmentSpec
) -> dict[str, Any]:
    """KEDA on the gateway's saturation (per pod, so `Value` against the current
    replicas) and on its queue for the pool (per replica, `AverageValue`)."""
    url = PROMETHEUS_URL.format(namespace=env.kubernetes.monitoring_namespace)
    pool = server.pool
    minimum = 0 if server.scale_to_zero else max(server.replicas, 1)
    return {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
        "minReplicaCount": minimum,
        "maxReplicaCount": max(server.max_replicas or 1, minimum, 1),
        # A GPU pod takes minutes to load a model: come back slowly to zero.
        "cooldownPeriod": 1800,
        "triggers": [
            {
                "type": "prometheus",
                "name": "saturation",
                "metricType": "Value",
                "metadata": {
                    "serverAddress": url,
                    "query": f'max(inference_pool_saturation{{name="{pool}"}})',
                    "threshold": str(server.saturation_target),
                },
            },
            {
                "type": "prometheus",
                "name": "queue",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": url,
                    "query": (
                        "sum(max by (band) "
                        f'(inference_extension_flow_control_queue_size{{name="{pool}"}}))'
                    ),
                    "threshold": str(server.queue_depth_target),
                    # One queued request wakes a pool scaled to zero.
                    "activationThreshold": "0",
                },
            },
        ],
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


def _hf_token_external_secret(secret_id: str, secret: str) -> dict[str, Any]:
    return {
        "refreshInterval": "1h",
        "secretStoreRef": {"kind": "ClusterSecretStore", "name": SECRET_STORE},
        "target": {"name": secret, "creationPolicy": "Owner"},
        "data": [{"secretKey": "HF_TOKEN", "remoteRef": {"key": secret_id}}],
    }


def _pod_spec(
    *, server: ModelServerSpec, group: NodeGroupSpec, selector: dict[str, str], image: str
) -> dict[str, Any]:
    gpus = str(server.gpus)
    health = {"httpGet": {"path": "/health", "port": "http"}}
    env = [
        {"name": "HOME", "value": "/home/vllm"},
        {"name": "HF_HOME", "value": "/models/huggingface"},
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        {"name": "DO_NOT_TRACK", "value": "1"},
    ]
    mounts = [
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "models", "mountPath": "/models"},
        {"name": "home", "mountPath": "/home/vllm"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes = [
        empty_dir("shm", size=server.shm_size, memory=True),
        empty_dir("models", size="200Gi"),
        empty_dir("home", size="10Gi"),
        empty_dir("tmp", size="2Gi"),
    ]
    secret = hf_token_secret(server)
    if secret:
        # A file, not an env var: secrets in the environment leak into crash dumps.
        env.append({"name": "HF_TOKEN_PATH", "value": f"{HF_TOKEN_DIR}/HF_TOKEN"})
        mounts.append({"name": "hf-token", "mountPath": HF_TOKEN_DIR, "readOnly": True})
        volumes.append({"name": "hf-token", "secret": {"secretName": secret}})
    return {
        "serviceAccountName": SERVICE_ACCOUNT,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "terminationGracePeriodSeconds": server.drain_seconds + 30,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            # Labels the CDK app puts on each GPU node group
                            # (stacks/parts/gpu_nodes.py: gpu_labels).
                            "matchExpressions": [
                                {"key": "igw.dev/gpu", "operator": "In", "values": [group.gpu]},
                                {
                                    "key": "igw.dev/node-group",
                                    "operator": "In",
                                    "values": [group.name],
                                },
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "topologySpreadConstraints": spread(selector),
        "containers": [
            {
                "name": "vllm",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["vllm", "serve"],
                "args": vllm_args(server),
                "env": env,
                "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
                # Downloading and loading weights takes minutes; up to 30 here.
                "startupProbe": {
                    **health,
                    "periodSeconds": 10,
                    "failureThreshold": STARTUP_PROBE_S // 10,
                },
                "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 3},
                "livenessProbe": {
                    **health,
                    "periodSeconds": 10,
                    "timeoutSeconds": 5,
                    "failureThreshold": 6,
                },
                "lifecycle": {"preStop": {"sleep": {"seconds": server.drain_seconds}}},
                "resources": {
                    "requests": {
                        "cpu": server.cpu,
                        "memory": server.memory,
                        "nvidia.com/gpu": gpus,
                    },
                    "limits": {"memory": server.memory, "nvidia.com/gpu": gpus},
                },
                "securityContext": container_security_context(),
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
