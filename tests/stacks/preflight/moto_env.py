"""An environment whose prerequisites exist in moto (inside the `aws` fixture's mock)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import boto3
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

REPO = Path(__file__).resolve().parents[3]
#: moto's account (its default), which the environment must name for the ARNs to match.
ACCOUNT = "123456789012"


def self_signed(*names: str, days: int = 30) -> tuple[bytes, bytes]:
    """A certificate (PEM) for `names` and its key, as one imports into ACM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), pem_key


def ready_environment(tmp_path: Path, *, certificate_names: tuple[str, ...] | None = None) -> Path:
    """dev in moto's account with every prerequisite made: its two Secrets Manager
    secrets, the Docker Hub credentials of the pull-through cache, and an imported ACM
    certificate for its names (`certificate_names` to import a different one)."""
    data: dict[str, Any] = yaml.safe_load(
        (REPO / "gitops/environments/dev/environment.yaml").read_text()
    )
    data["aws"]["account"] = ACCOUNT
    secrets = boto3.client("secretsmanager", region_name="us-east-1")
    arns = {}
    for name in ("igw/dev/hf-token", "igw/dev/api-keys", "ecr-pullthroughcache/docker-hub"):
        try:
            arns[name] = secrets.create_secret(Name=name, SecretString="x")["ARN"]
        except secrets.exceptions.ResourceExistsException:  # made by an earlier test
            arns[name] = secrets.describe_secret(SecretId=name)["ARN"]
    cache = arns["ecr-pullthroughcache/docker-hub"]
    data["aws"]["docker_hub_cache_credentials"] = {"us-east-1": cache}
    domain = "inference.internal.example.com"
    names = certificate_names or (domain, f"us-east-1.{domain}")
    pem, key = self_signed(*names)
    acm = boto3.client("acm", region_name="us-east-1")
    arn = acm.import_certificate(Certificate=pem, PrivateKey=key)["CertificateArn"]
    data["ingress"] = {"domain_name": domain, "certificate_arns": {"us-east-1": arn}}
    path = tmp_path / "environment.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
