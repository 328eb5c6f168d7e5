"""Fixtures for the GitOps tree: a fresh synthesis to compare the committed tree with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20,22")

from charts.app import GITOPS_DIR, synth_tree


@pytest.fixture(scope="session")
def gitops_dir() -> Path:
    return GITOPS_DIR


@pytest.fixture(scope="session")
def fresh_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fresh-gitops")
    synth_tree(root)
    return root
