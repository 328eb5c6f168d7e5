"""Every rendered object is checked against a schema: built-in kinds by
kubernetes-validate (strict, at the environment's Kubernetes version), custom resources
by jsonschema against their CRD's openAPIV3Schema (the rendered CRDs, or the minimal
third-party schemas under cdk8s/crds/external/)."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from rendered_schemas import EXTERNAL, crd_schemas, is_builtin

from charts.crds import CRD_DIR, pinned_crds
from envspec.environment import load_environment


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
        if not is_builtin(doc["apiVersion"]):
            continue
        try:
            kubernetes_validate.validate(doc, _k8s_version(relative), strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{relative} {doc['kind']}/{doc['metadata']['name']}: {error.message}")
        checked += 1
    assert checked > 30


def test_every_custom_resource_validates_against_its_crd_schema(rendered):
    schemas = crd_schemas(rendered)
    checked = set()
    for relative, doc in _objects(rendered):
        if is_builtin(doc["apiVersion"]):
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
    schemas = crd_schemas(rendered)
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
    del bad["spec"]["serviceRef"]
    assert not jsonschema.Draft4Validator(schemas[key]).is_valid(bad)
    certificate = next(d for _, d in _objects(rendered) if d["kind"] == "Certificate")
    key = "cert-manager.io/v1/Certificate"
    assert jsonschema.Draft4Validator(schemas[key]).is_valid(certificate)
    for change in ({"usages": ["server"]}, {"issuerref": {"name": "x"}}):
        bad = copy.deepcopy(certificate)
        bad["spec"].update(change)
        assert not jsonschema.Draft4Validator(schemas[key]).is_valid(bad), change


def test_pinned_crds_are_the_upstream_files_byte_for_byte():
    """cdk8s/crds/sources.json names, for every vendored GIE CRD, the upstream tag,
    commit and path (kubernetes-sigs/gateway-api-inference-extension
    config/crd/bases/), and the sha256 of that file: the vendored copy is that file
    unchanged, and its bundle-version annotation is the tag it came from."""
    sources = json.loads((CRD_DIR / "sources.json").read_text())
    assert "kubernetes-sigs/gateway-api-inference-extension" in sources["repository"]
    vendored = sorted(p.name for p in CRD_DIR.glob("*.yaml"))
    assert vendored == sorted(sources["files"])
    for name, source in sources["files"].items():
        data = (CRD_DIR / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == source["sha256"], name
        assert source["path"] == f"config/crd/bases/{name}"
        crd = yaml.safe_load(data)
        annotations = crd["metadata"]["annotations"]
        assert annotations["inference.networking.k8s.io/bundle-version"] == source["tag"], name


def test_the_gie_bundle_is_v1_0_0_where_it_says_so():
    """InferencePool (v1 and x-k8s v1alpha2) and InferenceObjective are GIE v1.0.0's, the
    release Envoy Gateway v1.5 and AI Gateway v0.4 speak; upstream v1.0.0's InferencePool
    allows exactly one target port."""
    by_kind = {c["spec"]["names"]["kind"] + "/" + c["spec"]["group"]: c for c in pinned_crds()}
    for key in (
        "InferencePool/inference.networking.k8s.io",
        "InferencePool/inference.networking.x-k8s.io",
        "InferenceObjective/inference.networking.x-k8s.io",
    ):
        labels = by_kind[key]["metadata"]["annotations"]
        assert labels["inference.networking.k8s.io/bundle-version"] == "v1.0.0", key
    pool = by_kind["InferencePool/inference.networking.k8s.io"]["spec"]["versions"][0]
    ports = pool["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["targetPorts"]
    assert ports["maxItems"] == 1


def test_rendered_gie_crds_are_the_vendored_ones_field_for_field(rendered_root: Path):
    """gitops/crds/ carries each vendored CRD's spec unchanged and its upstream
    annotations, plus only our labels and Argo CD's sync options."""
    rendered = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(
            (rendered_root / "crds/gateway-api-inference-extension.k8s.yaml").read_text()
        )
    }
    vendored = {c["metadata"]["name"]: c for c in pinned_crds()}
    assert sorted(rendered) == sorted(vendored)
    for name, crd in vendored.items():
        assert rendered[name]["spec"] == crd["spec"], name
        for key, value in crd["metadata"]["annotations"].items():
            assert rendered[name]["metadata"]["annotations"][key] == value, (name, key)


def test_external_schemas_name_their_version():
    for path in sorted(EXTERNAL.glob("*.yaml")):
        assert Path(path).read_text().startswith("# "), f"{path.name}: say which version"
