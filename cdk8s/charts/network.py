"""NetworkPolicies of the namespace as a whole: deny every ingress by default, and let the
gateway reach the model servers (in a P/D pool, its pods reach each other for the KV
transfers).

Each gateway component lets in its own callers beside its Deployment
(charts/component.py `ingress`, peers from charts/peers.py); the model servers' policy is
here because it covers every model-server pod of every pool at once.
"""

from __future__ import annotations

from constructs import Construct

from cdk8s import Chart
from envspec.disaggregation import DECODER_PORT
from envspec.environment import EnvironmentSpec

from . import peers
from .base import Wave, labels, object_meta
from .kube import k8s
from .model_servers import HTTP_PORT, KV_EVENTS_PORT, KV_REPLAY_PORT

__all__ = ["NetworkPoliciesChart"]


class NetworkPoliciesChart(Chart):
    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        envoy, picker, prometheus = peers.envoy(env), peers.picker(), peers.prometheus(env)
        model_servers = [
            peers.allow([envoy, picker], HTTP_PORT),
            peers.allow([prometheus], HTTP_PORT),
            # the picker's SUB sockets to each pod's KV-event publisher, and its replays
            peers.allow([picker], KV_EVENTS_PORT, KV_REPLAY_PORT),
        ]
        vllm = {"app.kubernetes.io/name": "vllm"}
        policies: dict[str, tuple[dict[str, str], list[k8s.NetworkPolicyIngressRule]]] = {
            "default-deny-ingress": ({}, []),
            "model-servers": (vllm, model_servers),
        }
        pd_pools = [s.pool for s in env.model_servers if s.disaggregation is not None]
        if pd_pools:
            # Prometheus scrapes a decode pod's vLLM behind the sidecar, on its own port
            model_servers.append(peers.allow([prometheus], DECODER_PORT))
        for pool_name in pd_pools:
            # Within a P/D pool, every port: NIXL's side channel and UCX transfers (whose
            # ports are chosen at run time), and the decode sidecars' prefill legs.
            pool = {**vllm, "igw.dev/pool": pool_name}
            same_pool = k8s.NetworkPolicyPeer(pod_selector=k8s.LabelSelector(match_labels=pool))
            policies[f"{pool_name}-kv-transfer"] = (pool, [peers.allow([same_pool])])
        for name, (pods, ingress) in policies.items():
            k8s.KubeNetworkPolicy(
                self,
                name,
                metadata=object_meta(
                    api_version="networking.k8s.io/v1",
                    name=name,
                    namespace=env.kubernetes.namespace,
                    labels=labels(name="inference-gateway", component="network-policy"),
                    wave=Wave.CONTROLLERS,
                ),
                spec=k8s.NetworkPolicySpec(
                    pod_selector=k8s.LabelSelector(match_labels=pods or None),
                    policy_types=["Ingress"],
                    ingress=ingress,
                ),
            )
