"""Envoy Gateway: the HTTPS entry point, model routing, and the ext_proc wiring.

Request path: the internal NLB (built by the CDK ingress stack, one per region) →
Envoy (Gateway `igw`, HTTPS, no listener hostname) → ext_proc #1, the body-based router
(`igw bbr`, charts/bbr.py), reads `model` from the body and sets `X-Gateway-Model-Name`,
clearing the route cache → the HTTPRoute of the pool that serves that model matches
(with authentication on, `igw auth` checks the credential first: charts/auth.py); its
backendRef is the pool's `InferencePool` → ext_proc #2, our picker (the pool's
`endpointPickerRef`), picks a pod and answers with `x-gateway-destination-endpoint` →
the pool's ORIGINAL_DST cluster connects to exactly that pod.

The InferencePool wiring is upstream's, not ours: Envoy Gateway v1.5 hands InferencePool
backends (`extensionManager.backendResources`, gitops/bootstrap) to the Envoy AI Gateway
controller, whose extension hooks build the picker's ext_proc filter and turn the route
cluster into ORIGINAL_DST with `load_balancing_policy` cleared (envoyproxy/ai-gateway
v0.4.0 `internal/extensionserver/post_cluster_modify.go`). No EnvoyPatchPolicy is left.

Circuit breakers (Envoy's default is 1,024 requests per cluster, and each streaming
request holds one ext_proc stream for its life): the route clusters get theirs from a
BackendTrafficPolicy, the body-based router's ext_proc cluster from its `backendSettings`;
the picker's ext_proc cluster is built by the AI Gateway hook after Envoy Gateway's patch
policies run (envoyproxy/gateway v1.5.0 `internal/xds/translator/translator.go`), so no
Envoy Gateway field reaches it: its thresholds are Envoy runtime keys
(`circuit_breakers.<cluster>.default.*`) in the EnvoyProxy bootstrap.

One load balancer: Envoy's Service is `ClusterIP` with a fixed name (EnvoyProxy
`envoyService.name`), and a TargetGroupBinding registers Envoy's pod IPs in the CDK
target group `igw-<env>-envoy` by its ARN, which only the CDK knows: it annotates the
cluster Secret with it, and the workloads' Application patches it in
(envspec/argocd_manifests.py `target_group_arn_patch`; also in SSM at
`/igw/<env>/<region>/ingress/target-group-arn`). A `LoadBalancer` Service here would
make the controller build a second, unmanaged NLB.

The listener's certificate, Secret `igw-tls`, is issued in the cluster by cert-manager
(cdk8s/charts/certificates.py).
"""

from __future__ import annotations

from typing import Any

from constructs import Construct

from cdk8s import Chart
from envspec.environment import EnvironmentSpec
from inference_gateway.config.spec import PoolSpec
from inference_gateway.envoyproxy.settings import (
    Address,
    CircuitBreaker,
    GatewaySettings,
    PoolRoute,
    ResponseOverride,
    StatusRoute,
)

from .auth import Authentication
from .base import (
    BBR,
    GATEWAY,
    GATEWAY_CLASS,
    PICKER,
    PROXY_CONFIG,
    ROUTE_TIMEOUT_S,
    Placement,
    Wave,
    labels,
    manifest,
)
from .bbr import BBR_BODY_MODE, BBR_MESSAGE_TIMEOUT_S, BBR_POLICY, BBR_PORT, BodyBasedRouter
from .kube import k8s, pod_spec_json
from .picker import GRPC_PORT, METRICS_PORT
from .tracing import envoy_tracing
from .workloads import spread

__all__ = [
    "DESTINATION_HEADER",
    "ENVOY_SERVICE",
    "LISTENER",
    "LISTENER_PORT",
    "MODEL_HEADER",
    "GatewayChart",
    "envoy_pod_labels",
    "envoy_settings",
    "picker_ext_proc_cluster",
    "pool_route_name",
    "routes",
]

LISTENER = "https"
LISTENER_PORT = 443
#: Envoy's Service, named rather than generated so the TargetGroupBinding can point at it.
ENVOY_SERVICE = f"{GATEWAY}-envoy"
MODEL_HEADER = "X-Gateway-Model-Name"
DESTINATION_HEADER = "x-gateway-destination-endpoint"
GATEWAY_API = "gateway.networking.k8s.io/v1"
ENVOY_GATEWAY_API = "gateway.envoyproxy.io/v1alpha1"
TLS_SECRET = f"{GATEWAY}-tls"
POOL_GROUP = "inference.networking.k8s.io"
#: The runtime-key limits (Envoy `circuit_breakers.<cluster>.<priority>.<limit>`) and the
#: CircuitBreaker fields of Envoy Gateway that set the same four thresholds.
_RUNTIME_LIMITS = ("max_connections", "max_pending_requests", "max_requests", "max_retries")


def picker_ext_proc_cluster(pool: str, namespace: str) -> str:
    """The name Envoy AI Gateway v0.4 gives the ext_proc cluster of an InferencePool's
    endpoint picker (`clusterNameForInferencePool` in its extension server)."""
    return f"envoy.clusters.endpointpicker_{pool}_{namespace}_ext_proc"


def circuit_breaker(env: EnvironmentSpec) -> dict[str, int]:
    """Envoy Gateway `CircuitBreaker` thresholds, far above Envoy's 1,024 default."""
    cb = envoy_settings(env).circuit_breaker
    return {
        "maxConnections": cb.max_connections,
        "maxPendingRequests": cb.max_pending_requests,
        "maxParallelRequests": cb.max_parallel_requests,
        "maxParallelRetries": cb.max_parallel_retries,
    }


# ROUTE_TIMEOUT_S (base.py): the inference routes' `timeouts.request`, which the picker's
# drain on a rollout matches.


def envoy_settings(env: EnvironmentSpec) -> GatewaySettings:
    """What Envoy's config depends on in this chart, as the plain settings the gateway's
    bootstrap renderer (`inference_gateway.envoyproxy`) takes. The chart's own manifests
    read their timeouts, modes, thresholds and override from here, so the bootstrap a
    test renders from it is the one Envoy Gateway + AI Gateway build from the tree."""
    namespace = env.kubernetes.namespace
    picker = Address(PICKER, GRPC_PORT)
    by_pool = routes(env)
    first = min((p.name for p in env.gateway.pools), default=None)
    pool_routes = [
        PoolRoute(
            route=pool_route_name(p.name),
            pool=p.name,
            picker=picker,
            models=tuple(by_pool[p.name]),
            namespace=namespace,
            timeout_s=route_timeout_s(p),
            catch_all=p.name == first,
        )
        for p in env.gateway.pools
    ]
    limit = env.kubernetes.max_parallel_requests
    return GatewaySettings(
        routes=tuple(pool_routes),
        bbr=Address(BBR, BBR_PORT) if env.kubernetes.bbr.enabled else None,
        gateway=GATEWAY,
        namespace=namespace,
        listener=LISTENER,
        # Envoy Gateway maps a privileged Gateway port P to container port P + 10000
        listener_port=LISTENER_PORT + 10000,
        bbr_policy=BBR_POLICY,
        bbr_message_timeout_s=BBR_MESSAGE_TIMEOUT_S,
        bbr_request_body_mode=BBR_BODY_MODE,
        traffic_policy=f"{GATEWAY}-routes",
        circuit_breaker=CircuitBreaker(limit, limit, limit, 16),
        response_override=ResponseOverride(),
        picker_circuit_breaker=limit,
        status=StatusRoute(backend=Address(PICKER, METRICS_PORT), route=STATUS_ROUTE),
    )


def route_timeout_s(pool: PoolSpec) -> int:
    """A pool's route timeout: its own (the managed add-on's per-scheduler
    routeTimeout), else the chart's, which is also the longest a picker drains."""
    return pool.route_timeout_s or ROUTE_TIMEOUT_S


def response_override(settings: GatewaySettings) -> list[dict[str, Any]]:
    """BackendTrafficPolicy `responseOverride` (Envoy Gateway v1.5
    `api/v1alpha1/shared_types.go`): while the picker is unreachable its ext_proc filter
    fails closed and Envoy answers 500 with an empty body; this gives that 500 an
    OpenAI-shaped JSON body (the `custom_response` filter, `custom_response.go`)."""
    override = settings.response_override
    if override is None:
        return []
    return [
        {
            "match": {
                "statusCodes": [{"type": "Value", "value": code} for code in override.status_codes]
            },
            "response": {
                "contentType": override.content_type,
                "body": {"type": "Inline", "inline": override.body},
            },
        }
    ]


def pool_route_name(pool: str) -> str:
    return f"{pool}-route"


def routes(env: EnvironmentSpec) -> dict[str, list[str]]:
    """Pool name → client-facing names routed to it: models, adapters, canary aliases."""
    from envspec.workloads import canary_pool

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


class GatewayChart(Chart):
    """EnvoyProxy, GatewayClass, Gateway, TargetGroupBinding, HTTPRoutes, their traffic
    policy, and the body-based router and `igw auth` where the environment has them."""

    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        namespace = env.kubernetes.namespace
        gw_labels = labels(name=GATEWAY, component="gateway")
        config: Placement = {"namespace": namespace, "labels": gw_labels, "wave": Wave.CONFIG}

        manifest(
            self,
            "envoyproxy",
            api_version=ENVOY_GATEWAY_API,
            kind="EnvoyProxy",
            name=PROXY_CONFIG,
            namespace=namespace,
            labels=gw_labels,
            wave=Wave.CONTROLLERS,
            body={"spec": _envoy_proxy_spec(env)},
        )
        manifest(
            self,
            "gatewayclass",
            api_version=GATEWAY_API,
            kind="GatewayClass",
            name=GATEWAY_CLASS,
            labels=gw_labels,
            wave=Wave.CONTROLLERS,
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
            labels=gw_labels,
            wave=Wave.CONTROLLERS,
            body={
                "spec": {
                    "gatewayClassName": GATEWAY_CLASS,
                    "listeners": [
                        {
                            "name": LISTENER,
                            "protocol": "HTTPS",
                            "port": LISTENER_PORT,
                            # No hostname: Envoy Gateway would add an SNI `server_names`
                            # match, and the NLB re-encrypts without SNI.
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
            body={"spec": _target_group_binding_spec()},
        )
        self._routes(env=env, config=config)
        manifest(
            self,
            "route-traffic",
            api_version=ENVOY_GATEWAY_API,
            kind="BackendTrafficPolicy",
            name=f"{GATEWAY}-routes",
            **config,
            body={
                "spec": {
                    "targetRefs": [
                        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": n}
                        for n in route_names(env)
                    ],
                    "circuitBreaker": circuit_breaker(env),
                    "responseOverride": response_override(envoy_settings(env)),
                }
            },
        )
        if env.kubernetes.auth is not None:
            Authentication(self, "auth", env=env, auth=env.kubernetes.auth, routes=route_names(env))
        if env.kubernetes.bbr.enabled:
            BodyBasedRouter(self, "bbr", env=env, circuit_breaker=circuit_breaker(env))

    def _routes(self, *, env: EnvironmentSpec, config: Placement) -> None:
        """One HTTPRoute per pool, matching the model header; the first pool's (by name)
        also matches every `/v1` request without one, the catch-all.

        The catch-all exists so that Envoy has a route, and with it the ext_proc
        filters, for a request whose model is not known yet; after the body-based router
        sets the header the route is chosen again (a header match outranks it, Gateway
        API match precedence). A model nobody serves ends at the picker, which answers
        404 in OpenAI shape. It is a match of the pool's own rule, not a second route to
        the same pool: Envoy AI Gateway v0.4 builds one picker cluster per route rule
        backed by an InferencePool, all named `envoy.clusters.endpointpicker_<pool>_<ns>
        _ext_proc`, with no de-duplication (`internal/extensionserver/
        post_translate_modify.go`, `inferencepool.go: clusterNameForInferencePool`);
        Envoy Gateway v1.5 passes the list on and go-control-plane's snapshot keeps the
        last of each name (`pkg/cache/v3/resources.go: IndexResourcesByName`). One rule
        per pool leaves nothing to collapse.
        """
        by_pool = routes(env)
        first = min((p.name for p in env.gateway.pools), default=None)
        for pool in env.gateway.pools:
            matches: list[dict[str, Any]] = [
                {
                    "path": {"type": "PathPrefix", "value": "/v1"},
                    "headers": [{"type": "Exact", "name": MODEL_HEADER, "value": model}],
                }
                for model in by_pool[pool.name]
            ]
            if pool.name == first:
                matches.append({"path": {"type": "PathPrefix", "value": "/v1"}})
            manifest(
                self,
                f"route-{pool.name}",
                api_version=GATEWAY_API,
                kind="HTTPRoute",
                name=pool_route_name(pool.name),
                **config,
                body={
                    "spec": _route_spec(
                        matches=matches, pool=pool.name, timeout_s=route_timeout_s(pool)
                    )
                },
            )
        manifest(
            self,
            "route-status",
            api_version=GATEWAY_API,
            kind="HTTPRoute",
            name=STATUS_ROUTE,
            **config,
            body={"spec": _status_route_spec(envoy_settings(env))},
        )


def envoy_pod_labels(env: EnvironmentSpec) -> dict[str, str]:
    """The labels Envoy Gateway v1.5 puts on the Envoy pods of Gateway `igw`: its
    `EnvoyAppLabel` and the owning gateway's (envoyproxy/gateway v1.5.0
    `internal/infrastructure/kubernetes/proxy/resource.go`, `internal/gatewayapi/
    translator.go`). Its PodDisruptionBudget selects them itself; the spread must name them."""
    return {
        "app.kubernetes.io/name": "envoy",
        "app.kubernetes.io/component": "proxy",
        "app.kubernetes.io/managed-by": "envoy-gateway",
        "gateway.envoyproxy.io/owning-gateway-name": GATEWAY,
        "gateway.envoyproxy.io/owning-gateway-namespace": env.kubernetes.namespace,
    }


def _envoy_proxy_spec(env: EnvironmentSpec) -> dict[str, Any]:
    """Envoy's Service stays inside the cluster: the CDK's internal NLB is the only way
    in (its security group admits `ingress.allowed_cidrs` on 443).

    Two Envoy replicas spread over zones and nodes like the gateway's own pods, and a
    PodDisruptionBudget keeping one of them through a node drain, both through the
    EnvoyProxy's own fields (v1.5 `KubernetesPodSpec.topologySpreadConstraints`,
    `EnvoyProxyKubernetesProvider.envoyPDB`), which Envoy Gateway copies onto the
    Deployment and PodDisruptionBudget it creates."""
    spec: dict[str, Any] = {
        "provider": {
            "type": "Kubernetes",
            "kubernetes": {
                "envoyDeployment": {
                    "replicas": 2,
                    "pod": {"topologySpreadConstraints": _spread(envoy_pod_labels(env))},
                },
                "envoyPDB": {"minAvailable": 1},
                "envoyService": {"name": ENVOY_SERVICE, "type": "ClusterIP"},
            },
        }
    }
    tracing = envoy_tracing(env)
    if tracing is not None:  # Envoy's spans, one trace per request (charts/tracing.py)
        spec["telemetry"] = {"tracing": tracing}
    runtime = picker_circuit_breaker_runtime(env)
    if runtime:
        # Into the static layer Envoy Gateway's default bootstrap already has
        # (v1.5 `internal/xds/bootstrap/bootstrap.yaml.tpl`: layered_runtime.layers[0]).
        spec["bootstrap"] = {
            "type": "JSONPatch",
            "jsonPatches": [
                {
                    "op": "add",
                    "path": f"/layered_runtime/layers/0/static_layer/{key}",
                    "value": value,
                }
                for key, value in runtime.items()
            ],
        }
    return spec


def _spread(pod_labels: dict[str, str]) -> list[dict[str, Any]]:
    """The gateway's own pods' spread (charts/workloads.py), as EnvoyProxy's `pod` takes it
    (a core/v1 PodSpec field, v1.5 `KubernetesPodSpec.topologySpreadConstraints`)."""
    spec = k8s.PodSpec(containers=[], topology_spread_constraints=spread(pod_labels))
    constraints: list[dict[str, Any]] = pod_spec_json(spec)["topologySpreadConstraints"]
    return constraints


def _target_group_binding_spec() -> dict[str, Any]:
    """Envoy's pods (by IP) in the NLB target group the CDK ingress stack created.

    The controller registers each pod at the Service port's target port: Envoy Gateway
    maps the 443 listener to container port 443 + 10000, which is the target group's
    port (`ingress.target_port`, default 10443). Security groups are the CDK's (the
    cluster security group admits the NLB), so `networking` is left out. The target
    group's ARN is patched in by the Application (`targetGroupARN`, module docstring).
    """
    return {
        "serviceRef": {"name": ENVOY_SERVICE, "port": LISTENER_PORT},
        "targetType": "ip",
        "ipAddressType": "ipv4",
    }


def route_names(env: EnvironmentSpec) -> list[str]:
    """Every inference HTTPRoute of the chart: one per pool, the first also the
    catch-all (the `/status` heartbeat route is not one: no auth, no inference circuit
    breaker)."""
    return [pool_route_name(p.name) for p in env.gateway.pools]


STATUS_ROUTE = f"{GATEWAY}-status-route"


def _status_route_spec(settings: GatewaySettings) -> dict[str, Any]:
    """`GET /status` to the picker's metrics port: the cluster's heartbeat for `igw
    global` (frontends/status.py). Exact path and method only, so `/metrics` and the
    rest of that port stay inside the cluster. From `envoy_settings`, as the bootstrap
    the tests run renders it."""
    status = settings.status
    assert status is not None
    return {
        "parentRefs": [{"name": GATEWAY, "sectionName": LISTENER}],
        "rules": [
            {
                "matches": [
                    {"path": {"type": "Exact", "value": status.path}, "method": status.method}
                ],
                "backendRefs": [
                    {
                        "group": "",
                        "kind": "Service",
                        "name": status.backend.host,
                        "port": status.backend.port,
                    }
                ],
                "timeouts": {"request": f"{status.timeout_s:g}s"},
            }
        ],
    }


def _route_spec(*, matches: list[dict[str, Any]], pool: str, timeout_s: int) -> dict[str, Any]:
    """The backend is the pool itself, as GIE documents (`backendRefs` to an
    InferencePool; no port, the pool's `targetPorts` say it)."""
    return {
        "parentRefs": [{"name": GATEWAY, "sectionName": LISTENER}],
        "rules": [
            {
                "matches": matches,
                "backendRefs": [{"group": POOL_GROUP, "kind": "InferencePool", "name": pool}],
                # Streams of long completions must not be cut by a default timeout.
                "timeouts": {"request": f"{timeout_s}s"},
            }
        ],
    }


def picker_circuit_breaker_runtime(env: EnvironmentSpec) -> dict[str, int]:
    """Envoy runtime keys that raise the picker ext_proc clusters' circuit breakers.

    Envoy reads `circuit_breakers.<cluster_name>.<priority>.<limit>` from runtime before
    the configured threshold (Envoy docs, "Circuit breaking": runtime overrides), so the
    AI Gateway's cluster, which sets no thresholds, gets the same as every other.
    """
    limit = env.kubernetes.max_parallel_requests
    namespace = env.kubernetes.namespace
    out: dict[str, int] = {}
    for pool in env.gateway.pools:
        cluster = picker_ext_proc_cluster(pool.name, namespace)
        for priority in ("default", "high"):
            for key in _RUNTIME_LIMITS:
                out[f"circuit_breakers.{cluster}.{priority}.{key}"] = (
                    16 if key == "max_retries" else limit
                )
    return out
