"""The certificates and secrets the tree's servers need are made by the tree (issue 30
items 3 and 4): cert-manager, an Argo CD Application of its upstream chart, issues the
Gateway listener's certificate and Envoy AI Gateway's webhook certificate; External
Secrets copies what lives in Secrets Manager (a documented prerequisite, checked by
`make preflight`).

Upstream rules encoded here:

* Envoy Gateway v1.5.0 `internal/gatewayapi/validate.go:
  validateTerminateModeAndGetTLSSecrets`: a listener's `certificateRefs` Secret must
  exist in the Gateway's namespace (no ReferenceGrant here), be of type
  `kubernetes.io/tls` and hold `tls.crt` and `tls.key`, or the listener is marked
  `InvalidCertificateRef` and skipped (`listener.go`);
* cert-manager v1.18.2 writes a Certificate's `secretName` as a `kubernetes.io/tls`
  Secret with `tls.crt`, `tls.key` and `ca.crt`
  (`pkg/controller/certificates/issuing/internal/secret.go`); a CA Issuer whose Secret
  does not exist is `Ready=False` (`pkg/issuer/ca/setup.go`, `ErrGetKeyPair`), which Argo
  CD v2.13.2 reads as Degraded (`resource_customizations/cert-manager.io/Issuer/
  health.lua`) and fails the sync on;
* the kubelet does not start a container whose non-optional Secret volume or
  `secretKeyRef` is missing (`CreateContainerConfigError`);
* Envoy AI Gateway v0.4.0 makes its webhook certificate with Helm's `lookup`
  (`manifests/charts/ai-gateway-helm/templates/admission_webhook.yaml`), which `helm
  template`, Argo CD's renderer, always answers empty, while the controller patches the
  webhook's caBundle only when it starts (`cmd/controller/main.go:
  maybePatchAdmissionWebhook`); the chart's `controller.mutatingWebhook.certManager
  .enable` renders a cert-manager Certificate and the CA-injection annotation instead.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from charts.app import environment_names
from charts.base import Wave
from envspec.environment import load_environment
from envspec.names import regional_domain_name

from .argo_health import HEALTHY, health
from .argo_sync import Operation
from .cluster_model import Cluster, Timing

Obj = dict[str, Any]
WAVE = "argocd.argoproj.io/sync-wave"


def _tree(gitops_dir: Path, name: str) -> list[Obj]:
    """What Argo CD applies to a cluster of environment `name`: the workloads and, where
    the environment has a global tier, a region's global-router folder."""
    env_dir = gitops_dir / "environments" / name
    folders = [env_dir / "rendered", *sorted((env_dir / "global").glob("*"))[:1]]
    return [d for f in folders for p in sorted(f.glob("*.k8s.yaml")) for d in _docs(p)]


def _docs(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _wave(obj: Obj) -> int:
    return int(obj["metadata"]["annotations"][WAVE])


def _needed(docs: list[Obj]) -> Iterator[tuple[str, str, str]]:
    """(namespace, Secret, who) for every Secret a listener or a container needs."""
    for doc in docs:
        namespace = doc["metadata"].get("namespace", "")
        who = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] == "Gateway":
            for listener in doc["spec"]["listeners"]:
                for ref in listener.get("tls", {}).get("certificateRefs", []):
                    yield ref.get("namespace", namespace), ref["name"], who
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        for volume in pod.get("volumes", []):
            secret = volume.get("secret")
            if secret is not None and not secret.get("optional", False):
                yield namespace, secret["secretName"], who
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None and not ref.get("optional", False):
                    yield namespace, ref["name"], who


def _made(docs: list[Obj]) -> dict[tuple[str, str], Obj]:
    """(namespace, Secret) -> what makes it: an ExternalSecret or a Certificate."""
    out = {}
    for doc in docs:
        namespace = doc["metadata"].get("namespace", "")
        if doc["kind"] == "ExternalSecret":
            target = doc["spec"].get("target", {}).get("name", doc["metadata"]["name"])
            out[namespace, target] = doc
        if doc["kind"] == "Certificate":
            out[namespace, doc["spec"]["secretName"]] = doc
    return out


@pytest.mark.parametrize("name", environment_names())
def test_every_secret_a_listener_or_a_container_needs_is_made_by_the_tree(
    name: str, gitops_dir: Path
) -> None:
    docs = _tree(gitops_dir, name)
    made = _made(docs)
    needed = list(_needed(docs))
    assert any(who.startswith("Gateway/") for _, _, who in needed)
    missing = [f"{who} needs Secret {ns}/{s}" for ns, s, who in needed if (ns, s) not in made]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("name", environment_names())
def test_the_listener_certificate_is_issued_in_the_gateways_namespace_by_a_complete_chain(
    name: str, gitops_dir: Path
) -> None:
    env = load_environment(name)
    docs = _tree(gitops_dir, name)
    made = _made(docs)
    (gateway,) = [d for d in docs if d["kind"] == "Gateway"]
    namespace = gateway["metadata"]["namespace"]
    issuers = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d
        for d in docs
        if d["kind"] == "Issuer"
    }
    for listener in gateway["spec"]["listeners"]:
        (ref,) = listener["tls"]["certificateRefs"]
        assert ref.get("kind", "Secret") == "Secret" and "namespace" not in ref
        leaf = made[namespace, ref["name"]]
        assert leaf["kind"] == "Certificate"  # cert-manager: kubernetes.io/tls, tls.crt/key
        domain = env.ingress.domain_name
        assert leaf["spec"]["dnsNames"] == [
            domain,
            *(regional_domain_name(domain, r) for r in env.aws.regions),
        ]
        assert _wave(leaf) <= _wave(gateway)
        # Up the chain to a self-signed root, each step in the same namespace, and a CA
        # Issuer only in a wave after the Certificate that makes its Secret.
        certificate, seen = leaf, 0
        while True:
            issuer = issuers[namespace, certificate["spec"]["issuerRef"]["name"]]
            assert certificate["spec"]["issuerRef"].get("kind", "Issuer") == "Issuer"
            assert _wave(issuer) <= _wave(certificate)
            if "selfSigned" in issuer["spec"]:
                break
            ca = made[namespace, issuer["spec"]["ca"]["secretName"]]
            assert ca["kind"] == "Certificate" and ca["spec"].get("isCA") is True
            assert _wave(ca) < _wave(issuer), "a CA Issuer before its Secret is Degraded"
            certificate, seen = ca, seen + 1
            assert seen < 5
        assert seen == 1  # leaf <- environment CA <- self-signed


def _certificates_play(docs: list[Obj]) -> tuple[Cluster, Operation]:
    """One sync of `docs` (the namespace first) on a cluster where cert-manager runs."""
    cluster = Cluster(lambda c: True, timing=Timing(chart_s=0.0))
    cluster.apply(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {"name": "cert-manager", "namespace": "argocd"},
            "spec": {
                "source": {"chart": "cert-manager"},
                "destination": {"namespace": "cert-manager"},
            },
        }
    )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "igw"}}
    operation = Operation([namespace, *docs], cluster, retry_limit=0)

    def finished() -> bool:
        operation.step(cluster.now)
        return operation.outcome.phase != "Running"

    cluster.run_until(finished, 600.0)
    return cluster, operation


def test_the_chain_syncs_in_its_waves_and_not_in_one(gitops_dir: Path) -> None:
    """Played with the cluster model's cert-manager: the committed waves issue `igw-tls`;
    with the CA Issuer in the CA Certificate's wave, it is Degraded while the CA is being
    issued, and Argo CD fails the sync on it (a wave waits on health)."""
    docs = _docs(gitops_dir / "environments" / "dev" / "rendered" / "05-certificates.k8s.yaml")
    cluster, operation = _certificates_play(docs)
    assert operation.outcome.phase == "Succeeded", operation.outcome
    leaf = cluster.find("Certificate", "igw-tls")
    assert leaf is not None
    assert cluster.run_until(lambda: health(leaf) == (HEALTHY, ""), cluster.now + 60)
    squashed = copy.deepcopy(docs)
    for doc in squashed:
        if (doc["kind"], doc["metadata"]["name"]) == ("Issuer", "igw-ca"):
            doc["metadata"]["annotations"][WAVE] = Wave.CRDS.value
    _, operation = _certificates_play(squashed)
    assert operation.outcome.phase == "Failed"
    assert "Issuer/igw-ca" in operation.outcome.message


def test_cert_manager_is_installed_before_anything_asks_it_for_a_certificate(
    gitops_dir: Path,
) -> None:
    """cert-manager's chart with its CRDs (`crds.enabled`, deploy/charts/cert-manager
    values.yaml v1.18.2) in a wave before the Envoy AI Gateway chart (whose templates
    then hold a Certificate and an Issuer) and before the environments' workloads."""
    docs = _docs(gitops_dir / "bootstrap" / "inference-gateway.k8s.yaml")
    apps = {
        d["metadata"]["name"]: d for d in docs if d["kind"] in ("Application", "ApplicationSet")
    }
    cert_manager = apps["cert-manager"]
    source = cert_manager["spec"]["source"]
    assert (source["repoURL"], source["chart"]) == ("https://charts.jetstack.io", "cert-manager")
    assert source["targetRevision"].startswith("v1.")
    assert yaml.safe_load(source["helm"]["values"])["crds"]["enabled"] is True
    assert "ServerSideApply=true" in cert_manager["spec"]["syncPolicy"]["syncOptions"]
    for later in ("envoy-ai-gateway", "inference-gateway-environments"):
        assert _wave(cert_manager) < _wave(apps[later]), later


def test_ai_gateway_webhook_certificate_comes_from_cert_manager(gitops_dir: Path) -> None:
    """Issue 30 item 4 (the module docstring): the chart's own switch, and Argo CD told
    that the CA injector owns the webhook's caBundle (argo-cd v2.13.2
    docs/user-guide/diffing.md, the `.webhooks[]?.clientConfig.caBundle` example)."""
    docs = _docs(gitops_dir / "bootstrap" / "inference-gateway.k8s.yaml")
    (app,) = [
        d
        for d in docs
        if d["kind"] == "Application" and d["metadata"]["name"] == "envoy-ai-gateway"
    ]
    source = app["spec"]["source"]
    assert (source["chart"], source["targetRevision"]) == ("ai-gateway-helm", "v0.4.0")
    values = yaml.safe_load(source["helm"].get("values") or "{}") or {}
    webhook = values.get("controller", {}).get("mutatingWebhook", {})
    assert webhook.get("certManager", {}).get("enable") is True, values
    assert app["spec"]["ignoreDifferences"] == [
        {
            "group": "admissionregistration.k8s.io",
            "kind": "MutatingWebhookConfiguration",
            "jqPathExpressions": [".webhooks[]?.clientConfig.caBundle"],
        }
    ]
