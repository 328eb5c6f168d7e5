"""Who may connect to a component: the NetworkPolicy peers and rules the charts allow.

The namespace denies every ingress by default (charts/network.py); each component lets in
only what needs it (charts/component.py `ingress`). "The gateway" is Envoy's pods (in
Envoy Gateway's namespace, labelled with the owning Gateway) plus, for the model
servers, the picker, which scrapes their `/metrics`. Prometheus may scrape the metrics
ports. Kubelet probes are node traffic and unaffected.
"""

from __future__ import annotations

from collections.abc import Sequence

from envspec.environment import EnvironmentSpec

from .base import GATEWAY, PICKER
from .kube import k8s

__all__ = ["allow", "envoy", "namespace", "picker", "prometheus"]


def namespace(name: str) -> k8s.LabelSelector:
    return k8s.LabelSelector(match_labels={"kubernetes.io/metadata.name": name})


def envoy(env: EnvironmentSpec) -> k8s.NetworkPolicyPeer:
    """The Envoy pods of Gateway `igw` (labels Envoy Gateway gives them, charts/gateway.py
    `envoy_pod_labels`)."""
    k8s_spec = env.kubernetes
    return k8s.NetworkPolicyPeer(
        namespace_selector=namespace(k8s_spec.envoy_gateway_namespace),
        pod_selector=k8s.LabelSelector(
            match_labels={
                "app.kubernetes.io/name": "envoy",
                "gateway.envoyproxy.io/owning-gateway-name": GATEWAY,
                "gateway.envoyproxy.io/owning-gateway-namespace": k8s_spec.namespace,
            }
        ),
    )


def prometheus(env: EnvironmentSpec) -> k8s.NetworkPolicyPeer:
    return k8s.NetworkPolicyPeer(namespace_selector=namespace(env.kubernetes.monitoring_namespace))


def picker() -> k8s.NetworkPolicyPeer:
    return k8s.NetworkPolicyPeer(
        pod_selector=k8s.LabelSelector(match_labels={"app.kubernetes.io/name": PICKER})
    )


def allow(peers: Sequence[k8s.NetworkPolicyPeer], *ports: int) -> k8s.NetworkPolicyIngressRule:
    """`peers` to the TCP `ports` (every port where none is named)."""
    return k8s.NetworkPolicyIngressRule(
        from_=list(peers),
        ports=[
            k8s.NetworkPolicyPort(protocol="TCP", port=k8s.IntOrString.from_number(p))
            for p in ports
        ]
        or None,
    )
