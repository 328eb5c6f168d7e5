"""Who may call: `igw auth`, the ext_authz service of the inference routes' SecurityPolicy.

A SecurityPolicy on every inference route whose one check is ext_authz to `igw auth`, so
no request reaches the picker, let alone a pod, without a known credential, and API keys
and JWTs are accepted together.

Why not `apiKeyAuth` + `jwt`: Envoy Gateway v1.5 orders api_key_auth before jwt_authn
(`internal/xds/translator/httpfilters.go`), and Envoy's api_key_auth answers 401 to any
bearer it does not know, a JWT included, so no JWT client could pass
(tests/e2e/test_auth_through_envoy.py shows it with Envoy's own filters). `igw auth`
makes the checks `igw serve` makes (key digests from the mounted key file, JWTs against
the issuer's JWKS URL, per-credential models from the body) and hands the client id to
the picker in the headers `headersToBackend` lists, which override any a client sent.
The key file (digests only) is a Secrets Manager secret that External Secrets keeps in
sync.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from constructs import Construct

from envspec.environment import EnvironmentSpec
from envspec.workloads import AuthSpec
from inference_gateway.frontends.authz import AUTHZ_PATH_PREFIX, UPSTREAM_HEADERS

from . import peers
from .base import GATEWAY, Wave, gateway_image, labels, manifest
from .component import GatewayComponent, Pod, Rollout, gateway_service_pod
from .kube import k8s
from .tracing import otel_env
from .workloads import CPU_LIMIT_SKIP, DIGEST_SKIP, service_port

__all__ = [
    "API_KEYS_SECRET",
    "AUTH",
    "AUTH_HEADERS_TO_BACKEND",
    "AUTH_PATH",
    "AUTH_PORT",
    "Authentication",
    "auth_labels",
]

#: `igw auth`, the ext_authz service of the SecurityPolicy
AUTH = f"{GATEWAY}-auth"
AUTH_PORT = 9010
AUTH_PATH = AUTHZ_PATH_PREFIX
AUTH_HEADERS_TO_BACKEND = UPSTREAM_HEADERS
API_KEYS_SECRET = f"{GATEWAY}-api-keys"
AUTH_KEYS_FILE = "keys.yaml"
ENVOY_GATEWAY_API = "gateway.envoyproxy.io/v1alpha1"


def auth_labels() -> dict[str, str]:
    return labels(name=AUTH, component="auth")


class Authentication(Construct):
    """The key file's ExternalSecret, the `igw auth` component and the SecurityPolicy on
    the inference `routes`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: EnvironmentSpec,
        auth: AuthSpec,
        routes: Sequence[str],
    ) -> None:
        super().__init__(scope, construct_id)
        namespace = env.kubernetes.namespace
        config_labels = labels(name=GATEWAY, component="gateway")
        if auth.api_keys_secret_id is not None:
            # The key file `igw auth` mounts: External Secrets keeps it in sync with the
            # Secrets Manager secret (digests only).
            manifest(
                self,
                "api-keys",
                api_version="external-secrets.io/v1",
                kind="ExternalSecret",
                name=API_KEYS_SECRET,
                namespace=namespace,
                labels=config_labels,
                wave=Wave.CONFIG,
                body={"spec": _api_keys_spec(auth.api_keys_secret_id)},
            )
        # In the config wave, with the ExternalSecret that makes the key file: a pod whose
        # Secret volume does not exist yet never starts, so in the controllers wave its
        # Deployment would pass its progress deadline and fail the first sync
        # (tests/gitops/test_gitops_first_sync.py plays it).
        GatewayComponent(
            self,
            "component",
            name=AUTH,
            namespace=namespace,
            labels=auth_labels(),
            wave=Wave.CONFIG,
            pod=_pod(env, auth),
            rollout=Rollout(replicas=2),
            service_ports=[service_port("http", AUTH_PORT)],
            min_available=1,
            ingress=[peers.allow([peers.envoy(env)], AUTH_PORT)],
            checkov_skips={**CPU_LIMIT_SKIP, **DIGEST_SKIP},
        )
        manifest(
            self,
            "security-policy",
            api_version=ENVOY_GATEWAY_API,
            kind="SecurityPolicy",
            name=AUTH,
            namespace=namespace,
            labels=config_labels,
            wave=Wave.CONFIG,
            body={"spec": _security_policy_spec(env, routes)},
        )


def _api_keys_spec(secret_id: str) -> dict[str, Any]:
    return {
        "refreshInterval": "5m",
        "secretStoreRef": {"kind": "ClusterSecretStore", "name": "aws-secrets-manager"},
        "target": {"name": API_KEYS_SECRET, "creationPolicy": "Owner"},
        # The secret's value is igw's key file (`keys: [{client, sha256, models?}]`).
        "data": [{"secretKey": AUTH_KEYS_FILE, "remoteRef": {"key": secret_id}}],
    }


def _security_policy_spec(env: EnvironmentSpec, routes: Sequence[str]) -> dict[str, Any]:
    return {
        # The inference routes, not the Gateway: the heartbeat route (`/status`, read
        # by `igw global` of every region) carries no credential, and a policy on
        # the Gateway would cover every route attached to it.
        "targetRefs": [
            {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": n} for n in routes
        ],
        "extAuth": {
            "http": {
                "backendRefs": [{"group": "", "kind": "Service", "name": AUTH, "port": AUTH_PORT}],
                "path": AUTH_PATH,
                "headersToBackend": list(AUTH_HEADERS_TO_BACKEND),
            },
            # The model check reads the body (a credential may be limited to models);
            # the picker's own body limit, so no request the picker takes is refused here.
            "bodyToExtAuth": {"maxRequestBytes": env.kubernetes.max_request_body_bytes},
            "failOpen": False,
        },
    }


def _pod(env: EnvironmentSpec, auth: AuthSpec) -> Pod:
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
    key_file = k8s.Volume(name="keys", secret=k8s.SecretVolumeSource(secret_name=API_KEYS_SECRET))
    return gateway_service_pod(
        image=gateway_image(env),
        container="auth",
        args=args,
        port=("http", AUTH_PORT),
        check=k8s.HttpGetAction(path="/healthz", port=k8s.IntOrString.from_string("http")),
        volume=("/etc/igw-auth", key_file) if keys else None,
        env=otel_env(env, "igw-auth"),
    )
