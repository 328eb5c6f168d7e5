"""A model of an EKS cluster's API server and the controllers the GitOps tree leans on.

A Kubernetes API server, its controllers and Argo CD cannot run here, so this is a
MODEL (the developers' guide allows one for a Kubernetes API server; it says so here):
objects are stored as applied; a virtual clock drives the controllers below, each
reduced to the status fields Argo CD's health checks read (tests/gitops/argo_health.py):

* Deployment controller (kubernetes `pkg/controller/deployment`): pods per template
  revision, a rolling update bounded by `maxSurge` / `maxUnavailable` (defaults 25%),
  `status.{replicas,updatedReplicas,availableReplicas,observedGeneration}` and the
  `Progressing` condition, which turns `ProgressDeadlineExceeded` once
  `progressDeadlineSeconds` (default 600) pass without a pod becoming available;
* pods: Running after their start time (`Timing`), a pod that needs a Secret (an env
  reference or a volume, not `optional`) only once it exists, Ready when its readiness
  rule says so. The picker's rule is a parameter (`PickerRule`), read from the real
  picker by
  `tests/gitops/picker_probe.py`;
* disruption controller (`pkg/controller/disruption`): `DisruptionAllowed` True
  (`SufficientPods`) when `currentHealthy - desiredHealthy > 0` and pods are expected,
  else False (`InsufficientPods`);
* External Secrets: a (Cluster)SecretStore is Ready once the operator runs (its AWS
  credentials are assumed good); an ExternalSecret is Ready, and its Secret exists, once
  its store is Ready;
* KEDA: a ScaledObject is Ready once KEDA runs and its target exists; with no traffic
  it holds the target at `minReplicaCount`;
* cert-manager (`pkg/controller/certificates`, `pkg/issuer/{selfsigned,ca}` at v1.18):
  once it runs, a self-signed Issuer is Ready; a CA Issuer is Ready when its Secret
  exists and `Ready=False` otherwise; a Certificate is `Issuing` (at least one tick)
  until its Issuer is Ready, then Ready, and its Secret exists;
* namespaces: the ones a fresh EKS cluster and the CDK's Argo CD install have, the
  Namespace objects applied, and the destination namespace of every add-on chart
  Application (`CreateNamespace=true`); an object applied elsewhere fails;
* Argo CD's own controllers: an Application whose source is this repository syncs its
  path with `argo_sync.Operation` and reports the aggregated health; one that installs an
  upstream chart turns Healthy `Timing.chart_s` after it is created and registers the
  kinds the chart installs (`CHART_KINDS`); an ApplicationSet generates its Applications
  for the environment's cluster Secret and says `ResourcesUpToDate`.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envspec.environment import EnvironmentSpec
from envspec.names import target_group_name

from .argo_health import aggregate, group_of, health
from .argo_sync import Operation

__all__ = [
    "CHART_KINDS",
    "Cluster",
    "PickerRule",
    "Timing",
    "example_target_group_arn",
    "load_manifests",
]

Obj = dict[str, Any]
Key = tuple[str, str, str, str]
#: Is the picker ready in this cluster now?
PickerRule = Callable[["Cluster"], bool]
REPO_ROOT = Path(__file__).resolve().parents[2]
#: The file names Kustomize reads a kustomization from (`konfig.RecognizedKustomizationFileNames`).
KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")

#: What a fresh EKS cluster from `cdk deploy` serves before Argo CD syncs anything: the
#: built-in kinds the tree uses, Argo CD's own (the gitops stack installs it) and the
#: AWS Load Balancer Controller's TargetGroupBinding (the cluster stack installs it).
BUILTIN_KINDS = {
    ("", k) for k in ("Namespace", "Service", "ServiceAccount", "ConfigMap", "Secret", "Pod")
} | {
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("policy", "PodDisruptionBudget"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("batch", "Job"),
    ("argoproj.io", "Application"),
    ("argoproj.io", "ApplicationSet"),
    ("argoproj.io", "AppProject"),
    ("elbv2.k8s.aws", "TargetGroupBinding"),
}
#: Namespaces before Argo CD syncs: Kubernetes' own, and Argo CD's (the CDK's Helm chart).
BUILTIN_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease", "argocd"}

#: The kinds each upstream chart's CRDs add (from each chart's crds/ or templates at the
#: pinned version: gateway-helm v1.5.0 ships Gateway API and gateway.envoyproxy.io CRDs;
#: keda 2.17.2 `keda.sh`; external-secrets 0.18.2 with installCRDs; kube-prometheus-stack
#: 75.15.0 the prometheus-operator CRDs; karpenter-crd 1.6.6 karpenter.sh and
#: karpenter.k8s.aws). Only the kinds this tree creates are listed.
CHART_KINDS: dict[str, set[tuple[str, str]]] = {
    "gateway-helm": {
        ("gateway.networking.k8s.io", k) for k in ("GatewayClass", "Gateway", "HTTPRoute")
    }
    | {
        ("gateway.envoyproxy.io", k)
        for k in (
            "EnvoyProxy",
            "SecurityPolicy",
            "BackendTrafficPolicy",
            "EnvoyExtensionPolicy",
            "ClientTrafficPolicy",
            "Backend",
        )
    },
    "ai-gateway-crds-helm": {("aigateway.envoyproxy.io", "AIGatewayRoute")},
    "ai-gateway-helm": set(),
    "nvidia-device-plugin": set(),
    "kube-prometheus-stack": {
        ("monitoring.coreos.com", k) for k in ("ServiceMonitor", "PodMonitor", "PrometheusRule")
    },
    "keda": {("keda.sh", "ScaledObject"), ("keda.sh", "TriggerAuthentication")},
    "external-secrets": {
        ("external-secrets.io", k) for k in ("ExternalSecret", "SecretStore", "ClusterSecretStore")
    },
    "karpenter-crd": {("karpenter.sh", "NodePool"), ("karpenter.k8s.aws", "EC2NodeClass")},
    "karpenter": set(),
    "opentelemetry-collector": set(),  # a Deployment, Service, ConfigMap: no CRDs
    "cert-manager": {("cert-manager.io", k) for k in ("Certificate", "Issuer", "ClusterIssuer")},
    # SageMaker HyperPod's chart (aws/sagemaker-hyperpod-cli helm_chart/HyperPodHelmChart):
    # the training operators' and HyperPod's kinds, none of which this tree creates.
    "helm_chart/HyperPodHelmChart": set(),
}


@dataclass(frozen=True)
class Timing:
    """Seconds each step takes in the model (round figures; only their order matters:
    a GPU pod takes minutes, a chart install a couple, a CPU pod seconds)."""

    tick_s: float = 5.0
    pod_start_s: float = 20.0  # schedule, pull, start a CPU container
    gpu_pod_start_s: float = 900.0  # a GPU node, the vLLM image, the weights
    chart_s: float = 120.0  # an upstream chart's Application becoming Healthy


def example_target_group_arn(env: EnvironmentSpec, region: str, name: str | None = None) -> str:
    """An ARN shaped as Elastic Load Balancing makes it (`targetgroup/<name>/<16 hex>`),
    for the target group the CDK would create; a cluster Secret carries it."""
    name = name or target_group_name(env.name)
    return (
        f"arn:aws:elasticloadbalancing:{region}:{env.aws.account}:targetgroup/{name}/"
        "0123456789abcdef"
    )


def load_manifests(directory: Path) -> list[Obj]:
    """The objects Argo CD reads from a directory source (top-level files only, Argo CD's
    default `directory.recurse: false`), or from a kustomization's resources (the region
    overlays only re-point images, which no health check reads)."""
    kustomization = next(
        (k for k in (directory / n for n in KUSTOMIZATIONS) if k.exists()), directory / "-"
    )
    if kustomization.exists():
        spec = yaml.safe_load(kustomization.read_text())
        out: list[Obj] = []
        for resource in spec["resources"]:
            target = (directory / resource).resolve()
            out += load_manifests(target) if target.is_dir() else _load_file(target)
        return out
    return [o for f in sorted(directory.glob("*.yaml")) for o in _load_file(f)]


def _load_file(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return group_of(obj), obj["kind"], meta.get("namespace", ""), meta["name"]


def _count(value: int | str | None, total: int, default: str, up: bool) -> int:
    """An int-or-percent of a rolling update, rounded as Kubernetes does (surge up,
    unavailable down)."""
    value = default if value is None else value
    if isinstance(value, int):
        return value
    share = int(value.rstrip("%")) * total / 100
    return math.ceil(share) if up else math.floor(share)


@dataclass
class Pod:
    revision: str
    created_s: float
    secrets: tuple[str, ...]
    gpu: bool
    running_s: float | None = None
    ready: bool = False


@dataclass
class AppModel:
    """Argo CD's view of one Application: a sync of this repo's path, or a chart."""

    obj: Obj
    operation: Operation | None
    manifests: list[Obj]
    healthy_at: float | None = None
    kinds: set[tuple[str, str]] = field(default_factory=set)


class Cluster:
    """The API server and controllers (see the module docstring)."""

    def __init__(
        self,
        picker_ready: PickerRule,
        *,
        timing: Timing = Timing(),
        cluster_secret: Obj | None = None,
        picker_name: str = "igw-picker",
    ) -> None:
        self.timing = timing
        self.picker_ready = picker_ready
        self.picker_name = picker_name
        self.cluster_secret = cluster_secret
        self.now = 0.0
        self.objects: dict[Key, Obj] = {}
        self.kinds = set(BUILTIN_KINDS)
        self.pods: dict[Key, list[Pod]] = {}
        self.progress_s: dict[Key, float] = {}
        self.apps: dict[str, AppModel] = {}
        self.history: dict[Key, list[tuple[float, str]]] = {}
        self.namespaces = set(BUILTIN_NAMESPACES)

    # -- the API server -------------------------------------------------------------
    def knows(self, group: str, kind: str) -> bool:
        return (group, kind) in self.kinds

    def has_namespace(self, name: str) -> bool:
        return name in self.namespaces

    def live(self, obj: Obj) -> Obj | None:
        return self.objects.get(_key(obj))

    def apply(self, obj: Obj) -> None:
        key = _key(obj)
        new = copy.deepcopy(obj)
        old = self.objects.get(key)
        if old is None:
            new["metadata"]["generation"] = 1
        else:
            generation = old["metadata"]["generation"]
            changed = {k: v for k, v in new.get("spec", {}).items()} != {
                k: v for k, v in old.get("spec", {}).items() if k in new.get("spec", {})
            }
            new["metadata"]["generation"] = generation + 1 if changed else generation
            if "replicas" not in new.get("spec", {}) and "replicas" in old.get("spec", {}):
                new["spec"]["replicas"] = old["spec"]["replicas"]  # KEDA's, not git's
            new["status"] = old.get("status", {})
        if obj["kind"] == "Deployment":
            new["spec"].setdefault("replicas", 1)  # the API server's default
        if obj["kind"] == "CustomResourceDefinition":
            self.kinds.add((obj["spec"]["group"], obj["spec"]["names"]["kind"]))
        if obj["kind"] == "Namespace":
            self.namespaces.add(obj["metadata"]["name"])
        self.objects[key] = new
        if obj["kind"] == "Application" and obj["metadata"]["name"] not in self.apps:
            self._start_app(new)
        if obj["kind"] == "ApplicationSet":
            self._generate(new)

    def find(self, kind: str, name: str) -> Obj | None:
        for (_, k, _, n), obj in self.objects.items():
            if (k, n) == (kind, name):
                return obj
        return None

    # -- the clock ----------------------------------------------------------------
    def run_until(self, done: Callable[[], bool], limit_s: float) -> bool:
        """Tick until `done()` or the limit; whether `done()` held."""
        while self.now < limit_s:
            self.step()
            if done():
                return True
        return False

    def step(self) -> None:
        self.now += self.timing.tick_s
        for app in list(self.apps.values()):
            self._reconcile_app(app)
        for key, obj in list(self.objects.items()):
            control = {
                "Deployment": self._deployment,
                "PodDisruptionBudget": self._pdb,
                "ClusterSecretStore": self._store,
                "SecretStore": self._store,
                "ExternalSecret": self._external_secret,
                "ScaledObject": self._scaled_object,
                "Issuer": self._issuer,
                "Certificate": self._certificate,
            }.get(obj["kind"])
            if control is not None:
                control(key, obj)
            found = health(obj)
            if found is not None:
                seen = self.history.setdefault(key, [])
                if not seen or seen[-1][1] != found[0]:
                    seen.append((self.now, found[0]))

    # -- controllers ----------------------------------------------------------------
    def _running(self, chart: str) -> bool:
        return any(
            a.healthy_at is not None
            and self.now >= a.healthy_at
            and a.obj["spec"]["source"].get("chart", a.obj["spec"]["source"].get("path")) == chart
            for a in self.apps.values()
        )

    def _secret_exists(self, name: str) -> bool:
        for obj in self.objects.values():
            issued = obj["kind"] == "Certificate" and obj["spec"]["secretName"] == name
            if issued and _ready(obj):
                return True
            if obj["kind"] == "ExternalSecret":
                target = obj["spec"].get("target", {}).get("name", obj["metadata"]["name"])
                ready = any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in obj.get("status", {}).get("conditions", [])
                )
                if target == name and ready:
                    return True
        return False

    def _pod_ready(self, deployment: Obj, pod: Pod) -> bool:
        if pod.running_s is None:
            return False
        if deployment["metadata"]["name"] == self.picker_name:
            return self.picker_ready(self)
        return True

    def _deployment(self, key: Key, obj: Obj) -> None:
        spec, meta = obj["spec"], obj["metadata"]
        template = spec["template"]["spec"]
        revision = json.dumps(spec["template"], sort_keys=True)
        pods = self.pods.setdefault(key, [])
        status = obj.setdefault("status", {})
        if status.get("observedGeneration") != meta["generation"]:
            self.progress_s[key] = self.now  # a new spec restarts the deadline
        want = int(spec["replicas"])
        strategy = spec.get("strategy", {}).get("rollingUpdate", {})
        surge = _count(strategy.get("maxSurge"), want, "25%", up=True)
        unavailable = _count(strategy.get("maxUnavailable"), want, "25%", up=False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        for pod in pods:
            start = self.timing.gpu_pod_start_s if pod.gpu else self.timing.pod_start_s
            secrets_ok = all(self._secret_exists(s) for s in pod.secrets)
            if pod.running_s is None and secrets_ok and self.now - pod.created_s >= start:
                pod.running_s = self.now
            was = pod.ready
            pod.ready = self._pod_ready(obj, pod)
            if pod.ready and not was:
                self.progress_s[key] = self.now
        new = [p for p in pods if p.revision == revision]
        old = [p for p in pods if p.revision != revision]
        available = sum(p.ready for p in pods)
        # scale down: unready old pods first, then ready ones while availability allows
        for pod in sorted(old, key=lambda p: p.ready):
            if not pod.ready or available - 1 >= want - unavailable:
                pods.remove(pod)
                available -= pod.ready
        extra = len(pods) - want if not old else 0
        for pod in sorted(new, key=lambda p: p.ready)[: max(extra, 0)]:
            pods.remove(pod)
        # scale up the new revision within the surge
        secrets = tuple(
            env["valueFrom"]["secretKeyRef"]["name"]
            for c in template.get("containers", [])
            for env in c.get("env", [])
            if "secretKeyRef" in env.get("valueFrom", {})
            and not env["valueFrom"]["secretKeyRef"].get("optional", False)
        ) + tuple(
            volume["secret"]["secretName"]
            for volume in template.get("volumes", [])
            if "secret" in volume and not volume["secret"].get("optional", False)
        )
        gpu = any(
            "nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {})
            for c in template.get("containers", [])
        )
        new = [p for p in pods if p.revision == revision]
        while len(new) < want and len(pods) < want + surge:
            pod = Pod(revision, self.now, secrets, gpu)
            pods.append(pod)
            new.append(pod)
            self.progress_s[key] = self.now  # a scaled-up ReplicaSet is progress
        updated = len(new)
        status.update(
            observedGeneration=meta["generation"],
            replicas=len(pods),
            updatedReplicas=updated,
            availableReplicas=sum(p.ready for p in pods),
            readyReplicas=sum(p.ready for p in pods),
        )
        complete = updated == want == len(pods) and all(p.ready for p in pods)
        deadline = spec.get("progressDeadlineSeconds", 600)
        if complete:
            reason = "NewReplicaSetAvailable"
        elif self.now - self.progress_s.get(key, self.now) > deadline:
            reason = "ProgressDeadlineExceeded"
        else:
            reason = "ReplicaSetUpdated"
        status["conditions"] = [
            {
                "type": "Progressing",
                "reason": reason,
                "status": "False" if reason.startswith("ProgressDeadline") else "True",
            }
        ]

    def pods_of(self, selector: dict[str, str]) -> list[Pod]:
        """The pods of every Deployment whose template labels match `selector`."""
        out: list[Pod] = []
        for key, obj in self.objects.items():
            if obj["kind"] != "Deployment":
                continue
            labels = obj["spec"]["template"]["metadata"].get("labels", {})
            if all(labels.get(k) == v for k, v in selector.items()):
                out += self.pods.get(key, [])
        return out

    def _pdb(self, key: Key, obj: Obj) -> None:
        spec = obj["spec"]
        pods = self.pods_of(spec["selector"].get("matchLabels", {}))
        expected = len(pods)
        healthy = sum(p.ready for p in pods)
        if "minAvailable" in spec:
            desired = _count(spec["minAvailable"], expected, "0%", up=True)
        else:
            desired = max(0, expected - _count(spec["maxUnavailable"], expected, "0%", up=True))
        allowed = healthy - desired if expected > 0 and healthy - desired > 0 else 0
        reason = "SufficientPods" if allowed > 0 else "InsufficientPods"
        obj["status"] = {
            "observedGeneration": obj["metadata"]["generation"],
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "disruptionsAllowed": allowed,
            "conditions": [
                {
                    "type": "DisruptionAllowed",
                    "reason": reason,
                    "status": "True" if allowed > 0 else "False",
                }
            ],
        }

    def _store(self, key: Key, obj: Obj) -> None:
        if self._running("external-secrets"):
            obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}

    def _external_secret(self, key: Key, obj: Obj) -> None:
        ref = obj["spec"]["secretStoreRef"]
        store = self.find(ref.get("kind", "SecretStore"), ref["name"])
        ready = store is not None and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in store.get("status", {}).get("conditions", [])
        )
        if ready and self._running("external-secrets"):
            obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}

    def _issuer(self, key: Key, obj: Obj) -> None:
        if not self._running("cert-manager"):
            return
        ca = obj["spec"].get("ca")
        if ca is None or self._secret_exists(ca["secretName"]):
            obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        else:
            message = f"Error getting keypair for CA issuer: secret {ca['secretName']} not found"
            obj["status"] = {
                "conditions": [{"type": "Ready", "status": "False", "message": message}]
            }

    def _certificate(self, key: Key, obj: Obj) -> None:
        if not self._running("cert-manager"):
            return
        ref = obj["spec"]["issuerRef"]
        issuer = self.find(ref.get("kind", "Issuer"), ref["name"])
        issuing = any(
            c["type"] == "Issuing" and c["status"] == "True"
            for c in obj.get("status", {}).get("conditions", [])
        )
        if issuing and issuer is not None and _ready(issuer):  # signed a tick after asking
            obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        elif not _ready(obj):
            obj["status"] = {
                "conditions": [
                    {"type": "Issuing", "status": "True"},
                    {"type": "Ready", "status": "False", "reason": "DoesNotExist"},
                ]
            }

    def _scaled_object(self, key: Key, obj: Obj) -> None:
        if not self._running("keda"):
            return
        target = self.find("Deployment", obj["spec"]["scaleTargetRef"]["name"])
        if target is None:
            return
        replicas = int(obj["spec"].get("minReplicaCount", 0))
        if target["spec"].get("replicas") != replicas:
            target["spec"]["replicas"] = replicas
            target["metadata"]["generation"] += 1
        obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}

    # -- Argo CD's Application and ApplicationSet controllers --------------------------
    def _start_app(self, obj: Obj) -> None:
        source = obj["spec"]["source"]
        name = obj["metadata"]["name"]
        upstream = source.get("chart") or (
            source["path"] if not (REPO_ROOT / source["path"]).is_dir() else None
        )
        policy = obj["spec"].get("syncPolicy", {})
        destination = obj["spec"]["destination"].get("namespace")
        create_namespace = "CreateNamespace=true" in policy.get("syncOptions", [])
        if upstream is not None:
            if create_namespace and destination:
                self.namespaces.add(destination)
            kinds = CHART_KINDS[upstream]
            healthy_at = self.now + self.timing.chart_s
            self.apps[name] = AppModel(obj, None, [], healthy_at=healthy_at, kinds=kinds)
            return
        manifests = load_manifests(REPO_ROOT / source["path"])
        retry = policy.get("retry", {})
        backoff = retry.get("backoff", {})
        operation = Operation(
            manifests,
            self,
            retry_limit=int(retry.get("limit", 5)),
            backoff_s=_seconds(backoff.get("duration", "5s")),
            factor=float(backoff.get("factor", 2)),
            max_backoff_s=_seconds(backoff.get("maxDuration", "3m")),
            create_namespace=destination if create_namespace else None,
        )
        self.apps[name] = AppModel(obj, operation, manifests)

    def _reconcile_app(self, app: AppModel) -> None:
        live = self.objects[_key(app.obj)]
        if app.operation is None:
            installed = app.healthy_at is not None and self.now >= app.healthy_at
            if installed:
                self.kinds |= app.kinds
            live["status"] = {"health": {"status": "Healthy" if installed else "Progressing"}}
            return
        app.operation.step(self.now)
        lives = [o for o in (self.live(m) for m in app.manifests) if o is not None]
        status, message = aggregate(lives)
        live["status"] = {
            "health": {"status": status, "message": message},
            "operationState": {"phase": app.operation.outcome.phase},
        }

    def _generate(self, appset: Obj) -> None:
        """The git-directories x clusters matrix and the clusters generator of the
        bootstrap ApplicationSets, for the one cluster Secret of this play."""
        secret = self.cluster_secret
        if secret is None:
            return
        labels = secret["metadata"]["labels"]
        spec = appset["spec"]
        generators = spec["generators"][0]
        paths: list[str] = [""]
        clusters = generators.get("clusters")
        if "matrix" in generators:
            git = generators["matrix"]["generators"][0]["git"]["directories"][0]["path"]
            paths = [str(p.relative_to(REPO_ROOT)) for p in sorted(REPO_ROOT.glob(git))]
            paths = [p for p in paths if Path(p).name == labels.get("igw.dev/environment")]
        elif clusters is not None and not _selects(clusters.get("selector", {}), labels):
            paths = []
        for path in paths:
            params = {
                ".path.basename": Path(path).name,
                ".path.path": path,
                ".nameNormalized": secret["metadata"]["name"],
                ".server": secret["stringData"]["server"],
            }
            meta = {"labels": labels, "annotations": secret["metadata"].get("annotations", {})}

            def fill(
                text: str, params: dict[str, str] = params, meta: dict[str, Any] = meta
            ) -> str:
                text = re.sub(
                    r'\{\{index \.metadata\.(labels|annotations) "([^"]+)"\}\}',
                    lambda m: meta[m.group(1)][m.group(2)],
                    text,
                )
                for name, value in params.items():
                    text = text.replace("{{" + name + "}}", value)
                return text

            template = _map_strings(spec["template"], fill)
            app = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", **template}
            app["metadata"]["namespace"] = "argocd"
            self.apply(app)
        appset["status"] = {"conditions": [{"type": "ResourcesUpToDate", "status": "True"}]}


def _map_strings(node: Any, fill: Callable[[str], str]) -> Any:
    """A copy of `node` with `fill` applied to every string in it (a Go template of an
    ApplicationSet fills every string field of its template)."""
    if isinstance(node, dict):
        return {k: _map_strings(v, fill) for k, v in node.items()}
    if isinstance(node, list):
        return [_map_strings(v, fill) for v in node]
    return fill(node) if isinstance(node, str) else node


def _ready(obj: Obj) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions In/Exists) on labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        if operator == "Exists" and key not in labels:
            return False
        if operator == "In" and labels.get(key) not in expression["values"]:
            return False
    return True


def _seconds(text: str) -> float:
    """A Go duration of the kind Argo CD's retry takes (`10s`, `5m`, `1h`)."""
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]]
