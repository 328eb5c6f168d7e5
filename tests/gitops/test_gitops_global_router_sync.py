"""The global router's Application on a fresh cluster of a region without HyperPod
(issue 30 item 6), played with the sync model of test_gitops_first_sync.py.

In such a region nothing holds the fleet stack back: the CDK creates the router's
Application (envspec/argocd_manifests.py `global_application`, applied by
stacks/global_tier.py) right after Argo CD and the root Application, while the root's
waves are still installing the add-ons whose kinds the router's folder uses (External
Secrets' SecretStore and ExternalSecret) and before the environment's Application has
created the namespace it deploys into. It must still end synced, however long the
add-ons take: the namespace is created by its own sync (`CreateNamespace=true`,
gitops-engine `pkg/sync/sync_context.go: autoCreateNamespace` at bd7681ae3f8b) and the
sync is retried until the kinds exist (`retry.limit: -1`, argo-cd v2.13.2
`controller/appcontroller.go: processRequestedAppOperation`). With five retries
(10 s x 2^n, about five minutes in all) and no namespace, the operation failed for good
once add-ons took longer, and Argo CD never retried that commit.
"""

from __future__ import annotations

from envspec.argocd_manifests import cluster_secret, global_application
from envspec.environment import load_environment
from envspec.global_router import GLOBAL_ROUTER, global_target_group_name

from .argo_health import HEALTHY
from .argo_sync import Operation
from .cluster_model import REPO_ROOT, Cluster, Timing, example_target_group_arn, load_manifests
from .picker_probe import serves_when_configured

REGION = "us-west-2"  # prod's secondary: no HyperPod, so nothing delays its fleet stack
LIMIT_S = 3 * 3600.0


def test_the_router_syncs_however_long_the_add_ons_take() -> None:
    """Each add-on chart takes 15 minutes to turn Healthy (the root waits for all of a
    wave): slow but ordinary for a first install (images pulled on fresh nodes,
    kube-prometheus-stack's admission jobs), and past the old five retries."""
    chart_s = 900.0
    env = load_environment("prod")
    assert REGION in env.aws.regions and REGION not in env.cluster.hyperpod.availability_zones
    secret = cluster_secret(
        env.name,
        REGION,
        env.cluster.name,
        target_group_arn=example_target_group_arn(env, REGION),
    )
    cluster = Cluster(serves_when_configured, timing=Timing(chart_s=chart_s), cluster_secret=secret)
    root = Operation(load_manifests(REPO_ROOT / "gitops/bootstrap"), cluster)
    application = global_application(
        environment=env.name,
        region=REGION,
        gitops=env.gitops,
        namespace=env.kubernetes.namespace,
        binding=GLOBAL_ROUTER,
        target_group_arn=example_target_group_arn(env, REGION, global_target_group_name(env.name)),
    )
    cluster.apply(application)  # beside the root, as the CDK does
    router = cluster.apps[application["metadata"]["name"]].operation
    assert router is not None

    def finished() -> bool:
        root.step(cluster.now)
        return root.outcome.phase != "Running" and router.outcome.phase != "Running"

    assert cluster.run_until(finished, LIMIT_S)
    assert root.outcome.phase == "Succeeded", root.outcome
    assert router.outcome.phase == "Succeeded", router.outcome
    assert router.outcome.attempts > 1  # it did meet a missing kind or namespace first
    live = cluster.find("Application", application["metadata"]["name"])
    assert live is not None
    assert cluster.run_until(lambda: live["status"]["health"]["status"] == HEALTHY, LIMIT_S), live[
        "status"
    ]["health"]
