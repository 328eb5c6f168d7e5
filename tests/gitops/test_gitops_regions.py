"""Each region's cluster pulls every image from its own region's ECR, by digest where the
environment gives one.

The ApplicationSet syncs `<env>/regions/<region>/` (a Kustomize overlay over `rendered/`)
to a cluster labelled with that region; Argo CD builds it with Kustomize (Argo CD docs,
"Kustomize"). The overlay is built here with the real Kustomize that `kubectl kustomize`
embeds (v5), so the test reads what Argo CD would apply.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from charts.app import environment_names, synth_tree
from charts.base import ecr_registry
from envspec.argocd_manifests import PATCHED_KUSTOMIZATION
from envspec.environment import load_environment

KUBECTL = shutil.which("kubectl")
needs_kustomize = pytest.mark.usefixtures("kubectl_installed")


@pytest.fixture
def kubectl_installed() -> None:
    """The overlays are built by kubectl's embedded Kustomize; a missing kubectl fails the
    test (`make test` installs the Debian package), it never skips it."""
    if KUBECTL is None:
        pytest.fail("kubectl is missing: `make test` installs the Debian package", pytrace=False)


def _images(docs: list[dict[str, Any]]) -> list[str]:
    images = []
    for doc in docs:
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            images.append(container["image"])
    return images


def _build(folder: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [KUBECTL, "kustomize", str(folder)], check=True, capture_output=True, text=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _rendered(env_dir: Path) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((env_dir / "rendered").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


@needs_kustomize
def test_every_region_pulls_from_its_own_registry(gitops_dir: Path) -> None:
    """Same objects as `rendered/`, and every image in the region's registry (the gateway
    replicated there, vLLM through the region's pull-through cache), tag kept."""
    for name in environment_names():
        env = load_environment(name)
        env_dir = gitops_dir / "environments" / name
        rendered = _rendered(env_dir)
        for region in env.aws.regions:
            built = _build(env_dir / "regions" / region)
            assert len(built) == len(rendered), region
            images = _images(built)
            assert images
            local = ecr_registry(env.aws.account, region) + "/"
            for image in images:
                assert image.startswith(local), f"{name}/{region}: {image}"
            tags = sorted(i.rpartition(":")[2] for i in images)
            assert tags == sorted(i.rpartition(":")[2] for i in _images(rendered))


@needs_kustomize
def test_digests_from_the_environment_survive_the_overlay(tmp_path: Path, gitops_dir: Path) -> None:
    """With digests in environment.yaml (gateway and vLLM), pods pull by digest in every
    region: Kustomize's `newName` keeps the digest (Kustomize docs, "images")."""
    source = tmp_path / "environments" / "prod"
    source.mkdir(parents=True)
    data = yaml.safe_load((gitops_dir / "environments" / "prod" / "environment.yaml").read_text())
    gateway_digest = "sha256:" + "a" * 64
    vllm_digest = "sha256:" + "b" * 64
    data["kubernetes"]["image_digest"] = gateway_digest
    for server in data["model_servers"]:
        server["image_digest"] = vllm_digest
    (source / "environment.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    synth_tree(out, environments_dir=tmp_path / "environments")
    env_dir = out / "environments" / "prod"
    for region in ("us-east-1", "us-west-2"):
        images = _images(_build(env_dir / "regions" / region))
        local = ecr_registry("222222222222", region)
        assert f"{local}/igw-prod/gateway@{gateway_digest}" in images
        assert f"{local}/docker-hub/vllm/vllm-openai@{vllm_digest}" in images
        assert all("@sha256:" in i for i in images), images


def test_overlays_cover_every_image_from_the_primary_registry(gitops_dir: Path) -> None:
    """Without Kustomize at hand: every image the rendered manifests pull from the primary
    region's ECR has an entry in each secondary region's overlay."""
    for name in environment_names():
        env = load_environment(name)
        env_dir = gitops_dir / "environments" / name
        primary = ecr_registry(env.aws.account, env.aws.region) + "/"
        names = {
            i.partition("@")[0].rpartition(":")[0] if "@" not in i else i.partition("@")[0]
            for i in _images(_rendered(env_dir))
        }
        assert all(n.startswith(primary) for n in names), names
        for region in env.aws.secondary_regions:
            overlay = yaml.safe_load(
                (env_dir / "regions" / region / PATCHED_KUSTOMIZATION).read_text()
            )
            mapped = {i["name"]: i["newName"] for i in overlay["images"]}
            assert set(mapped) == names
            local = ecr_registry(env.aws.account, region) + "/"
            assert all(v == local + k.removeprefix(primary) for k, v in mapped.items())


@needs_kustomize
def test_a_region_without_a_docker_hub_cache_pulls_from_docker_hub(
    tmp_path: Path, gitops_dir: Path
) -> None:
    """Only the regions `aws.docker_hub_cache_credentials` lists have a pull-through cache
    rule (stacks/parts/images.py); a cluster elsewhere must not be pointed at a cache its
    registry lacks, so its overlay takes the vLLM image back to Docker Hub."""
    source = tmp_path / "environments" / "prod"
    source.mkdir(parents=True)
    data = yaml.safe_load((gitops_dir / "environments" / "prod" / "environment.yaml").read_text())
    del data["aws"]["docker_hub_cache_credentials"]["us-west-2"]
    (source / "environment.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    synth_tree(out, environments_dir=tmp_path / "environments")
    env_dir = out / "environments" / "prod"
    east = _images(_build(env_dir / "regions" / "us-east-1"))
    west = _images(_build(env_dir / "regions" / "us-west-2"))
    cache = f"{ecr_registry('222222222222', 'us-east-1')}/docker-hub/vllm/vllm-openai:v0.11.0"
    assert cache in east
    assert "vllm/vllm-openai:v0.11.0" in west
    assert f"{ecr_registry('222222222222', 'us-west-2')}/igw-prod/gateway:0.1.0" in west
