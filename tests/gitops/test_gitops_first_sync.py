"""Argo CD's first sync of each environment on an empty cluster, and a rollout of each
component, played wave by wave.

The play (argo_sync.py: gitops-engine's sync loop; argo_health.py: Argo CD's health
checks; cluster_model.py: a MODEL of the API server and controllers, since no cluster
runs here) starts from what `cdk deploy` leaves: EKS, Argo CD, the AWS Load Balancer
Controller, the `in-cluster` Secret of the environment (envspec/argocd_manifests.py
`cluster_secret`). It syncs `gitops/bootstrap` as the root Application; the
ApplicationSets it creates generate the environment's Application
(`regions/<region>/`, the rendered tree) and its monitoring one; every Application syncs
by the same loop.

The picker's readiness is the one rule that is ours: the real picker is asked
(picker_probe.py), and the two models it can follow are played side by side, so the
deadlock of issue 22 item 1 is shown where it exists and proved gone where readiness no
longer waits on pods.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from envspec.argocd_manifests import cluster_secret
from envspec.environment import load_environment

from .argo_health import DEGRADED, HEALTHY, PROGRESSING, health
from .argo_sync import Operation, Outcome
from .cluster_model import (
    REPO_ROOT,
    Cluster,
    PickerRule,
    example_target_group_arn,
    load_manifests,
)
from .picker_probe import (
    picker_config,
    real_picker_readings,
    rule_from_readings,
    serves_when_configured,
    waits_on_pods,
)

ENVIRONMENTS = sorted(p.name for p in (REPO_ROOT / "gitops/environments").iterdir())
#: Four virtual hours: enough for every retry of every wave and a GPU fleet's start.
LIMIT_S = 4 * 3600.0


@dataclass
class Play:
    cluster: Cluster
    root: Operation

    def app(self, name: str) -> Outcome:
        operation = self.cluster.apps[name].operation
        assert operation is not None, name
        return operation.outcome

    def env_app(self) -> str:
        return next(
            n
            for n in self.cluster.apps
            if n.startswith("inference-gateway-") and "monitoring" not in n
        )


def first_sync(env: str, rule: PickerRule) -> Play:
    """Sync gitops/bootstrap on an empty cluster of `env` until every Argo CD operation
    has finished (or the limit)."""
    spec = load_environment(env)
    secret = cluster_secret(
        env,
        spec.aws.region,
        spec.cluster.name,
        target_group_arn=example_target_group_arn(spec, spec.aws.region),
        hyperpod=spec.cluster.hyperpod.enabled,
    )
    cluster = Cluster(rule, cluster_secret=secret)
    root = Operation(load_manifests(REPO_ROOT / "gitops/bootstrap"), cluster)
    play = Play(cluster, root)

    def finished() -> bool:
        root.step(cluster.now)
        operations = [a.operation for a in cluster.apps.values() if a.operation is not None]
        return root.outcome.phase != "Running" and all(
            o.outcome.phase != "Running" for o in operations
        )

    cluster.run_until(finished, LIMIT_S)
    return play


@pytest.fixture(scope="module")
def real_rule() -> Iterator[dict[str, tuple[bool, bool]]]:
    """The real picker's two readings, per environment (its rendered config)."""
    readings: dict[str, tuple[bool, bool]] = {}
    for env in ENVIRONMENTS:
        manifests = load_manifests(REPO_ROOT / f"gitops/environments/{env}/rendered")
        config_map = next(m for m in manifests if m["metadata"]["name"] == "igw-picker-config")
        probe = Cluster(serves_when_configured)
        probe.apply(config_map)
        config = picker_config(probe)
        assert config is not None
        readings[env] = real_picker_readings(config)
    yield readings


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_first_sync_completes_when_readiness_does_not_wait_on_pods(env: str) -> None:
    play = first_sync(env, serves_when_configured)
    assert play.root.outcome.phase == "Succeeded", play.root.outcome
    env_app = play.env_app()
    outcome = play.app(env_app)
    assert outcome.phase == "Succeeded", outcome
    assert outcome.applied_waves == [-2, -1, 0, 1, 2]
    monitoring = next(n for n in play.cluster.apps if "monitoring" in n)
    assert play.app(monitoring).phase == "Succeeded"
    # HyperPod's Helm chart only where the cluster Secret says HyperPod joins (prod)
    hyperpod = play.cluster.find("Application", "hyperpod-dependencies-in-cluster")
    assert (hyperpod is not None) == load_environment(env).cluster.hyperpod.enabled
    # and then the environment's Application turns Healthy: every pool at its size
    live_app = play.cluster.find("Application", env_app)
    assert live_app is not None
    healthy = play.cluster.run_until(
        lambda: live_app["status"]["health"]["status"] == HEALTHY, LIMIT_S
    )
    assert healthy, live_app["status"]["health"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_first_sync_deadlocks_when_readiness_waits_on_pods(env: str) -> None:
    """Issue 22 item 1: the picker (wave 0) waits for model pods (wave 2); its Deployment
    exceeds its progress deadline, Argo CD fails the operation and every retry, and
    wave 2 is never applied."""
    play = first_sync(env, waits_on_pods)
    outcome = play.app(play.env_app())
    assert outcome.phase == "Failed"
    assert outcome.attempts == 6  # the first try and `retry.limit: 5`
    assert "Deployment/igw-picker" in outcome.message
    assert "exceeded its progress deadline" in outcome.message
    assert 2 not in outcome.applied_waves
    picker = play.cluster.find("Deployment", "igw-picker")
    assert picker is not None and health(picker) == (
        DEGRADED,
        "Deployment 'igw-picker' exceeded its progress deadline",
    )


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_first_sync_with_the_real_pickers_readiness(
    env: str, real_rule: dict[str, tuple[bool, bool]]
) -> None:
    """The must-hold: with the picker's own readiness, the first sync completes. The
    real picker is asked over gRPC health with no pod and with one fresh pod."""
    without, with_pod = real_rule[env]
    assert with_pod, "the picker must be ready with a fresh pod"
    play = first_sync(env, rule_from_readings(without, with_pod))
    outcome = play.app(play.env_app())
    assert outcome.phase == "Succeeded", (
        f"the picker's readiness with zero pods is {'SERVING' if without else 'NOT_SERVING'}: "
        f"{outcome.message}"
    )


def _bump(obj: dict[str, Any], tag: str) -> dict[str, Any]:
    bumped = copy.deepcopy(obj)
    for container in bumped["spec"]["template"]["spec"]["containers"]:
        name, _, _ = container["image"].rpartition(":")
        container["image"] = f"{name}:{tag}"
    return bumped


@functools.cache
def _settled(env: str) -> Play:
    """The first sync, played until the environment's Application is Healthy."""
    play = first_sync(env, serves_when_configured)
    live_app = play.cluster.find("Application", play.env_app())
    assert live_app is not None
    healthy = play.cluster.run_until(
        lambda: live_app["status"]["health"]["status"] == HEALTHY, LIMIT_S
    )
    assert healthy, live_app["status"]["health"]
    return play


def _deployments(env: str) -> list[str]:
    rendered = load_manifests(REPO_ROOT / f"gitops/environments/{env}/rendered")
    return [m["metadata"]["name"] for m in rendered if m["kind"] == "Deployment"]


@pytest.mark.parametrize(
    ("env", "deployment"), [(e, d) for e in ENVIRONMENTS for d in _deployments(e)]
)
def test_rollout_of_each_component_goes_progressing_then_healthy(env: str, deployment: str) -> None:
    """After the first sync, a commit bumps one component's image: the sync applies it,
    the Deployment rolls (Progressing) and ends Healthy, and the sync succeeds."""
    play = copy.deepcopy(_settled(env))
    cluster = play.cluster
    app = cluster.apps[play.env_app()]
    live_app = cluster.find("Application", play.env_app())
    assert live_app is not None
    manifests = [
        _bump(m, "0.1.1")
        if m["kind"] == "Deployment" and m["metadata"]["name"] == deployment
        else m
        for m in app.manifests
    ]
    target = next(
        m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == deployment
    )
    started = cluster.now
    rollout = Operation(manifests, cluster)
    app.operation, app.manifests = rollout, manifests

    def rolled() -> bool:
        current = cluster.live(target)
        return (
            rollout.outcome.phase != "Running"
            and current is not None
            and (health(current) == (HEALTHY, ""))
        )

    assert cluster.run_until(rolled, started + LIMIT_S)
    assert rollout.outcome.phase == "Succeeded", rollout.outcome
    seen = [
        status
        for key, history in cluster.history.items()
        if key[1] == "Deployment" and key[3] == deployment
        for at, status in history
        if at > started
    ]
    current = cluster.live(target)
    assert current is not None
    if current["spec"]["replicas"]:
        assert seen[0] == PROGRESSING and seen[-1] == HEALTHY, seen
    else:  # a pool scaled to zero has nothing to roll
        assert seen in ([], [PROGRESSING, HEALTHY]), seen
    image = current["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(":0.1.1")
    assert cluster.run_until(
        lambda: live_app["status"]["health"]["status"] == HEALTHY, cluster.now + 60
    )


def test_the_play_orders_waves_and_kinds_as_gitops_engine() -> None:
    """A check of the loop itself: CRDs before their resources even when listed in a
    later wave (`adjustDeps`), namespaces first, kinds in Helm's order."""
    from .argo_sync import SyncTask, sort_tasks

    def obj(kind: str, name: str, wave: int, api: str = "v1", **extra: object) -> dict[str, Any]:
        meta = {"name": name, "annotations": {"argocd.argoproj.io/sync-wave": str(wave)}}
        return {"apiVersion": api, "kind": kind, "metadata": meta, **extra}

    crd = obj(
        "CustomResourceDefinition",
        "widgets.x.io",
        3,
        "apiextensions.k8s.io/v1",
        spec={"group": "x.io", "names": {"kind": "Widget"}},
    )
    tasks = [
        SyncTask(obj("Deployment", "a", 0, "apps/v1"), "Sync"),
        SyncTask(obj("Widget", "w", 1, "x.io/v1"), "Sync"),
        SyncTask(crd, "Sync"),
        SyncTask(obj("ConfigMap", "c", 0), "Sync"),
        SyncTask(obj("Namespace", "n", 0), "Sync"),
    ]
    order = [(t.kind, t.wave) for t in sort_tasks(tasks)]
    assert order == [
        ("Namespace", 0),
        ("ConfigMap", 0),
        ("Deployment", 0),
        ("CustomResourceDefinition", 1),
        ("Widget", 1),
    ]


def test_the_model_reports_a_dead_deadline_as_degraded() -> None:
    """The Deployment model's progress deadline, through the transcribed health check:
    a pod that never turns Ready degrades its Deployment after progressDeadlineSeconds."""
    cluster = Cluster(lambda c: False)
    manifests = load_manifests(REPO_ROOT / "gitops/environments/dev/rendered")
    picker = next(
        m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == "igw-picker"
    )
    cluster.apply(picker)
    cluster.run_until(lambda: False, 590.0)
    live = cluster.live(picker)
    assert live is not None and health(live)[0] == PROGRESSING  # type: ignore[index]
    cluster.run_until(lambda: False, 660.0)
    assert health(live)[0] == DEGRADED  # type: ignore[index]
