"""The `vllm serve` containers of every environment's rendered tree, for the tests of the
emulator's `vllm` stand-in (tests/gateway/emulator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[1]
RENDERED = sorted(ROOT.glob("gitops/environments/*/rendered/60-model-servers.k8s.yaml"))


class RenderedVllm(NamedTuple):
    where: str  # environment/deployment
    container: dict[str, Any]
    gpu: str  # the GPU its node affinity requires (igw.dev/gpu): the emulator's GPU profile


def vllm_containers() -> list[RenderedVllm]:
    """Every `vllm serve` container rendered, with its Deployment's GPU."""
    found = []
    for path in RENDERED:
        env = path.parents[1].name
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "Deployment":
                continue
            spec = doc["spec"]["template"]["spec"]
            for container in spec["containers"]:
                if container.get("command", [])[:2] == ["vllm", "serve"]:
                    where = f"{env}/{doc['metadata']['name']}"
                    found.append(RenderedVllm(where, container, _gpu(spec)))
    return found


def _gpu(pod: dict[str, Any]) -> str:
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    for term in required["nodeSelectorTerms"]:
        for expression in term["matchExpressions"]:
            if expression["key"] == "igw.dev/gpu":
                return str(expression["values"][0])
    raise ValueError("a model server without an igw.dev/gpu node affinity")


def container_params() -> list[Any]:
    """`vllm_containers()` as pytest parameters named after their deployment."""
    import pytest

    return [pytest.param(r, id=r.where) for r in vllm_containers()]
