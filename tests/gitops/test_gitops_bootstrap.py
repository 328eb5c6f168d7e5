"""ArgoCD bootstrap and sync waves: what makes rollout and rollback work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from charts.app import environment_names
from charts.bootstrap import repo_of
from envspec.argocd_manifests import PATCHED_KUSTOMIZATION
from envspec.environment import load_environment

WAVE = "argocd.argoproj.io/sync-wave"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _bootstrap(gitops_dir: Path) -> dict[str, dict[str, Any]]:
    docs = _docs(gitops_dir / "bootstrap" / "inference-gateway.k8s.yaml")
    return {d["kind"] + "/" + d["metadata"]["name"]: d for d in docs}


def test_applicationset_fans_out_over_environments_with_automated_sync(gitops_dir):
    appset = _bootstrap(gitops_dir)["ApplicationSet/inference-gateway-environments"]["spec"]
    git, clusters = appset["generators"][0]["matrix"]["generators"]
    assert git["git"]["directories"] == [{"path": "gitops/environments/*"}]
    assert clusters["clusters"]["selector"]["matchLabels"] == {
        "igw.dev/environment": "{{.path.basename}}"
    }
    template = appset["template"]["spec"]
    # The workloads through the overlay of the cluster's region (its cluster Secret's
    # igw.dev/region label, which the CDK sets), which exists for every region.
    path = template["source"]["path"]
    assert path == '{{.path.path}}/regions/{{index .metadata.labels "igw.dev/region"}}'
    for name in environment_names():
        for region in load_environment(name).aws.regions:
            folder = path.replace("{{.path.path}}", f"gitops/environments/{name}").replace(
                '{{index .metadata.labels "igw.dev/region"}}', region
            )
            assert (gitops_dir.parent / folder / PATCHED_KUSTOMIZATION).is_file(), folder
    assert template["destination"] == {"server": "{{.server}}"}
    assert template["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}


def test_root_application_syncs_the_bootstrap_folder(gitops_dir):
    (root,) = _docs(gitops_dir / "bootstrap" / "root" / "root.k8s.yaml")
    assert root["kind"] == "Application"
    assert root["spec"]["source"]["path"] == "gitops/bootstrap"
    assert root["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}


def test_envoy_gateway_hands_inference_pools_to_its_extension_and_applies_server_side(
    gitops_dir,
):
    """Envoy Gateway resolves an InferencePool backendRef only through an extension
    server that declares it (`extensionManager.backendResources`), the Envoy AI Gateway
    controller (envoyproxy/ai-gateway manifests/envoy-gateway-values.yaml and
    examples/inference-pool/envoy-gateway-values-addon.yaml, v0.4.0). The same values
    file marks `extensionApis.enableBackend: true` "Required: Enable Backend API for AI
    service backends"; `enableEnvoyPatchPolicy` it calls optional, and no patch policy is
    rendered, so it stays off."""
    app = _bootstrap(gitops_dir)["Application/envoy-gateway"]["spec"]
    values = yaml.safe_load(app["source"]["helm"]["values"])
    manager = values["config"]["envoyGateway"]["extensionManager"]
    assert manager["backendResources"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "version": "v1"}
    ]
    assert manager["service"]["fqdn"] == {
        "hostname": "ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local",
        "port": 1063,
    }
    assert {"Translation", "Cluster"} <= set(manager["hooks"]["xdsTranslator"]["post"])
    assert values["config"]["envoyGateway"]["extensionApis"] == {"enableBackend": True}
    assert "Application/envoy-ai-gateway" in _bootstrap(gitops_dir)
    assert "ServerSideApply=true" in app["syncPolicy"]["syncOptions"]
    assert int(_bootstrap(gitops_dir)["ApplicationSet/inference-gateway-environments"][
        "metadata"]["annotations"][WAVE]) > int(
        _bootstrap(gitops_dir)["Application/envoy-gateway"]["metadata"]["annotations"][WAVE]
    )  # fmt: skip


def test_waves_order_crds_then_controllers_then_config_then_workloads(gitops_dir):
    for name in environment_names():
        waves: dict[str, set[int]] = {}
        for path in sorted((gitops_dir / "environments" / name / "rendered").glob("*.yaml")):
            for doc in _docs(path):
                wave = int(doc["metadata"]["annotations"][WAVE])
                waves.setdefault(doc["kind"], set()).add(wave)
        (crds,) = waves["CustomResourceDefinition"]
        assert crds < min(waves["Deployment"])
        assert max(waves["InferencePool"]) > max(waves["CustomResourceDefinition"])
        # The picker is up before the routing config that names it; vLLM last.
        assert min(waves["InferencePool"]) > min(waves["Deployment"])
        assert max(waves["Deployment"]) > max(waves["InferencePool"])
        assert max(waves.get("HorizontalPodAutoscaler", set()) | waves["Deployment"]) == max(
            w for ws in waves.values() for w in ws
        )


def test_large_crds_apply_server_side(gitops_dir):
    for name in environment_names():
        for doc in _docs(gitops_dir / "environments" / name / "rendered" / "00-crds.k8s.yaml"):
            if doc["kind"] == "CustomResourceDefinition":
                options = doc["metadata"]["annotations"]["argocd.argoproj.io/sync-options"]
                assert options == "ServerSideApply=true"


def test_environments_must_share_one_repository_and_revision():

    env = load_environment("dev")
    other = env.model_copy(
        update={"gitops": env.gitops.model_copy(update={"revision": "release-1"})}
    )
    assert repo_of([env, env]) == (env.gitops.repo_url, env.gitops.revision)
    with pytest.raises(ValueError, match=r"gitops\.revision"):
        repo_of([env, other])


OCI_REGISTRIES = {"docker.io/envoyproxy", "public.ecr.aws/karpenter"}


def test_oci_chart_sources_are_scheme_less_so_argo_cd_pulls_them_anonymously(gitops_dir):
    """Argo CD v2.13.2 treats a Helm `repoURL` as OCI exactly when it has no scheme
    (`util/helm/client.go: IsHelmOciRepo`: `url.Parse(repoURL).Host == ""`; the repo
    server's `enableOCI := repo.EnableOCI || helm.IsHelmOciRepo(repo.Repo)`), and an
    unregistered repository comes back without credentials (`util/db/repository.go:
    getRepository` returns `&Repository{Repo: repoURL}`). So every OCI chart of the
    bootstrap names its registry without `oci://` (which would make it an HTTP chart
    repository, asking for `index.yaml`), and no repository Secret is rendered."""
    sources = []
    for doc in _bootstrap(gitops_dir).values():
        spec = doc["spec"].get("template", {}).get("spec", doc["spec"])
        source = spec.get("source")
        if source is not None and "chart" in source:
            sources.append(source["repoURL"])
    assert set(sources) >= OCI_REGISTRIES
    for url in sources:
        assert "://" in url or url in OCI_REGISTRIES, url
        assert not url.startswith("oci://"), url
    text = (gitops_dir / "bootstrap" / "inference-gateway.k8s.yaml").read_text()
    assert "argocd.argoproj.io/secret-type: repository" not in text


def test_hyperpod_dependencies_go_where_hyperpod_joins_before_the_cluster(gitops_dir):
    """AWS requires SageMaker HyperPod's Helm chart on the EKS cluster before
    `CreateCluster` ("Installing packages on the Amazon EKS cluster using Helm": release
    `hyperpod-dependencies` in kube-system, from aws/sagemaker-hyperpod-cli
    helm_chart/HyperPodHelmChart). The ApplicationSet installs it, pinned to a commit, on
    every cluster whose Secret the CDK labels `igw.dev/hyperpod: enabled`, in wave 0
    with the other controllers; the CDK creates the HyperPod cluster only once the
    chart's agent exists (tests/stacks/test_stacks_hyperpod.py). The region goes in
    explicitly: the chart detects it with Helm's `lookup`, which `helm template` (Argo
    CD's renderer) answers empty, and would fall back to us-west-2."""
    bootstrap = _bootstrap(gitops_dir)
    appset = bootstrap["ApplicationSet/hyperpod-dependencies"]
    assert appset["metadata"]["annotations"][WAVE] == "0"
    (generator,) = appset["spec"]["generators"]
    assert generator["clusters"]["selector"]["matchExpressions"] == [
        {"key": "igw.dev/hyperpod", "operator": "In", "values": ["enabled"]}
    ]
    spec = appset["spec"]["template"]["spec"]
    source = spec["source"]
    assert source["repoURL"] == "https://github.com/aws/sagemaker-hyperpod-cli.git"
    assert source["path"] == "helm_chart/HyperPodHelmChart"
    assert len(source["targetRevision"]) == 40  # a commit, not a moving branch or tag
    assert source["helm"]["releaseName"] == "hyperpod-dependencies"
    region = '{{index .metadata.labels "igw.dev/region"}}'
    assert {p["name"]: p["value"] for p in source["helm"]["parameters"]} == {
        "global.region": region,
        "health-monitoring-agent.region": region,
    }
    assert spec["destination"] == {"server": "{{.server}}", "namespace": "kube-system"}
    project = bootstrap[f"AppProject/{spec['project']}"]["spec"]
    assert project["sourceRepos"] == [source["repoURL"]]
