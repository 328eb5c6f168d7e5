"""Argo CD's health assessment of a live object, transcribed for the sync play.

Each rule below is a transcription (facts, not code) of what Argo CD v2.13.2 decides
for a kind. v2.13.2 is the `appVersion` of the argo-cd chart 7.7.10 the stacks pin
(argoproj/argo-helm tag `argo-cd-7.7.10`, charts/argo-cd/Chart.yaml); it vendors
gitops-engine v0.7.1-0.20240905010810-bd7681ae3f8b (argo-cd go.mod).

* built-in checks: gitops-engine `pkg/health/health_<kind>.go` at bd7681ae3f8b
  (Deployment, StatefulSet, DaemonSet, ReplicaSet, PersistentVolumeClaim, Service,
  Ingress, Job, Pod, APIService); `pkg/health/health.go: GetHealthCheckFunc` picks
  one by group and kind, and a kind it does not list has no health (None);
* Lua checks shipped with Argo CD: argo-cd v2.13.2
  `resource_customizations/<group>/<kind>/health.lua` for the kinds this tree uses
  (argoproj.io ApplicationSet, keda.sh ScaledObject, external-secrets.io
  ExternalSecret, SecretStore and ClusterSecretStore, policy PodDisruptionBudget, cert-manager.io
  Certificate, Issuer and ClusterIssuer);
* our own `argocd-cm` check for `argoproj.io/Application`
  (envspec/argocd_manifests.py `APPLICATION_HEALTH_LUA`): Argo CD v1.8 removed the
  built-in one.

`health(obj)` answers `(status, message)` or None where Argo CD has no check (a
ConfigMap, a CRD, an HTTPRoute): gitops-engine then counts the task successful at once
(`pkg/sync/sync_context.go: Sync`, "some objects (e.g. secret) do not have health").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "DEGRADED",
    "HEALTHY",
    "MISSING",
    "PROGRESSING",
    "SUSPENDED",
    "Health",
    "aggregate",
    "health",
    "is_worse",
]

HEALTHY = "Healthy"
SUSPENDED = "Suspended"
PROGRESSING = "Progressing"
MISSING = "Missing"
DEGRADED = "Degraded"
UNKNOWN = "Unknown"
#: gitops-engine `pkg/health/health.go: healthOrder`, most healthy first.
HEALTH_ORDER = (HEALTHY, SUSPENDED, PROGRESSING, MISSING, DEGRADED, UNKNOWN)

Health = tuple[str, str]
Obj = dict[str, Any]


def is_worse(current: str, new: str) -> bool:
    """gitops-engine `health.IsWorse`."""
    return HEALTH_ORDER.index(new) > HEALTH_ORDER.index(current)


def _conditions(obj: Obj) -> list[dict[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _deployment(obj: Obj) -> Health:
    """gitops-engine `health_deployment.go: getAppsv1DeploymentHealth` (after kubectl's
    rollout status)."""
    spec, status = obj["spec"], obj.get("status") or {}
    name = obj["metadata"]["name"]
    if spec.get("paused"):
        return SUSPENDED, "Deployment is paused"
    if obj["metadata"].get("generation", 1) > status.get("observedGeneration", 0):
        return PROGRESSING, "observed deployment generation less than desired generation"
    for cond in status.get("conditions") or []:
        if cond["type"] == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return DEGRADED, f"Deployment {name!r} exceeded its progress deadline"
    replicas = spec.get("replicas")
    updated = status.get("updatedReplicas", 0)
    if replicas is not None and updated < replicas:
        return PROGRESSING, f"{updated} out of {replicas} new replicas have been updated"
    if status.get("replicas", 0) > updated:
        return PROGRESSING, "old replicas are pending termination"
    if status.get("availableReplicas", 0) < updated:
        return PROGRESSING, f"{status.get('availableReplicas', 0)} of {updated} available"
    return HEALTHY, ""


def _statefulset(obj: Obj) -> Health:
    """gitops-engine `health_statefulset.go` (partitioned and OnDelete cases folded into
    the rolling case: the tree has neither)."""
    spec, status = obj["spec"], obj.get("status") or {}
    observed = status.get("observedGeneration", 0)
    if observed == 0 or obj["metadata"].get("generation", 1) > observed:
        return PROGRESSING, "Waiting for statefulset spec update to be observed..."
    replicas = spec.get("replicas")
    if replicas is not None and status.get("readyReplicas", 0) < replicas:
        return PROGRESSING, "Waiting for pods to be ready..."
    if (spec.get("updateStrategy") or {}).get("type") == "OnDelete":
        return HEALTHY, ""
    if status.get("updateRevision") != status.get("currentRevision"):
        return PROGRESSING, "waiting for statefulset rolling update to complete"
    return HEALTHY, ""


def _daemonset(obj: Obj) -> Health:
    """gitops-engine `health_daemonset.go`."""
    status = obj.get("status") or {}
    if obj["metadata"].get("generation", 1) > status.get("observedGeneration", 0):
        return PROGRESSING, "observed daemon set generation less than desired generation"
    if (obj["spec"].get("updateStrategy") or {}).get("type") == "OnDelete":
        return HEALTHY, ""
    desired = status.get("desiredNumberScheduled", 0)
    if status.get("updatedNumberScheduled", 0) < desired:
        return PROGRESSING, "new pods are being updated"
    if status.get("numberAvailable", 0) < desired:
        return PROGRESSING, "updated pods are not all available"
    return HEALTHY, ""


def _replicaset(obj: Obj) -> Health:
    """gitops-engine `health_replicaset.go`."""
    status = obj.get("status") or {}
    if obj["metadata"].get("generation", 1) > status.get("observedGeneration", 0):
        return PROGRESSING, "observed replica set generation less than desired generation"
    for cond in status.get("conditions") or []:
        if cond["type"] == "ReplicaFailure" and cond["status"] == "True":
            return DEGRADED, cond.get("message", "")
    replicas = obj["spec"].get("replicas")
    if replicas is not None and status.get("availableReplicas", 0) < replicas:
        return PROGRESSING, "Waiting for rollout to finish"
    return HEALTHY, ""


def _pvc(obj: Obj) -> Health:
    """gitops-engine `health_pvc.go`."""
    phase = str((obj.get("status") or {}).get("phase"))
    return {"Lost": DEGRADED, "Pending": PROGRESSING, "Bound": HEALTHY}.get(phase, UNKNOWN), ""


def _service(obj: Obj) -> Health:
    """gitops-engine `health_service.go`: only a LoadBalancer waits for an address."""
    if obj["spec"].get("type") == "LoadBalancer":
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress")
        return (HEALTHY, "") if ingress else (PROGRESSING, "")
    return HEALTHY, ""


def _ingress(obj: Obj) -> Health:
    """gitops-engine `health_ingress.go`."""
    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress")
    return (HEALTHY, "") if ingress else (PROGRESSING, "")


def _job(obj: Obj) -> Health:
    """gitops-engine `health_job.go`."""
    failed = complete = suspended = False
    for cond in _conditions(obj):
        if cond["type"] == "Failed":
            failed = complete = True
        elif cond["type"] == "Complete":
            complete = True
        elif cond["type"] == "Suspended":
            complete = True
            suspended = cond["status"] == "True"
    if not complete:
        return PROGRESSING, ""
    if failed:
        return DEGRADED, "job failed"
    return (SUSPENDED, "") if suspended else (HEALTHY, "")


def _pod(obj: Obj) -> Health:
    """gitops-engine `health_pod.go` (restartPolicy Always: waiting reasons `Err*`,
    `*Error`, `*BackOff` are Degraded; Running and Ready is Healthy)."""
    status = obj.get("status") or {}
    always = obj["spec"].get("restartPolicy", "Always") == "Always"
    containers = status.get("containerStatuses") or []
    if always:
        for c in containers:
            reason = ((c.get("state") or {}).get("waiting") or {}).get("reason", "")
            if reason.startswith("Err") or reason.endswith(("Error", "BackOff")):
                return DEGRADED, reason
    phase = status.get("phase")
    if phase == "Pending":
        return PROGRESSING, ""
    if phase == "Succeeded":
        return HEALTHY, ""
    if phase == "Failed":
        return DEGRADED, status.get("message", "")
    if phase == "Running":
        if not always:
            return PROGRESSING, ""
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []
        )
        if ready:
            return HEALTHY, ""
        if any(c.get("lastState", {}).get("terminated") for c in containers):
            return DEGRADED, ""
        return PROGRESSING, ""
    return UNKNOWN, ""


def _apiservice(obj: Obj) -> Health:
    """gitops-engine `health_apiservice.go`."""
    for cond in _conditions(obj):
        if cond["type"] == "Available":
            return (HEALTHY if cond["status"] == "True" else PROGRESSING), ""
    return PROGRESSING, "Waiting to be processed"


def _ready_condition(waiting: str) -> Callable[[Obj], Health]:
    """argo-cd v2.13.2 `external-secrets.io/{ExternalSecret,SecretStore,ClusterSecretStore}
    /health.lua` (and cert-manager.io's Issuer, ClusterIssuer): condition Ready False is
    Degraded, True is Healthy, else Progressing."""

    def check(obj: Obj) -> Health:
        for cond in _conditions(obj):
            if cond["type"] == "Ready" and cond["status"] == "False":
                return DEGRADED, cond.get("message", "")
            if cond["type"] == "Ready" and cond["status"] == "True":
                return HEALTHY, cond.get("message", "")
        return PROGRESSING, waiting

    return check


def _certificate(obj: Obj) -> Health:
    """argo-cd v2.13.2 `cert-manager.io/Certificate/health.lua`: `Issuing` True first
    (Progressing), then Ready False is Degraded, True is Healthy, else Progressing."""
    for cond in _conditions(obj):
        if cond["type"] == "Issuing" and cond["status"] == "True":
            return PROGRESSING, cond.get("message", "")
    return _ready_condition("Waiting for certificate")(obj)


def _scaledobject(obj: Obj) -> Health:
    """argo-cd v2.13.2 `keda.sh/ScaledObject/health.lua`."""
    healthy = degraded = paused = False
    for cond in _conditions(obj):
        if cond["type"] == "Ready":
            degraded = degraded or cond["status"] == "False"
            healthy = healthy or cond["status"] == "True"
        if cond["type"] == "Paused" and cond["status"] == "True":
            paused = True
    if degraded:
        return DEGRADED, ""
    if healthy:
        return (SUSPENDED, "") if paused else (HEALTHY, "")
    return PROGRESSING, "Creating HorizontalPodAutoscaler Object"


def _pdb(obj: Obj) -> Health:
    """argo-cd v2.13.2 `policy/PodDisruptionBudget/health.lua`: a False condition is
    Degraded unless its reason is InsufficientPods (v2.13.0 degraded on that too; fixed
    by argo-cd #20665 for issue #20171); no condition yet is Progressing."""
    result: Health = (PROGRESSING, "Waiting for status")
    for cond in _conditions(obj):
        if cond["status"] == "False" and cond.get("reason") != "InsufficientPods":
            return DEGRADED, f"PodDisruptionBudget has {cond.get('reason')}"
        result = (HEALTHY, f"PodDisruptionBudget has {cond.get('reason')}")
    return result


def _applicationset(obj: Obj) -> Health:
    """argo-cd v2.13.2 `argoproj.io/ApplicationSet/health.lua`: ErrorOccurred True is
    Degraded, ResourcesUpToDate True is Healthy, and no condition defaults to Healthy.
    It never looks at the health of the Applications it generated."""
    for cond in _conditions(obj):
        if cond["type"] == "ErrorOccurred" and cond["status"] == "True":
            return DEGRADED, cond.get("message", "")
        if cond["type"] == "ResourcesUpToDate" and cond["status"] == "True":
            return HEALTHY, cond.get("message", "")
    return HEALTHY, ""


def _application(obj: Obj) -> Health:
    """Our argocd-cm check (envspec/argocd_manifests.py `APPLICATION_HEALTH_LUA`):
    the child's own `status.health`, Progressing until it has one."""
    child = (obj.get("status") or {}).get("health") or {}
    if child.get("status"):
        return child["status"], child.get("message", "")
    return PROGRESSING, "waiting for the application's health"


#: (API group, kind) -> check. The group is "" for the core API.
CHECKS: dict[tuple[str, str], Callable[[Obj], Health]] = {
    ("apps", "Deployment"): _deployment,
    ("apps", "StatefulSet"): _statefulset,
    ("apps", "DaemonSet"): _daemonset,
    ("apps", "ReplicaSet"): _replicaset,
    ("", "PersistentVolumeClaim"): _pvc,
    ("", "Service"): _service,
    ("", "Pod"): _pod,
    ("networking.k8s.io", "Ingress"): _ingress,
    ("extensions", "Ingress"): _ingress,
    ("batch", "Job"): _job,
    ("apiregistration.k8s.io", "APIService"): _apiservice,
    ("external-secrets.io", "ExternalSecret"): _ready_condition("Waiting for ExternalSecret"),
    ("external-secrets.io", "ClusterSecretStore"): _ready_condition(
        "Waiting for ClusterSecretStore"
    ),
    ("external-secrets.io", "SecretStore"): _ready_condition("Waiting for SecretStore"),
    ("keda.sh", "ScaledObject"): _scaledobject,
    # `cert-manager.io/{Issuer,ClusterIssuer}/health.lua`: the Ready rule
    ("cert-manager.io", "Issuer"): _ready_condition("Initializing issuer"),
    ("cert-manager.io", "ClusterIssuer"): _ready_condition("Initializing ClusterIssuer"),
    ("cert-manager.io", "Certificate"): _certificate,
    ("policy", "PodDisruptionBudget"): _pdb,
    ("argoproj.io", "ApplicationSet"): _applicationset,
    ("argoproj.io", "Application"): _application,
}


def group_of(obj: Obj) -> str:
    api = str(obj["apiVersion"])
    return api.split("/")[0] if "/" in api else ""


def health(obj: Obj) -> Health | None:
    """gitops-engine `health.GetResourceHealth`: an object being deleted is Progressing;
    otherwise the kind's check, or None where Argo CD has none."""
    if obj["metadata"].get("deletionTimestamp"):
        return PROGRESSING, "Pending deletion"
    check = CHECKS.get((group_of(obj), obj["kind"]))
    return None if check is None else check(obj)


def aggregate(objects: list[Obj]) -> Health:
    """argo-cd v2.13.2 `controller/health.go: setApplicationHealth`: the worst health of
    the app's resources; a resource without a check does not count, nor a child
    Application that is Missing or Unknown."""
    worst: Health = (HEALTHY, "")
    for obj in objects:
        found = health(obj)
        if found is None:
            continue
        if obj["kind"] == "Application" and found[0] in (MISSING, UNKNOWN):
            continue
        if is_worse(worst[0], found[0]):
            worst = (found[0], f"{obj['kind']}/{obj['metadata']['name']}: {found[1]}")
    return worst
