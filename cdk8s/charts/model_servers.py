"""vLLM model servers: one Deployment per pool and GPU generation (a P/D server: one per
role, prefill and decode, charts/pd.py), scaled by KEDA (charts/autoscaling.py).

Scaling reads what the picker exports (scraped by kube-prometheus-stack):
`inference_pool_saturation` of the pool, and the requests queued at the gateway for it
(`inference_extension_flow_control_queue_size`, summed over bands). vLLM's own queue is not
a signal: admission keeps it short on purpose. With `scale_to_zero` the pool may go to no
pod at all; a request then waits in the gateway's queue, which activates KEDA. A P/D
server's roles scale on their own pods' vLLM series instead.

The pod labels come from `envspec.workloads.model_server_pod_labels`, the same
function the environment validation uses to prove that each pool's selector selects
these pods. Pods drain before they stop: readiness fails first (the picker stops
picking the pod), then `preStop` sleeps `drain_seconds` so streams in flight finish,
and the grace period covers both.

Placement: a model server runs on its node group's managed nodes and, where the
environment attaches SageMaker HyperPod, on the HyperPod instance groups of the same GPU,
which HyperPod labels itself (`sagemaker.amazonaws.com/...`, `node_terms`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from constructs import Construct

from cdk8s import Chart
from envspec.disaggregation import DECODER_PORT, PdRole
from envspec.environment import EnvironmentSpec
from envspec.infra import HyperPodInstanceGroupSpec, NodeGroupSpec
from envspec.workloads import (
    ModelServerSpec,
    model_server_deployment,
    model_server_name,
    model_server_node_group,
    model_server_pod_labels,
    model_server_roles,
)

from .autoscaling import PROMETHEUS_URL, role_scaled_object_spec, scaled_object_spec
from .base import Placement, Wave, manifest, model_server_image
from .component import GatewayComponent, Pod, Rollout, service_account_manifest
from .kube import k8s
from .pd import kv_transfer_args, nixl_env, sidecar_container, sidecar_volumes
from .workloads import (
    CPU_LIMIT_SKIP,
    DIGEST_SKIP,
    container_port,
    container_security_context,
    empty_dir,
    env_value,
    mount,
    pre_stop_sleep,
    probe,
    resources,
)

__all__ = [
    "HTTP_PORT",
    "PROMETHEUS_URL",
    "ModelServersChart",
    "hf_token_secret",
    "scaled_object_spec",
    "vllm_args",
    "vllm_port",
]

HTTP_PORT = 8000
#: vLLM's KV-event publisher (`--kv-events-config`), which the picker's precise prefix
#: scorer subscribes to on each pod's IP (its `events_port` default).
KV_EVENTS_PORT = 5557
#: vLLM's replay ROUTER (`replay_endpoint`), which the scorer asks for the batches a gap
#: lost (its `replay_port`, set by charts/tokenizers.py): the port vLLM's own example
#: subscriber uses (examples/online_serving/kv_events_subscriber.py)
KV_REPLAY_PORT = 5558
#: vLLM's NONE_HASH seed: the picker reproduces the pods' block hashes with the same
#: value (the scorer's `hash_seed` default).
KV_HASH_SEED = "0"
KV_EVENTS_CONFIG = json.dumps(
    {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{KV_EVENTS_PORT}",
        "replay_endpoint": f"tcp://*:{KV_REPLAY_PORT}",
        "topic": "kv-events",
    },
    separators=(",", ":"),
)
SERVICE_ACCOUNT = "vllm"
HF_TOKEN_DIR = "/var/run/secrets/huggingface"
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


def vllm_port(role: PdRole | None) -> int:
    """vLLM's port: the pool's target port, except behind a decode pod's sidecar."""
    return DECODER_PORT if role == "decode" else HTTP_PORT


def vllm_args(server: ModelServerSpec, role: PdRole | None = None) -> list[str]:
    """The vLLM command line, flag by flag from the environment (and the P/D role)."""
    args = [
        server.model,
        "--served-model-name",
        server.served_name,
        "--port",
        str(vllm_port(role)),
        "--tensor-parallel-size",
        str(server.gpus),
        "--max-model-len",
        str(server.max_model_len),
        "--gpu-memory-utilization",
        str(server.gpu_memory_utilization),
        "--disable-uvicorn-access-log",
    ]
    if server.revision:
        args += ["--revision", server.revision]  # the tokenizer's too (vLLM's default)
    if server.model.startswith("s3://"):
        # Weights streamed straight from S3 (vLLM's Run:ai model streamer).
        args += ["--load-format", "runai_streamer"]
    if server.enable_prefix_caching:
        # and publish what the cache holds, for the picker's precise prefix scorer, which
        # hashes with the same block size and algorithm (charts/tokenizers.py)
        args += ["--enable-prefix-caching", "--kv-events-config", KV_EVENTS_CONFIG]
        args += ["--block-size", str(server.block_size)]
        args += ["--prefix-caching-hash-algo", server.prefix_caching_hash_algo]
    if server.max_loras:
        args += ["--enable-lora", "--max-loras", str(server.max_loras)]
        if server.adapters:
            sources = server.adapter_sources
            args += ["--lora-modules", *(f"{a}={sources[a]}" for a in server.adapters)]
    if server.tool_call_parser:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", server.tool_call_parser]
    if role is not None:
        args += kv_transfer_args()
    return args


class ModelServersChart(Chart):
    """The shared `vllm` ServiceAccount, and per model server (per role of a P/D server)
    its component (Deployment, PDB), ScaledObject and Hugging Face token."""

    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        service_account_manifest(
            self,
            "sa",
            name=SERVICE_ACCOUNT,
            namespace=env.kubernetes.namespace,
            labels={
                "app.kubernetes.io/name": "vllm",
                "app.kubernetes.io/part-of": "inference-gateway",
            },
            wave=Wave.WORKLOADS,
        )
        groups = {g.name: g for g in env.node_groups}
        for server in env.model_servers:
            # one Deployment, or a P/D server's prefill and decode Deployments
            for role in model_server_roles(server):
                group = groups[model_server_node_group(server, role)]
                self._server(server=server, group=group, env=env, role=role)

    def _server(
        self,
        *,
        server: ModelServerSpec,
        group: NodeGroupSpec,
        env: EnvironmentSpec,
        role: PdRole | None,
    ) -> None:
        namespace = env.kubernetes.namespace
        name = model_server_deployment(server, role)
        pod_labels = model_server_pod_labels(server, gpu=group.gpu, role=role)
        meta = {**pod_labels, "app.kubernetes.io/managed-by": "cdk8s"}
        common: Placement = {"namespace": namespace, "labels": meta, "wave": Wave.WORKLOADS}
        if role is None:
            replicas, scaled = server.replicas, server.max_replicas is not None
        else:
            assert server.disaggregation is not None
            bounds = server.disaggregation.role(role)
            replicas, scaled = bounds.min_replicas, bounds.max_replicas is not None
        # GPUs are scarce: with several replicas replace one at a time in place, with one
        # replica surge so the model never goes dark.
        surge = replicas <= 1
        GatewayComponent(
            self,
            name,
            name=name,
            namespace=namespace,
            labels=meta,
            wave=Wave.WORKLOADS,
            pod=_pod(
                server=server,
                group=group,
                image=model_server_image(env, image=server.image, digest=server.image_digest),
                hyperpod_groups=(
                    env.cluster.hyperpod.instance_groups if env.cluster.hyperpod.enabled else ()
                ),
                role=role,
                environment=env,
                labels=pod_labels,
            ),
            rollout=Rollout(
                # KEDA owns the count of a scaled server
                replicas=None if scaled else replicas,
                max_surge=1 if surge else 0,
                max_unavailable=0 if surge else 1,
                # Past the startup probe's budget, or a slow first load reads as a failed
                # rollout.
                progress_deadline_s=STARTUP_PROBE_S + 600,
            ),
            service_account=False,  # the chart's one `vllm` ServiceAccount
            # a node drain takes one pod of the server at a time
            max_unavailable=1,
            checkov_skips={**CPU_LIMIT_SKIP, **DIGEST_SKIP},
        )
        if scaled:
            manifest(
                self,
                f"{name}-scaledobject",
                api_version="keda.sh/v1alpha1",
                kind="ScaledObject",
                name=name,
                **common,
                body={
                    "spec": (
                        scaled_object_spec(server=server, name=name, env=env)
                        if role is None
                        else role_scaled_object_spec(server=server, role=role, name=name, env=env)
                    )
                },
            )
        secret = hf_token_secret(server)
        # one Secret per server: a P/D server's decode Deployment syncs it
        if server.hf_token_secret_id and secret and role in (None, "decode"):
            manifest(
                self,
                f"{name}-hf-token",
                api_version="external-secrets.io/v1",
                kind="ExternalSecret",
                name=secret,
                **common,
                body={"spec": _hf_token_external_secret(server.hf_token_secret_id, secret)},
            )


def _hf_token_external_secret(secret_id: str, secret: str) -> dict[str, Any]:
    return {
        "refreshInterval": "1h",
        "secretStoreRef": {"kind": "ClusterSecretStore", "name": SECRET_STORE},
        "target": {"name": secret, "creationPolicy": "Owner"},
        "data": [{"secretKey": "HF_TOKEN", "remoteRef": {"key": secret_id}}],
    }


#: The labels SageMaker HyperPod puts on the nodes it joins to an EKS cluster: the kind
#: of compute, the instance group, and the health its agents report ("Resilience-related
#: Kubernetes labels by SageMaker HyperPod": only `Schedulable` nodes take workloads).
HYPERPOD_COMPUTE_LABEL = "sagemaker.amazonaws.com/compute-type"
HYPERPOD_GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
HYPERPOD_HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"


def node_terms(
    group: NodeGroupSpec, hyperpod_groups: Sequence[HyperPodInstanceGroupSpec]
) -> list[k8s.NodeSelectorTerm]:
    """Where a model server of `group` may run (terms are ORed): the managed node group,
    by the labels the CDK gives it (stacks/parts/gpu_nodes.py: gpu_labels), and every
    HyperPod instance group of the same GPU, by HyperPod's own labels, healthy only."""

    def term(*requirements: tuple[str, list[str]]) -> k8s.NodeSelectorTerm:
        return k8s.NodeSelectorTerm(
            match_expressions=[
                k8s.NodeSelectorRequirement(key=key, operator="In", values=values)
                for key, values in requirements
            ]
        )

    terms = [term(("igw.dev/gpu", [group.gpu]), ("igw.dev/node-group", [group.name]))]
    names = sorted(g.name for g in hyperpod_groups if g.gpu == group.gpu)
    if names:
        terms.append(
            term(
                (HYPERPOD_COMPUTE_LABEL, ["hyperpod"]),
                (HYPERPOD_GROUP_LABEL, names),
                (HYPERPOD_HEALTH_LABEL, ["Schedulable"]),
            )
        )
    return terms


def _pod(
    *,
    server: ModelServerSpec,
    group: NodeGroupSpec,
    image: str,
    hyperpod_groups: Sequence[HyperPodInstanceGroupSpec] = (),
    role: PdRole | None = None,
    environment: EnvironmentSpec,
    labels: Mapping[str, str],
) -> Pod:
    gpus = str(server.gpus)
    health = k8s.HttpGetAction(path="/health", port=k8s.IntOrString.from_string("http"))
    env = [
        # uid 10001 has no passwd entry in the image: torch 2.8's inductor (imported by
        # `vllm` at start) calls getpass.getuser(), which then needs USER (or LOGNAME),
        # else KeyError before vLLM parses its flags (torch/_inductor/runtime/
        # cache_dir_utils.py default_cache_dir, called unconditionally by codecache.py,
        # so TORCHINDUCTOR_CACHE_DIR does not avoid it); emulator/vllm_startup.py
        env_value("USER", SERVICE_ACCOUNT),
        env_value("HOME", "/home/vllm"),
        env_value("HF_HOME", "/models/huggingface"),
        env_value("VLLM_NO_USAGE_STATS", "1"),
        env_value("DO_NOT_TRACK", "1"),
    ]
    if server.enable_prefix_caching:  # block hashes the picker can reproduce
        env.append(env_value("PYTHONHASHSEED", KV_HASH_SEED))
    if role is not None:
        env += nixl_env()
    mounts = [
        mount("shm", "/dev/shm"),
        mount("models", "/models"),
        mount("home", "/home/vllm"),
        mount("tmp", "/tmp"),
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
        env.append(env_value("HF_TOKEN_PATH", f"{HF_TOKEN_DIR}/HF_TOKEN"))
        mounts.append(mount("hf-token", HF_TOKEN_DIR, read_only=True))
        volumes.append(
            k8s.Volume(name="hf-token", secret=k8s.SecretVolumeSource(secret_name=secret))
        )
    sidecars = []
    if role == "decode":
        sidecars.append(sidecar_container(environment, drain_seconds=server.drain_seconds))
        volumes += sidecar_volumes()
    ports = [container_port("http", vllm_port(role), protocol="TCP")]
    if server.enable_prefix_caching:
        ports.append(container_port("kv-events", KV_EVENTS_PORT, protocol="TCP"))
        ports.append(container_port("kv-replay", KV_REPLAY_PORT, protocol="TCP"))
    vllm = k8s.Container(
        name="vllm",
        image=image,
        image_pull_policy="IfNotPresent",
        command=["vllm", "serve"],
        args=vllm_args(server, role),
        env=env,
        ports=ports,
        # Downloading and loading weights takes minutes; up to 30 here.
        startup_probe=probe(health, period_s=10, failure_threshold=STARTUP_PROBE_S // 10),
        readiness_probe=probe(health, period_s=5, failure_threshold=3),
        liveness_probe=probe(health, period_s=10, timeout_s=5, failure_threshold=6),
        lifecycle=pre_stop_sleep(server.drain_seconds),
        resources=resources(
            requests={"cpu": server.cpu, "memory": server.memory, "nvidia.com/gpu": gpus},
            limits={"memory": server.memory, "nvidia.com/gpu": gpus},
        ),
        security_context=container_security_context(),
        volume_mounts=mounts,
    )
    return Pod(
        containers=[vllm, *sidecars],
        volumes=volumes,
        service_account=SERVICE_ACCOUNT,
        termination_grace_s=server.drain_seconds + 30,
        affinity=k8s.Affinity(
            node_affinity=k8s.NodeAffinity(
                required_during_scheduling_ignored_during_execution=k8s.NodeSelector(
                    node_selector_terms=node_terms(group, hyperpod_groups)
                )
            )
        ),
        tolerations=[k8s.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        labels=labels,
    )
