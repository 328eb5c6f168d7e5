"""Every rendered object is checked against a schema: built-in kinds by
kubernetes-validate (strict, at the environment's Kubernetes version), custom resources
by jsonschema against their CRD's openAPIV3Schema (the rendered CRDs, or the minimal
third-party schemas under cdk8s/crds/external/)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from charts.crds import CRD_DIR
from envspec.environment import load_environment

EXTERNAL = CRD_DIR / "external"


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


def _schemas(rendered: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
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


BUILTIN_GROUPS = {
    "",
    "apps",
    "autoscaling",
    "policy",
    "networking.k8s.io",
    "rbac.authorization.k8s.io",
    "apiextensions.k8s.io",
}


def _is_builtin(api_version: str) -> bool:
    return api_version.rpartition("/")[0] in BUILTIN_GROUPS


def _k8s_version(relative: str) -> str:
    if relative.startswith("environments/"):
        env = load_environment(relative.split("/")[1])
        return f"{env.cluster.kubernetes_version}.0"
    return "1.32.0"


def _objects(rendered):
    for relative, docs in rendered.items():
        for doc in docs:
            yield relative, doc


def test_every_builtin_object_passes_kubernetes_validate_strict(rendered):
    checked = 0
    for relative, doc in _objects(rendered):
        if not _is_builtin(doc["apiVersion"]):
            continue
        try:
            kubernetes_validate.validate(doc, _k8s_version(relative), strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{relative} {doc['kind']}/{doc['metadata']['name']}: {error.message}")
        checked += 1
    assert checked > 30


def test_every_custom_resource_validates_against_its_crd_schema(rendered):
    schemas = _schemas(rendered)
    checked = set()
    for relative, doc in _objects(rendered):
        if _is_builtin(doc["apiVersion"]):
            continue
        key = f"{doc['apiVersion']}/{doc['kind']}"
        assert key in schemas, f"{relative}: no schema for {key}; add one to {EXTERNAL}"
        errors = sorted(
            jsonschema.Draft4Validator(schemas[key]).iter_errors(doc), key=lambda e: e.path
        )
        assert not errors, f"{relative} {key} {doc['metadata']['name']}: " + "; ".join(
            f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors
        )
        checked.add(key)
    assert {
        "inference.networking.k8s.io/v1/InferencePool",
        "inference.networking.x-k8s.io/v1alpha2/InferenceObjective",
        "inference.networking.x-k8s.io/v1alpha2/InferenceModelRewrite",
        "inference.igw.dev/v1alpha1/InferenceGatewayConfig",
        "gateway.envoyproxy.io/v1alpha1/EnvoyExtensionPolicy",
        "gateway.envoyproxy.io/v1alpha1/BackendTrafficPolicy",
        "gateway.envoyproxy.io/v1alpha1/SecurityPolicy",
        "keda.sh/v1alpha1/ScaledObject",
        "external-secrets.io/v1/ExternalSecret",
        "external-secrets.io/v1/ClusterSecretStore",
        "gateway.networking.k8s.io/v1/HTTPRoute",
        "argoproj.io/v1alpha1/ApplicationSet",
        "elbv2.k8s.aws/v1beta1/TargetGroupBinding",
        "gateway.envoyproxy.io/v1alpha1/EnvoyProxy",
    } <= checked


def test_the_schemas_reject_what_they_should(rendered):
    """The minimal schemas are strict enough to catch a typo or a bad weight."""
    schemas = _schemas(rendered)
    policy = next(d for _, d in _objects(rendered) if d["kind"] == "EnvoyExtensionPolicy")
    bad = copy.deepcopy(policy)
    bad["spec"]["extProc"][0]["processingMode"]["request"]["body"] = "FullDuplex"
    key = "gateway.envoyproxy.io/v1alpha1/EnvoyExtensionPolicy"
    assert not jsonschema.Draft4Validator(schemas[key]).is_valid(bad)
    rewrite = next(d for _, d in _objects(rendered) if d["kind"] == "InferenceModelRewrite")
    bad = copy.deepcopy(rewrite)
    bad["spec"]["rules"][0]["targets"][0]["weight"] = 0
    key = "inference.networking.x-k8s.io/v1alpha2/InferenceModelRewrite"
    assert not jsonschema.Draft4Validator(schemas[key]).is_valid(bad)
    binding = next(d for _, d in _objects(rendered) if d["kind"] == "TargetGroupBinding")
    key = "elbv2.k8s.aws/v1beta1/TargetGroupBinding"
    assert jsonschema.Draft4Validator(schemas[key]).is_valid(binding)
    for change in ({"targetType": "pod"}, {"targetGroupname": "x"}):
        bad = copy.deepcopy(binding)
        bad["spec"].update(change)
        assert not jsonschema.Draft4Validator(schemas[key]).is_valid(bad), change
    bad = copy.deepcopy(binding)
    del bad["spec"]["targetGroupName"]  # neither a name nor an ARN
    assert not jsonschema.Draft4Validator(schemas[key]).is_valid(bad)


def test_pinned_crds_name_their_source_and_version():
    for path in sorted(CRD_DIR.glob("*.yaml")):
        text = path.read_text()
        assert "kubernetes-sigs/gateway-api-inference-extension" in text, path.name
        crd = yaml.safe_load(text)
        assert crd["metadata"]["annotations"]["inference.networking.k8s.io/bundle-version"]
    for path in sorted(EXTERNAL.glob("*.yaml")):
        assert Path(path).read_text().startswith("# "), f"{path.name}: say which version"
