"""The certificates the environment's servers present, issued in the cluster by cert-manager.

Envoy's HTTPS listener (the Gateway's `certificateRefs`, Secret `igw-tls`) needs a
`kubernetes.io/tls` Secret with `tls.crt` and `tls.key` in the Gateway's namespace; Envoy
Gateway v1.5 skips a listener whose Secret is missing or malformed
(`internal/gatewayapi/validate.go: validateTerminateModeAndGetTLSSecrets`, reason
`InvalidCertificateRef`), and the NLB's health checks then fail while Argo CD shows green.
Nothing outside the cluster can make that Secret (an ACM certificate's private key never
leaves ACM), so cert-manager (an add-on of gitops/bootstrap, wave -1) issues it:

  wave -1  a self-signed Issuer and, from it, the environment's CA (`igw-ca`, ten years)
  wave  0  an Issuer of that CA (after the CA's Secret exists: a CA Issuer without its
           Secret is `Ready=False`, which Argo CD reads as Degraded) and the listener's
           certificate, renewed by cert-manager a third of its lifetime before expiry

Behind a TLS listener of the NLB (an ACM certificate, `ingress.certificate_arns`) clients
never see this certificate: the NLB re-encrypts to Envoy and does not verify the target's
certificate. Where the NLB passes TCP through (a region without an ACM certificate,
stacks/parts/internal_lb.py), clients see it and trust the CA in the `ca.crt` key of
Secret `igw-tls` (docs/first-deploy.md). A CA rather than a self-signed leaf, so a
renewal does not change what clients trust.
"""

from __future__ import annotations

from typing import Any

from constructs import Construct

from cdk8s import Chart
from envspec.environment import EnvironmentSpec
from envspec.names import regional_domain_name

from .base import GATEWAY, Wave, labels, manifest
from .gateway import TLS_SECRET

__all__ = [
    "CA_ISSUER",
    "CA_SECRET",
    "CERT_MANAGER_API",
    "SELF_SIGNED_ISSUER",
    "CertificatesChart",
    "listener_dns_names",
]

CERT_MANAGER_API = "cert-manager.io/v1"
SELF_SIGNED_ISSUER = f"{GATEWAY}-selfsigned"
CA_SECRET = f"{GATEWAY}-ca"
CA_ISSUER = f"{GATEWAY}-ca"
_KEY = {"algorithm": "RSA", "size": 2048, "rotationPolicy": "Always"}


def listener_dns_names(env: EnvironmentSpec) -> list[str]:
    """What clients call: the environment's name and each region's own
    (`<region>.<domain>`, which the global router addresses)."""
    domain = env.ingress.domain_name
    return [domain, *(regional_domain_name(domain, r) for r in env.aws.regions)]


def _issuer_ref(name: str) -> dict[str, str]:
    return {"group": "cert-manager.io", "kind": "Issuer", "name": name}


class CertificatesChart(Chart):
    """Self-signed Issuer, the environment's CA, its Issuer, the listener's certificate."""

    def __init__(self, scope: Construct, construct_id: str, *, env: EnvironmentSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        common: dict[str, Any] = {
            "namespace": env.kubernetes.namespace,
            "labels": labels(name=GATEWAY, component="certificates"),
        }
        trust = {**common, "wave": Wave.CRDS}
        serving = {**common, "wave": Wave.CONTROLLERS}
        manifest(
            self,
            "selfsigned-issuer",
            api_version=CERT_MANAGER_API,
            kind="Issuer",
            name=SELF_SIGNED_ISSUER,
            **trust,
            body={"spec": {"selfSigned": {}}},
        )
        manifest(
            self,
            "ca",
            api_version=CERT_MANAGER_API,
            kind="Certificate",
            name=CA_SECRET,
            **trust,
            body={
                "spec": {
                    "isCA": True,
                    "commonName": f"inference gateway {env.name} CA",
                    "secretName": CA_SECRET,
                    "duration": "87600h",
                    "privateKey": _KEY,
                    "issuerRef": _issuer_ref(SELF_SIGNED_ISSUER),
                }
            },
        )
        manifest(
            self,
            "ca-issuer",
            api_version=CERT_MANAGER_API,
            kind="Issuer",
            name=CA_ISSUER,
            **serving,
            body={"spec": {"ca": {"secretName": CA_SECRET}}},
        )
        names = listener_dns_names(env)
        manifest(
            self,
            "listener",
            api_version=CERT_MANAGER_API,
            kind="Certificate",
            name=TLS_SECRET,
            **serving,
            body={
                "spec": {
                    "secretName": TLS_SECRET,
                    "commonName": names[0],
                    "dnsNames": names,
                    "duration": "2160h",
                    "privateKey": _KEY,
                    "usages": ["server auth", "digital signature", "key encipherment"],
                    "issuerRef": _issuer_ref(CA_ISSUER),
                }
            },
        )
