"""Traces in the cluster (docs/tracing.md): Envoy's tracer, the gateway's exporters, and
the OpenTelemetry Collector that takes both.

* Envoy: EnvoyProxy `spec.telemetry.tracing` with the OpenTelemetry provider, the
  collector's Service as its `backendRefs` (envoyproxy/gateway v1.5.0 `api/v1alpha1/
  envoyproxy_tracing_types.go`; `internal/gatewayapi/listener.go` processTracing turns a
  Service backendRef into the `tracing` cluster, gRPC because the chart's `otlp` port
  says `appProtocol: grpc`, `route.go` processServiceDestinationSetting), sampling
  `samplingRate` percent of new requests; its spans and the trace context it sends the
  ext_proc servers (bbr, the picker) and the pod make one trace per request.
* The gateway's servers: the standard OTEL_* variables (`otel_env`) point their OTLP/gRPC
  exporters at the collector and name their resource (service, pod, namespace,
  environment); the picker and bbr trace per the config's `tracing` (parent-based, so
  Envoy's decision holds), `igw auth` with `--trace-sampling 0` (follows Envoy only).
* The collector: the upstream chart (open-telemetry/opentelemetry-helm-charts
  `opentelemetry-collector`, pinned) as an Argo CD ApplicationSet over the clusters of the
  traced environments, a Deployment of the contrib image (it holds the `awsxray`
  exporter) with an OTLP/gRPC receiver only, exporting to AWS X-Ray in the cluster's
  region (the region from the cluster Secret's label, as the Karpenter ApplicationSet
  names the cluster; the collector's Pod Identity may write trace segments,
  stacks/parts/pod_identity.py) or to the OTLP backend the environment names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from envspec.argocd_manifests import REGION_LABEL
from envspec.environment import EnvironmentSpec
from envspec.workloads import TracingEnvSpec

from .kube import k8s
from .workloads import env_field, env_value

__all__ = [
    "COLLECTOR",
    "COLLECTOR_CHART",
    "COLLECTOR_CHART_REPO",
    "COLLECTOR_PORT",
    "COLLECTOR_VERSION",
    "collector_applicationset",
    "envoy_tracing",
    "otel_env",
    "traced",
]

#: open-telemetry/opentelemetry-helm-charts, chart opentelemetry-collector 0.170.0
#: (appVersion 0.158.0): values.yaml read at that tag.
COLLECTOR_CHART_REPO = "https://open-telemetry.github.io/opentelemetry-helm-charts"
COLLECTOR_CHART = "opentelemetry-collector"
COLLECTOR_VERSION = "0.170.0"
#: `fullnameOverride`: the Service, Deployment and ServiceAccount names
COLLECTOR = "otel-collector"
COLLECTOR_PORT = 4317  # the chart's `otlp` port (appProtocol grpc)
#: What a trace backend indexes (X-Ray annotations): the gateway's routing attributes.
INDEXED = ["gen_ai.request.model", "igw.pool", "igw.band", "igw.endpoint", "igw.profile"]


def traced(envs: Sequence[EnvironmentSpec]) -> list[EnvironmentSpec]:
    return [e for e in envs if e.kubernetes.tracing is not None]


def collector_host(tracing: TracingEnvSpec) -> str:
    return f"{COLLECTOR}.{tracing.namespace}.svc.cluster.local"


def otel_env(env: EnvironmentSpec, service: str) -> list[k8s.EnvVar]:
    """A container's OTEL_* variables (none without tracing): the collector, plaintext
    inside the cluster, and the resource (`$(POD_NAME)` expands the earlier variables)."""
    tracing = env.kubernetes.tracing
    if tracing is None:
        return []
    return [
        env_field("OTEL_POD_NAME", "metadata.name"),
        env_field("OTEL_POD_NAMESPACE", "metadata.namespace"),
        env_value(
            "OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{collector_host(tracing)}:{COLLECTOR_PORT}"
        ),
        env_value("OTEL_EXPORTER_OTLP_INSECURE", "true"),
        env_value("OTEL_SERVICE_NAME", service),
        env_value(
            "OTEL_RESOURCE_ATTRIBUTES",
            "k8s.pod.name=$(OTEL_POD_NAME),k8s.namespace.name=$(OTEL_POD_NAMESPACE),"
            f"deployment.environment.name={env.name}",
        ),
    ]


def envoy_tracing(env: EnvironmentSpec) -> dict[str, Any] | None:
    """EnvoyProxy `spec.telemetry.tracing` (None without tracing)."""
    tracing = env.kubernetes.tracing
    if tracing is None:
        return None
    return {
        "samplingRate": tracing.sampling_percent,
        "provider": {
            "type": "OpenTelemetry",
            "backendRefs": [
                {"name": COLLECTOR, "namespace": tracing.namespace, "port": COLLECTOR_PORT}
            ],
        },
        "customTags": {
            "deployment.environment.name": {"type": "Literal", "literal": {"value": env.name}}
        },
    }


def collector_values(tracing: TracingEnvSpec) -> dict[str, Any]:
    """The chart's values: what differs from its defaults (values.yaml at 0.170.0)."""
    if tracing.exporter == "xray":
        exporter: dict[str, Any] = {"awsxray": {"indexed_attributes": INDEXED}}
    else:
        exporter = {"otlp": {"endpoint": tracing.otlp_endpoint}}
    return {
        "fullnameOverride": COLLECTOR,
        "mode": "deployment",
        "replicaCount": 1,
        # the contrib distribution: the core image has no awsxray exporter
        "image": {"repository": "otel/opentelemetry-collector-contrib"},
        "nodeSelector": {"igw.dev/role": "system"},
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        },
        # OTLP/gRPC in, nothing else listens (the chart enables Jaeger, Zipkin, OTLP/HTTP)
        "ports": {
            name: {"enabled": False}
            for name in ("otlp-http", "jaeger-compact", "jaeger-thrift", "jaeger-grpc", "zipkin")
        },
        "config": {
            "receivers": {
                "jaeger": None,
                "zipkin": None,
                "prometheus": None,
                "otlp": {"protocols": {"http": None}},
            },
            "exporters": exporter,
            "service": {
                "pipelines": {
                    "logs": None,
                    "metrics": None,
                    "traces": {
                        "receivers": ["otlp"],
                        "processors": ["memory_limiter", "batch"],
                        "exporters": list(exporter),
                    },
                }
            },
        },
    }


def collector_applicationset(
    envs: Sequence[EnvironmentSpec], *, project: str, sync: dict[str, Any], env_label: str
) -> dict[str, Any] | None:
    """The collector on every cluster of a traced environment (None when none is); the
    traced environments must agree on where traces go (one set of chart values)."""
    settings = [e.kubernetes.tracing for e in traced(envs)]
    if not settings:
        return None
    tracing = settings[0]
    assert tracing is not None
    if any(
        s != tracing.model_copy(update={"sampling_percent": s.sampling_percent})
        for s in settings
        if s
    ):
        raise ValueError(
            "kubernetes.tracing: environments disagree on the collector; one tree, one setting"
        )
    region = f'{{{{index .metadata.labels "{REGION_LABEL}"}}}}'
    return {
        "goTemplate": True,
        "goTemplateOptions": ["missingkey=error"],
        "generators": [
            {
                "clusters": {
                    "selector": {
                        "matchExpressions": [
                            {
                                "key": env_label,
                                "operator": "In",
                                "values": sorted(e.name for e in traced(envs)),
                            }
                        ]
                    }
                }
            }
        ],
        "template": {
            "metadata": {"name": f"{COLLECTOR_CHART}-{{{{.nameNormalized}}}}"},
            "spec": {
                "project": project,
                "source": {
                    "repoURL": COLLECTOR_CHART_REPO,
                    "chart": COLLECTOR_CHART,
                    "targetRevision": COLLECTOR_VERSION,
                    "helm": {
                        "releaseName": COLLECTOR_CHART,
                        "values": yaml.safe_dump(collector_values(tracing), sort_keys=True),
                        # the awsxray exporter's region: the cluster's own
                        "parameters": [
                            {"name": "extraEnvs[0].name", "value": "AWS_REGION"},
                            {"name": "extraEnvs[0].value", "value": region},
                        ],
                    },
                },
                "destination": {"server": "{{.server}}", "namespace": tracing.namespace},
                "syncPolicy": {**sync, "syncOptions": ["CreateNamespace=true"]},
            },
        },
    }
