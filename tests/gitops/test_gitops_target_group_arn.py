"""Every TargetGroupBinding Argo CD applies names its target group by ARN (issue 30 item 8).

aws-load-balancer-controller v2.13 resolves `spec.targetGroupName` to an ARN only when
a binding is created (`webhooks/elbv2/targetgroupbinding_mutator.go`: `MutateCreate`
calls `getArnFromNameIfNeeded`, `MutateUpdate` does not), and bindings by name are
reported to stop re-registering pods on rollouts ("A target group ARN must be
specified", aws-load-balancer-controller #4438 and #4297, v2.13.3). The ARN exists only
once CloudFormation has created the group, so git never holds it: the CDK annotates Argo
CD's cluster Secret with Envoy's (stacks/parts/argocd.py) and writes the router's into
its Application (stacks/global_tier.py), and each Application carries a Kustomize patch
(`source.kustomize.patches`, envspec/argocd_manifests.py `target_group_arn_patch`).

Built here as Argo CD v2.13.2 builds it (`util/kustomize/kustomize.go: Build`): the
Application's patches are appended to the `patches` of `<path>/kustomization.yaml`
(exactly that file name, else "failed to load kustomization.yaml"), then `kustomize
build`, with the Kustomize `kubectl kustomize` embeds; the ApplicationSet's Go template
filled from a cluster Secret the way the clusters generator does
(`applicationset/generators/cluster.go`: `metadata.annotations`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from charts.app import environment_names
from envspec.argocd_manifests import (
    PATCHED_KUSTOMIZATION,
    cluster_secret,
    global_application,
)
from envspec.environment import load_environment
from envspec.global_router import GLOBAL_ROUTER, global_folder, global_target_group_name

from .cluster_model import REPO_ROOT, example_target_group_arn

KUBECTL = shutil.which("kubectl")
Obj = dict[str, Any]


@pytest.fixture
def kubectl() -> str:
    """A missing kubectl fails the test (`make test` installs it), never skips it."""
    if KUBECTL is None:
        pytest.fail("kubectl is missing: `make test` installs the Debian package", pytrace=False)
    return KUBECTL


def _workloads_template(gitops_dir: Path) -> Obj:
    docs = yaml.safe_load_all((gitops_dir / "bootstrap" / "inference-gateway.k8s.yaml").read_text())
    (appset,) = [
        d
        for d in docs
        if d and d["kind"] == "ApplicationSet" and d["metadata"]["name"].endswith("-environments")
    ]
    return dict(appset["spec"]["template"])


def _fill(node: Any, secret: Obj, env_dir: str) -> Any:
    """The clusters x git-directories parameters of the ApplicationSet, for one Secret."""
    if isinstance(node, dict):
        return {k: _fill(v, secret, env_dir) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, secret, env_dir) for v in node]
    if not isinstance(node, str):
        return node
    for kind in ("labels", "annotations"):
        for key, value in secret["metadata"].get(kind, {}).items():
            node = node.replace(f'{{{{index .metadata.{kind} "{key}"}}}}', value)
    return node.replace("{{.path.path}}", env_dir)


def _build(kubectl: str, tmp: Path, source: Obj) -> list[Obj]:
    """`source.path` of this repository, with `source.kustomize.patches`, as Argo CD
    builds it: a copy of the tree, the patches appended to `kustomization.yaml`."""
    tree = tmp / "repo"
    if not tree.exists():
        shutil.copytree(REPO_ROOT / "gitops", tree / "gitops")
    folder = tree / source["path"]
    kustomization_file = folder / "kustomization.yaml"
    assert kustomization_file.is_file(), f"{source['path']}: Argo CD reads kustomization.yaml"
    kustomization = yaml.safe_load(kustomization_file.read_text())
    patches = source.get("kustomize", {}).get("patches", [])
    kustomization["patches"] = [*kustomization.get("patches", []), *patches]
    kustomization_file.write_text(yaml.safe_dump(kustomization))
    out = subprocess.run(
        [kubectl, "kustomize", str(folder)], check=True, capture_output=True, text=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _bindings(docs: list[Obj]) -> list[Obj]:
    return [d for d in docs if d["kind"] == "TargetGroupBinding"]


@pytest.mark.parametrize(
    ("name", "region"),
    [(n, r) for n in environment_names() for r in load_environment(n).aws.regions],
)
def test_envoys_binding_gets_its_regions_target_group_by_arn(
    name: str, region: str, gitops_dir: Path, kubectl: str, tmp_path: Path
) -> None:
    env = load_environment(name)
    arn = example_target_group_arn(env, region)
    secret = cluster_secret(name, region, env.cluster.name, target_group_arn=arn)
    template = _fill(_workloads_template(gitops_dir), secret, f"gitops/environments/{name}")
    (binding,) = _bindings(_build(kubectl, tmp_path, template["spec"]["source"]))
    assert binding["spec"]["targetGroupARN"] == arn
    assert "targetGroupName" not in binding["spec"]


@pytest.mark.parametrize(
    ("name", "region"),
    [
        (n, r)
        for n in environment_names()
        if (e := load_environment(n)).global_router.enabled
        for r in e.aws.regions
    ],
)
def test_the_routers_binding_gets_its_regions_target_group_by_arn(
    name: str, region: str, kubectl: str, tmp_path: Path
) -> None:
    env = load_environment(name)
    arn = example_target_group_arn(env, region, global_target_group_name(name))
    application = global_application(
        environment=name,
        region=region,
        gitops=env.gitops,
        namespace=env.kubernetes.namespace,
        binding=GLOBAL_ROUTER,
        target_group_arn=arn,
    )
    source = application["spec"]["source"]
    assert source["path"] == f"gitops/{global_folder(name, region)}"
    (binding,) = _bindings(_build(kubectl, tmp_path, source))
    assert binding["spec"]["targetGroupARN"] == arn
    assert "targetGroupName" not in binding["spec"]


def test_patched_folders_name_their_kustomization_as_argo_cd_reads_it(gitops_dir: Path) -> None:
    """Argo CD v2.13.2 appends an Application's patches to `kustomization.yaml` only; a
    folder holding `kustomization.yml` alone fails to build once patches are set."""
    assert PATCHED_KUSTOMIZATION == "kustomization.yaml"
    for folder in sorted(gitops_dir.glob("environments/*/regions/*")) + sorted(
        gitops_dir.glob("environments/*/global/*")
    ):
        assert (folder / PATCHED_KUSTOMIZATION).is_file(), folder
        assert not (folder / "kustomization.yml").exists(), folder
