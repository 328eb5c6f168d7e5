"""Envoy Gateway: the HTTPS entry point, model routing, and the ext_proc wiring.

Request path: the internal NLB (built by the CDK ingress stack, one per region) →
Envoy (Gateway `igw`, HTTPS) → ext_proc #1, the
body-based router (`igw bbr`), reads `model` from the body and sets
`X-Gateway-Model-Name`, clearing the route cache → the HTTPRoute of the pool that
serves that model matches → ext_proc #2, our picker, picks a pod and answers with
`x-gateway-destination-endpoint` → the route's cluster, patched to ORIGINAL_DST on that
header, connects to exactly that pod.

Both ext_procs sit in one EnvoyExtensionPolicy on the Gateway because Envoy Gateway runs
`extProc` entries in list order and a route-level policy would replace, not extend, a
Gateway-level one. The ORIGINAL_DST patch needs Envoy Gateway's
`extensionApis.enableEnvoyPatchPolicy: true` (set in gitops/bootstrap).

One load balancer: Envoy's Service is `ClusterIP` with a fixed name (EnvoyProxy
`envoyService.name`), and a TargetGroupBinding registers Envoy's pod IPs in the CDK
target group `igw-<env>-envoy` by name (AWS Load Balancer Controller ≥ 2.7 resolves
`spec.targetGroupName`; its ARN is also in SSM at
`/igw/<env>/<region>/ingress/target-group-arn`). A `LoadBalancer` Service here would
make the controller build a second, unmanaged NLB.
"""

from __future__ import annotations

from typing import Any

from constructs import Construct

from cdk8s import Chart
from stacks.environment import EnvironmentSpec
from stacks.parts.names import target_group_name

from .base import (
    BBR,
    GATEWAY,
    GATEWAY_CLASS,
    PICKER,
    PROXY_CONFIG,
    Wave,
    gateway_image,
    labels,
    manifest,
    selector_labels,
)
from .picker import CONFIG_MAP, CONFIG_PATH, config_hash
from .picker import GRPC_PORT as PICKER_PORT
from .workloads import (
    CPU_LIMIT_SKIP,
    DIGEST_SKIP,
    container_security_context,
    empty_dir,
    pod_security_context,
    spread,
    surge_deployment_spec,
)

__all__ = [
    "BBR_PORT",
    "DESTINATION_HEADER",
    "ENVOY_SERVICE",
    "LISTENER",
    "LISTENER_PORT",
    "MODEL_HEADER",
    "GatewayChart",
    "bbr_labels",
    "pool_route_name",
    "routes",
]

BBR_PORT = 9004
LISTENER = "https"
LISTENER_PORT = 443
#: Envoy's Service, named rather than generated so the TargetGroupBinding can point at it.
ENVOY_SERVICE = f"{GATEWAY}-envoy"
MODEL_HEADER = "X-Gateway-Model-Name"
DESTINATION_HEADER = "x-gateway-destination-endpoint"
GATEWAY_API = "gateway.networking.k8s.io/v1"
ENVOY_GATEWAY_API = "gateway.envoyproxy.io/v1alpha1"
TLS_SECRET = f"{GATEWAY}-tls"


def bbr_labels() -> dict[str, str]:
    return labels(name=BBR, component="body-based-router")


def pool_route_name(pool: str) -> str:
    return f"{pool}-route"


def routes(env: EnvironmentSpec) -> dict[str, list[str]]:
    """Pool name → client-facing names routed to it: models, adapters, canary aliases."""
    from stacks.spec_workloads import canary_pool

    out: dict[str, list[str]] = {p.name: [] for p in env.gateway.pools}
    for model in env.gateway.models:
        out[model.pool].append(model.name)
    # The body-based router puts an adapter's own name in the header.
    for model in env.gateway.models:
        out[model.pool] += [a for a in model.adapters if a not in out[model.pool]]
    for canary in env.canaries:
        pool = canary_pool(canary, env.gateway)
        if canary.model not in out[pool]:
            out[pool].append(canary.model)
    return out


def _message_timeout(env: EnvironmentSpec) -> str:
    """Longer than the longest flow-control queue wait, or Envoy cuts queued requests."""
    longest = max((b.ttl_s for b in env.gateway.flow_control.bands.values()), default=30.0)
    return f"{int(longest) + 5}s"


class GatewayChart(Chart):
    """GatewayClass, EnvoyProxy, Gateway, HTTPRoutes, ext_proc policy, patch, BBR."""

    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        namespace = env.kubernetes.namespace
        gw_labels = labels(name=GATEWAY, component="gateway")
        infra = {"labels": gw_labels, "wave": Wave.CONTROLLERS}
        config = {"namespace": namespace, "labels": gw_labels, "wave": Wave.CONFIG}

        manifest(
            self,
            "envoyproxy",
            api_version=ENVOY_GATEWAY_API,
            kind="EnvoyProxy",
            name=PROXY_CONFIG,
            namespace=namespace,
            **infra,
            body={"spec": _envoy_proxy_spec(env)},
        )
        manifest(
            self,
            "gatewayclass",
            api_version=GATEWAY_API,
            kind="GatewayClass",
            name=GATEWAY_CLASS,
            **infra,
            body={
                "spec": {
                    "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
                    "parametersRef": {
                        "group": "gateway.envoyproxy.io",
                        "kind": "EnvoyProxy",
                        "name": PROXY_CONFIG,
                        "namespace": namespace,
                    },
                }
            },
        )
        manifest(
            self,
            "gateway",
            api_version=GATEWAY_API,
            kind="Gateway",
            name=GATEWAY,
            namespace=namespace,
            **infra,
            body={
                "spec": {
                    "gatewayClassName": GATEWAY_CLASS,
                    "listeners": [
                        {
                            "name": LISTENER,
                            "protocol": "HTTPS",
                            "port": LISTENER_PORT,
                            "hostname": env.ingress.domain_name,
                            "tls": {
                                "mode": "Terminate",
                                "certificateRefs": [{"kind": "Secret", "name": TLS_SECRET}],
                            },
                            "allowedRoutes": {"namespaces": {"from": "Same"}},
                        }
                    ],
                }
            },
        )
        manifest(
            self,
            "target-group-binding",
            api_version="elbv2.k8s.aws/v1beta1",
            kind="TargetGroupBinding",
            name=ENVOY_SERVICE,
            namespace=env.kubernetes.envoy_gateway_namespace,
            labels=gw_labels,
            wave=Wave.CONFIG,
            body={"spec": _target_group_binding_spec(env)},
        )
        self._routes(env=env, config=config)
        manifest(
            self,
            "ext-proc",
            api_version=ENVOY_GATEWAY_API,
            kind="EnvoyExtensionPolicy",
            name=f"{GATEWAY}-ext-proc",
            **config,
            body={
                "spec": {
                    "targetRefs": [
                        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GATEWAY}
                    ],
                    "extProc": _ext_procs(env),
                }
            },
        )
        manifest(
            self,
            "original-dst",
            api_version=ENVOY_GATEWAY_API,
            kind="EnvoyPatchPolicy",
            name=f"{GATEWAY}-original-dst",
            **config,
            body={
                "spec": {
                    "targetRef": {
                        "group": "gateway.networking.k8s.io",
                        "kind": "Gateway",
                        "name": GATEWAY,
                    },
                    "type": "JSONPatch",
                    "jsonPatches": _original_dst_patches(env),
                }
            },
        )
        self._bbr(env=env)

    def _routes(self, *, env: EnvironmentSpec, config: dict[str, Any]) -> None:
        """One HTTPRoute per pool, matching the model header; a catch-all comes last.

        The catch-all route (no header) exists so that Envoy has a route, and with it
        the ext_proc filters, for a request whose model is not known yet; after the
        body-based router sets the header the route is chosen again. A model nobody
        serves ends at the picker, which answers 404 in OpenAI shape.
        """
        by_pool = routes(env)
        for pool in env.gateway.pools:
            matches = [
                {
                    "path": {"type": "PathPrefix", "value": "/v1"},
                    "headers": [{"type": "Exact", "name": MODEL_HEADER, "value": model}],
                }
                for model in by_pool[pool.name]
            ]
            manifest(
                self,
                f"route-{pool.name}",
                api_version=GATEWAY_API,
                kind="HTTPRoute",
                name=pool_route_name(pool.name),
                **config,
                body={"spec": _route_spec(matches=matches, pool=pool.name, port=pool.target_port)},
            )
        if env.gateway.pools:
            first = sorted(env.gateway.pools, key=lambda p: p.name)[0]
            manifest(
                self,
                "route-default",
                api_version=GATEWAY_API,
                kind="HTTPRoute",
                name=f"{GATEWAY}-default-route",
                **config,
                body={
                    "spec": _route_spec(
                        matches=[{"path": {"type": "PathPrefix", "value": "/v1"}}],
                        pool=first.name,
                        port=first.target_port,
                    )
                },
            )

    def _bbr(self, *, env: EnvironmentSpec) -> None:
        namespace = env.kubernetes.namespace
        meta = bbr_labels()
        selector = selector_labels(meta)
        common = {"namespace": namespace, "labels": meta, "wave": Wave.CONTROLLERS}
        manifest(
            self,
            "bbr-sa",
            api_version="v1",
            kind="ServiceAccount",
            name=BBR,
            **common,
            body={"automountServiceAccountToken": False},
        )
        manifest(
            self,
            "bbr-deployment",
            api_version="apps/v1",
            kind="Deployment",
            name=BBR,
            **common,
            checkov_skips={**CPU_LIMIT_SKIP, **DIGEST_SKIP},
            body={
                "spec": surge_deployment_spec(
                    replicas=2,
                    selector=selector,
                    pod_labels=meta,
                    pod_spec=_bbr_pod_spec(env=env, selector=selector),
                    # Adapter → base model comes from the config: roll on change.
                    annotations={"igw.dev/config-sha256": config_hash(env)},
                )
            },
        )
        manifest(
            self,
            "bbr-service",
            api_version="v1",
            kind="Service",
            name=BBR,
            **common,
            body={
                "spec": {
                    "type": "ClusterIP",
                    "selector": selector,
                    "ports": [
                        {
                            "name": "grpc",
                            "port": BBR_PORT,
                            "targetPort": "grpc",
                            "appProtocol": "kubernetes.io/h2c",
                        }
                    ],
                }
            },
        )
        manifest(
            self,
            "bbr-pdb",
            api_version="policy/v1",
            kind="PodDisruptionBudget",
            name=BBR,
            **common,
            body={"spec": {"minAvailable": 1, "selector": {"matchLabels": selector}}},
        )


def _bbr_pod_spec(*, env: EnvironmentSpec, selector: dict[str, str]) -> dict[str, Any]:
    grpc_probe = {"grpc": {"port": BBR_PORT}}
    container = {
        "name": "bbr",
        "image": gateway_image(env),
        "imagePullPolicy": "Always",
        "args": ["bbr", "--grpc-port", str(BBR_PORT), "--config", CONFIG_PATH],
        "ports": [{"name": "grpc", "containerPort": BBR_PORT}],
        "startupProbe": {**grpc_probe, "periodSeconds": 2, "failureThreshold": 30},
        "readinessProbe": {**grpc_probe, "periodSeconds": 5},
        "livenessProbe": {**grpc_probe, "periodSeconds": 10},
        "resources": {
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        },
        "securityContext": container_security_context(),
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/igw", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return {
        "serviceAccountName": BBR,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "topologySpreadConstraints": spread(selector),
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": CONFIG_MAP}},
            empty_dir("tmp", size="64Mi"),
        ],
    }


def _envoy_proxy_spec(env: EnvironmentSpec) -> dict[str, Any]:
    """Envoy's Service stays inside the cluster: the CDK's internal NLB is the only way
    in (its security group admits `ingress.allowed_cidrs` on 443)."""
    return {
        "provider": {
            "type": "Kubernetes",
            "kubernetes": {
                "envoyDeployment": {"replicas": 2},
                "envoyService": {"name": ENVOY_SERVICE, "type": "ClusterIP"},
            },
        }
    }


def _target_group_binding_spec(env: EnvironmentSpec) -> dict[str, Any]:
    """Envoy's pods (by IP) in the NLB target group the CDK ingress stack created.

    The controller registers each pod at the Service port's target port: Envoy Gateway
    maps the 443 listener to container port 443 + 10000, which is the target group's
    port (`ingress.target_port`, default 10443). Security groups are the CDK's (the
    cluster security group admits the NLB), so `networking` is left out.
    """
    return {
        "serviceRef": {"name": ENVOY_SERVICE, "port": LISTENER_PORT},
        "targetGroupName": target_group_name(env.name),
        "targetType": "ip",
        "ipAddressType": "ipv4",
    }


def _route_spec(*, matches: list[dict[str, Any]], pool: str, port: int) -> dict[str, Any]:
    """The backend is the pool's Service; the patch turns its cluster into ORIGINAL_DST."""
    return {
        "parentRefs": [{"name": GATEWAY, "sectionName": LISTENER}],
        "rules": [
            {
                "matches": matches,
                "backendRefs": [{"group": "", "kind": "Service", "name": pool, "port": port}],
                # Streams of long completions must not be cut by a default timeout.
                "timeouts": {"request": "600s"},
            }
        ],
    }


def _ext_procs(env: EnvironmentSpec) -> list[dict[str, Any]]:
    fail_open = bool(env.gateway.pools) and all(
        p.failure_mode == "FailOpen" for p in env.gateway.pools
    )
    return [
        {
            "backendRefs": [{"group": "", "kind": "Service", "name": BBR, "port": BBR_PORT}],
            "processingMode": {"request": {"body": "FullDuplexStreamed"}},
            "messageTimeout": "5s",
            "failOpen": False,
        },
        {
            "backendRefs": [{"group": "", "kind": "Service", "name": PICKER, "port": PICKER_PORT}],
            "processingMode": {
                "request": {"body": "FullDuplexStreamed"},
                "response": {"body": "FullDuplexStreamed"},
            },
            "messageTimeout": _message_timeout(env),
            "failOpen": fail_open,
        },
    ]


def _original_dst_patches(env: EnvironmentSpec) -> list[dict[str, Any]]:
    """Make every route's cluster connect to the pod the picker names in the header.

    Envoy Gateway names the cluster of rule 0 of an HTTPRoute
    `httproute/<namespace>/<name>/rule/0`; patching those by name (not route-table
    indices) keeps the patch right when routes are added or reordered.
    """
    namespace = env.kubernetes.namespace
    names = [pool_route_name(p.name) for p in env.gateway.pools]
    if env.gateway.pools:
        names.append(f"{GATEWAY}-default-route")
    patches = []
    for route in names:
        cluster = f"httproute/{namespace}/{route}/rule/0"
        for op, path, value in (
            ("remove", "/eds_cluster_config", None),
            ("add", "/type", "ORIGINAL_DST"),
            ("add", "/lb_policy", "CLUSTER_PROVIDED"),
            (
                "add",
                "/original_dst_lb_config",
                {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
            ),
        ):
            operation: dict[str, Any] = {"op": op, "path": path}
            if value is not None:
                operation["value"] = value
            patches.append(
                {
                    "type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                    "name": cluster,
                    "operation": operation,
                }
            )
    return patches
