"""The schemas a rendered tree is validated against, shared by the chart tests: the
rendered CRDs' OpenAPI schemas and the minimal third-party ones under
cdk8s/crds/external/, keyed `group/version/Kind`; which API groups kubernetes-validate
knows itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from charts.crds import CRD_DIR

__all__ = ["BUILTIN_GROUPS", "EXTERNAL", "crd_schemas", "is_builtin"]

EXTERNAL = CRD_DIR / "external"

BUILTIN_GROUPS = {
    "",
    "apps",
    "autoscaling",
    "policy",
    "networking.k8s.io",
    "rbac.authorization.k8s.io",
    "apiextensions.k8s.io",
}


def is_builtin(api_version: str) -> bool:
    return api_version.rpartition("/")[0] in BUILTIN_GROUPS


def _openapi_to_jsonschema(node: Any) -> Any:
    """OpenAPI v3.0 → JSON Schema draft 4: `nullable` becomes a null type."""
    if isinstance(node, list):
        return [_openapi_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _openapi_to_jsonschema(v) for k, v in node.items()}
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def crd_schemas(rendered: Mapping[str, Sequence[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """`apiVersion/Kind` → JSON schema, from the rendered CRDs and the external files."""
    out: dict[str, dict[str, Any]] = {}
    for docs in rendered.values():
        for doc in docs:
            if doc["kind"] != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                key = f"{spec['group']}/{version['name']}/{spec['names']['kind']}"
                out[key] = _openapi_to_jsonschema(version["schema"]["openAPIV3Schema"])
    for path in sorted(EXTERNAL.glob("*.yaml")):
        out.update(yaml.safe_load(path.read_text()))
    return out
