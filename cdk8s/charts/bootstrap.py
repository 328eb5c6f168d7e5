"""The ArgoCD side, rendered into `gitops/bootstrap/`: project, cluster add-ons, and the
ApplicationSets that turn every `gitops/environments/<env>/` into apps; the root
Application that syncs this folder is in `gitops/bootstrap/root/`.

From the root on, ArgoCD manages itself from git. Automated sync with prune and
self-heal: git is the only way to change the cluster, so a rollback is a `git revert`
(docs/operations.md). Every add-on the cluster needs to serve is an Application of its
upstream Helm chart at a pinned version (`ADDONS`). The root syncs them in waves:

  -1  the GIE CRDs (`gitops/crds/`), before any controller that watches InferencePools;
      cert-manager, before the charts and environments that ask it for certificates
      (Envoy AI Gateway's webhook, the Gateway listener's `igw-tls`)
   0  Envoy Gateway (+ its Gateway API CRDs), Envoy AI Gateway (InferencePool backends),
      NVIDIA device plugin, kube-prometheus-stack, KEDA, External Secrets, Karpenter's
      CRDs, and the Karpenter controller (an ApplicationSet: its values name the cluster)
   1  the Secrets Manager store, and the environments' workloads (`rendered/`)
   2  the environments' monitors (`monitoring/`), after the Prometheus operator's CRDs

A wave only waits for the Applications of the one before it to be Healthy because the
CDK's ArgoCD install configures a health check for `Application` (Argo CD has none
built in since v1.8; stacks/parts/argocd.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from constructs import Construct

from cdk8s import Chart
from envspec.argocd_manifests import (
    CLUSTER_NAME_LABEL,
    HYPERPOD_LABEL,
    REGION_LABEL,
    TARGET_GROUP_ARN_ANNOTATION,
    root_application,
    target_group_arn_patch,
)
from envspec.environment import EnvironmentSpec
from envspec.names import KARPENTER_NAMESPACE, KARPENTER_SERVICE_ACCOUNT

from .base import PART_OF, Shared, Wave, labels, manifest
from .gateway import ENVOY_SERVICE
from .tracing import COLLECTOR_CHART, COLLECTOR_CHART_REPO, collector_applicationset, traced

__all__ = [
    "ADDONS",
    "AI_GATEWAY_WEBHOOK_CA",
    "ARGOCD_NAMESPACE",
    "CERT_MANAGER_VERSION",
    "ENVOY_GATEWAY_CHART",
    "ENVOY_GATEWAY_VERSION",
    "HYPERPOD_CHART_REVISION",
    "HYPERPOD_RELEASE",
    "KARPENTER_VERSION",
    "PROJECT",
    "AddOnChart",
    "BootstrapChart",
    "RootChart",
    "repo_of",
]

ARGOCD_NAMESPACE = "argocd"
ADDONS_PROJECT = "cluster-addons"
CRDS_PATH = "gitops/crds"
#: Per-region overlays of an environment (cdk8s/charts/app.py REGIONS_DIR).
REGIONS_DIR = "regions"
#: The label the CDK puts on every GPU node group (stacks/parts/gpu_nodes.py).
GPU_LABEL = "igw.dev/gpu"
ARGO_API = "argoproj.io/v1alpha1"
PROJECT = PART_OF
ENV_LABEL = "igw.dev/environment"
ENVOY_GATEWAY_CHART = "docker.io/envoyproxy"
ENVOY_GATEWAY_VERSION = "v1.5.0"
_AUTOMATED = {"prune": True, "selfHeal": True}
_RETRY = {"limit": 5, "backoff": {"duration": "10s", "factor": 2, "maxDuration": "5m"}}
IN_CLUSTER = "https://kubernetes.default.svc"
AI_GATEWAY_NAMESPACE = "envoy-ai-gateway-system"
AI_GATEWAY_VERSION = "v0.4.0"
SECRET_STORE = "aws-secrets-manager"
#: Karpenter's charts (OCI, public ECR) and version, the one Karpenter's v1.6 docs install
#: ("Getting Started", KARPENTER_VERSION); 1.6 supports Kubernetes 1.29-1.33
#: (Karpenter docs, "Compatibility").
KARPENTER_CHART_REPO = "public.ecr.aws/karpenter"
KARPENTER_VERSION = "1.6.6"
#: kube-prometheus-stack selects monitors labelled `release: <release name>` by default
#: (`prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues: true`).
PROMETHEUS_RELEASE = "kube-prometheus-stack"
#: SageMaker HyperPod's Helm chart, which AWS requires on the EKS cluster before
#: `CreateCluster` ("Installing packages on the Amazon EKS cluster using Helm"): it is not
#: published to a chart repository, only in git (aws/sagemaker-hyperpod-cli,
#: helm_chart/HyperPodHelmChart, with local and remote dependencies Argo CD builds). Pinned
#: to the commit of tag v3.9.0; release `hyperpod-dependencies` in kube-system, as AWS's
#: install command names it; the chart owns the namespace `aws-hyperpod`.
HYPERPOD_PROJECT = "hyperpod"
HYPERPOD_CHART_REPO = "https://github.com/aws/sagemaker-hyperpod-cli.git"
HYPERPOD_CHART_PATH = "helm_chart/HyperPodHelmChart"
HYPERPOD_CHART_REVISION = "b01cf90676553a711ab1a8ac51422adbb09aef6b"  # tag v3.9.0
HYPERPOD_RELEASE = "hyperpod-dependencies"
#: cert-manager (jetstack chart; v1.18 supports Kubernetes 1.29-1.33, cert-manager docs
#: "Supported Releases"). It issues what nothing else in the tree can: the Gateway
#: listener's certificate (cdk8s/charts/certificates.py) and Envoy AI Gateway's webhook
#: certificate. Its CRDs from the chart itself (`crds.enabled`, deploy/charts/cert-manager
#: values.yaml at v1.18.2), so they exist before anything in a later wave asks for one.
CERT_MANAGER_VERSION = "v1.18.2"
#: Where cert-manager's CA injector writes the CA of Envoy AI Gateway's webhook
#: (the webhook's `cert-manager.io/inject-ca-from`): Argo CD must not count it as drift
#: (argo-cd v2.13.2 docs/user-guide/diffing.md, the caBundle example).
AI_GATEWAY_WEBHOOK_CA = {
    "group": "admissionregistration.k8s.io",
    "kind": "MutatingWebhookConfiguration",
    "jqPathExpressions": [".webhooks[]?.clientConfig.caBundle"],
}


@dataclass(frozen=True)
class AddOnChart:
    """One cluster add-on: an upstream Helm chart at a pinned version."""

    name: str
    repo: str
    chart: str
    version: str
    namespace: str
    wave: Wave
    #: The CRD groups the chart installs (the ordering test checks custom resources
    #: against these).
    crd_groups: tuple[str, ...] = ()
    server_side: bool = False
    #: Fields of the chart's objects that other controllers own (`ignoreDifferences`).
    ignore_differences: tuple[dict[str, Any], ...] = ()


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

ADDONS: tuple[AddOnChart, ...] = (
    AddOnChart(
        "cert-manager",
        "https://charts.jetstack.io",
        "cert-manager",
        CERT_MANAGER_VERSION,
        "cert-manager",
        Wave.CRDS,
        ("cert-manager.io", "acme.cert-manager.io"),
        server_side=True,
    ),
    AddOnChart(
        "envoy-gateway",
        ENVOY_GATEWAY_CHART,
        "gateway-helm",
        ENVOY_GATEWAY_VERSION,
        "envoy-gateway-system",
        Wave.CONTROLLERS,
        ("gateway.networking.k8s.io", "gateway.envoyproxy.io"),
        server_side=True,
    ),
    AddOnChart(
        "envoy-ai-gateway-crds",
        ENVOY_GATEWAY_CHART,
        "ai-gateway-crds-helm",
        AI_GATEWAY_VERSION,
        AI_GATEWAY_NAMESPACE,
        Wave.CONTROLLERS,
        ("aigateway.envoyproxy.io",),
        server_side=True,
    ),
    AddOnChart(
        "envoy-ai-gateway",
        ENVOY_GATEWAY_CHART,
        "ai-gateway-helm",
        AI_GATEWAY_VERSION,
        AI_GATEWAY_NAMESPACE,
        Wave.CONTROLLERS,
        ignore_differences=(AI_GATEWAY_WEBHOOK_CA,),
    ),
    AddOnChart(
        "nvidia-device-plugin",
        "https://nvidia.github.io/k8s-device-plugin",
        "nvidia-device-plugin",
        "0.17.1",
        "nvidia-device-plugin",
        Wave.CONTROLLERS,
    ),
    AddOnChart(
        PROMETHEUS_RELEASE,
        "https://prometheus-community.github.io/helm-charts",
        "kube-prometheus-stack",
        "75.15.0",
        "monitoring",
        Wave.CONTROLLERS,
        ("monitoring.coreos.com",),
        server_side=True,
    ),
    AddOnChart(
        "keda",
        "https://kedacore.github.io/charts",
        "keda",
        "2.17.2",
        "keda",
        Wave.CONTROLLERS,
        ("keda.sh", "eventing.keda.sh"),
        server_side=True,
    ),
    AddOnChart(
        "external-secrets",
        "https://charts.external-secrets.io",
        "external-secrets",
        "0.18.2",
        "external-secrets",
        Wave.CONTROLLERS,
        ("external-secrets.io", "generators.external-secrets.io"),
        server_side=True,
    ),
    # Karpenter's CRDs apart from its controller, as Karpenter's upgrade guide recommends
    # ("CRD Upgrades": Helm installs a chart's crds/ only once); the controller, whose
    # values name the cluster, is the `karpenter` ApplicationSet, one per cluster.
    AddOnChart(
        "karpenter-crd",
        KARPENTER_CHART_REPO,
        "karpenter-crd",
        KARPENTER_VERSION,
        KARPENTER_NAMESPACE,
        Wave.CONTROLLERS,
        ("karpenter.sh", "karpenter.k8s.aws"),
        server_side=True,
    ),
)
#: The GIE CRDs, pinned copies under cdk8s/crds/, synced from `gitops/crds/`.
GIE_CRDS_APP = "gateway-api-inference-extension-crds"
GIE_CRD_GROUPS = ("inference.networking.k8s.io", "inference.networking.x-k8s.io")


def repo_of(envs: Sequence[EnvironmentSpec]) -> tuple[str, str]:
    """The one git repository and revision every environment syncs from."""
    for field in ("repo_url", "revision"):
        values = sorted({getattr(e.gitops, field) for e in envs})
        if len(values) != 1:
            raise ValueError(f"gitops.{field}: environments disagree ({values}); one tree")
    return envs[0].gitops.repo_url, envs[0].gitops.revision


class BootstrapChart(Chart):
    def __init__(
        self, scope: Construct, construct_id: str, *, envs: Sequence[EnvironmentSpec]
    ) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        repo, revision = repo_of(envs)
        common: Shared = {
            "namespace": ARGOCD_NAMESPACE,
            "labels": labels(name=PROJECT, component="gitops"),
        }
        sync = {"automated": _AUTOMATED, "retry": _RETRY}
        namespaces = sorted({e.kubernetes.namespace for e in envs})
        egw_namespaces = sorted({e.kubernetes.envoy_gateway_namespace for e in envs})
        monitoring = sorted({e.kubernetes.monitoring_namespace for e in envs})
        manifest(
            self,
            "project",
            api_version=ARGO_API,
            kind="AppProject",
            name=PROJECT,
            wave=Wave.CRDS,
            **common,
            body={
                "spec": {
                    "description": "The inference gateway: routing, picker, model servers.",
                    "sourceRepos": [repo],
                    "destinations": [
                        {"server": "*", "namespace": ns}
                        for ns in sorted({*namespaces, *egw_namespaces, *monitoring})
                    ],
                    "clusterResourceWhitelist": [
                        {"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition"},
                        {"group": "gateway.networking.k8s.io", "kind": "GatewayClass"},
                        {"group": "external-secrets.io", "kind": "ClusterSecretStore"},
                        {"group": "karpenter.sh", "kind": "NodePool"},
                        {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass"},
                        {"group": "", "kind": "Namespace"},
                    ],
                }
            },
        )
        manifest(
            self,
            "addons-project",
            api_version=ARGO_API,
            kind="AppProject",
            name=ADDONS_PROJECT,
            wave=Wave.CRDS,
            **common,
            body={
                "spec": {
                    "description": "Cluster add-ons from upstream Helm charts, pinned.",
                    "sourceRepos": sorted(
                        {repo, *(a.repo for a in ADDONS)}
                        | ({COLLECTOR_CHART_REPO} if traced(envs) else set())
                    ),
                    "destinations": [
                        {"server": "*", "namespace": ns}
                        for ns in sorted(
                            {a.namespace for a in ADDONS}
                            | {"kube-system"}
                            | {e.kubernetes.tracing.namespace for e in traced(envs)}  # type: ignore[union-attr]
                        )
                    ],
                    # Controllers bring CRDs, webhooks, cluster roles, API services.
                    "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
                }
            },
        )
        manifest(
            self,
            "gie-crds",
            api_version=ARGO_API,
            kind="Application",
            name=GIE_CRDS_APP,
            wave=Wave.CRDS,
            **common,
            body={
                "spec": {
                    "project": ADDONS_PROJECT,
                    "source": {"repoURL": repo, "targetRevision": revision, "path": CRDS_PATH},
                    "destination": {"server": IN_CLUSTER},
                    "syncPolicy": {**sync, "syncOptions": ["ServerSideApply=true"]},
                }
            },
        )
        values = addon_values(envs)
        for addon in ADDONS:
            manifest(
                self,
                addon.name,
                api_version=ARGO_API,
                kind="Application",
                name=addon.name,
                wave=addon.wave,
                **common,
                body={"spec": _addon(addon, values=values[addon.name], sync=sync)},
            )
        manifest(
            self,
            "karpenter",
            api_version=ARGO_API,
            kind="ApplicationSet",
            name="karpenter",
            wave=Wave.CONTROLLERS,
            **common,
            body={"spec": _karpenter(sync=sync)},
        )
        collector = collector_applicationset(
            envs, project=ADDONS_PROJECT, sync=sync, env_label=ENV_LABEL
        )
        if collector is not None:  # docs/tracing.md
            manifest(
                self,
                COLLECTOR_CHART,
                api_version=ARGO_API,
                kind="ApplicationSet",
                name=COLLECTOR_CHART,
                wave=Wave.CONTROLLERS,
                **common,
                body={"spec": collector},
            )
        manifest(
            self,
            "hyperpod-project",
            api_version=ARGO_API,
            kind="AppProject",
            name=HYPERPOD_PROJECT,
            wave=Wave.CRDS,
            **common,
            body={
                "spec": {
                    "description": "SageMaker HyperPod's own Helm chart, pinned.",
                    "sourceRepos": [HYPERPOD_CHART_REPO],
                    # AWS's chart places its parts in namespaces of its choosing
                    # (aws-hyperpod, kubeflow, kube-system, ...) and brings CRDs.
                    "destinations": [{"server": "*", "namespace": "*"}],
                    "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
                }
            },
        )
        manifest(
            self,
            "hyperpod-dependencies",
            api_version=ARGO_API,
            kind="ApplicationSet",
            name=HYPERPOD_RELEASE,
            wave=Wave.CONTROLLERS,
            **common,
            body={"spec": _hyperpod_dependencies(sync=sync)},
        )
        for name, folder, wave in (
            (f"{PROJECT}-environments", "rendered", Wave.CONFIG),
            (f"{PROJECT}-monitoring", "monitoring", Wave.WORKLOADS),
        ):
            manifest(
                self,
                name.removeprefix(f"{PROJECT}-"),
                api_version=ARGO_API,
                kind="ApplicationSet",
                name=name,
                wave=wave,
                **common,
                body={
                    "spec": _environments(repo=repo, revision=revision, sync=sync, folder=folder)
                },
            )


def addon_values(envs: Sequence[EnvironmentSpec]) -> dict[str, dict[str, Any]]:
    """Each add-on's Helm values, from the environments where they say something."""
    gpu_nodes = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": GPU_LABEL, "operator": "Exists"}]}
                ]
            }
        }
    }
    return {
        "envoy-gateway": {
            "config": {
                "envoyGateway": {
                    # InferencePool as an HTTPRoute backend: Envoy Gateway hands it to the
                    # Envoy AI Gateway controller, its extension server (ai-gateway
                    # manifests/envoy-gateway-values.yaml + examples/inference-pool).
                    # The Backend API that values file marks required for AI Gateway's
                    # backends (AIServiceBackend -> Backend); the patch policy it calls
                    # optional stays off (no EnvoyPatchPolicy is rendered).
                    "extensionApis": {"enableBackend": True},
                    "extensionManager": {
                        "backendResources": [
                            {"group": GIE_CRD_GROUPS[0], "kind": "InferencePool", "version": "v1"}
                        ],
                        "hooks": {
                            "xdsTranslator": {
                                "translation": {
                                    k: {"includeAll": True}
                                    for k in ("listener", "route", "cluster", "secret")
                                },
                                "post": ["Translation", "Cluster", "Route"],
                            }
                        },
                        "service": {
                            "fqdn": {
                                "hostname": f"ai-gateway-controller.{AI_GATEWAY_NAMESPACE}"
                                ".svc.cluster.local",
                                "port": 1063,
                            }
                        },
                    },
                }
            }
        },
        "envoy-ai-gateway-crds": {},
        # The admission webhook's certificate from cert-manager (a Certificate and a
        # self-signed Issuer the chart renders; the CA injector fills the webhook's
        # caBundle, and the controller's certificate watcher reloads a renewed one).
        # The chart's default makes the certificate with Helm's `lookup`, which `helm
        # template` (how Argo CD renders) always answers empty: every refresh would
        # write a new certificate Secret, while the controller patches the caBundle only
        # when it starts (ai-gateway v0.4.0 manifests/charts/ai-gateway-helm/templates/
        # admission_webhook.yaml, cmd/controller/main.go `maybePatchAdmissionWebhook`),
        # and new Envoy pods would be refused until it restarts.
        "envoy-ai-gateway": {"controller": {"mutatingWebhook": {"certManager": {"enable": True}}}},
        "nvidia-device-plugin": {
            # On every GPU node class the CDK builds (igw.dev/gpu label), through the
            # taint the model servers tolerate; without it `nvidia.com/gpu` is never
            # advertised and no vLLM pod schedules.
            "tolerations": [GPU_TOLERATION],
            "affinity": gpu_nodes,
        },
        PROMETHEUS_RELEASE: {
            "fullnameOverride": PROMETHEUS_RELEASE,
            "prometheus": {
                "prometheusSpec": {"serviceMonitorSelectorNilUsesHelmValues": True},
            },
        },
        "keda": {},
        "external-secrets": {"installCRDs": True},
        "cert-manager": {"crds": {"enabled": True}},
        "karpenter-crd": {},
    }


def _karpenter(*, sync: dict[str, Any]) -> dict[str, Any]:
    """The Karpenter controller on every cluster the CDK registered, with that cluster's
    name (`settings.clusterName`) and interruption queue (`<cluster>-karpenter`, the SQS
    queue of stacks/parts/karpenter.py) from its cluster Secret's label; CRDs skipped,
    `karpenter-crd` owns them. On the system nodes: Karpenter must not run on nodes it
    manages (Karpenter docs, "Getting Started": run the controller on a node group)."""
    cluster = f'{{{{index .metadata.labels "{CLUSTER_NAME_LABEL}"}}}}'
    values = {
        "nodeSelector": {"igw.dev/role": "system"},
        "replicas": 2,
        "serviceAccount": {"name": KARPENTER_SERVICE_ACCOUNT},
    }
    return {
        "goTemplate": True,
        "goTemplateOptions": ["missingkey=error"],
        "generators": [
            {
                "clusters": {
                    "selector": {
                        "matchExpressions": [{"key": CLUSTER_NAME_LABEL, "operator": "Exists"}]
                    }
                }
            }
        ],
        "template": {
            "metadata": {"name": "karpenter-{{.nameNormalized}}"},
            "spec": {
                "project": ADDONS_PROJECT,
                "source": {
                    "repoURL": KARPENTER_CHART_REPO,
                    "chart": "karpenter",
                    "targetRevision": KARPENTER_VERSION,
                    "helm": {
                        "releaseName": "karpenter",
                        "skipCrds": True,
                        "values": yaml.safe_dump(values, sort_keys=True),
                        "parameters": [
                            {"name": "settings.clusterName", "value": cluster},
                            {"name": "settings.interruptionQueue", "value": f"{cluster}-karpenter"},
                        ],
                    },
                },
                "destination": {"server": "{{.server}}", "namespace": KARPENTER_NAMESPACE},
                "syncPolicy": {**sync, "syncOptions": ["ServerSideApply=true"]},
            },
        },
    }


def _hyperpod_dependencies(*, sync: dict[str, Any]) -> dict[str, Any]:
    """HyperPod's Helm dependencies on every cluster whose Secret says HyperPod joins it
    (`igw.dev/hyperpod: enabled`, set by the CDK gitops stack), before the CDK creates the
    HyperPod cluster (that stack waits for the chart's health-monitoring agent).

    The region is passed explicitly: the chart's own detection reads the cluster with
    Helm's `lookup`, which `helm template` (how Argo CD renders) answers empty, and then
    falls back to us-west-2 (charts/health-monitoring-agent/values.yaml). The chart's
    NVIDIA device plugin stays on: it selects HyperPod's `ml.*` instance types, ours
    selects the managed groups' `igw.dev/gpu` label, so each GPU node gets exactly one."""
    region = f'{{{{index .metadata.labels "{REGION_LABEL}"}}}}'
    return {
        "goTemplate": True,
        "goTemplateOptions": ["missingkey=error"],
        "generators": [
            {
                "clusters": {
                    "selector": {
                        "matchExpressions": [
                            {"key": HYPERPOD_LABEL, "operator": "In", "values": ["enabled"]}
                        ]
                    }
                }
            }
        ],
        "template": {
            "metadata": {"name": f"{HYPERPOD_RELEASE}-{{{{.nameNormalized}}}}"},
            "spec": {
                "project": HYPERPOD_PROJECT,
                "source": {
                    "repoURL": HYPERPOD_CHART_REPO,
                    "targetRevision": HYPERPOD_CHART_REVISION,
                    "path": HYPERPOD_CHART_PATH,
                    "helm": {
                        "releaseName": HYPERPOD_RELEASE,
                        "parameters": [
                            {"name": "global.region", "value": region},
                            {"name": "health-monitoring-agent.region", "value": region},
                        ],
                    },
                },
                "destination": {"server": "{{.server}}", "namespace": "kube-system"},
                "syncPolicy": {**sync, "syncOptions": ["ServerSideApply=true"]},
            },
        },
    }


def _addon(addon: AddOnChart, *, values: dict[str, Any], sync: dict[str, Any]) -> dict[str, Any]:
    options = ["CreateNamespace=true"]
    if addon.server_side:
        # CRDs too large for client-side apply's last-applied annotation.
        options.append("ServerSideApply=true")
    source: dict[str, Any] = {
        "repoURL": addon.repo,
        "chart": addon.chart,
        "targetRevision": addon.version,
        "helm": {"releaseName": addon.name},
    }
    if values:
        source["helm"]["values"] = yaml.safe_dump(values, sort_keys=True)
    spec: dict[str, Any] = {
        "project": ADDONS_PROJECT,
        "source": source,
        "destination": {"server": IN_CLUSTER, "namespace": addon.namespace},
        "syncPolicy": {**sync, "syncOptions": options},
    }
    if addon.ignore_differences:
        spec["ignoreDifferences"] = list(addon.ignore_differences)
    return spec


class RootChart(Chart):
    """The app-of-apps over `gitops/bootstrap/` (not recursive, so not this folder).

    The same object the CDK app applies when it installs ArgoCD (one function,
    `stacks.parts.argocd_manifests.root_application`); this file is for a cluster
    bootstrapped by hand: `kubectl apply -f gitops/bootstrap/root/root.k8s.yaml`.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, envs: Sequence[EnvironmentSpec]
    ) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        repo_of(envs)
        root = root_application(envs[0].gitops)
        manifest(
            self,
            "root",
            api_version=root["apiVersion"],
            kind=root["kind"],
            name=root["metadata"]["name"],
            namespace=root["metadata"]["namespace"],
            labels=labels(name=PROJECT, component="gitops"),
            wave=Wave.NAMESPACE,
            body={"spec": root["spec"]},
        )


def _source(*, repo: str, revision: str, folder: str) -> dict[str, Any]:
    """The source of an environment folder's Application; the workloads' gets the ARN of
    the cluster's Envoy target group (the cluster Secret's annotation, which the CDK
    sets) patched into Envoy's TargetGroupBinding."""
    source: dict[str, Any] = {
        "repoURL": repo,
        "targetRevision": revision,
        "path": _source_path(folder),
    }
    if folder == "rendered":
        arn = f'{{{{index .metadata.annotations "{TARGET_GROUP_ARN_ANNOTATION}"}}}}'
        source["kustomize"] = {"patches": [target_group_arn_patch(ENVOY_SERVICE, arn)]}
    return source


def _source_path(folder: str) -> str:
    """Workloads through the overlay of the cluster's region (its cluster Secret's
    `igw.dev/region` label), which points images at that region's ECR; monitors as
    rendered."""
    if folder == "rendered":
        return f'{{{{.path.path}}}}/{REGIONS_DIR}/{{{{index .metadata.labels "{REGION_LABEL}"}}}}'
    return f"{{{{.path.path}}}}/{folder}"


def _environments(*, repo: str, revision: str, sync: dict[str, Any], folder: str) -> dict[str, Any]:
    """One Application per environment folder and cluster of that environment, syncing
    `<env>/<folder>` (workloads in `rendered`, monitors apart in `monitoring`, so an
    environment without the Prometheus operator still syncs its workloads).

    The matrix pairs each `gitops/environments/<env>/` with the ArgoCD clusters labelled
    `igw.dev/environment: <env>` (the cluster Secret that registers a cluster carries the
    label; for the local cluster see docs/operations.md), so an ArgoCD per cluster, as
    the CDK app installs, deploys only its own environment, and a central ArgoCD deploys
    each environment to its clusters.
    """
    suffix = "" if folder == "rendered" else f"{folder}-"
    return {
        "goTemplate": True,
        "goTemplateOptions": ["missingkey=error"],
        "generators": [
            {
                "matrix": {
                    "generators": [
                        # Directories, not the files: a file's keys (`name`) would collide
                        # with the clusters generator's parameters.
                        {
                            "git": {
                                "repoURL": repo,
                                "revision": revision,
                                "directories": [{"path": "gitops/environments/*"}],
                            }
                        },
                        {
                            "clusters": {
                                "selector": {"matchLabels": {ENV_LABEL: "{{.path.basename}}"}}
                            }
                        },
                    ]
                }
            }
        ],
        "template": {
            "metadata": {
                # The workloads' Application keeps the name it always had.
                "name": f"{PROJECT}-{{{{.path.basename}}}}-{suffix}{{{{.nameNormalized}}}}",
                "labels": {ENV_LABEL: "{{.path.basename}}"},
            },
            "spec": {
                "project": PROJECT,
                "source": _source(repo=repo, revision=revision, folder=folder),
                "destination": {"server": "{{.server}}"},
                # Deployments scaled by an HPA leave `replicas` out, so there is no diff
                # to ignore; PruneLast deletes only after the new objects are healthy.
                "syncPolicy": {**sync, "syncOptions": ["PruneLast=true"]},
            },
        },
    }
