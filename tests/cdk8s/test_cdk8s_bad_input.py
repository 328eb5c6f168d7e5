"""A bad environment fails synthesis with the field path, and nothing is written."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from charts.app import GITOPS_DIR, write_tree
from inference_gateway.errors import ConfigError

Mutation = Callable[[dict[str, Any]], None]


def _selector_typo(env: dict[str, Any]) -> None:
    env["gateway"]["pools"][0]["selector"]["igw.dev/pool"] = "llama-8b-a10q"


def _rewrite_to_unknown_model(env: dict[str, Any]) -> None:
    env["canaries"][0]["targets"][1]["model"] = "llama-3.1-8b-typo"


def _all_weights_zero(env: dict[str, Any]) -> None:
    for target in env["canaries"][0]["targets"]:
        target["weight"] = 0


def _two_pools_claim_one_model(env: dict[str, Any]) -> None:
    pool = dict(env["gateway"]["pools"][0])
    pool["name"] = "llama-8b-spare"
    pool["selector"] = {"app.kubernetes.io/name": "vllm", "igw.dev/pool": "llama-8b-spare"}
    env["gateway"]["pools"].append(pool)
    server = dict(env["model_servers"][0])
    server["pool"] = "llama-8b-spare"
    env["model_servers"].append(server)


def _pool_without_deployment(env: dict[str, Any]) -> None:
    pool = dict(env["gateway"]["pools"][0])
    pool["name"] = "llama-70b-a10g"
    pool["selector"] = {"igw.dev/pool": "llama-70b-a10g"}
    env["gateway"]["pools"].append(pool)


def _canary_across_pools(env: dict[str, Any]) -> None:
    _pool_without_deployment(env)
    env["gateway"]["models"].append({"name": "llama-70b", "pool": "llama-70b-a10g"})
    env["canaries"][0]["targets"].append({"model": "llama-70b", "weight": 1})


def _unknown_field(env: dict[str, Any]) -> None:
    env["model_servers"][0]["gpu_count"] = 2


CASES: list[tuple[str, Mutation, str]] = [
    ("selector-typo", _selector_typo, "gateway.pools[0].selector: "),
    ("rewrite-unknown-model", _rewrite_to_unknown_model, "canaries[0].targets[1].model: unknown"),
    ("weights-all-zero", _all_weights_zero, "canaries[0].targets: every weight is 0"),
    ("two-pools-one-model", _two_pools_claim_one_model, "model_servers[1].served_model_name: "),
    ("pool-without-deployment", _pool_without_deployment, "gateway.pools[1].selector: "),
    ("canary-across-pools", _canary_across_pools, "canaries[0].targets: models of pools"),
    ("unknown-field", _unknown_field, "model_servers[0].gpu_count: Extra inputs"),
]


@pytest.fixture()
def gitops_copy(tmp_path: Path) -> Path:
    """A copy of gitops/ with the dev environment only (rendered files included)."""
    root = tmp_path / "gitops"
    shutil.copytree(GITOPS_DIR / "environments" / "dev", root / "environments" / "dev")
    shutil.copytree(GITOPS_DIR / "bootstrap", root / "bootstrap")
    return root


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _mutate(root: Path, mutation: Mutation) -> None:
    path = root / "environments" / "dev" / "environment.yaml"
    env = yaml.safe_load(path.read_text())
    mutation(env)
    path.write_text(yaml.safe_dump(env, sort_keys=False))


@pytest.mark.parametrize(("mutation", "path"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_synth_fails_with_the_field_path_and_writes_nothing(gitops_copy, mutation, path):
    _mutate(gitops_copy, mutation)
    before = _snapshot(gitops_copy)
    with pytest.raises(ConfigError) as raised:
        write_tree(gitops_copy)
    assert any(path in problem for problem in raised.value.problems), raised.value.problems
    assert _snapshot(gitops_copy) == before


def test_the_script_exits_2_and_says_nothing_was_written(gitops_copy, capsys):
    spec = importlib.util.spec_from_file_location(
        "cdk8s_main", GITOPS_DIR.parent / "cdk8s" / "main.py"
    )
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    _mutate(gitops_copy, _selector_typo)
    assert script.main(["--gitops-dir", str(gitops_copy)]) == 2  # bad input, as app.py
    err = capsys.readouterr().err
    assert "nothing written" in err and "gateway.pools[0].selector" in err


def test_stale_files_are_removed_and_a_clean_tree_is_left_alone(gitops_copy):
    write_tree(gitops_copy)  # in sync first (drift itself is tests/gitops' job)
    stale = gitops_copy / "environments" / "dev" / "rendered" / "99-old.k8s.yaml"
    stale.write_text("kind: ConfigMap\n")
    changes = write_tree(gitops_copy)
    assert changes == [f"deleted {stale}"]
    assert not stale.exists()
    assert write_tree(gitops_copy) == []
