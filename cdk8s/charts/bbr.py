"""The body-based router (`igw bbr`): Envoy's first ext_proc, before route selection.

It reads `model` from the request body and sets `X-Gateway-Model-Name`, clearing the
route cache, so the HTTPRoute of the pool that serves that model matches
(charts/gateway.py). Its EnvoyExtensionPolicy attaches it to the Gateway; the component
is two or more replicas of the gateway image behind a ClusterIP Service that only Envoy
may reach, reading adapter → base model from the picker's ConfigMap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from constructs import Construct

from envspec.environment import EnvironmentSpec

from . import peers
from .base import BBR, GATEWAY, Wave, gateway_image, labels, manifest
from .component import GatewayComponent, Rollout, gateway_service_pod
from .kube import k8s
from .picker import CONFIG_MAP, CONFIG_PATH, config_hash
from .tracing import otel_env
from .workloads import CPU_LIMIT_SKIP, DIGEST_SKIP, service_port

__all__ = [
    "BBR_BODY_MODE",
    "BBR_MESSAGE_TIMEOUT_S",
    "BBR_POLICY",
    "BBR_PORT",
    "BodyBasedRouter",
    "bbr_labels",
]

BBR_PORT = 9004
#: The body-based router's EnvoyExtensionPolicy: it only needs the request body.
BBR_MESSAGE_TIMEOUT_S = 5
BBR_BODY_MODE = "FullDuplexStreamed"
BBR_POLICY = f"{GATEWAY}-ext-proc"


def bbr_labels() -> dict[str, str]:
    return labels(name=BBR, component="body-based-router")


class BodyBasedRouter(Construct):
    """EnvoyExtensionPolicy on the Gateway, and the `igw bbr` component."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: EnvironmentSpec,
        circuit_breaker: Mapping[str, int],
    ) -> None:
        super().__init__(scope, construct_id)
        manifest(
            self,
            "ext-proc",
            api_version="gateway.envoyproxy.io/v1alpha1",
            kind="EnvoyExtensionPolicy",
            name=BBR_POLICY,
            namespace=env.kubernetes.namespace,
            labels=labels(name=GATEWAY, component="gateway"),
            wave=Wave.CONFIG,
            body={
                "spec": {
                    "targetRefs": [
                        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GATEWAY}
                    ],
                    "extProc": _ext_procs(circuit_breaker),
                }
            },
        )
        replicas = env.kubernetes.bbr.replicas
        GatewayComponent(
            self,
            "component",
            name=BBR,
            namespace=env.kubernetes.namespace,
            labels=bbr_labels(),
            wave=Wave.CONTROLLERS,
            pod=gateway_service_pod(
                image=gateway_image(env),
                container="bbr",
                # igw bbr binds loopback unless told, as the picker does: Envoy and the
                # kubelet's probes reach it on the pod IP (NetworkPolicy limits who).
                args=[
                    *("bbr", "--host", "0.0.0.0", "--grpc-port", str(BBR_PORT)),
                    *("--config", CONFIG_PATH),
                    # the picker's limit: a body bbr would pass is one the picker reads
                    *("--max-body-bytes", str(env.kubernetes.max_request_body_bytes)),
                ],
                port=("grpc", BBR_PORT),
                check=k8s.GrpcAction(port=BBR_PORT),
                env=otel_env(env, "igw-bbr"),
                volume=(
                    "/etc/igw",
                    k8s.Volume(
                        name="config", config_map=k8s.ConfigMapVolumeSource(name=CONFIG_MAP)
                    ),
                ),
                # Adapter → base model comes from the config: roll on change.
                annotations={"igw.dev/config-sha256": config_hash(env)},
            ),
            rollout=Rollout(replicas=replicas),
            service_ports=[service_port("grpc", BBR_PORT, app_protocol="kubernetes.io/h2c")],
            # with one replica a PDB would block drains
            min_available=1 if replicas > 1 else None,
            ingress=[peers.allow([peers.envoy(env)], BBR_PORT)],
            checkov_skips={**CPU_LIMIT_SKIP, **DIGEST_SKIP},
        )


def _ext_procs(circuit_breaker: Mapping[str, int]) -> list[dict[str, Any]]:
    """The body-based router only: the picker's ext_proc comes with the InferencePool.

    `failOpen` stays false: Envoy Gateway's CRD forbids `failOpen: true` with a
    `FullDuplexStreamed` body (CEL rule on ExtProc, v1.5 `ext_proc_types.go`).
    """
    return [
        {
            "backendRefs": [{"group": "", "kind": "Service", "name": BBR, "port": BBR_PORT}],
            "backendSettings": {"circuitBreaker": dict(circuit_breaker)},
            "processingMode": {"request": {"body": BBR_BODY_MODE}},
            "messageTimeout": f"{BBR_MESSAGE_TIMEOUT_S}s",
            "failOpen": False,
        },
    ]
