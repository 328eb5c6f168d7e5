"""One Argo CD sync operation, iteration by iteration, as gitops-engine runs it.

Transcribed (facts, not code) from gitops-engine bd7681ae3f8b, the version Argo CD
v2.13.2 vendors (see argo_health.py for why that version):

* `pkg/sync/sync_tasks.go`: tasks sort by phase (PreSync, Sync, PostSync), wave
  (`argocd.argoproj.io/sync-wave`, else the Helm hook weight, else 0), kind (Helm's
  kind order: Namespace ... APIService, custom resources last) and name; `adjustDeps`
  pulls a Namespace or a CRD forward into the wave of the first task that needs it;
* `pkg/sync/syncwaves/waves.go`, `pkg/sync/sync_phase.go`, `pkg/sync/hook/hook.go`:
  the phases a hook annotation puts a task in, `Skip` hooks left out;
* `pkg/sync/sync_context.go: getSyncTasks`: before the first apply, every kind must be
  known to the API server, or be created by a CRD of the same sync, or carry
  `SkipDryRunOnMissingResource=true`, else the operation fails at once;
* `pkg/sync/sync_context.go: Sync`, one call per reconcile: running tasks take their
  result from health (Healthy: succeeded, Degraded: failed, no check: succeeded at
  once, Progressing: still running); a multi-wave sync waits while any task runs; any
  completed and unsuccessful task fails the operation; otherwise the next phase/wave
  is applied, and the last wave succeeds the moment it is applied ("EVEN if those
  objects subsequently degraded");
* argo-cd v2.13.2 `controller/appcontroller.go: processRequestedAppOperation` and
  `pkg/apis/application/v1alpha1/types.go: RetryStrategy.NextRetryAt`: a failed
  operation is retried `retry.limit` times (without end when the limit is negative:
  `RetryCount < Limit || Limit < 0`) after `backoff.duration * factor^n`, capped at
  `maxDuration`; `autoSync` then skips the failed revision ("Skipping auto-sync:
  failed previous sync attempt"), so the app stays failed until a new commit;
* `pkg/sync/sync_context.go: autoCreateNamespace` (`CreateNamespace=true`): a PreSync
  task creates the destination namespace when no manifest of the app is that Namespace
  and the cluster lacks it; applying an object into a namespace that does not exist
  fails (the API server's NotFound).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .argo_health import DEGRADED, HEALTHY, group_of, health

__all__ = ["KIND_ORDER", "Operation", "Outcome", "SyncTask", "sort_tasks"]

Obj = dict[str, Any]
WAVE = "argocd.argoproj.io/sync-wave"
HOOK = "argocd.argoproj.io/hook"
HELM_HOOK = "helm.sh/hook"
HELM_WEIGHT = "helm.sh/hook-weight"
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
PHASE_ORDER = {"PreSync": -1, "Sync": 0, "PostSync": 1, "SyncFail": 2}
HELM_PHASES = {
    "pre-install": "PreSync",
    "pre-upgrade": "PreSync",
    "post-install": "PostSync",
    "post-upgrade": "PostSync",
}
#: gitops-engine `sync_tasks.go` kindOrder (Helm's `releaseutil/kind_sorter.go`); a kind
#: not listed sorts after all of them.
KIND_ORDER = [
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
]


class ApiServer(Protocol):
    """What a sync needs of the cluster (tests/gitops/cluster_model.py)."""

    def knows(self, group: str, kind: str) -> bool: ...
    def has_namespace(self, name: str) -> bool: ...
    def apply(self, obj: Obj) -> None: ...
    def live(self, obj: Obj) -> Obj | None: ...


def _annotations(obj: Obj) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def _hook_types(obj: Obj) -> list[str]:
    argo = [t.strip() for t in _annotations(obj).get(HOOK, "").split(",") if t.strip()]
    if argo:
        return argo
    helm = [t.strip() for t in _annotations(obj).get(HELM_HOOK, "").split(",") if t.strip()]
    return [HELM_PHASES[t] for t in helm if t in HELM_PHASES]


def phases(obj: Obj) -> list[str]:
    """`sync_phase.go: syncPhases`: a Skip-only hook has none, a hook its types."""
    types = _hook_types(obj)
    if types == ["Skip"]:
        return []
    hooks = sorted({t for t in types if t in PHASE_ORDER})
    return hooks or ["Sync"]


def skips_dry_run(obj: Obj) -> bool:
    options = _annotations(obj).get(SYNC_OPTIONS, "")
    return "SkipDryRunOnMissingResource=true" in [o.strip() for o in options.split(",")]


@dataclass
class SyncTask:
    obj: Obj
    phase: str
    wave_override: int | None = None
    result: str = ""  # "", Running, Succeeded, Failed
    message: str = ""

    @property
    def wave(self) -> int:
        if self.wave_override is not None:
            return self.wave_override
        notes = _annotations(self.obj)
        return int(notes.get(WAVE, notes.get(HELM_WEIGHT, "0")))

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def is_hook(self) -> bool:
        return bool(_hook_types(self.obj))

    def key(self) -> tuple[int, int, int, str]:
        kind = KIND_ORDER.index(self.kind) - len(KIND_ORDER) if self.kind in KIND_ORDER else 0
        return PHASE_ORDER[self.phase], self.wave, kind, self.name


def _adjust(
    tasks: list[SyncTask], dep: Callable[[Obj], str | None], ref: Callable[[Obj], str | None]
) -> None:
    """`sync_tasks.go: adjustDeps`: a dependency found after the first task that refers
    to it moves to that task's place, phase and wave."""
    first: dict[str, int] = {}
    for i, task in enumerate(list(tasks)):
        key = dep(task.obj)
        if key is not None:
            if key in first:
                at = first[key]
                task.wave_override, task.phase = tasks[at].wave, tasks[at].phase
                tasks.pop(i)
                tasks.insert(at, task)
                first = {k: (v + 1 if v >= at else v) for k, v in first.items()}
        else:
            refers = ref(task.obj)
            if refers is not None and refers not in first:
                first[refers] = i


def sort_tasks(tasks: list[SyncTask]) -> list[SyncTask]:
    """`syncTasks.Sort`: the order above, then namespaces and CRDs before their users."""
    ordered = sorted(tasks, key=SyncTask.key)
    _adjust(
        ordered,
        lambda o: o["metadata"]["name"] if o["kind"] == "Namespace" else None,
        lambda o: o["metadata"].get("namespace") or None,
    )
    _adjust(
        ordered,
        lambda o: (
            f"{o['spec']['group']}/{o['spec']['names']['kind']}"
            if o["kind"] == "CustomResourceDefinition"
            else None
        ),
        lambda o: f"{group_of(o)}/{o['kind']}",
    )
    return ordered


@dataclass
class Outcome:
    phase: str  # Running, Succeeded, Failed
    message: str = ""
    attempts: int = 1
    finished_at: float | None = None
    applied_waves: list[int] = field(default_factory=list)


@dataclass
class Operation:
    """One sync operation of one Application, with its retry strategy."""

    manifests: list[Obj]
    api: ApiServer
    retry_limit: int = 5
    backoff_s: float = 10.0
    factor: float = 2.0
    max_backoff_s: float = 300.0
    #: The destination namespace, where the app syncs with `CreateNamespace=true`.
    create_namespace: str | None = None
    outcome: Outcome = field(default_factory=lambda: Outcome("Running"))
    _tasks: list[SyncTask] | None = None
    _retry_at: float | None = None

    def _fresh_tasks(self) -> list[SyncTask]:
        tasks = [SyncTask(obj, phase) for obj in self.manifests for phase in phases(obj)]
        name = self.create_namespace
        own = [o for o in self.manifests if o["kind"] == "Namespace"]
        if name is not None and name not in {o["metadata"]["name"] for o in own}:
            tasks += self._namespace_task(name)
        return sort_tasks(tasks)

    def _namespace_task(self, name: str) -> list[SyncTask]:
        if self.api.has_namespace(name):
            return []
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        return [SyncTask(namespace, "PreSync")]

    def _fail(self, now: float, message: str) -> None:
        if self.retry_limit < 0 or self.outcome.attempts <= self.retry_limit:
            delay = self.backoff_s * self.factor ** (self.outcome.attempts - 1)
            self._retry_at = now + min(delay, self.max_backoff_s)
            self.outcome.message = message
            self._tasks = None
        else:
            self.outcome.phase, self.outcome.message = "Failed", message
            self.outcome.finished_at = now

    def step(self, now: float) -> None:
        """One reconcile of the operation (`syncContext.Sync`), or a wait for a retry."""
        if self.outcome.phase != "Running":
            return
        if self._retry_at is not None:
            if now < self._retry_at:
                return
            self._retry_at = None
            self.outcome.attempts += 1
        if self._tasks is None:
            tasks = self._fresh_tasks()
            own_crds = {
                (t.obj["spec"]["group"], t.obj["spec"]["names"]["kind"])
                for t in tasks
                if t.kind == "CustomResourceDefinition"
            }
            invalid = [
                t
                for t in tasks
                if not self.api.knows(group_of(t.obj), t.kind)
                and (group_of(t.obj), t.kind) not in own_crds
                and not skips_dry_run(t.obj)
            ]
            if invalid:
                names = ", ".join(f"{t.kind}/{t.name}" for t in invalid)
                self._fail(now, f"one or more synchronization tasks are not valid: {names}")
                return
            self._tasks = tasks
        self._sync(now, self._tasks)

    def _sync(self, now: float, tasks: list[SyncTask]) -> None:
        for task in tasks:
            if task.result != "Running":
                continue
            live = self.api.live(task.obj)
            found = None if live is None else health(live)
            if found is None or found[0] == HEALTHY:
                task.result = "Succeeded"
            elif found[0] == DEGRADED:
                task.result, task.message = "Failed", found[1]
        waves = {(t.phase, t.wave) for t in tasks}
        multi_step = len(waves) > 1
        if any((multi_step or t.is_hook) and t.result == "Running" for t in tasks):
            return
        failed = [t for t in tasks if t.result == "Failed"]
        if failed:
            detail = "; ".join(f"{t.kind}/{t.name}: {t.message}" for t in failed)
            self._fail(now, f"one or more synchronization tasks completed unsuccessfully: {detail}")
            return
        pending = [t for t in tasks if t.result == ""]
        if not pending:
            self._succeed(now, "successfully synced (no more tasks)")
            return
        phase, wave = pending[0].phase, pending[0].wave
        now_tasks = [t for t in pending if (t.phase, t.wave) == (phase, wave)]
        remaining = [t for t in pending if (t.phase, t.wave) != (phase, wave) or t.is_hook]
        for task in now_tasks:
            namespace = task.obj["metadata"].get("namespace")
            if not self.api.knows(group_of(task.obj), task.kind):
                task.result, task.message = "Failed", "the server could not find the kind"
                self._fail(now, f"one or more objects failed to apply: {task.kind}/{task.name}")
                return
            if namespace and not self.api.has_namespace(namespace):
                task.result, task.message = "Failed", f'namespaces "{namespace}" not found'
                self._fail(now, f"one or more objects failed to apply: {task.kind}/{task.name}")
                return
            self.api.apply(task.obj)
            task.result = "Running"
        if wave not in self.outcome.applied_waves:
            self.outcome.applied_waves.append(wave)
        if not remaining:
            self._succeed(now, "successfully synced (all tasks run)")

    def _succeed(self, now: float, message: str) -> None:
        self.outcome.phase, self.outcome.message = "Succeeded", message
        self.outcome.finished_at = now
