"""The pods the cluster add-ons run, transcribed from their charts' default values at the
versions the tree pins, with the scheduling fields this tree's values override.

Each `AddOn` names the chart (or manifest), the version its figures were read at and
where; `test_gitops_schedule.py` refuses an add-on of the tree that has no entry here,
or whose pinned version differs from `version` (re-read the values, then raise it).
Requests left empty upstream (`resources: {}`) are transcribed as empty: such a pod takes
no CPU or memory in the scheduler's sums, but it does take one of the node's pod slots.
Helm hook Jobs (certificate generators, CRD patchers) run once and end; not modelled.

Who installs what (one cluster per region, each with its own Argo CD):

* the CDK cluster stack: the EKS managed add-ons (`stacks/parts/addons.py`, versions
  unpinned: EKS's default for the Kubernetes version, figures from the upstream charts
  named below) and the AWS Load Balancer Controller (`stacks/parts/eks_cluster.py`);
* the CDK gitops stack: Argo CD (`stacks/parts/argocd.py`, `gitops.argocd_chart_version`);
* Argo CD: `ADDONS` and the Karpenter controller (`cdk8s/charts/bootstrap.py`), and
  HyperPod's chart where HyperPod joins the cluster (the primary region).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AddOn", "Workload", "addon_inventory"]

Obj = dict[str, Any]

LINUX = {"kubernetes.io/os": "linux"}
TOLERATE_ALL = [{"operator": "Exists"}]


def requests(cpu: str | None = None, memory: str | None = None) -> Obj:
    out = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"resources": {"requests": out}} if out else {}


def required_terms(*terms: list[Obj]) -> Obj:
    """`affinity.nodeAffinity.required…` with one node-selector term per argument."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
            }
        }
    }


def instance_types_in(types: str) -> list[Obj]:
    return [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types.split()}]


#: The EKS add-on charts' own node affinity (amazon-vpc-cni-k8s v1.19.6
#: charts/aws-vpc-cni/values.yaml; eks-pod-identity-agent chart 1.2.0 values.yaml).
EKS_NODES = required_terms(
    [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
        {
            "key": "eks.amazonaws.com/compute-type",
            "operator": "NotIn",
            "values": ["fargate", "hybrid", "auto"],
        },
    ]
)


@dataclass(frozen=True)
class Workload:
    """One Deployment, StatefulSet or DaemonSet of an add-on, as a pod template."""

    kind: str  # Deployment | StatefulSet | DaemonSet
    name: str
    namespace: str
    replicas: int = 1  # ignored for a DaemonSet
    containers: tuple[Obj, ...] = ({},)
    node_selector: Mapping[str, str] = field(default_factory=lambda: dict(LINUX))
    affinity: Obj = field(default_factory=dict)
    tolerations: tuple[Obj, ...] = ()
    spread: tuple[Obj, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def pod_template(self) -> Obj:
        """The template's metadata and spec, shaped like a rendered Deployment's."""
        return {
            "metadata": {"labels": dict(self.labels) or {"app.kubernetes.io/name": self.name}},
            "spec": {
                "containers": [{"name": f"c{i}", **c} for i, c in enumerate(self.containers)],
                "nodeSelector": dict(self.node_selector),
                "affinity": self.affinity,
                "tolerations": list(self.tolerations),
                "topologySpreadConstraints": list(self.spread),
            },
        }


@dataclass(frozen=True)
class AddOn:
    name: str
    #: The version the figures were read at; None: the tree does not pin one.
    version: str | None
    source: str
    workloads: tuple[Workload, ...]


_DCGM_TYPES = (
    "g3.4xlarge g3.8xlarge g3.16xlarge g3s.xlarge g4ad.2xlarge g4ad.4xlarge g4ad.8xlarge "
    "g4ad.16xlarge g4ad.xlarge g4dn.2xlarge g4dn.4xlarge g4dn.8xlarge g4dn.12xlarge "
    "g4dn.16xlarge g4dn.metal g4dn.xlarge g5.2xlarge g5.4xlarge g5.8xlarge g5.12xlarge "
    "g5.16xlarge g5.24xlarge g5.48xlarge g5.xlarge g5g.2xlarge g5g.4xlarge g5g.8xlarge "
    "g5g.16xlarge g5g.metal g5g.xlarge g6.2xlarge g6.4xlarge g6.8xlarge g6.12xlarge "
    "g6.16xlarge g6.24xlarge g6.48xlarge g6.xlarge g6e.2xlarge g6e.4xlarge g6e.8xlarge "
    "g6e.12xlarge g6e.16xlarge g6e.24xlarge g6e.48xlarge g6e.xlarge gr6.4xlarge gr6.8xlarge "
    "p2.8xlarge p2.16xlarge p2.xlarge p3.2xlarge p3.8xlarge p3.16xlarge p3dn.24xlarge "
    "p4d.24xlarge p4de.24xlarge p5.48xlarge p5e.48xlarge p5en.48xlarge p6-b200.48xlarge "
    "p6-b300.48xlarge p6e-gb200.36xlarge ml.g3.4xlarge ml.g3.8xlarge ml.g3.16xlarge "
    "ml.g3s.xlarge ml.g4ad.2xlarge ml.g4ad.4xlarge ml.g4ad.8xlarge ml.g4ad.16xlarge "
    "ml.g4ad.xlarge ml.g4dn.2xlarge ml.g4dn.4xlarge ml.g4dn.8xlarge ml.g4dn.12xlarge "
    "ml.g4dn.16xlarge ml.g4dn.metal ml.g4dn.xlarge ml.g5.2xlarge ml.g5.4xlarge ml.g5.8xlarge "
    "ml.g5.12xlarge ml.g5.16xlarge ml.g5.24xlarge ml.g5.48xlarge ml.g5.xlarge ml.g5g.2xlarge "
    "ml.g5g.4xlarge ml.g5g.8xlarge ml.g5g.16xlarge ml.g5g.metal ml.g5g.xlarge ml.g6.2xlarge "
    "ml.g6.4xlarge ml.g6.8xlarge ml.g6.12xlarge ml.g6.16xlarge ml.g6.24xlarge ml.g6.48xlarge "
    "ml.g6.xlarge ml.g6e.2xlarge ml.g6e.4xlarge ml.g6e.8xlarge ml.g6e.12xlarge "
    "ml.g6e.16xlarge ml.g6e.24xlarge ml.g6e.48xlarge ml.g6e.xlarge ml.gr6.4xlarge "
    "ml.gr6.8xlarge ml.p2.8xlarge ml.p2.16xlarge ml.p2.xlarge ml.p3.2xlarge ml.p3.8xlarge "
    "ml.p3.16xlarge ml.p3dn.24xlarge ml.p4d.24xlarge ml.p4de.24xlarge ml.p5.48xlarge "
    "ml.p5e.48xlarge ml.p5en.48xlarge ml.p6-b200.48xlarge ml.p6e-gb200.36xlarge"
)
_HYPERPOD_NVIDIA_TYPES = (
    "ml.g5.xlarge ml.g5.2xlarge ml.g5.4xlarge ml.g5.8xlarge ml.g5.12xlarge ml.g5.16xlarge "
    "ml.g5.24xlarge ml.g5.48xlarge ml.g6.xlarge ml.g6.2xlarge ml.g6.4xlarge ml.g6.8xlarge "
    "ml.g6.16xlarge ml.g6.12xlarge ml.g6.24xlarge ml.g6.48xlarge ml.g6e.xlarge ml.g6e.2xlarge "
    "ml.g6e.4xlarge ml.g6e.8xlarge ml.g6e.12xlarge ml.g6e.16xlarge ml.g6e.24xlarge "
    "ml.g6e.48xlarge ml.g7e.2xlarge ml.g7e.4xlarge ml.g7e.8xlarge ml.g7e.12xlarge "
    "ml.g7e.24xlarge ml.g7e.48xlarge ml.gr6.4xlarge ml.gr6.8xlarge ml.p4d.24xlarge "
    "ml.p4de.24xlarge ml.p5.4xlarge ml.p5.48xlarge ml.p5e.48xlarge ml.p5en.48xlarge "
    "ml.p6-b200.48xlarge ml.p6-b300.48xlarge ml.p6e-gb200.36xlarge"
)
_HYPERPOD_HEALTH_TYPES = (
    "ml.p5en.48xlarge ml.p5e.48xlarge ml.p5.48xlarge ml.p5.4xlarge ml.p4d.24xlarge "
    "ml.p4de.24xlarge ml.g5.xlarge ml.g5.2xlarge ml.g5.4xlarge ml.g5.8xlarge ml.g5.12xlarge "
    "ml.g5.16xlarge ml.g5.24xlarge ml.g5.48xlarge ml.g6.xlarge ml.g6.2xlarge ml.g6.4xlarge "
    "ml.g6.8xlarge ml.g6.16xlarge ml.g6.12xlarge ml.g6.24xlarge ml.g6.48xlarge ml.gr6.4xlarge "
    "ml.gr6.8xlarge ml.g6e.xlarge ml.g6e.2xlarge ml.g6e.4xlarge ml.g6e.8xlarge ml.g6e.16xlarge "
    "ml.g6e.12xlarge ml.g6e.24xlarge ml.g6e.48xlarge ml.g7e.2xlarge ml.g7e.4xlarge "
    "ml.g7e.8xlarge ml.g7e.12xlarge ml.g7e.24xlarge ml.g7e.48xlarge ml.p6-b200.48xlarge "
    "ml.p6-b300.48xlarge ml.p6e-gb200.36xlarge"
)
_HYPERPOD_EFA_TYPES = (
    "ml.c5n.9xlarge ml.c5n.18xlarge ml.g5.8xlarge ml.g5.12xlarge ml.g5.16xlarge "
    "ml.g5.24xlarge ml.g5.48xlarge ml.g6.8xlarge ml.g6.12xlarge ml.g6.16xlarge ml.g6.24xlarge "
    "ml.g6.48xlarge ml.g6e.8xlarge ml.g6e.12xlarge ml.g6e.16xlarge ml.g6e.24xlarge "
    "ml.g6e.48xlarge ml.g7e.8xlarge ml.g7e.12xlarge ml.g7e.24xlarge ml.g7e.48xlarge "
    "ml.gr6.8xlarge ml.i3en.12xlarge ml.i3en.24xlarge ml.m7i.48xlarge ml.p4d.24xlarge "
    "ml.p4de.24xlarge ml.p5.4xlarge ml.p5.48xlarge ml.p5e.48xlarge ml.p5en.48xlarge "
    "ml.p6-b200.48xlarge ml.p6-b300.48xlarge ml.p6e-gb200.36xlarge ml.r7i.48xlarge "
    "ml.trn1.32xlarge ml.trn1n.32xlarge ml.trn2.3xlarge ml.trn2.48xlarge"
)


def addon_inventory(
    *,
    bootstrap_values: Mapping[str, Obj],
    karpenter_values: Obj,
    cloudwatch_tolerations: list[Obj],
    argocd_node_selector: Mapping[str, str],
) -> dict[str, AddOn]:
    """Every add-on this tree may install, keyed by its Application (or EKS add-on)
    name, with the scheduling values the tree gives it: `bootstrap_values` are the Helm
    values of the rendered add-on Applications, `karpenter_values` those of the
    Karpenter ApplicationSet, `cloudwatch_tolerations` the CloudWatch add-on's
    configuration, `argocd_node_selector` the CDK's Argo CD values."""
    device_plugin = bootstrap_values.get("nvidia-device-plugin", {})
    collector = bootstrap_values.get("opentelemetry-collector", {})
    karpenter_labels = {
        "app.kubernetes.io/name": "karpenter",
        "app.kubernetes.io/instance": "karpenter",
    }
    entries = [
        # -- the CDK cluster stack: EKS managed add-ons (unpinned) -------------------------
        AddOn(
            "vpc-cni",
            None,
            "aws/amazon-vpc-cni-k8s v1.19.6 charts/aws-vpc-cni/values.yaml: aws-node "
            "requests cpu 25m; the network-policy agent and init container resources {}; "
            "tolerations [{operator: Exists}]",
            (
                Workload(
                    "DaemonSet",
                    "aws-node",
                    "kube-system",
                    containers=(requests(cpu="25m"), {}),
                    node_selector={},
                    affinity=EKS_NODES,
                    tolerations=tuple(TOLERATE_ALL),
                ),
            ),
        ),
        AddOn(
            "kube-proxy",
            None,
            "the DaemonSet EKS installs (no published chart): requests cpu 100m, no "
            "memory request (aws/containers-roadmap#1509), tolerations [{operator: Exists}]",
            (
                Workload(
                    "DaemonSet",
                    "kube-proxy",
                    "kube-system",
                    containers=(requests(cpu="100m"),),
                    node_selector={},
                    affinity=EKS_NODES,
                    tolerations=tuple(TOLERATE_ALL),
                ),
            ),
        ),
        AddOn(
            "coredns",
            None,
            "coredns/deployment kubernetes/coredns.yaml.sed (7853d4a): requests cpu 100m, "
            "memory 70Mi; EKS runs two replicas (EKS User Guide, 'Manage CoreDNS'), their "
            "anti-affinity preferred only",
            (
                Workload(
                    "Deployment",
                    "coredns",
                    "kube-system",
                    replicas=2,
                    containers=(requests(cpu="100m", memory="70Mi"),),
                    tolerations=({"key": "CriticalAddonsOnly", "operator": "Exists"},),
                    labels={"k8s-app": "kube-dns"},
                ),
            ),
        ),
        AddOn(
            "eks-pod-identity-agent",
            None,
            "aws/eks-pod-identity-agent chart 1.2.0 (d4dc0f3) values.yaml: resources {}, "
            "tolerations [{operator: Exists}]",
            (
                Workload(
                    "DaemonSet",
                    "eks-pod-identity-agent",
                    "kube-system",
                    node_selector={},
                    affinity=EKS_NODES,
                    tolerations=tuple(TOLERATE_ALL),
                ),
            ),
        ),
        AddOn(
            "amazon-cloudwatch-observability",
            None,
            "aws-observability/helm-charts amazon-cloudwatch-observability-4.10.1 "
            "values.yaml: manager 100m/64Mi; agent 250m/128Mi; fluentBit 50m/25Mi; "
            "dcgmExporter 250m/128Mi on the GPU instance types it lists (neuronMonitor: "
            "trn/inf types only, none here); tolerations from the add-on configuration",
            (
                Workload(
                    "Deployment",
                    "amazon-cloudwatch-observability-controller-manager",
                    "amazon-cloudwatch",
                    containers=(requests(cpu="100m", memory="64Mi"),),
                ),
                Workload(
                    "DaemonSet",
                    "cloudwatch-agent",
                    "amazon-cloudwatch",
                    containers=(requests(cpu="250m", memory="128Mi"),),
                    tolerations=tuple(cloudwatch_tolerations),
                ),
                Workload(
                    "DaemonSet",
                    "fluent-bit",
                    "amazon-cloudwatch",
                    containers=(requests(cpu="50m", memory="25Mi"),),
                    tolerations=tuple(cloudwatch_tolerations),
                ),
                Workload(
                    "DaemonSet",
                    "dcgm-exporter",
                    "amazon-cloudwatch",
                    containers=(requests(cpu="250m", memory="128Mi"),),
                    affinity=required_terms(instance_types_in(_DCGM_TYPES)),
                    tolerations=tuple(cloudwatch_tolerations),
                ),
            ),
        ),
        AddOn(
            "aws-load-balancer-controller",
            "v2.13.3",
            "aws/eks-charts stable/aws-load-balancer-controller/values.yaml, chart 1.13.3 "
            "(e33fb15): replicaCount 2, resources {}, default anti-affinity preferred only",
            (Workload("Deployment", "aws-load-balancer-controller", "kube-system", replicas=2),),
        ),
        # -- the CDK gitops stack ------------------------------------------------------------
        AddOn(
            "argo-cd",
            "7.7.10",
            "argoproj/argo-helm argo-cd-7.7.10 charts/argo-cd/values.yaml: every component "
            "one replica, resources {}; global.nodeSelector from stacks/parts/argocd.py",
            tuple(
                Workload(kind, f"argocd-{name}", "argocd", node_selector=argocd_node_selector)
                for kind, name in (
                    ("StatefulSet", "application-controller"),
                    ("Deployment", "applicationset-controller"),
                    ("Deployment", "dex-server"),
                    ("Deployment", "notifications-controller"),
                    ("Deployment", "redis"),
                    ("Deployment", "repo-server"),
                    ("Deployment", "server"),
                )
            ),
        ),
        # -- Argo CD: cdk8s/charts/bootstrap.py ADDONS ---------------------------------------
        AddOn(
            "envoy-gateway",
            "v1.5.0",
            "envoyproxy/gateway v1.5.0 charts/gateway-helm/values.tmpl.yaml: "
            "deployment.replicas 1, envoyGateway requests cpu 100m, memory 256Mi",
            (
                Workload(
                    "Deployment",
                    "envoy-gateway",
                    "envoy-gateway-system",
                    containers=(requests(cpu="100m", memory="256Mi"),),
                    node_selector={},
                ),
            ),
        ),
        AddOn("envoy-ai-gateway-crds", "v0.4.0", "CRDs only", ()),
        AddOn(
            "envoy-ai-gateway",
            "v0.4.0",
            "envoyproxy/ai-gateway v0.4.0 manifests/charts/ai-gateway-helm/values.yaml: "
            "controller.replicaCount 1, resources {}",
            (
                Workload(
                    "Deployment",
                    "ai-gateway-controller",
                    "envoy-ai-gateway-system",
                    node_selector={},
                ),
            ),
        ),
        AddOn(
            "nvidia-device-plugin",
            "0.17.1",
            "NVIDIA/k8s-device-plugin v0.17.1 deployments/helm/nvidia-device-plugin/"
            "values.yaml: resources {}; affinity and tolerations from this tree's values",
            (
                Workload(
                    "DaemonSet",
                    "nvidia-device-plugin",
                    "nvidia-device-plugin",
                    node_selector={},
                    affinity=device_plugin.get("affinity", {}),
                    tolerations=tuple(device_plugin.get("tolerations", ())),
                ),
            ),
        ),
        AddOn(
            "kube-prometheus-stack",
            "75.15.0",
            "prometheus-community/helm-charts kube-prometheus-stack-75.15.0 values.yaml and "
            "its dependencies (kube-state-metrics 6.1.0, prometheus-node-exporter 4.47.3, "
            "grafana 9.3.0): every resources {}, config reloader requests 0; node-exporter "
            "nodeSelector linux, tolerations [{effect: NoSchedule, operator: Exists}]",
            (
                Workload("Deployment", "kube-prometheus-stack-operator", "monitoring"),
                Workload("Deployment", "kube-prometheus-stack-kube-state-metrics", "monitoring"),
                Workload("Deployment", "kube-prometheus-stack-grafana", "monitoring"),
                Workload(
                    "StatefulSet", "prometheus-kube-prometheus-stack-prometheus", "monitoring"
                ),
                Workload(
                    "StatefulSet", "alertmanager-kube-prometheus-stack-alertmanager", "monitoring"
                ),
                Workload(
                    "DaemonSet",
                    "kube-prometheus-stack-prometheus-node-exporter",
                    "monitoring",
                    tolerations=({"effect": "NoSchedule", "operator": "Exists"},),
                ),
            ),
        ),
        AddOn(
            "keda",
            "2.17.2",
            "kedacore/charts v2.17.2 keda/values.yaml: operator, metrics API server and "
            "admission webhooks one replica each, each requests cpu 100m, memory 100Mi",
            tuple(
                Workload(
                    "Deployment",
                    name,
                    "keda",
                    containers=(requests(cpu="100m", memory="100Mi"),),
                    node_selector={},
                )
                for name in (
                    "keda-operator",
                    "keda-operator-metrics-apiserver",
                    "keda-admission-webhooks",
                )
            ),
        ),
        AddOn(
            "external-secrets",
            "0.18.2",
            "external-secrets/external-secrets helm-chart-0.18.2 deploy/charts/"
            "external-secrets/values.yaml: controller, webhook, cert controller one replica "
            "each, resources {}",
            tuple(
                Workload("Deployment", name, "external-secrets", node_selector={})
                for name in (
                    "external-secrets",
                    "external-secrets-webhook",
                    "external-secrets-cert-controller",
                )
            ),
        ),
        AddOn(
            "opentelemetry-collector",
            "0.170.0",
            "open-telemetry/opentelemetry-helm-charts opentelemetry-collector-0.170.0 "
            "charts/opentelemetry-collector/values.yaml: resources {}, replicaCount 1, "
            "nodeSelector {}; mode, replicas, resources and nodeSelector from the "
            "ApplicationSet's values (cdk8s/charts/tracing.py)",
            (
                Workload(
                    "Deployment",
                    "otel-collector",
                    "observability",
                    replicas=int(collector.get("replicaCount", 1)),
                    containers=(
                        {"resources": {"requests": dict(collector["resources"]["requests"])}}
                        if collector.get("resources")
                        else {},
                    ),
                    node_selector=dict(collector.get("nodeSelector", {})),
                ),
            ),
        ),
        AddOn("karpenter-crd", "1.6.6", "CRDs only", ()),
        AddOn(
            "karpenter",
            "1.6.6",
            "aws/karpenter-provider-aws v1.6.6 charts/karpenter/values.yaml: resources {}; "
            "nodeSelector linux; required node affinity karpenter.sh/nodepool DoesNotExist "
            "and pod anti-affinity on kubernetes.io/hostname (selector: the pod labels); "
            "zone spread maxSkew 1 DoNotSchedule; replicas and nodeSelector merged with the "
            "ApplicationSet's values",
            (
                Workload(
                    "Deployment",
                    "karpenter",
                    "kube-system",
                    replicas=int(karpenter_values.get("replicas", 2)),
                    node_selector={**LINUX, **karpenter_values.get("nodeSelector", {})},
                    affinity={
                        **required_terms(
                            [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]
                        ),
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "topologyKey": "kubernetes.io/hostname",
                                    "labelSelector": {"matchLabels": karpenter_labels},
                                }
                            ]
                        },
                    },
                    tolerations=({"key": "CriticalAddonsOnly", "operator": "Exists"},),
                    spread=(
                        {
                            "maxSkew": 1,
                            "topologyKey": "topology.kubernetes.io/zone",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": karpenter_labels},
                        },
                    ),
                    labels=karpenter_labels,
                ),
            ),
        ),
        AddOn(
            "hyperpod-dependencies",
            "b01cf90676553a711ab1a8ac51422adbb09aef6b",
            "aws/sagemaker-hyperpod-cli v3.9.0 helm_chart/HyperPodHelmChart values.yaml and "
            "subcharts: training-operator and mpi-operator one replica, resources {}, no "
            "node selector; health-monitoring-agent 500m/512Mi and HyperPod's NVIDIA and EFA "
            "device plugins (resources {}) on the ml.* types they list; cert-manager, "
            "mlflow, storage, inference operator off; neuron plugin: trn/inf types only",
            (
                Workload("Deployment", "training-operator", "kubeflow", node_selector={}),
                Workload(
                    "Deployment",
                    "mpi-operator",
                    "kube-system",
                    node_selector={},
                    tolerations=(
                        {
                            "key": "sagemaker.amazonaws.com/node-health-status",
                            "operator": "Equal",
                            "value": "Unschedulable",
                            "effect": "NoSchedule",
                        },
                    ),
                ),
                Workload(
                    "DaemonSet",
                    "health-monitoring-agent",
                    "aws-hyperpod",
                    containers=(requests(cpu="500m", memory="512Mi"),),
                    node_selector={},
                    affinity=required_terms(instance_types_in(_HYPERPOD_HEALTH_TYPES)),
                    tolerations=(
                        {"effect": "NoSchedule", "operator": "Exists"},
                        {"effect": "NoExecute", "operator": "Exists"},
                    ),
                ),
                Workload(
                    "DaemonSet",
                    "hyperpod-nvidia-device-plugin",
                    "kube-system",
                    node_selector={},
                    affinity=required_terms(instance_types_in(_HYPERPOD_NVIDIA_TYPES)),
                    tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
                ),
                Workload(
                    "DaemonSet",
                    "aws-efa-k8s-device-plugin",
                    "kube-system",
                    node_selector={},
                    affinity=required_terms(instance_types_in(_HYPERPOD_EFA_TYPES)),
                    tolerations=({"key": "aws.amazon.com/efa", "operator": "Exists"},),
                ),
            ),
        ),
        # Not pinned by this tree yet; here so that pinning it (certificates for the
        # listener and the webhooks) starts from its figures.
        AddOn(
            "cert-manager",
            "v1.18.2",
            "cert-manager/cert-manager v1.18.2 deploy/charts/cert-manager/values.yaml: "
            "controller, webhook, cainjector one replica each, resources {}",
            tuple(
                Workload("Deployment", name, "cert-manager")
                for name in ("cert-manager", "cert-manager-webhook", "cert-manager-cainjector")
            ),
        ),
    ]
    return {a.name: a for a in entries}
