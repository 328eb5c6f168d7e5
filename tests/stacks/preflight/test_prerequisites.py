"""The prerequisites `make preflight` checks (stacks/preflight/prerequisites.py): what a
deploy needs and the tree cannot create, listed first in docs/first-deploy.md.

moto answers ACM (`ImportCertificate`, `RequestCertificate`, `DescribeCertificate`) and
Secrets Manager (`CreateSecret`, `DescribeSecret`) in process. ACM issues a
DNS-validated certificate only once its CNAME resolves publicly (ACM user guide, "DNS
validation"), so a requested one stays `PENDING_VALIDATION`, which moto reproduces.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto_env import ready_environment

from envspec.environment import load_environment
from stacks.preflight.cli import main
from stacks.preflight.prerequisites import (
    BotoAcmApi,
    BotoSecretsApi,
    Prerequisite,
    check_prerequisites,
    covers,
    planned_prerequisites,
)


def _clients(service: str) -> Any:
    make: Any = boto3.client
    return lambda region: make(service, region_name=region)


def _check(path: Path) -> dict[str, Any]:
    checks = check_prerequisites(
        planned_prerequisites(load_environment(path)),
        BotoAcmApi(_clients("acm")),
        BotoSecretsApi(_clients("secretsmanager")),
        now=datetime.now(UTC),
    )
    return {c.prerequisite.ident: c for c in checks}


def test_what_dev_and_prod_must_provide() -> None:
    """dev: its two secrets and the Docker Hub credentials, no certificate (the NLB passes
    TLS through to Envoy); prod: a certificate per region for both names, and more."""
    dev = planned_prerequisites(load_environment("dev"))
    assert {(p.kind, p.ident) for p in dev} == {
        ("secret", "igw/dev/hf-token"),
        ("secret", "igw/dev/api-keys"),
        ("secret", load_environment("dev").aws.docker_hub_cache_credentials["us-east-1"]),
    }
    prod = load_environment("prod")
    certificates = [p for p in planned_prerequisites(prod) if p.kind == "certificate"]
    assert [(p.region, p.ident) for p in certificates] == sorted(
        prod.ingress.certificate_arns.items()
    )
    for p in certificates:
        domain = prod.ingress.domain_name
        assert p.names == (domain, f"{p.region}.{domain}")


def test_every_prerequisite_in_place_passes(aws: None, tmp_path: Path) -> None:
    checks = _check(ready_environment(tmp_path))
    assert len(checks) == 4
    assert {c.verdict for c in checks.values()} == {"ok"}, {i: c.reasons for i, c in checks.items()}


def test_a_missing_secret_and_a_certificate_short_of_a_name_are_reported(
    aws: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    domain = "inference.internal.example.com"
    path = ready_environment(tmp_path, certificate_names=(domain,))
    data = yaml.safe_load(path.read_text())
    data["kubernetes"]["auth"]["api_keys_secret_id"] = "igw/dev/not-made"
    path.write_text(yaml.safe_dump(data))
    checks = _check(path)
    assert checks["igw/dev/not-made"].verdict == "missing"
    (certificate,) = [c for c in checks.values() if c.prerequisite.kind == "certificate"]
    assert certificate.verdict == "missing"
    assert certificate.reasons == [f"does not cover us-east-1.{domain} (it names {domain})"]
    assert main([str(path), "--allow-unread-quotas"]) == 1
    captured = capsys.readouterr()
    assert "2 prerequisite(s) missing or unread" in captured.err
    assert "missing" in captured.out


def test_a_requested_certificate_still_pending_validation_is_not_a_pass(aws: None) -> None:
    acm = boto3.client("acm", region_name="us-east-1")
    name = "inference.internal.example.com"
    arn = acm.request_certificate(DomainName=name, ValidationMethod="DNS")["CertificateArn"]
    (check,) = check_prerequisites(
        [Prerequisite("certificate", "us-east-1", arn, "the NLB", (name,))],
        BotoAcmApi(_clients("acm")),
        BotoSecretsApi(_clients("secretsmanager")),
        now=datetime.now(UTC),
    )
    assert check.verdict == "missing"
    assert check.reasons == ["status PENDING_VALIDATION, not ISSUED"]
    later = datetime.now(UTC) + timedelta(days=400)  # past the imported certificate's end
    (expired,) = check_prerequisites(
        [Prerequisite("certificate", "us-east-1", arn, "the NLB", (name,))],
        _Fixed({"Status": "ISSUED", "DomainName": name, "NotAfter": later - timedelta(days=1)}),
        BotoSecretsApi(_clients("secretsmanager")),
        now=later,
    )
    assert expired.verdict == "missing" and expired.reasons[0].startswith("expired ")


class _Fixed:
    """An `AcmApi` that answers one description (the seam's documented stub)."""

    def __init__(self, certificate: dict[str, Any]) -> None:
        self._certificate = certificate

    def certificate(self, region: str, arn: str) -> dict[str, Any] | None:
        return self._certificate


def test_a_refused_call_is_unchecked_never_a_pass() -> None:
    class Refusing:
        def secret_exists(self, region: str, secret_id: str) -> bool:
            from stacks.preflight.prerequisites import Unreadable

            raise Unreadable("AccessDeniedException")

    (check,) = check_prerequisites(
        [Prerequisite("secret", "us-east-1", "igw/dev/hf-token", "External Secrets")],
        _Fixed({}),
        Refusing(),
        now=datetime.now(UTC),
    )
    assert check.verdict == "unchecked"
    assert check.reasons == ["could not be read: AccessDeniedException"]


@pytest.mark.parametrize(
    ("on", "name", "ok"),
    [
        (["a.example.com"], "a.example.com", True),
        (["A.Example.com"], "a.example.com", True),
        (["*.example.com"], "us-east-1.example.com", True),
        (["*.example.com"], "x.us-east-1.example.com", False),  # one label only
        (["*.example.com"], "example.com", False),
        (["example.com"], "us-east-1.example.com", False),
    ],
)
def test_certificate_names_cover_as_tls_clients_match_them(
    on: list[str], name: str, ok: bool
) -> None:
    """RFC 6125 6.4.3: a wildcard stands for exactly the left-most label."""
    assert covers(on, name) is ok
