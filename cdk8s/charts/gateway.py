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
)
from inference_gateway.frontends.authz import AUTHZ_PATH_PREFIX, UPSTREAM_HEADERS

from .base import (
    BBR,
    GATEWAY,
    GATEWAY_CLASS,
    PICKER,
    PROXY_CONFIG,
    ROUTE_TIMEOUT_S,
    Wave,
    gateway_image,
    labels,
    manifest,
    selector_labels,
)
from .picker import CONFIG_MAP, CONFIG_PATH, GRPC_PORT, METRICS_PORT, config_hash
from .tracing import envoy_tracing, otel_env
from .workloads import (
    CPU_LIMIT_SKIP,
    DIGEST_SKIP,
    empty_dir,
    gateway_service_container,
    pod_security_context,
    spread,
    surge_deployment_spec,
)

__all__ = [
    "AUTH",
    "AUTH_HEADERS_TO_BACKEND",
    "AUTH_PATH",
    "AUTH_PORT",
    "BBR_PORT",
    "DESTINATION_HEADER",
    "ENVOY_SERVICE",
    "LISTENER",
    "LISTENER_PORT",
    "MODEL_HEADER",
    "GatewayChart",
    "bbr_labels",
    "envoy_pod_labels",
    "envoy_settings",
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
AUTH_KEYS_FILE = "keys.yaml"
#: `igw auth`, the ext_authz service of the SecurityPolicy
AUTH = f"{GATEWAY}-auth"
AUTH_PORT = 9010
AUTH_PATH = AUTHZ_PATH_PREFIX
AUTH_HEADERS_TO_BACKEND = UPSTREAM_HEADERS
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
#: The body-based router's EnvoyExtensionPolicy: it only needs the request body.
BBR_MESSAGE_TIMEOUT_S = 5
BBR_BODY_MODE = "FullDuplexStreamed"


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
        bbr_policy=f"{GATEWAY}-ext-proc",
        bbr_message_timeout_s=BBR_MESSAGE_TIMEOUT_S,
        bbr_request_body_mode=BBR_BODY_MODE,
        traffic_policy=f"{GATEWAY}-routes",
        circuit_breaker=CircuitBreaker(limit, limit, limit, 16),
        response_override=ResponseOverride(),
        picker_circuit_breaker=limit,
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


def auth_labels() -> dict[str, str]:
    return labels(name=AUTH, component="auth")


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
            body={"spec": _target_group_binding_spec()},
        )
        self._routes(env=env, config=config)
        if env.kubernetes.bbr.enabled:
            self._bbr_policy(env=env, config=config)
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
            self._auth(env=env, config=config)
        if env.kubernetes.bbr.enabled:
            self._bbr(env=env)

    def _bbr_policy(self, *, env: EnvironmentSpec, config: dict[str, Any]) -> None:
        """The body-based router on the Gateway: an ext_proc before route selection."""
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

    def _auth(self, *, env: EnvironmentSpec, config: dict[str, Any]) -> None:
        """Who may call: a SecurityPolicy on every inference route whose one check is
        ext_authz to `igw auth`, so no request reaches the picker, let alone a pod,
        without a known credential, and API keys and JWTs are accepted together.

        Why not `apiKeyAuth` + `jwt`: Envoy Gateway v1.5 orders api_key_auth before
        jwt_authn (`internal/xds/translator/httpfilters.go`), and Envoy's api_key_auth
        answers 401 to any bearer it does not know, a JWT included, so no JWT client could
        pass (tests/e2e/test_auth_through_envoy.py shows it with Envoy's own filters).
        `igw auth` makes the checks `igw serve` makes (key digests from the mounted key
        file, JWTs against the issuer's JWKS URL, per-credential models from the body) and
        hands the client id to the picker in the headers `headersToBackend` lists, which
        override any a client sent. The key file (digests only) is a Secrets Manager
        secret that External Secrets keeps in sync.
        """
        auth = env.kubernetes.auth
        assert auth is not None
        if auth.api_keys_secret_id is not None:
            self._api_keys(auth.api_keys_secret_id, config=config)
        self._auth_service(env=env)
        self._security_policy(env=env, config=config)

    def _api_keys(self, secret_id: str, *, config: dict[str, Any]) -> None:
        """The key file `igw auth` mounts: External Secrets keeps it in sync with the
        Secrets Manager secret (digests only)."""
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
                    # The secret's value is igw's key file (`keys: [{client, sha256, models?}]`).
                    "data": [{"secretKey": AUTH_KEYS_FILE, "remoteRef": {"key": secret_id}}],
                }
            },
        )

    def _security_policy(self, *, env: EnvironmentSpec, config: dict[str, Any]) -> None:
        spec: dict[str, Any] = {
            # The inference routes, not the Gateway: the heartbeat route (`/status`, read
            # by `igw global` of every region) carries no credential, and a policy on
            # the Gateway would cover every route attached to it.
            "targetRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": n}
                for n in route_names(env)
            ],
            "extAuth": {
                "http": {
                    "backendRefs": [
                        {"group": "", "kind": "Service", "name": AUTH, "port": AUTH_PORT}
                    ],
                    "path": AUTH_PATH,
                    "headersToBackend": list(AUTH_HEADERS_TO_BACKEND),
                },
                # The model check reads the body (a credential may be limited to models);
                # the picker's own body limit, so no request the picker takes is refused here.
                "bodyToExtAuth": {"maxRequestBytes": env.kubernetes.max_request_body_bytes},
                "failOpen": False,
            },
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

    def _auth_service(self, *, env: EnvironmentSpec) -> None:
        """`igw auth`: two replicas behind a ClusterIP Service, the key file mounted.

        In the config wave, with the ExternalSecret that makes the key file: a pod whose
        Secret volume does not exist yet never starts, so in the controllers wave its
        Deployment would pass its progress deadline and fail the first sync
        (tests/gitops/test_gitops_first_sync.py plays it)."""
        meta = auth_labels()
        selector = selector_labels(meta)
        common = {"namespace": env.kubernetes.namespace, "labels": meta, "wave": Wave.CONFIG}
        manifest(
            self,
            "auth-sa",
            api_version="v1",
            kind="ServiceAccount",
            name=AUTH,
            **common,
            body={"automountServiceAccountToken": False},
        )
        manifest(
            self,
            "auth-deployment",
            api_version="apps/v1",
            kind="Deployment",
            name=AUTH,
            **common,
            checkov_skips={**CPU_LIMIT_SKIP, **DIGEST_SKIP},
            body={
                "spec": surge_deployment_spec(
                    replicas=2,
                    selector=selector,
                    pod_labels=meta,
                    pod_spec=_auth_pod_spec(env=env, selector=selector),
                )
            },
        )
        manifest(
            self,
            "auth-service",
            api_version="v1",
            kind="Service",
            name=AUTH,
            **common,
            body={
                "spec": {
                    "type": "ClusterIP",
                    "selector": selector,
                    "ports": [{"name": "http", "port": AUTH_PORT, "targetPort": "http"}],
                }
            },
        )
        manifest(
            self,
            "auth-pdb",
            api_version="policy/v1",
            kind="PodDisruptionBudget",
            name=AUTH,
            **common,
            body={"spec": {"minAvailable": 1, "selector": {"matchLabels": selector}}},
        )

    def _routes(self, *, env: EnvironmentSpec, config: dict[str, Any]) -> None:
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
            body={"spec": _status_route_spec()},
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
                    replicas=env.kubernetes.bbr.replicas,
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
        if env.kubernetes.bbr.replicas > 1:  # with one replica a PDB would block drains
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
    return _gateway_service_pod_spec(
        env=env,
        selector=selector,
        name=BBR,
        container="bbr",
        # igw bbr binds loopback unless told, as the picker does: Envoy and the kubelet's
        # probes reach it on the pod IP (NetworkPolicy limits who).
        args=[
            *("bbr", "--host", "0.0.0.0", "--grpc-port", str(BBR_PORT), "--config", CONFIG_PATH),
            # the picker's limit: a body bbr would pass is one the picker reads
            *("--max-body-bytes", str(env.kubernetes.max_request_body_bytes)),
        ],
        port=("grpc", BBR_PORT),
        probe={"grpc": {"port": BBR_PORT}},
        mount=("config", "/etc/igw"),
        volume={"name": "config", "configMap": {"name": CONFIG_MAP}},
        env_vars=otel_env(env, "igw-bbr"),
    )


def _auth_pod_spec(*, env: EnvironmentSpec, selector: dict[str, str]) -> dict[str, Any]:
    auth = env.kubernetes.auth
    assert auth is not None
    args = ["auth", "--host", "0.0.0.0", "--port", str(AUTH_PORT)]
    keys = auth.api_keys_secret_id is not None
    if keys:
        args += ["--api-keys", f"/etc/igw-auth/{AUTH_KEYS_FILE}"]
    args += ["--max-body-bytes", str(env.kubernetes.max_request_body_bytes)]
    if auth.jwt is not None:
        args += ["--jwt-issuer", auth.jwt.issuer, "--jwt-jwks", auth.jwt.jwks_uri]
        args += ["--jwt-client-claim", auth.jwt.client_id_claim]
        for audience in auth.jwt.audiences:
            args += ["--jwt-audience", audience]
        for claim, value in auth.jwt.required_claims.items():
            args += ["--jwt-claim", f"{claim}={value}"]
    if env.kubernetes.tracing is not None:  # Envoy's sampling decides (parent-based)
        args += ["--trace-sampling", "0"]
    return _gateway_service_pod_spec(
        env=env,
        selector=selector,
        name=AUTH,
        container="auth",
        args=args,
        port=("http", AUTH_PORT),
        probe={"httpGet": {"path": "/healthz", "port": "http"}},
        mount=("keys", "/etc/igw-auth") if keys else None,
        volume={"name": "keys", "secret": {"secretName": API_KEYS_SECRET}} if keys else None,
        env_vars=otel_env(env, "igw-auth"),
    )


def _gateway_service_pod_spec(
    *,
    env: EnvironmentSpec,
    selector: dict[str, str],
    name: str,
    container: str,
    args: list[str],
    port: tuple[str, int],
    probe: dict[str, Any],
    mount: tuple[str, str] | None,
    volume: dict[str, Any] | None,
    env_vars: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The pod of a small gateway service (`igw bbr`, `igw auth`): the gateway image, one
    port with its probes, at most one read-only volume, restricted security, spread over
    zones."""
    own = [] if mount is None else [{"name": mount[0], "mountPath": mount[1], "readOnly": True}]
    spec = gateway_service_container(
        image=gateway_image(env),
        name=container,
        args=args,
        port=port,
        probe=probe,
        mounts=[*own, {"name": "tmp", "mountPath": "/tmp"}],
    )
    if env_vars:
        spec["env"] = env_vars
    return {
        "serviceAccountName": name,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "topologySpreadConstraints": spread(selector),
        "containers": [spec],
        "volumes": [*([] if volume is None else [volume]), empty_dir("tmp", size="64Mi")],
    }


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
                    "pod": {"topologySpreadConstraints": spread(envoy_pod_labels(env))},
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


def _ext_procs(env: EnvironmentSpec) -> list[dict[str, Any]]:
    """The body-based router only: the picker's ext_proc comes with the InferencePool.

    `failOpen` stays false: Envoy Gateway's CRD forbids `failOpen: true` with a
    `FullDuplexStreamed` body (CEL rule on ExtProc, v1.5 `ext_proc_types.go`).
    """
    return [
        {
            "backendRefs": [{"group": "", "kind": "Service", "name": BBR, "port": BBR_PORT}],
            "backendSettings": {"circuitBreaker": circuit_breaker(env)},
            "processingMode": {"request": {"body": BBR_BODY_MODE}},
            "messageTimeout": f"{BBR_MESSAGE_TIMEOUT_S}s",
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
