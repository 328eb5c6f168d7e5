"""The endpoint picker (`igw picker`): the ext_proc server Envoy asks for every request.

Active-active: every replica discovers the pool's pods by label selector and scrapes
them itself; Envoy spreads the ext_proc streams over the replicas. With
`kubernetes.picker_leader_election` (the managed add-on's schedulers elect a leader above
one replica) the replicas elect a holder of the Lease `igw-picker`, which alone writes the
InferenceGatewayConfig's status (`igw picker --leader-elect-status`, handed over as the
holder starts draining); every replica stays ready and routes, as the managed schedulers'
replicas do (docs/managed-gateway.md). Readiness gated on the lease (`--leader-elect`,
active-passive) is not rendered: a standby is never ready, so Argo CD would hold the
Deployment Progressing, then Degraded past its progress deadline, and every node drain
would wait on the one ready pod.
Where the environment's global tier is enabled, the replicas also share their dispatch
view (`--store`, from `$IGW_STORE_URL` and `$IGW_STORE_PASSWORD`) through the region's
Valkey, so N replicas pick like one: the manifests are the same in every region, so the
URL and token come from the Secret the region's own global-router folder renders
(cdk8s/charts/global_router.py), optional so a picker that starts first runs alone.

It starts from the mounted config file (the whole
`InferenceGatewayConfig` resource, from a ConfigMap whose hash sits on the pod template,
so a change rolls the pods) and watches the `igw` InferenceGatewayConfig, the
InferenceObjectives and InferenceModelRewrites through the API, so a canary step applies
without a restart.
"""

from __future__ import annotations

import hashlib
from typing import Any

import yaml
from constructs import Construct

from cdk8s import Chart
from envspec.disaggregation import pd_gateway_config
from envspec.environment import EnvironmentSpec
from envspec.global_router import STORE_AUTH_KEY, STORE_URL_KEY
from inference_gateway.config.spec import API_GROUP, API_VERSION
from inference_gateway.core.scheduling.config_checks import parse_config

from . import peers
from .base import PICKER, ROUTE_TIMEOUT_S, Placement, Wave, gateway_image, labels, manifest
from .component import GatewayComponent, Pod, Rollout
from .global_router import STORE_SECRET
from .kube import k8s
from .tokenizers import (
    SIDECAR_PROBE_SKIPS,
    apply_precise_prefix_parameters,
    picker_mount,
    sidecars,
    tokenizer_sources,
    volumes,
)
from .tracing import otel_env
from .workloads import (
    CPU_LIMIT_SKIP,
    DIGEST_SKIP,
    container_port,
    container_security_context,
    empty_dir,
    env_field,
    env_secret,
    mount,
    pre_stop_sleep,
    probe,
    resources,
    service_port,
)

__all__ = [
    "CONFIG_MAP",
    "CONFIG_PATH",
    "DRAIN_TIMEOUT_S",
    "EMF_INTERVAL_S",
    "GRPC_PORT",
    "HEALTH_PORT",
    "LEASE",
    "LIVENESS_SERVICE",
    "METRICS_PORT",
    "PRESTOP_SLEEP_S",
    "READINESS_SERVICE",
    "TERMINATION_GRACE_S",
    "PickerChart",
    "config_hash",
    "gateway_config_resource",
    "picker_labels",
    "store_env",
]

GRPC_PORT = 9002
#: The Lease the replicas elect their holder with (`kubernetes.picker_leader_election`).
LEASE = PICKER
#: Plain-text gRPC health (grpc.health.v1): the kubelet's gRPC probe speaks no TLS, and the
#: ext_proc port does (Envoy AI Gateway dials the picker over TLS), as upstream's EPP
#: splits `-grpcPort` / `-grpcHealthPort`.
HEALTH_PORT = 9003
METRICS_PORT = 9090
#: The endpoint-picker protocol's health services: `liveness` ignores pods and leases (a
#: model outage must not restart the pickers), `readiness` says the picker can pick.
LIVENESS_SERVICE = "liveness"
READINESS_SERVICE = "readiness"
#: Seconds between the CloudWatch EMF records the picker writes to stdout: one per alarm
#: period (stacks/parts/alarms.py reads one-minute periods).
EMF_INTERVAL_S = 60
#: A replaced picker: the kubelet runs `preStop` (sleep) first, while the Service and Envoy
#: Gateway drop the terminating pod from the picker cluster, then SIGTERM: readiness goes
#: NOT_SERVING and `igw picker` serves until its last ext_proc stream ends, at most the
#: route timeout (a stream is a request's whole response). The grace covers all three.
PRESTOP_SLEEP_S = 5
DRAIN_TIMEOUT_S = ROUTE_TIMEOUT_S
TERMINATION_GRACE_S = PRESTOP_SLEEP_S + DRAIN_TIMEOUT_S + 10
CONFIG_PATH = "/etc/igw/config.yaml"
CONFIG_NAME = "igw"
CONFIG_MAP = f"{PICKER}-config"


def picker_labels() -> dict[str, str]:
    return labels(name=PICKER, component="endpoint-picker")


def gateway_config_resource(env: EnvironmentSpec) -> dict[str, Any]:
    """The `InferenceGatewayConfig` resource: the CR and the picker's config file."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": CONFIG_NAME, "namespace": env.kubernetes.namespace},
        "spec": picker_spec(env),
    }


def picker_spec(env: EnvironmentSpec) -> dict[str, Any]:
    """`gateway` with the P/D pools' filters, decider, handler and profiles and the
    precise prefix scorer's hashing parameters (charts/tokenizers.py), as the gateway's
    parser writes it back (every default spelled out, as for `gateway`)."""
    spec = apply_precise_prefix_parameters(pd_gateway_config(env.gateway, env.model_servers), env)
    return parse_config(spec, "picker config").model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def config_file(env: EnvironmentSpec) -> str:
    return yaml.safe_dump(gateway_config_resource(env), sort_keys=False)


def config_hash(env: EnvironmentSpec) -> str:
    """On the pod templates of the config's readers, so a change rolls them."""
    return hashlib.sha256(config_file(env).encode()).hexdigest()[:16]


class PickerChart(Chart):
    """Read-only RBAC, ConfigMap, and the picker component (ServiceAccount, Deployment,
    Service, PDB, NetworkPolicy)."""

    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        namespace = env.kubernetes.namespace
        meta = picker_labels()
        common: Placement = {"namespace": namespace, "labels": meta, "wave": Wave.CONTROLLERS}

        GatewayComponent(
            self,
            "picker",
            name=PICKER,
            namespace=namespace,
            labels=meta,
            wave=Wave.CONTROLLERS,
            pod=Pod(
                containers=[_container(env), *sidecars(env)],
                volumes=[
                    k8s.Volume(
                        name="config", config_map=k8s.ConfigMapVolumeSource(name=CONFIG_MAP)
                    ),
                    empty_dir("tmp", size="64Mi"),
                    *volumes(env),
                ],
                # The ServiceAccount does not automount; only this pod, which watches the
                # API, does.
                automount_token=True,
                termination_grace_s=TERMINATION_GRACE_S,
                annotations={"igw.dev/config-sha256": config_hash(env)},
            ),
            rollout=Rollout(replicas=env.kubernetes.picker_replicas),
            service_ports=[
                service_port("grpc", GRPC_PORT, protocol="TCP", app_protocol="kubernetes.io/h2c"),
                service_port("metrics", METRICS_PORT, protocol="TCP"),
            ],
            # with one replica a PDB blocks every drain
            min_available=1 if env.kubernetes.picker_replicas > 1 else None,
            ingress=[
                peers.allow([peers.envoy(env)], GRPC_PORT),
                # Envoy: only the `/status` route reaches this port (igw global's heartbeat)
                peers.allow([peers.envoy(env), peers.prometheus(env)], METRICS_PORT),
            ],
            checkov_skips={
                **CPU_LIMIT_SKIP,
                **DIGEST_SKIP,
                "CKV_K8S_38": "the picker watches pods of its pools through the API",
                **(SIDECAR_PROBE_SKIPS if tokenizer_sources(env) else {}),
                **(
                    {
                        "CKV_K8S_35": "igw picker reads the store password from an environment "
                        "variable only ($IGW_STORE_PASSWORD); the value comes from the Secret"
                    }
                    if env.global_router.enabled
                    else {}
                ),
            },
        )
        manifest(
            self,
            "role",
            api_version="rbac.authorization.k8s.io/v1",
            kind="Role",
            name=PICKER,
            **common,
            body={"rules": _read_rules(leases=env.kubernetes.picker_leader_election)},
        )
        manifest(
            self,
            "rolebinding",
            api_version="rbac.authorization.k8s.io/v1",
            kind="RoleBinding",
            name=PICKER,
            **common,
            body={
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": PICKER,
                },
                "subjects": [{"kind": "ServiceAccount", "name": PICKER, "namespace": namespace}],
            },
        )
        manifest(
            self,
            "config",
            api_version="v1",
            kind="ConfigMap",
            name=CONFIG_MAP,
            **common,
            body={"data": {"config.yaml": config_file(env)}},
        )


def _read_rules(*, leases: bool) -> list[dict[str, Any]]:
    """What the picker reads; it writes only an Event about a config it rejects, its
    resource's status and, electing a leader, the Lease `igw-picker`."""
    read = ["get", "list", "watch"]
    lease = [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [LEASE],
            "verbs": ["get", "update"],
        },
    ]
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": read},
        {
            "apiGroups": ["inference.networking.k8s.io"],
            "resources": ["inferencepools"],
            "verbs": read,
        },
        {
            "apiGroups": ["inference.networking.x-k8s.io"],
            "resources": ["inferenceobjectives", "inferencemodelrewrites"],
            "verbs": read,
        },
        {"apiGroups": [API_GROUP], "resources": ["inferencegatewayconfigs"], "verbs": read},
        # `kubectl get igwc` shows what the picker sees: conditions and pod counts.
        {
            "apiGroups": [API_GROUP],
            "resources": ["inferencegatewayconfigs/status"],
            "verbs": ["get", "patch"],
        },
        # A rejected config is reported as a Warning Event on the resource.
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    return rules + lease if leases else rules


def store_env(env: EnvironmentSpec) -> list[k8s.EnvVar]:
    """`igw picker`'s store flag and password, from the global router's Secret (the region's
    Valkey); none without the global tier, the one in-cluster store. Optional keys: until
    External Secrets has synced the Secret the picker starts alone, and picks the store up
    on its next restart."""
    if not env.global_router.enabled:
        return []
    return [
        env_secret(name, secret=STORE_SECRET, key=key, optional=True)
        for name, key in (("IGW_STORE_URL", STORE_URL_KEY), ("IGW_STORE_PASSWORD", STORE_AUTH_KEY))
    ]


def _client_id_args(env: EnvironmentSpec) -> list[str]:
    """With authentication on, the SecurityPolicy's ext_authz (`igw auth`) sets
    x-igw-client-id on every request that reaches the picker (Envoy's ext_authz
    `allowed_upstream_headers`, which Envoy Gateway makes of `headersToBackend`,
    overwrite a header the client sent: envoy `source/extensions/filters/http/ext_authz/
    ext_authz.cc`, Envoy Gateway `internal/xds/translator/extauth.go`), so the picker may
    key rate limits on it. Without a policy nothing sets it and the picker ignores it."""
    return ["--client-id-from-auth"] if env.kubernetes.auth is not None else []


def _container(env: EnvironmentSpec) -> k8s.Container:
    live = k8s.GrpcAction(port=HEALTH_PORT, service=LIVENESS_SERVICE)
    ready = k8s.GrpcAction(port=HEALTH_PORT, service=READINESS_SERVICE)
    return k8s.Container(
        name="picker",
        image=gateway_image(env),
        image_pull_policy="IfNotPresent",
        args=[
            "picker",
            # igw picker binds loopback unless told: Envoy, the kubelet's probes
            # and Prometheus reach it on the pod IP (NetworkPolicy limits who).
            "--host",
            "0.0.0.0",
            "--grpc-port",
            str(GRPC_PORT),
            # Envoy AI Gateway's picker cluster speaks TLS without verifying.
            "--tls",
            "--grpc-health-port",
            str(HEALTH_PORT),
            "--metrics-port",
            str(METRICS_PORT),
            "--config",
            CONFIG_PATH,
            # The records the CDK alarms read (namespace InferenceGateway,
            # dimension Cluster = the EKS cluster's name): in the cluster the
            # picker is what routes, so it is what reports.
            "--emf-interval",
            str(EMF_INTERVAL_S),
            "--emf-cluster",
            env.cluster.name,
            "--drain-timeout",
            str(DRAIN_TIMEOUT_S),
            *_client_id_args(env),
            "--max-body-bytes",
            str(env.kubernetes.max_request_body_bytes),
            *(
                ["--leader-elect-status", "--lease-name", LEASE]
                if env.kubernetes.picker_leader_election
                else []
            ),
        ],
        lifecycle=pre_stop_sleep(PRESTOP_SLEEP_S),
        env=[
            env_field("POD_NAMESPACE", "metadata.namespace"),
            *store_env(env),
            *otel_env(env, "igw-picker"),
        ],
        ports=[
            container_port("grpc", GRPC_PORT, protocol="TCP"),
            container_port("grpc-health", HEALTH_PORT, protocol="TCP"),
            container_port("metrics", METRICS_PORT, protocol="TCP"),
        ],
        # Startup and liveness ask `liveness`: a picker with no fresh pod (a model
        # outage, a scale from zero) or no lease is alive and must not restart.
        startup_probe=probe(live, period_s=2, failure_threshold=30),
        readiness_probe=probe(ready, period_s=5, failure_threshold=2),
        liveness_probe=probe(live, period_s=10, failure_threshold=3),
        resources=resources(requests={"cpu": "1", "memory": "512Mi"}, limits={"memory": "1Gi"}),
        security_context=container_security_context(),
        volume_mounts=[
            mount("config", "/etc/igw", read_only=True),
            mount("tmp", "/tmp"),
            *picker_mount(env),
        ],
    )
