"""`igw validate`'s check of environment files, registered by this repository's project
under the entry point group `inference_gateway.validators` (pyproject.toml): the gateway
package cannot import `envspec` (its image holds no environments), so the repository
plugs its own loader in, and `igw validate gitops/environments/prod/environment.yaml`
runs exactly what `make synth` and `cdk deploy` run first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envspec.environment import EnvironmentSpec, load_environment

__all__ = ["kind", "load", "matches", "read_by"]

kind = "environment"
read_by = "make synth, cdk synth and cdk deploy"


def matches(document: dict[str, Any]) -> bool:
    """An environment file: its name, AWS side and node groups."""
    return {"aws", "cluster", "node_groups"} <= set(document)


def load(path: Path) -> EnvironmentSpec:
    return load_environment(path)
