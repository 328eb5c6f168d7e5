"""Environment validation, placement and add-on dependencies: plain Python, no synth."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from envspec.environment import EnvironmentSpec, load_environment
from inference_gateway.errors import ConfigError
from stacks.parts.addons import (
    AddOn,
    CloudWatchObservabilityAddOn,
    CoreDnsAddOn,
    MissingAddOnError,
    PodIdentityAgentAddOn,
    VpcCniAddOn,
    install_addons,
)
from stacks.placement import plan_regions

REPO = Path(__file__).resolve().parents[2]


def _raw(name: str) -> dict:
    return yaml.safe_load((REPO / f"gitops/environments/{name}/environment.yaml").read_text())


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "environment.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_shipped_environments_load() -> None:
    dev, prod = load_environment("dev"), load_environment("prod")
    assert dev.aws.regions == ["us-east-1"]
    assert prod.aws.regions == ["us-east-1", "us-west-2"]
    assert {g.instance_type for g in prod.node_groups} == {"p5.48xlarge", "g5.2xlarge"}
    assert {p.name for p in prod.gateway.pools} == {
        "llama-8b-h100",
        "llama-8b-a10g",
        "llama-8b-h100-pd",
    }
    # HyperPod on in prod: an H100 instance group beside the managed h100 group.
    assert prod.cluster.hyperpod.enabled
    assert [g.gpu for g in prod.cluster.hyperpod.instance_groups] == ["H100"]


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (
            lambda d: d["node_groups"][0].update(instance_type="p5 48xlarge"),
            "node_groups[0].instance_type",
        ),
        (
            lambda d: d["node_groups"][1].update(availability_zones=["useast1a"]),
            "node_groups[1].availability_zones",
        ),
        (lambda d: d["aws"].update(secondary_regions=["us-east-1"]), "aws"),
        (lambda d: d["aws"].update(account="12345"), "aws.account"),
        (
            lambda d: d["cluster"]["hyperpod"].update(enabled=True, instance_groups=[]),
            "cluster.hyperpod",
        ),
        (
            lambda d: d["aws"]["docker_hub_cache_credentials"].update(
                {"eu-west-1": d["aws"]["docker_hub_cache_credentials"]["us-east-1"]}
            ),
            "aws",
        ),
        (
            lambda d: d["aws"]["docker_hub_cache_credentials"].update(
                {"us-west-2": d["aws"]["docker_hub_cache_credentials"]["us-east-1"]}
            ),
            "aws",
        ),
        (lambda d: d["alarms"].update(error_rate_max=3), "alarms.error_rate_max"),
        (lambda d: d["ingress"].update(surprise=True), "ingress.surprise"),
        (
            lambda d: d["ingress"]["certificate_arns"].update(
                {"us-west-2": d["ingress"]["certificate_arns"]["us-east-1"]}
            ),
            "ingress.certificate_arns",
        ),
        (lambda d: d["node_groups"][0].update(min_size=5, desired_size=1), "node_groups[0]"),
    ],
)
def test_bad_environment_names_the_field(tmp_path: Path, mutate, path: str) -> None:
    data = _raw("prod")
    mutate(data)
    with pytest.raises(ConfigError) as caught:
        load_environment(_write(tmp_path, data))
    assert any(p.startswith(path) for p in caught.value.problems), caught.value.problems


def test_gpu_group_of_a_scale_to_zero_pool_must_start_without_nodes(tmp_path: Path) -> None:
    """EKS keeps a managed node group at `desiredSize` until something changes it (EKS API
    Reference, NodegroupScalingConfig: only the Cluster Autoscaler does, and this tree
    runs Karpenter, which scales only its own NodePools' nodes). dev's a10g pool scales
    to zero; with `desired_size: 2` its two GPU nodes would stay up idle."""
    data = _raw("dev")
    assert data["model_servers"][0]["scale_to_zero"]
    data["node_groups"][0]["desired_size"] = 2
    with pytest.raises(ConfigError) as caught:
        load_environment(_write(tmp_path, data))
    (problem,) = [p for p in caught.value.problems if "node_groups[0].desired_size:" in p]
    assert "scales to zero" in problem and "gpu-a10g" in problem
    data["model_servers"][0]["scale_to_zero"] = False  # an always-on pool may keep nodes
    load_environment(_write(tmp_path, data))


def test_node_group_zone_outside_the_vpc_is_rejected_with_its_path() -> None:
    data = _raw("prod")
    data["node_groups"][0]["availability_zones"] = ["us-east-1a", "us-east-1f", "eu-west-1a"]
    env = EnvironmentSpec.model_validate(data)
    with pytest.raises(ConfigError) as caught:
        plan_regions(env)
    problems = caught.value.problems
    assert any(
        p.startswith("node_groups[0].availability_zones[1]: the us-east-1 VPC") for p in problems
    )
    assert any(
        p.startswith("node_groups[0].availability_zones[2]: eu-west-1a is in eu-west-1")
        for p in problems
    )


def test_groups_are_placed_only_in_regions_where_they_list_zones() -> None:
    data = _raw("prod")
    data["node_groups"][0]["availability_zones"] = ["us-east-1a"]
    data["cluster"]["hyperpod"]["availability_zones"] = []
    plans = plan_regions(EnvironmentSpec.model_validate(data))
    primary, secondary = plans
    assert primary.primary and not secondary.primary
    assert [g.name for g in primary.node_groups] == ["h100", "a10g"]
    assert [g.name for g in secondary.node_groups] == ["a10g"]
    assert primary.node_group_zones["h100"] == ("us-east-1a",)
    assert secondary.node_group_zones["a10g"] == ("us-west-2a", "us-west-2b", "us-west-2c")
    assert primary.hyperpod and not secondary.hyperpod
    assert primary.hyperpod_zones == ("us-east-1a", "us-east-1b", "us-east-1c")


def test_default_zones_follow_max_azs_and_groups_without_zones_go_everywhere() -> None:
    data = _raw("dev")
    data["node_groups"][0]["availability_zones"] = []
    (plan,) = plan_regions(EnvironmentSpec.model_validate(data))
    assert plan.availability_zones == ("us-east-1a", "us-east-1b")
    assert plan.node_group_zones["a10g"] == ("us-east-1a", "us-east-1b")


def test_kubernetes_version_without_a_pinned_kubectl_layer_fails_with_the_path(
    tmp_path: Path,
) -> None:
    from stacks.application import build, new_app

    data = _raw("dev")
    data["cluster"]["kubernetes_version"] = "1.99"
    env = EnvironmentSpec.model_validate(data)
    with pytest.raises(ConfigError, match=r"cluster\.kubernetes_version: no kubectl layer"):
        build(new_app(outdir=str(tmp_path)), env)


def test_addon_missing_a_dependency_fails_naming_both() -> None:
    with pytest.raises(MissingAddOnError) as caught:
        install_addons(None, None, [VpcCniAddOn(), CloudWatchObservabilityAddOn()])  # type: ignore[arg-type]
    message = str(caught.value)
    assert "CloudWatchObservabilityAddOn requires PodIdentityAgentAddOn" in message


def test_addon_dependency_cycle_is_reported() -> None:
    class A(AddOn):
        name = "a"

    class B(AddOn):
        name = "b"
        requires = (A,)

    A.requires = (B,)
    with pytest.raises(MissingAddOnError, match="cycle: A -> B -> A"):
        install_addons(None, None, [A(), B()])  # type: ignore[arg-type]


def test_addons_declare_dependencies_by_class() -> None:
    assert PodIdentityAgentAddOn in CloudWatchObservabilityAddOn.requires
    assert CoreDnsAddOn in CloudWatchObservabilityAddOn.requires
    assert all(isinstance(r, type) for r in CloudWatchObservabilityAddOn.requires)


def test_capacity_block_groups_are_refused_until_supported(tmp_path: Path) -> None:
    from stacks.application import build, new_app

    data = _raw("dev")
    data["node_groups"][0]["capacity_type"] = "CAPACITY_BLOCK"
    env = EnvironmentSpec.model_validate(data)
    with pytest.raises(ConfigError, match=r"node_groups\[0\]\.capacity_type: CAPACITY_BLOCK"):
        build(new_app(outdir=str(tmp_path)), env)


def test_an_acknowledgement_without_a_real_reason_is_refused() -> None:
    from stacks.nag import acknowledge

    with pytest.raises(ValueError, match="needs a real reason"):
        acknowledge(None, "IAM5", "because")  # type: ignore[arg-type]


def test_placement_is_importable_without_aws_cdk() -> None:
    """The capacity preflight reads the same per-region plan without starting jsii."""
    import subprocess
    import sys

    code = (
        "import sys, stacks.placement as p; "
        "plans = p.plan_regions(__import__('envspec.environment').environment"
        ".load_environment('prod')); "
        "assert 'aws_cdk' not in sys.modules; "
        "print({pl.region: dict(pl.node_group_zones) for pl in plans})"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "'us-west-2': {'h100': ('us-west-2b',)" in result.stdout
