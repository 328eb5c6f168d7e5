"""The few facts of a gateway that decide Envoy's config, as plain frozen data.

The charts (`charts.envoy_settings`) fill these from an environment spec, tests and the
demo fill them for loopback; `bootstrap.render` turns them into Envoy's bootstrap. Each
field names the GitOps object it mirrors, so a test can hold the two side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_OVERRIDE_BODY",
    "Address",
    "CircuitBreaker",
    "GatewaySettings",
    "PoolRoute",
    "ResponseOverride",
    "StatusRoute",
    "Tracing",
]


@dataclass(frozen=True)
class Address:
    """A host and port Envoy connects to (a Service DNS name in the cluster)."""

    host: str
    port: int


@dataclass(frozen=True)
class CircuitBreaker:
    """Envoy Gateway's `CircuitBreaker` (BackendTrafficPolicy, backendSettings)."""

    max_connections: int = 1024
    max_pending_requests: int = 1024
    max_parallel_requests: int = 1024
    max_parallel_retries: int = 16


@dataclass(frozen=True)
class PoolRoute:
    """One HTTPRoute whose backend is an InferencePool, and that pool's picker.

    `models`: the `X-Gateway-Model-Name` values the route matches (empty: the catch-all
    route, matching `/v1` alone). `catch_all`: the route's rule also matches `/v1` alone
    (the charts put the catch-all in the first pool's rule, so no pool backs two rules).
    `picker`: the pool's `endpointPickerRef` Service and port. `namespace`: the pool's,
    which names the picker's cluster and filter.
    """

    route: str
    pool: str
    picker: Address
    models: tuple[str, ...] = ()
    namespace: str = "default"
    timeout_s: float = 600.0
    #: `aigateway.envoyproxy.io/processing-body-mode`: "duplex" (default) or "buffered"
    body_mode: str = "duplex"
    catch_all: bool = False


@dataclass(frozen=True)
class StatusRoute:
    """The HTTPRoute `igw-status-route`: `GET /status` (that exact path and method, nothing
    else of the port) to a Service that is not a pool, the picker's metrics port, where it
    answers the cluster's heartbeat for `igw global` (docs/global-router.md, "The
    heartbeat"). No policy but the body-based router's targets it (the inference routes'
    BackendTrafficPolicy and SecurityPolicy name their routes)."""

    backend: Address
    route: str = "igw-status-route"
    path: str = "/status"
    method: str = "GET"
    timeout_s: float = 5.0


#: OpenAI's error shape (`{"error": {message, type, param, code}}`) for a 500 that Envoy
#: answers itself, the picker's ext_proc stream having failed closed.
DEFAULT_OVERRIDE_BODY = (
    '{"error":{"message":"The gateway could not route this request: the endpoint picker '
    'is unavailable or failed. Retry shortly.","type":"server_error","param":null,'
    '"code":"endpoint_picker_unavailable"}}'
)


@dataclass(frozen=True)
class ResponseOverride:
    """BackendTrafficPolicy `responseOverride`: a status matched, a body answered."""

    status_codes: tuple[int, ...] = (500,)
    body: str = DEFAULT_OVERRIDE_BODY
    content_type: str = "application/json"


@dataclass(frozen=True)
class Tracing:
    """EnvoyProxy `spec.telemetry.tracing` with the OpenTelemetry provider: where spans go
    (the collector's OTLP/gRPC Service), the share of new traces sampled (`samplingRate`,
    percent) and the `customTags`, here literal ones only."""

    collector: Address
    sampling_percent: float = 100.0
    service_name: str | None = None  # default: `<gateway>.<namespace>`, as Envoy Gateway
    literal_tags: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class GatewaySettings:
    """Everything `bootstrap.render` needs: the Gateway, its routes and policies.

    `listener_port` is Envoy's container port (Envoy Gateway maps a privileged Gateway
    port P to P + 10000); 0 binds any free port (tests). `bbr` is the body-based
    router's Service (None: no EnvoyExtensionPolicy, the picker alone).
    """

    routes: tuple[PoolRoute, ...]
    bbr: Address | None = None
    gateway: str = "igw"
    namespace: str = "default"
    listener: str = "https"
    listener_address: str = "0.0.0.0"
    listener_port: int = 10443
    #: EnvoyExtensionPolicy of the body-based router: name, `messageTimeout`, body mode
    bbr_policy: str = "igw-ext-proc"
    bbr_message_timeout_s: float = 5.0
    bbr_request_body_mode: str = "FullDuplexStreamed"
    #: BackendTrafficPolicy of the inference routes: name, circuit breaker, override
    traffic_policy: str = "igw-routes"
    circuit_breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    response_override: ResponseOverride | None = field(default_factory=ResponseOverride)
    #: the picker clusters' thresholds, as runtime keys in the EnvoyProxy bootstrap
    picker_circuit_breaker: int = 1024
    #: TLS to the pickers, as Envoy AI Gateway always builds it (no verification)
    picker_tls: bool = True
    admin_address: str = "127.0.0.1"
    admin_port: int = 0
    #: a certificate and key (PEM paths) for a TLS listener; None: plain HTTP (loopback)
    listener_tls: tuple[str, str] | None = None
    #: a file for one JSON line per request (Envoy Gateway logs the same fields to stdout)
    access_log: str | None = None
    #: EnvoyProxy telemetry.tracing (None: no tracing, Envoy Gateway's default)
    tracing: Tracing | None = None
    #: the heartbeat's HTTPRoute (the charts always have one; None: no `/status` route)
    status: StatusRoute | None = None

    def pools(self) -> list[str]:
        """The distinct pools, in route order (one picker filter each)."""
        seen: dict[str, None] = {}
        for route in self.routes:
            seen.setdefault(route.pool, None)
        return list(seen)
