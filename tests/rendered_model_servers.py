"""The `vllm serve` containers of every environment's rendered tree, for the tests of the
emulator's `vllm` stand-in (tests/gateway/emulator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RENDERED = sorted(ROOT.glob("gitops/environments/*/rendered/60-model-servers.k8s.yaml"))


def vllm_containers() -> list[tuple[str, dict[str, Any]]]:
    """(environment/deployment, container) for every `vllm serve` container rendered."""
    found = []
    for path in RENDERED:
        env = path.parents[1].name
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "Deployment":
                continue
            for container in doc["spec"]["template"]["spec"]["containers"]:
                if container.get("command", [])[:2] == ["vllm", "serve"]:
                    found.append((f"{env}/{doc['metadata']['name']}", container))
    return found


def container_params() -> list[Any]:
    """`vllm_containers()` as pytest parameters named after their deployment."""
    import pytest

    return [pytest.param(where, container, id=where) for where, container in vllm_containers()]
