"""The global router (`igw global`) of one region: tier 2, in front of every cluster.

Rendered once per region of an environment whose `global_router` is enabled, into
`gitops/environments/<env>/global/<region>/` (not `rendered/`, which every cluster of the
environment syncs): the region's own Valkey and its home region differ per region, and
only that region's cluster syncs the folder (the ArgoCD Application its GlobalTierStack
creates, stacks/global_tier.py).

Request path: client → `ingress.domain_name` (private DNS, latency-routed to a healthy
region, stacks/global_dns.py) → the region's global NLB (TLS) → these pods (bound to the
NLB's target group by its ARN, which the region's Application patches in) → a cluster gateway at `https://<region>.<domain>`.

Store wiring, with no secret in git: the CDK writes the region's Valkey auth token and
endpoint into two Secrets Manager secrets (same names in every region); a namespaced
SecretStore reads this region's Secrets Manager, and an ExternalSecret renders the
router's config file from the ConfigMap below (a template whose only variable is the
store URL) into a Secret, with the token beside it for `passwordEnv`, and the URL too: the
pickers of the region (same namespace, cdk8s/charts/picker.py) read both from that Secret
to share their dispatch view through the same store.

Rate limits across regions: every region's config also names the PRIMARY region's store
as `rateLimitStore`, from the secret the primary replicates to every region
(stacks/parts/valkey.py), so one budget holds fleet-wide (docs/global-router.md: one
inter-region round trip before a rate-limited request's first byte).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml
from constructs import Construct

from cdk8s import App, Chart, YamlOutputType
from envspec.argocd_manifests import PATCHED_KUSTOMIZATION
from envspec.environment import EnvironmentSpec
from envspec.global_router import (
    GLOBAL_ROUTER,
    STORE_AUTH_KEY,
    STORE_URL_KEY,
    global_folder,
    rate_limit_store_secret_name,
    resolved_clusters,
    store_secret_names,
)

from . import peers
from .base import Placement, Wave, gateway_image, labels, manifest
from .component import GatewayComponent, Pod, Rollout
from .kube import k8s
from .tracing import otel_env
from .workloads import (
    CPU_LIMIT_SKIP,
    DIGEST_SKIP,
    container_port,
    container_security_context,
    empty_dir,
    env_secret,
    mount,
    probe,
    resources,
    service_port,
)

__all__ = [
    "CONFIG_KEY",
    "GLOBAL_ROUTER",
    "PASSWORD_ENV",
    "RATE_LIMIT_PASSWORD_ENV",
    "STORE_SECRET",
    "GlobalRouterChart",
    "router_config",
    "synth_global_routers",
]

STORE_SECRET = "igw-global-store"
CHART_FILE = "70-global-router"
CONFIG_KEY = "config.yaml"
CONFIG_DIR = "/etc/igw-global"
PASSWORD_ENV = "IGW_STORE_PASSWORD"
RATE_LIMIT_PASSWORD_ENV = "IGW_RATELIMIT_STORE_PASSWORD"
#: The config's template variables: filled in by External Secrets (Go template).
URL_PLACEHOLDER = "{{ ." + STORE_URL_KEY + " }}"
#: Keys of the router's Secret holding the primary region's store (URL, token).
RATE_LIMIT_URL_KEY = "rateLimitUrl"
RATE_LIMIT_AUTH_KEY = "rateLimitPassword"
RATE_LIMIT_URL_PLACEHOLDER = "{{ ." + RATE_LIMIT_URL_KEY + " }}"
ESO_API = "external-secrets.io/v1"


def router_labels() -> dict[str, str]:
    return labels(name=GLOBAL_ROUTER, component="global-router")


def router_config(
    env: EnvironmentSpec, region: str, *, store_url: str, rate_limit_store_url: str
) -> dict[str, Any]:
    """The `igw global --config` document of `region` (docs/global-router.md)."""
    spec = env.global_router
    config: dict[str, Any] = {
        "homeRegion": region,
        "profile": spec.profile,
        "pollIntervalMs": spec.poll_interval_ms,
        "staleAfterMs": spec.stale_after_ms,
        "rampS": spec.ramp_s,
        "sheddableObjectives": list(spec.sheddable_objectives),
        "clusters": [
            {
                "name": c.name,
                "region": c.region,
                "endpoint": c.endpoint,
                "priority": c.priority,
                "hourlyCostUsd": c.hourly_cost_usd,
            }
            for c in resolved_clusters(env)
        ],
        # TLS (rediss) with the AUTH token; ElastiCache's certificate chains to Amazon's
        # public roots, which the image's CA bundle holds, so no caFile.
        "store": {"url": store_url, "passwordEnv": PASSWORD_ENV},
        "rateLimitStore": {"url": rate_limit_store_url, "passwordEnv": RATE_LIMIT_PASSWORD_ENV},
        # the entry point: it starts the traces (docs/tracing.md), as Envoy does in a cluster
        **(
            {
                "tracing": {
                    "enabled": True,
                    "samplingRatio": env.kubernetes.tracing.sampling_percent / 100,
                }
            }
            if env.kubernetes.tracing is not None
            else {}
        ),
    }
    return config


def config_template(env: EnvironmentSpec, region: str) -> str:
    config = router_config(
        env, region, store_url=URL_PLACEHOLDER, rate_limit_store_url=RATE_LIMIT_URL_PLACEHOLDER
    )
    return yaml.safe_dump(config, sort_keys=False)


def _store_secret_spec(env: EnvironmentSpec) -> dict[str, Any]:
    """The ExternalSecret: this region's store (URL, token), the primary's (for the rate
    limits), and the config file rendered from the ConfigMap with those URLs in it."""
    auth_secret, endpoint_secret = store_secret_names(env.name)
    remote = [
        (STORE_AUTH_KEY, auth_secret, STORE_AUTH_KEY),
        (STORE_URL_KEY, endpoint_secret, STORE_URL_KEY),
    ]
    # The token for passwordEnv; the URL for the pickers' IGW_STORE_URL (picker.py).
    plain = [STORE_AUTH_KEY, STORE_URL_KEY, RATE_LIMIT_AUTH_KEY]
    shared = rate_limit_store_secret_name(env.name)
    remote += [
        (RATE_LIMIT_AUTH_KEY, shared, STORE_AUTH_KEY),
        (RATE_LIMIT_URL_KEY, shared, STORE_URL_KEY),
    ]
    return {
        "refreshInterval": "1h",
        "secretStoreRef": {"kind": "SecretStore", "name": STORE_SECRET},
        "target": {
            "name": STORE_SECRET,
            "creationPolicy": "Owner",
            "template": {
                "engineVersion": "v2",
                "data": {key: "{{ ." + key + " }}" for key in plain},
                "templateFrom": [
                    {
                        "configMap": {
                            "name": GLOBAL_ROUTER,
                            "items": [{"key": CONFIG_KEY, "templateAs": "Values"}],
                        }
                    }
                ],
            },
        },
        "data": [
            {"secretKey": key, "remoteRef": {"key": name, "property": prop}}
            for key, name, prop in remote
        ],
    }


class GlobalRouterChart(Chart):
    """ConfigMap, SecretStore, ExternalSecret, TargetGroupBinding, and the router component
    (ServiceAccount, Deployment, Service, PDB, NetworkPolicy)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: EnvironmentSpec,
        region: str,
    ) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        if region not in env.aws.regions:
            raise ValueError(f"{region} is not a region of environment {env.name}")
        namespace = env.kubernetes.namespace
        meta = router_labels()
        template = config_template(env, region)
        config_sha = hashlib.sha256(template.encode()).hexdigest()[:16]
        config: Placement = {"namespace": namespace, "labels": meta, "wave": Wave.CONFIG}

        manifest(
            self,
            "config",
            api_version="v1",
            kind="ConfigMap",
            name=GLOBAL_ROUTER,
            **config,
            body={"data": {CONFIG_KEY: template}},
        )
        manifest(
            self,
            "secret-store",
            api_version=ESO_API,
            kind="SecretStore",
            name=STORE_SECRET,
            **config,
            body={"spec": {"provider": {"aws": {"service": "SecretsManager", "region": region}}}},
        )
        manifest(
            self,
            "store-secret",
            api_version=ESO_API,
            kind="ExternalSecret",
            name=STORE_SECRET,
            **config,
            body={"spec": _store_secret_spec(env)},
        )
        port = env.global_router.port
        GatewayComponent(
            self,
            "router",
            name=GLOBAL_ROUTER,
            namespace=namespace,
            labels=meta,
            wave=Wave.WORKLOADS,
            pod=Pod(
                containers=[_container(env, region=region)],
                volumes=[
                    k8s.Volume(
                        name="config",
                        secret=k8s.SecretVolumeSource(
                            secret_name=STORE_SECRET,
                            items=[k8s.KeyToPath(key=CONFIG_KEY, path=CONFIG_KEY)],
                        ),
                    ),
                    empty_dir("tmp", size="64Mi"),
                ],
                # Streams in flight finish (the NLB deregisters first, 120 s delay there).
                termination_grace_s=60,
                annotations={"igw.dev/config-sha256": config_sha},
            ),
            rollout=Rollout(replicas=env.global_router.replicas),
            service_ports=[service_port("http", port, protocol="TCP")],
            min_available=1,
            ingress=[_ingress(env, region)],
            checkov_skips={
                **CPU_LIMIT_SKIP,
                **DIGEST_SKIP,
                "CKV_K8S_35": "igw global reads the store password from an environment "
                "variable only (its config's passwordEnv); the value comes from the Secret",
            },
        )
        manifest(
            self,
            "target-group-binding",
            api_version="elbv2.k8s.aws/v1beta1",
            kind="TargetGroupBinding",
            name=GLOBAL_ROUTER,
            namespace=namespace,
            labels=meta,
            wave=Wave.WORKLOADS,
            body={
                # The target group by ARN, patched in by the region's Application
                # (envspec/argocd_manifests.py global_application): only the CDK knows it.
                "spec": {
                    "serviceRef": {"name": GLOBAL_ROUTER, "port": port},
                    "targetType": "ip",
                }
            },
        )


def _ingress(env: EnvironmentSpec, region: str) -> k8s.NetworkPolicyIngressRule:
    """The NLB's IP targets see the client's address (client IP preservation), so the
    clients' CIDRs and the VPC's (the NLB's own health checks) may reach the port;
    Prometheus scrapes /metrics on the same port."""
    cidrs = sorted({*env.ingress.allowed_cidrs, env.cluster.vpc_cidr_of(region)})
    sources = [k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=cidr)) for cidr in cidrs]
    return peers.allow([*sources, peers.prometheus(env)], env.global_router.port)


def _container(env: EnvironmentSpec, *, region: str) -> k8s.Container:
    spec = env.global_router
    passwords = [
        env_secret(PASSWORD_ENV, secret=STORE_SECRET, key=STORE_AUTH_KEY),
        env_secret(RATE_LIMIT_PASSWORD_ENV, secret=STORE_SECRET, key=RATE_LIMIT_AUTH_KEY),
    ]
    args = [
        "global",
        "--config",
        f"{CONFIG_DIR}/{CONFIG_KEY}",
        "--host",
        "0.0.0.0",
        "--port",
        str(spec.port),
        "--environment",
        env.name,
    ]
    if spec.emf_interval_s:
        args += ["--emf-interval", str(spec.emf_interval_s)]
    http = k8s.IntOrString.from_string("http")
    # /health is 503 while no cluster is routable: the pod leaves the Service and the NLB
    # target group, and DNS moves clients to another region. Liveness reads /metrics,
    # which answers while every cluster is drained, so a fleet outage never restarts the
    # routers.
    metrics = k8s.HttpGetAction(path="/metrics", port=http)
    health = k8s.HttpGetAction(path="/health", port=http)
    return k8s.Container(
        name="global-router",
        # This region's registry (ECR replication copies the release there).
        image=gateway_image(env, region=region),
        image_pull_policy="IfNotPresent",
        args=args,
        env=[*passwords, *otel_env(env, "igw-global")],
        ports=[container_port("http", spec.port, protocol="TCP")],
        startup_probe=probe(metrics, period_s=2, failure_threshold=30),
        readiness_probe=probe(health, period_s=5, failure_threshold=2),
        liveness_probe=probe(metrics, period_s=10, failure_threshold=3),
        resources=resources(
            requests={"cpu": "500m", "memory": "256Mi"}, limits={"memory": "512Mi"}
        ),
        security_context=container_security_context(),
        volume_mounts=[mount("config", CONFIG_DIR, read_only=True), mount("tmp", "/tmp")],
    )


def synth_global_routers(env: EnvironmentSpec, out_root: Path) -> list[Path]:
    """Render every region's folder of `env` under `out_root` (shaped like gitops/): the
    chart, and the Kustomization its Application's patch (the target group's ARN) needs."""
    if not env.global_router.enabled:
        return []
    folders = []
    for region in env.aws.regions:
        folder = out_root / global_folder(env.name, region)
        app = App(outdir=str(folder), yaml_output_type=YamlOutputType.FILE_PER_CHART)
        GlobalRouterChart(app, CHART_FILE, env=env, region=region)
        app.synth()
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [f"{CHART_FILE}.k8s.yaml"],
        }
        (folder / PATCHED_KUSTOMIZATION).write_text(yaml.safe_dump(kustomization, sort_keys=False))
        folders.append(folder)
    return folders
