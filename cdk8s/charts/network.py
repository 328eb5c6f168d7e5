"""NetworkPolicies: deny by default; only the gateway reaches the picker and the models
(and, in a P/D pool, its pods reach each other for the KV transfers).

"The gateway" is Envoy's pods (in Envoy Gateway's namespace, labelled with the owning
Gateway) plus, for the model servers, the picker, which scrapes their `/metrics`.
Prometheus may scrape the metrics ports. Kubelet probes are node traffic and unaffected.
"""

from __future__ import annotations

from typing import Any

from constructs import Construct

from cdk8s import Chart
from envspec.disaggregation import DECODER_PORT
from envspec.environment import EnvironmentSpec

from .base import BBR, GATEWAY, PICKER, Wave, labels, manifest
from .gateway import AUTH, AUTH_PORT, BBR_PORT
from .model_servers import HTTP_PORT, KV_EVENTS_PORT
from .picker import GRPC_PORT, METRICS_PORT

__all__ = ["NetworkPoliciesChart"]


def _namespace(name: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": name}}


class NetworkPoliciesChart(Chart):
    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        k8s = env.kubernetes
        envoy = {
            "namespaceSelector": _namespace(k8s.envoy_gateway_namespace),
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "envoy",
                    "gateway.envoyproxy.io/owning-gateway-name": GATEWAY,
                    "gateway.envoyproxy.io/owning-gateway-namespace": k8s.namespace,
                }
            },
        }
        prometheus = {"namespaceSelector": _namespace(k8s.monitoring_namespace)}
        picker = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": PICKER}}}

        def tcp(port: int) -> list[dict[str, Any]]:
            return [{"protocol": "TCP", "port": port}]

        policies: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
            "default-deny-ingress": ({}, []),
            "model-servers": (
                {"matchLabels": {"app.kubernetes.io/name": "vllm"}},
                [
                    {"from": [envoy, picker], "ports": tcp(HTTP_PORT)},
                    {"from": [prometheus], "ports": tcp(HTTP_PORT)},
                    # the picker's SUB sockets to each pod's KV-event publisher
                    {"from": [picker], "ports": tcp(KV_EVENTS_PORT)},
                ],
            ),
            PICKER: (
                {"matchLabels": {"app.kubernetes.io/name": PICKER}},
                [
                    {"from": [envoy], "ports": tcp(GRPC_PORT)},
                    # Envoy: only the `/status` route reaches this port (igw global's heartbeat)
                    {"from": [envoy, prometheus], "ports": tcp(METRICS_PORT)},
                ],
            ),
            BBR: (
                {"matchLabels": {"app.kubernetes.io/name": BBR}},
                [{"from": [envoy], "ports": tcp(BBR_PORT)}],
            ),
            AUTH: (
                {"matchLabels": {"app.kubernetes.io/name": AUTH}},
                [{"from": [envoy], "ports": tcp(AUTH_PORT)}],
            ),
        }
        pd_pools = [s.pool for s in env.model_servers if s.disaggregation is not None]
        if pd_pools:
            # Prometheus scrapes a decode pod's vLLM behind the sidecar, on its own port
            policies["model-servers"][1].append({"from": [prometheus], "ports": tcp(DECODER_PORT)})
        for pool_name in pd_pools:
            # Within a P/D pool, every port: NIXL's side channel and UCX transfers (whose
            # ports are chosen at run time), and the decode sidecars' prefill legs.
            pool = {"matchLabels": {"app.kubernetes.io/name": "vllm", "igw.dev/pool": pool_name}}
            policies[f"{pool_name}-kv-transfer"] = (pool, [{"from": [{"podSelector": pool}]}])
        for name, (pods, ingress) in policies.items():
            manifest(
                self,
                name,
                api_version="networking.k8s.io/v1",
                kind="NetworkPolicy",
                name=name,
                namespace=k8s.namespace,
                labels=labels(name="inference-gateway", component="network-policy"),
                wave=Wave.CONTROLLERS,
                body={
                    "spec": {"podSelector": pods, "policyTypes": ["Ingress"], "ingress": ingress}
                },
            )
