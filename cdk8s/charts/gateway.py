"""Envoy Gateway: the HTTPS entry point, model routing, and the ext_proc wiring.

Request path: the internal NLB (built by the CDK ingress stack, one per region) →
Envoy (Gateway `igw`, HTTPS, no listener hostname) → ext_proc #1, the body-based router
(`igw bbr`), reads `model` from the body and sets `X-Gateway-Model-Name`, clearing the
route cache → the HTTPRoute of the pool that serves that model matches; its backendRef
is the pool's `InferencePool` → ext_proc #2, our picker (the pool's `endpointPickerRef`),
picks a pod and answers with `x-gateway-destination-endpoint` → the pool's ORIGINAL_DST
cluster connects to exactly that pod.

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
target group `igw-<env>-envoy` by name (AWS Load Balancer Controller ≥ 2.7 resolves
`spec.targetGroupName`; its ARN is also in SSM at
`/igw/<env>/<region>/ingress/target-group-arn`). A `LoadBalancer` Service here would
make the controller build a second, unmanaged NLB.
"""

from __future__ import annotations

from typing import Any

from constructs import Construct

from cdk8s import Chart
from envspec.environment import EnvironmentSpec
from envspec.names import target_group_name

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
from .picker import CONFIG_MAP, CONFIG_PATH, METRICS_PORT, config_hash
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
    "picker_ext_proc_cluster",
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
POOL_GROUP = "inference.networking.k8s.io"
API_KEYS_SECRET = f"{GATEWAY}-api-keys"
#: The authenticated client id, which the picker takes as the fairness id.
CLIENT_ID_HEADER = "x-igw-client-id"
#: The runtime-key limits (Envoy `circuit_breakers.<cluster>.<priority>.<limit>`) and the
#: CircuitBreaker fields of Envoy Gateway that set the same four thresholds.
_RUNTIME_LIMITS = ("max_connections", "max_pending_requests", "max_requests", "max_retries")


def picker_ext_proc_cluster(pool: str, namespace: str) -> str:
    """The name Envoy AI Gateway v0.4 gives the ext_proc cluster of an InferencePool's
    endpoint picker (`clusterNameForInferencePool` in its extension server)."""
    return f"envoy.clusters.endpointpicker_{pool}_{namespace}_ext_proc"


def circuit_breaker(env: EnvironmentSpec) -> dict[str, int]:
    """Envoy Gateway `CircuitBreaker` thresholds, far above Envoy's 1,024 default."""
    limit = env.kubernetes.max_parallel_requests
    return {
        "maxConnections": limit,
        "maxPendingRequests": limit,
        "maxParallelRequests": limit,
        "maxParallelRetries": 16,
    }


def bbr_labels() -> dict[str, str]:
    return labels(name=BBR, component="body-based-router")


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
                }
            },
        )
        if env.kubernetes.auth is not None:
            self._auth(env=env, config=config)
        self._bbr(env=env)

    def _auth(self, *, env: EnvironmentSpec, config: dict[str, Any]) -> None:
        """Who may call: a SecurityPolicy on every inference route, so no request reaches
        the picker, let alone a pod, without a known credential.

        API keys (Envoy's api_key_auth, `Authorization: Bearer <key>` as the OpenAI SDK
        sends it) come from a Secret that External Secrets keeps in sync with the
        environment's Secrets Manager secret (client id → key); the client id is
        forwarded as `x-igw-client-id`, the fairness and rate-limit key. With `jwt`, a
        token of the issuer is checked too (signature, issuer, audiences) and its
        client claim copied to the same header.
        """
        auth = env.kubernetes.auth
        assert auth is not None
        manifest(
            self,
            "api-keys",
            api_version="external-secrets.io/v1",
            kind="ExternalSecret",
            name=API_KEYS_SECRET,
            **config,
            body={
                "spec": {
                    "refreshInterval": "5m",
                    "secretStoreRef": {"kind": "ClusterSecretStore", "name": "aws-secrets-manager"},
                    "target": {"name": API_KEYS_SECRET, "creationPolicy": "Owner"},
                    # Every key of the JSON secret becomes one client id of the Secret.
                    "dataFrom": [{"extract": {"key": auth.api_keys_secret_id}}],
                }
            },
        )
        spec: dict[str, Any] = {
            # The inference routes, not the Gateway: the heartbeat route (`/status`, read
            # by `igw global` of every region) carries no credential, and a policy on
            # the Gateway would cover every route attached to it.
            "targetRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": n}
                for n in route_names(env)
            ],
            "apiKeyAuth": {
                "credentialRefs": [{"group": "", "kind": "Secret", "name": API_KEYS_SECRET}],
                "extractFrom": [{"headers": ["authorization"]}],
                "forwardClientIDHeader": CLIENT_ID_HEADER,
                # The key never travels upstream, to the picker or a model server.
                "sanitize": True,
            },
        }
        if auth.jwt is not None:
            spec["jwt"] = {
                "optional": True,
                "providers": [
                    {
                        "name": "oidc",
                        "issuer": auth.jwt.issuer,
                        "audiences": list(auth.jwt.audiences),
                        "remoteJWKS": {"uri": auth.jwt.jwks_uri},
                        "claimToHeaders": [
                            {"header": CLIENT_ID_HEADER, "claim": auth.jwt.client_id_claim}
                        ],
                    }
                ],
            }
        manifest(
            self,
            "security-policy",
            api_version=ENVOY_GATEWAY_API,
            kind="SecurityPolicy",
            name=f"{GATEWAY}-auth",
            **config,
            body={"spec": spec},
        )

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
                body={"spec": _route_spec(matches=matches, pool=pool.name)},
            )
        manifest(
            self,
            "route-status",
            api_version=GATEWAY_API,
            kind="HTTPRoute",
            name=STATUS_ROUTE,
            **config,
            body={"spec": _status_route_spec()},
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
        "imagePullPolicy": "IfNotPresent",
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
    spec: dict[str, Any] = {
        "provider": {
            "type": "Kubernetes",
            "kubernetes": {
                "envoyDeployment": {"replicas": 2},
                "envoyService": {"name": ENVOY_SERVICE, "type": "ClusterIP"},
            },
        }
    }
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


def route_names(env: EnvironmentSpec) -> list[str]:
    """Every inference HTTPRoute of the chart: one per pool, then the catch-all (the
    `/status` heartbeat route is not one: no auth, no inference circuit breaker)."""
    names = [pool_route_name(p.name) for p in env.gateway.pools]
    return [*names, f"{GATEWAY}-default-route"] if names else []


STATUS_ROUTE = f"{GATEWAY}-status-route"


def _status_route_spec() -> dict[str, Any]:
    """`GET /status` to the picker's metrics port: the cluster's heartbeat for `igw
    global` (frontends/status.py). Exact path and method only, so `/metrics` and the
    rest of that port stay inside the cluster."""
    return {
        "parentRefs": [{"name": GATEWAY, "sectionName": LISTENER}],
        "rules": [
            {
                "matches": [{"path": {"type": "Exact", "value": "/status"}, "method": "GET"}],
                "backendRefs": [
                    {"group": "", "kind": "Service", "name": PICKER, "port": METRICS_PORT}
                ],
                "timeouts": {"request": "5s"},
            }
        ],
    }


def _route_spec(*, matches: list[dict[str, Any]], pool: str) -> dict[str, Any]:
    """The backend is the pool itself, as GIE documents (`backendRefs` to an
    InferencePool; no port, the pool's `targetPorts` say it)."""
    return {
        "parentRefs": [{"name": GATEWAY, "sectionName": LISTENER}],
        "rules": [
            {
                "matches": matches,
                "backendRefs": [{"group": POOL_GROUP, "kind": "InferencePool", "name": pool}],
                # Streams of long completions must not be cut by a default timeout.
                "timeouts": {"request": "600s"},
            }
        ],
    }


def _ext_procs(env: EnvironmentSpec) -> list[dict[str, Any]]:
    """The body-based router only: the picker's ext_proc comes with the InferencePool.

    `failOpen` stays false: Envoy Gateway's CRD forbids `failOpen: true` with a
    `FullDuplexStreamed` body (CEL rule on ExtProc, v1.5 `ext_proc_types.go`).
    """
    return [
        {
            "backendRefs": [{"group": "", "kind": "Service", "name": BBR, "port": BBR_PORT}],
            "backendSettings": {"circuitBreaker": circuit_breaker(env)},
            "processingMode": {"request": {"body": "FullDuplexStreamed"}},
            "messageTimeout": "5s",
            "failOpen": False,
        },
    ]


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
