"""The Envoy bootstrap Envoy Gateway v1.5 + Envoy AI Gateway v0.4 build for our tree.

In the cluster Envoy gets this over xDS: Envoy Gateway translates the Gateway, the
HTTPRoutes and the policies (envoyproxy/gateway v1.5.0 `internal/xds/translator/`), then
AI Gateway's extension hooks add what an InferencePool backend needs (envoyproxy/ai-gateway
v0.4.0 `internal/extensionserver/`). Here it is one static bootstrap, field for field,
each field commented with the upstream code that sets it. The standalone example of the
same wiring is GIE's `test/testdata/envoy.yaml` (kubernetes-sigs/gateway-api-inference-
extension v1.0.0), which the picker's defaults follow.

Chain of one inference request: listener → HCM filters, in Envoy Gateway's order
(`httpfilters.go` newOrderedHTTPFilter: ext_proc 100+i, custom_response 306, router
309), with AI Gateway's per-pool picker filters inserted just before the router
(`post_translate_modify.go` patchListenerWithInferencePoolFilters):

    body-based router ext_proc → custom_response → picker ext_proc (one per pool) → router

then the route of the pool the model header names → that pool's ORIGINAL_DST cluster,
which connects to the `x-gateway-destination-endpoint` the picker set. `GET /status` (the
heartbeat `igw global` polls) takes its own route, every picker filter off, to the
picker's metrics port.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from inference_gateway.envoyproxy.settings import (
    Address,
    CircuitBreaker,
    GatewaySettings,
    PoolRoute,
    ResponseOverride,
    StatusRoute,
    Tracing,
)

__all__ = [
    "ACCESS_LOG_FIELDS",
    "DESTINATION_HEADER",
    "MODEL_HEADER",
    "TRACING_CLUSTER",
    "bbr_cluster_name",
    "bbr_filter_name",
    "custom_response_filter_name",
    "picker_cluster_name",
    "picker_filter_name",
    "render",
    "render_round_robin",
    "route_cluster_name",
]

DESTINATION_HEADER = "x-gateway-destination-endpoint"
MODEL_HEADER = "X-Gateway-Model-Name"
_T = "type.googleapis.com/"
EXT_PROC = _T + "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
EXT_PROC_PER_ROUTE = _T + "envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute"
FILTER_CONFIG = _T + "envoy.config.route.v3.FilterConfig"
HTTP_OPTIONS_KEY = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
#: Envoy's default per-connection buffer, which Envoy Gateway sets on every listener
#: (gateway v1.5.0 `internal/xds/translator/listener.go`: tcpListenerPerConnectionBufferLimit)
BUFFER_LIMIT = 32768
#: gateway v1.5.0 `internal/gatewayapi/listener.go` processTracing: `destName := "tracing"`
TRACING_CLUSTER = "tracing"


def picker_cluster_name(pool: str, namespace: str) -> str:
    """ai-gateway v0.4.0 `inferencepool.go` clusterNameForInferencePool."""
    return f"envoy.clusters.endpointpicker_{pool}_{namespace}_ext_proc"


def picker_filter_name(pool: str, namespace: str) -> str:
    """ai-gateway v0.4.0 `inferencepool.go` httpFilterNameForInferencePool."""
    return f"envoy.filters.http.ext_proc/endpointpicker/{pool}_{namespace}_ext_proc"


def bbr_filter_name(namespace: str, policy: str) -> str:
    """gateway v1.5.0: `perRouteFilterName(ext_proc, irConfigNameForExtProc(policy, 0))`
    (`internal/xds/translator/extproc.go`, `internal/gatewayapi/envoyextensionpolicy.go`)."""
    return f"envoy.filters.http.ext_proc/envoyextensionpolicy/{namespace}/{policy}/extproc/0"


def bbr_cluster_name(namespace: str, policy: str) -> str:
    """The ext_proc backend's cluster, named after the policy's ext_proc config."""
    return f"envoyextensionpolicy/{namespace}/{policy}/extproc/0"


def custom_response_filter_name(namespace: str, policy: str) -> str:
    """gateway v1.5.0 `custom_response.go` customResponseFilterName (per-route name)."""
    return f"envoy.filters.http.custom_response/backendtrafficpolicy/{namespace}/{policy}"


def route_cluster_name(namespace: str, route: str) -> str:
    """gateway v1.5.0: one cluster per HTTPRoute rule, `httproute/<ns>/<name>/rule/<i>`."""
    return f"httproute/{namespace}/{route}/rule/0"


def render(settings: GatewaySettings) -> dict[str, Any]:
    """The bootstrap (a dict; `json.dumps` it for `envoy -c`)."""
    return {
        "admin": {"address": _socket(settings.admin_address, settings.admin_port)},
        "static_resources": {
            "listeners": [_listener(settings)],
            "clusters": _clusters(settings),
        },
        "layered_runtime": {
            "layers": [{"name": "static", "static_layer": _runtime(settings)}],
        },
    }


def render_round_robin(settings: GatewaySettings, pods: list[Address]) -> dict[str, Any]:
    """A cluster without the inference extension: the same listener and routes, no
    ext_proc, each route's cluster the pods themselves, round robin. (Envoy Gateway's own
    default for a Service backend is least request; `demo.envoy.least_request_bootstrap`
    derives that one from this.) For benchmarks and the demo's comparison."""
    plain = replace(settings, bbr=None, response_override=None, status=None)
    bootstrap = render(plain)
    hcm = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    config = hcm["typed_config"]
    config["http_filters"] = [f for f in config["http_filters"] if "ext_proc" not in f["name"]]
    for route in config["route_config"]["virtual_hosts"][0]["routes"]:
        route["typed_per_filter_config"] = {}
    clusters = []
    for cluster in bootstrap["static_resources"]["clusters"]:
        if cluster["type"] != "ORIGINAL_DST":
            continue  # the pickers' clusters
        clusters.append(
            {
                "name": cluster["name"],
                "type": "STATIC",
                "lb_policy": "ROUND_ROBIN",
                "connect_timeout": cluster["connect_timeout"],
                "circuit_breakers": cluster["circuit_breakers"],
                "load_assignment": {
                    "cluster_name": cluster["name"],
                    "endpoints": [
                        {
                            "lb_endpoints": [
                                {"endpoint": {"address": _socket(p.host, p.port)}} for p in pods
                            ]
                        }
                    ],
                },
            }
        )
    bootstrap["static_resources"]["clusters"] = clusters
    bootstrap["layered_runtime"]["layers"][0]["static_layer"] = {}
    return bootstrap


def _socket(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


# --- listener and filters --------------------------------------------------------------


def _listener(s: GatewaySettings) -> dict[str, Any]:
    chain: dict[str, Any] = {
        "filters": [
            {
                "name": "envoy.filters.network.http_connection_manager",
                "typed_config": _hcm(s),
            }
        ]
    }
    if s.listener_tls is not None:
        cert, key = s.listener_tls
        chain["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": _T + "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
                "common_tls_context": {
                    "tls_certificates": [
                        {"certificate_chain": {"filename": cert}, "private_key": {"filename": key}}
                    ],
                    "alpn_protocols": ["h2", "http/1.1"],
                },
            },
        }
    return {
        # gateway v1.5.0 listener.go: named `<namespace>/<gateway>/<listener>`
        "name": f"{s.namespace}/{s.gateway}/{s.listener}",
        "address": _socket(s.listener_address, s.listener_port),
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT,
        "filter_chains": [chain],
    }


def _hcm(s: GatewaySettings) -> dict[str, Any]:
    filters: list[dict[str, Any]] = []
    if s.bbr is not None:
        filters.append(_bbr_filter(s))
    if s.response_override is not None:
        filters.append(_custom_response_filter(s, s.response_override))
    # ai-gateway v0.4.0 post_translate_modify.go: the pool filters go just before the
    # router, one per distinct pool (searchInferencePoolInFilterChain de-duplicates).
    pools = {r.pool: r for r in s.routes}
    filters += [_picker_filter(route) for route in pools.values()]
    filters.append(
        {
            "name": "envoy.filters.http.router",
            "typed_config": {"@type": _T + "envoy.extensions.filters.http.router.v3.Router"},
        }
    )
    hcm: dict[str, Any] = {
        "@type": _T
        + "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": f"{s.namespace}/{s.gateway}/{s.listener}",
        "route_config": _route_config(s),
        "http_filters": filters,
        # gateway v1.5.0 listener.go buildXdsTCPListener/addHCMToXDSListener defaults
        "use_remote_address": True,
        "normalize_path": True,
        "merge_slashes": True,
        "path_with_escaped_slashes_action": "UNESCAPE_AND_REDIRECT",
        "common_http_protocol_options": {"headers_with_underscores_action": "REJECT_REQUEST"},
        "http2_protocol_options": {
            "max_concurrent_streams": 100,
            "initial_stream_window_size": 65536,
            "initial_connection_window_size": 1048576,
        },
    }
    if s.access_log is not None:
        hcm["access_log"] = [_access_log(s.access_log)]
    if s.tracing is not None:
        hcm["tracing"] = _tracing(s, s.tracing)
    return hcm


def _tracing(s: GatewaySettings, tracing: Tracing) -> dict[str, Any]:
    """gateway v1.5.0 `internal/xds/translator/tracing.go` buildHCMTracing with the
    OpenTelemetry provider: client and overall sampling 100 %, random sampling the
    EnvoyProxy's rate, the service name `<gateway>.<namespace>` (`naming.ServiceName`)
    unless the provider names one, the custom tags sorted by name, and an upstream span
    per request to the pod (`spawn_upstream_span`)."""
    return {
        "client_sampling": {"value": 100.0},
        "overall_sampling": {"value": 100.0},
        "random_sampling": {"value": tracing.sampling_percent},
        "provider": {
            "name": "envoy.tracers.opentelemetry",
            "typed_config": {
                "@type": _T + "envoy.config.trace.v3.OpenTelemetryConfig",
                "grpc_service": {
                    "envoy_grpc": {
                        "cluster_name": TRACING_CLUSTER,
                        "authority": tracing.collector.host,
                    }
                },
                "service_name": tracing.service_name or f"{s.gateway}.{s.namespace}",
            },
        },
        "custom_tags": [
            {"tag": tag, "literal": {"value": value}} for tag, value in sorted(tracing.literal_tags)
        ],
        "spawn_upstream_span": True,
    }


#: Which pod served, as the picker named it and as Envoy connected, and Envoy's verdict.
ACCESS_LOG_FIELDS = {
    "code": "%RESPONSE_CODE%",
    "flags": "%RESPONSE_FLAGS%",
    "details": "%RESPONSE_CODE_DETAILS%",
    "model": "%REQ(X-GATEWAY-MODEL-NAME)%",
    "destination": "%REQ(X-GATEWAY-DESTINATION-ENDPOINT)%",
    "upstream": "%UPSTREAM_HOST%",
    "route": "%ROUTE_NAME%",
    "duration_ms": "%DURATION%",
}


def _access_log(path: str) -> dict[str, Any]:
    return {
        "name": "envoy.access_loggers.file",
        "typed_config": {
            "@type": _T + "envoy.extensions.access_loggers.file.v3.FileAccessLog",
            "path": path,
            "log_format": {"json_format": ACCESS_LOG_FIELDS},
        },
    }


def _bbr_filter(s: GatewaySettings) -> dict[str, Any]:
    """The EnvoyExtensionPolicy's ext_proc (gateway v1.5.0 `extproc.go`)."""
    assert s.bbr is not None
    mode = _BODY_MODES[s.bbr_request_body_mode]
    processing: dict[str, str] = {
        # buildProcessingMode: everything SKIP/NONE, then what the policy asks for; a
        # request body mode turns request headers on, FULL_DUPLEX_STREAMED the trailers.
        "request_header_mode": "SEND",
        "response_header_mode": "SKIP",
        "request_body_mode": mode,
        "response_body_mode": "NONE",
        "request_trailer_mode": "SEND" if mode == "FULL_DUPLEX_STREAMED" else "SKIP",
        "response_trailer_mode": "SKIP",
    }
    return {
        "name": bbr_filter_name(s.namespace, s.bbr_policy),
        # buildHCMExtProcFilter: aggregated on the HCM disabled, enabled per route
        "disabled": True,
        "typed_config": {
            "@type": EXT_PROC,
            "grpc_service": {
                "envoy_grpc": {
                    "cluster_name": bbr_cluster_name(s.namespace, s.bbr_policy),
                    "authority": f"{s.bbr.host}:{s.bbr.port}",
                },
                "timeout": "10s",  # utils.go defaultExtServiceRequestTimeout
            },
            "processing_mode": processing,
            "failure_mode_allow": False,  # the policy's failOpen: false
            "message_timeout": _duration(s.bbr_message_timeout_s),
        },
    }


_BODY_MODES = {
    # gateway v1.5.0 extproc.go translateExtProcBodyProcessingMode
    "Buffered": "BUFFERED",
    "BufferedPartial": "BUFFERED_PARTIAL",
    "Streamed": "STREAMED",
    "FullDuplexStreamed": "FULL_DUPLEX_STREAMED",
}


def _picker_filter(route: PoolRoute) -> dict[str, Any]:
    """ai-gateway v0.4.0 `inferencepool.go` buildHTTPFilterForInferencePool."""
    mode = "BUFFERED" if route.body_mode == "buffered" else "FULL_DUPLEX_STREAMED"
    return {
        "name": picker_filter_name(route.pool, route.namespace),
        "typed_config": {
            "@type": EXT_PROC,
            "grpc_service": {
                "envoy_grpc": {
                    "cluster_name": picker_cluster_name(route.pool, route.namespace),
                    # authorityForInferencePool: `<svc>.<ns>.svc:<port>`
                    "authority": _authority(route.picker, route.namespace),
                },
            },
            "processing_mode": {
                "request_header_mode": "SEND",
                "request_body_mode": mode,
                "request_trailer_mode": "SEND",
                "response_header_mode": "SEND",
                "response_body_mode": mode,
                "response_trailer_mode": "SEND",
            },
            "allow_mode_override": False,  # annotation absent
            "message_timeout": "300s",
            "failure_mode_allow": False,
        },
    }


def _authority(picker: Address, namespace: str) -> str:
    if _is_ip(picker.host):  # loopback: no Service name to give
        return f"{picker.host}:{picker.port}"
    return f"{picker.host}.{namespace}.svc:{picker.port}"


def _custom_response_filter(s: GatewaySettings, override: ResponseOverride) -> dict[str, Any]:
    """gateway v1.5.0 `custom_response.go`: a matcher on the response status, a
    LocalResponsePolicy action with the body and `Content-Type`; disabled on the HCM,
    enabled on the routes the BackendTrafficPolicy targets."""
    rule = f"backendtrafficpolicy/{s.namespace}/{s.traffic_policy}/responseoverride/rule/0"
    status_input = {
        "name": "http-response-status-code-match-input",
        "typed_config": {
            "@type": _T + "envoy.type.matcher.v3.HttpResponseStatusCodeMatchInput",
        },
    }
    predicates = [
        {"single_predicate": {"input": status_input, "value_match": {"exact": str(code)}}}
        for code in override.status_codes
    ]
    predicate = predicates[0] if len(predicates) == 1 else {"or_matcher": {"predicate": predicates}}
    action = {
        "name": rule,
        "typed_config": {
            "@type": _T
            + "envoy.extensions.http.custom_response.local_response_policy.v3.LocalResponsePolicy",
            "body_format": {"text_format": override.body},
            "response_headers_to_add": [
                {
                    "header": {"key": "Content-Type", "value": override.content_type},
                    "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
                }
            ],
        },
    }
    return {
        "name": custom_response_filter_name(s.namespace, s.traffic_policy),
        "disabled": True,
        "typed_config": {
            "@type": _T + "envoy.extensions.filters.http.custom_response.v3.CustomResponse",
            "custom_response_matcher": {
                "matcher_list": {
                    "matchers": [{"predicate": predicate, "on_match": {"action": action}}]
                }
            },
        },
    }


# --- routes ------------------------------------------------------------------------------


def _route_config(s: GatewaySettings) -> dict[str, Any]:
    routes: list[dict[str, Any]] = []
    for route in s.routes:
        routes += _routes(s, route)
    if s.status is not None:
        routes.append(_status_route(s, s.status))
    # Envoy Gateway sorts a listener's routes (one per match) most specific first: an
    # exact path before a prefix, header matches before the `/v1` catch-all, even when
    # both are matches of one rule (gateway v1.5.0 `internal/xds/translator`
    # sortXdsIRRoutes, Gateway API's match precedence).
    routes.sort(key=lambda r: ("path" not in r["match"], not r["match"].get("headers")))
    name = f"{s.namespace}/{s.gateway}/{s.listener}"
    return {
        "name": name,
        "virtual_hosts": [{"name": f"{name}/*", "domains": ["*"], "routes": routes}],
    }


def _routes(s: GatewaySettings, route: PoolRoute) -> list[dict[str, Any]]:
    per_filter: dict[str, Any] = {}
    enabled = {"@type": FILTER_CONFIG, "config": {}}  # utils.go enableFilterOnRoute
    if s.bbr is not None:
        per_filter[bbr_filter_name(s.namespace, s.bbr_policy)] = enabled
    if s.response_override is not None:
        per_filter[custom_response_filter_name(s.namespace, s.traffic_policy)] = enabled
    # post_translate_modify.go patchVirtualHostWithInferencePool: every other pool's
    # picker filter is disabled on this route
    for other in s.pools():
        if other != route.pool:
            per_filter[picker_filter_name(other, route.namespace)] = {
                "@type": EXT_PROC_PER_ROUTE,
                "disabled": True,
            }
    action = {
        "cluster": route_cluster_name(s.namespace, route.route),
        "timeout": _duration(route.timeout_s),
        # route.go idleTimeout: one hour, or the request timeout when that is longer
        "idle_timeout": _duration(max(3600.0, route.timeout_s)),
    }
    matches = [
        {
            "prefix": "/v1",
            "headers": [{"name": MODEL_HEADER, "string_match": {"exact": model}}],
        }
        for model in route.models
    ]
    if route.catch_all or not matches:
        matches.append({"prefix": "/v1"})
    return [
        {
            "name": f"httproute/{s.namespace}/{route.route}/rule/0/match/{i}/*",
            "match": match,
            "route": action,
            "typed_per_filter_config": per_filter,
        }
        for i, match in enumerate(matches)
    ]


def _status_route(s: GatewaySettings, status: StatusRoute) -> dict[str, Any]:
    """The heartbeat's HTTPRoute: an exact path and a method (Envoy Gateway matches an
    HTTPRoute `method` as the `:method` header), to its Service's cluster."""
    enabled = {"@type": FILTER_CONFIG, "config": {}}
    per_filter: dict[str, Any] = {}
    if s.bbr is not None:  # the EnvoyExtensionPolicy targets the Gateway: every route
        per_filter[bbr_filter_name(s.namespace, s.bbr_policy)] = enabled
    # post_translate_modify.go patchVirtualHostWithInferencePool: a route whose backend is
    # no pool has every pool's picker filter disabled. The BackendTrafficPolicy (the
    # custom response) targets the pools' routes only, so it stays off here.
    namespaces = {r.pool: r.namespace for r in s.routes}
    for pool, namespace in namespaces.items():
        per_filter[picker_filter_name(pool, namespace)] = {
            "@type": EXT_PROC_PER_ROUTE,
            "disabled": True,
        }
    return {
        "name": f"httproute/{s.namespace}/{status.route}/rule/0/match/0/*",
        "match": {
            "path": status.path,
            "headers": [{"name": ":method", "string_match": {"exact": status.method}}],
        },
        "route": {
            "cluster": route_cluster_name(s.namespace, status.route),
            "timeout": _duration(status.timeout_s),
            "idle_timeout": _duration(max(3600.0, status.timeout_s)),
        },
        "typed_per_filter_config": per_filter,
    }


# --- clusters ----------------------------------------------------------------------------


def _clusters(s: GatewaySettings) -> list[dict[str, Any]]:
    clusters = [_route_cluster(s, route) for route in s.routes]
    seen: set[str] = set()
    for route in s.routes:
        name = picker_cluster_name(route.pool, route.namespace)
        if name not in seen:  # a static bootstrap takes each name once
            seen.add(name)
            clusters.append(_picker_cluster(s, route))
    if s.bbr is not None:
        clusters.append(_bbr_cluster(s, s.bbr))
    if s.status is not None:
        clusters.append(_status_cluster(s, s.status))
    if s.tracing is not None:
        clusters.append(_tracing_cluster(s.tracing.collector))
    return clusters


def _route_cluster(s: GatewaySettings, route: PoolRoute) -> dict[str, Any]:
    """ai-gateway v0.4.0 `post_cluster_modify.go` handleInferencePoolCluster over the
    cluster Envoy Gateway built for the rule (thresholds from the BackendTrafficPolicy,
    gateway v1.5.0 `cluster.go` buildXdsClusterCircuitBreaker)."""
    return {
        "name": route_cluster_name(s.namespace, route.route),
        "type": "ORIGINAL_DST",
        "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": "10s",
        "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
        "circuit_breakers": {"thresholds": [_thresholds(s.circuit_breaker)]},
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT,
    }


def _thresholds(cb: CircuitBreaker) -> dict[str, Any]:
    return {
        "priority": "DEFAULT",
        "max_connections": cb.max_connections,
        "max_pending_requests": cb.max_pending_requests,
        "max_requests": cb.max_parallel_requests,
        "max_retries": cb.max_parallel_retries,
    }


def _http2_options() -> dict[str, Any]:
    return {
        HTTP_OPTIONS_KEY: {
            "@type": _T + HTTP_OPTIONS_KEY,
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }


def _picker_cluster(s: GatewaySettings, route: PoolRoute) -> dict[str, Any]:
    """ai-gateway v0.4.0 `inferencepool.go` buildExtProcClusterForInferencePoolEndpointPicker:
    STRICT_DNS, LEAST_REQUEST, 10 s connect, TLS that accepts any certificate (an empty
    validation context), HTTP/2. No thresholds: the EnvoyProxy's runtime keys set them."""
    name = picker_cluster_name(route.pool, route.namespace)
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC" if _is_ip(route.picker.host) else "STRICT_DNS",
        "lb_policy": "LEAST_REQUEST",
        "connect_timeout": "10s",
        "load_assignment": _assignment(name, route.picker),
        "typed_extension_protocol_options": _http2_options(),
    }
    if s.picker_tls:
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": _T + "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "common_tls_context": {"validation_context": {}},
            },
        }
    return cluster


def _bbr_cluster(s: GatewaySettings, bbr: Address) -> dict[str, Any]:
    """Envoy Gateway's cluster for an ext_proc backendRef: gRPC, so HTTP/2, with the
    policy's `backendSettings.circuitBreaker` (gateway v1.5.0 `extproc.go`, `cluster.go`)."""
    name = bbr_cluster_name(s.namespace, s.bbr_policy)
    return {
        "name": name,
        "type": "STATIC" if _is_ip(bbr.host) else "STRICT_DNS",
        "lb_policy": "LEAST_REQUEST",
        "connect_timeout": "10s",
        "load_assignment": _assignment(name, bbr),
        "typed_extension_protocol_options": _http2_options(),
        "circuit_breakers": {"thresholds": [_thresholds(s.circuit_breaker)]},
    }


def _status_cluster(s: GatewaySettings, status: StatusRoute) -> dict[str, Any]:
    """Envoy Gateway's cluster for the heartbeat route's Service backend (gateway v1.5.0
    `cluster.go`: least request, 10 s connect, HTTP/1.1 as the Service's port has no
    `appProtocol`), no thresholds (no BackendTrafficPolicy targets the route)."""
    name = route_cluster_name(s.namespace, status.route)
    return {
        "name": name,
        "type": "STATIC" if _is_ip(status.backend.host) else "STRICT_DNS",
        "lb_policy": "LEAST_REQUEST",
        "connect_timeout": "10s",
        "load_assignment": _assignment(name, status.backend),
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT,
    }


def _tracing_cluster(collector: Address) -> dict[str, Any]:
    """gateway v1.5.0 `tracing.go` processClusterForTracing: the collector's cluster,
    gRPC (`destinationSettingFromHostAndPort` sets protocol GRPC), so HTTP/2."""
    return {
        "name": TRACING_CLUSTER,
        "type": "STATIC" if _is_ip(collector.host) else "STRICT_DNS",
        "lb_policy": "LEAST_REQUEST",
        "connect_timeout": "10s",
        "load_assignment": _assignment(TRACING_CLUSTER, collector),
        "typed_extension_protocol_options": _http2_options(),
    }


def _assignment(name: str, address: Address) -> dict[str, Any]:
    return {
        "cluster_name": name,
        "endpoints": [
            {"lb_endpoints": [{"endpoint": {"address": _socket(address.host, address.port)}}]}
        ],
    }


def _runtime(s: GatewaySettings) -> dict[str, Any]:
    """The picker clusters' thresholds as runtime keys (`circuit_breakers.<cluster>.
    <priority>.<limit>`), which the chart patches into the EnvoyProxy bootstrap."""
    out: dict[str, Any] = {}
    for pool in s.pools():
        namespace = next(r.namespace for r in s.routes if r.pool == pool)
        cluster = picker_cluster_name(pool, namespace)
        for priority in ("default", "high"):
            for key in ("max_connections", "max_pending_requests", "max_requests"):
                out[f"circuit_breakers.{cluster}.{priority}.{key}"] = s.picker_circuit_breaker
            out[f"circuit_breakers.{cluster}.{priority}.max_retries"] = 16
    return out


def _duration(seconds: float) -> str:
    return f"{seconds:g}s"


def _is_ip(host: str) -> bool:
    parts = host.split(".")
    return host == "::1" or (len(parts) == 4 and all(p.isdigit() for p in parts))
