"""Fixtures for the chart tests: the dev environment, chart synthesis, the rendered tree.

The whole tree is synthesised once per session (a few seconds of jsii start-up); chart
tests synthesise single charts with `cdk8s.Testing`, as the charts' own unit tests.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))  # rendered_schemas, beside this file
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20,22")

from chart_app import chart_app

from cdk8s import Chart, Testing
from charts.app import synth_tree
from envspec.argocd_manifests import PATCHED_KUSTOMIZATION
from envspec.environment import EnvironmentSpec, load_environment

Doc = dict[str, Any]


@pytest.fixture(scope="session")
def dev_env() -> EnvironmentSpec:
    return load_environment("dev")


@pytest.fixture(scope="session")
def synth() -> Callable[..., list[Doc]]:
    def run(chart: type[Chart], env: EnvironmentSpec) -> list[Doc]:
        return list(Testing.synth(chart(chart_app(), "test", env=env)))  # type: ignore[call-arg]

    return run


@pytest.fixture(scope="session")
def rendered_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rendered")
    synth_tree(root)
    return root


@pytest.fixture(scope="session")
def rendered(rendered_root: Path) -> dict[str, list[Doc]]:
    """Relative path → the objects of that file, for every manifest of the fresh tree
    (not the Kustomization files of the folders whose Applications patch them)."""
    return {
        str(p.relative_to(rendered_root)): [d for d in yaml.safe_load_all(p.read_text()) if d]
        for p in sorted(rendered_root.rglob("*.yaml"))
        if p.name != PATCHED_KUSTOMIZATION
    }
