"""Full label selectors meet the InferencePool: what renders, and what is refused.

Upstream InferencePool v1 selects pods by `matchLabels` only: its `LabelSelector` is
"This simplified version uses only the matchLabels field" (kubernetes-sigs/
gateway-api-inference-extension, api/v1/shared_types.go; `MinProperties=1`, no
`matchExpressions` field). In a cluster, Envoy Gateway routes to the InferencePool
rendered from each config pool, so a pool whose selector needs `matchExpressions` cannot
be rendered faithfully: the environment is refused with the field path, and nothing is
written. A full-form selector with `matchLabels` only renders as before.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from charts.app import GITOPS_DIR, write_tree
from inference_gateway.errors import ConfigError


@pytest.fixture()
def gitops_copy(tmp_path: Path) -> Path:
    root = tmp_path / "gitops"
    shutil.copytree(GITOPS_DIR / "environments" / "dev", root / "environments" / "dev")
    shutil.copytree(GITOPS_DIR / "bootstrap", root / "bootstrap")
    return root


def _set_selector(
    root: Path, selector: Callable[[dict[str, str]], dict[str, Any]]
) -> dict[str, str]:
    """Give the dev environment's first pool `selector(its plain map)`; return that map."""
    path = root / "environments" / "dev" / "environment.yaml"
    env = yaml.safe_load(path.read_text())
    pool = env["gateway"]["pools"][0]
    old = dict(pool["selector"])
    pool["selector"] = selector(old)
    path.write_text(yaml.safe_dump(env, sort_keys=False))
    return old


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _problems(root: Path) -> list[str]:
    before = _snapshot(root)
    with pytest.raises(ConfigError) as raised:
        write_tree(root)
    assert _snapshot(root) == before
    return raised.value.problems


def test_a_pool_with_match_expressions_is_refused_with_its_path(gitops_copy: Path) -> None:
    _set_selector(
        gitops_copy,
        lambda old: {
            "matchLabels": old,
            "matchExpressions": [{"key": "igw.dev/gpu", "operator": "In", "values": ["A10G"]}],
        },
    )
    problems = _problems(gitops_copy)
    expected = (
        "gateway.pools[0].selector.matchExpressions: an InferencePool (v1) selects by "
        "matchLabels only"
    )
    assert any(expected in p for p in problems), problems


def test_the_environment_check_matches_pods_with_the_expressions(gitops_copy: Path) -> None:
    """The check that a pool selects its model-server pods honours `matchExpressions`:
    `NotIn` the pool's own GPU leaves it no Deployment, which is reported too."""
    _set_selector(
        gitops_copy,
        lambda old: {
            "matchLabels": old,
            "matchExpressions": [{"key": "igw.dev/gpu", "operator": "NotIn", "values": ["A10G"]}],
        },
    )
    problems = _problems(gitops_copy)
    expected = "'values': ['A10G']}]} matches no model-server Deployment"
    assert any(
        "gateway.pools[0].selector: {'matchLabels'" in p and expected in p for p in problems
    ), problems


def test_the_full_form_with_match_labels_only_renders_as_the_plain_map(
    gitops_copy: Path,
) -> None:
    old = _set_selector(gitops_copy, lambda old: {"matchLabels": old})
    write_tree(gitops_copy)
    rendered = gitops_copy / "environments" / "dev" / "rendered" / "40-inference.k8s.yaml"
    docs = [d for d in yaml.safe_load_all(rendered.read_text()) if d]
    (pool,) = [d for d in docs if d["kind"] == "InferencePool"]
    assert pool["spec"]["selector"] == {"matchLabels": old}
    (config,) = [d for d in docs if d["kind"] == "InferenceGatewayConfig"]
    assert config["spec"]["pools"][0]["selector"] == old
