"""What a deploy needs and cannot create: checked before `cdk deploy`, never guessed.

The tree makes every certificate and secret it can (cert-manager issues the Gateway
listener's and Envoy AI Gateway's webhook certificates in the cluster; the CDK writes
the global store's secrets). What is left is the environment's to provide, listed first
in docs/first-deploy.md, and checked here where an AWS API can tell:

* **ACM certificates** of `ingress.certificate_arns`: `ISSUED`, not expired, and covering
  `ingress.domain_name` and the region's own name `<region>.<domain_name>` (the NLB
  presents it for both; a wildcard covers one label, RFC 6125 6.4.3). A certificate for a
  private name cannot be DNS-validated without a public zone, so it is imported or comes
  from a private CA; the CDK requests none.
* **Secrets Manager secrets** External Secrets copies into the cluster (the Hugging Face
  token, the API keys; primary region) and the Docker Hub credentials of each region's
  ECR pull-through cache (`aws.docker_hub_cache_credentials`).

AWS is reached through two narrow seams, `AcmApi` and `SecretsApi` (tests use moto).
Verdicts: `ok`, `missing` (absent, not issued, expired, or not covering a name), and
`unchecked` (a call was refused: an unread prerequisite is not a pass).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from envspec.environment import EnvironmentSpec
from envspec.names import regional_domain_name

__all__ = [
    "AcmApi",
    "BotoAcmApi",
    "BotoSecretsApi",
    "Prerequisite",
    "PrerequisiteCheck",
    "SecretsApi",
    "Unreadable",
    "check_prerequisites",
    "covers",
    "planned_prerequisites",
]


class Unreadable(Exception):
    """AWS refused to say (permissions, throttling): the verdict is `unchecked`."""


class AcmApi(Protocol):
    def certificate(self, region: str, arn: str) -> dict[str, Any] | None:
        """`DescribeCertificate`'s `Certificate`, None when there is no such certificate."""
        ...


class SecretsApi(Protocol):
    def secret_exists(self, region: str, secret_id: str) -> bool: ...


def _refused(error: Exception) -> Unreadable:
    return Unreadable(str(error))


class BotoAcmApi:
    """`AcmApi` over boto3; `client_for(region)` returns an `acm` client of that region."""

    def __init__(self, client_for: Callable[[str], Any]) -> None:
        self._client_for = client_for

    def certificate(self, region: str, arn: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            reply = self._client_for(region).describe_certificate(CertificateArn=arn)
        except ClientError as error:
            if error.response["Error"]["Code"] == "ResourceNotFoundException":
                return None
            raise _refused(error) from None
        return dict(reply["Certificate"])


class BotoSecretsApi:
    """`SecretsApi` over boto3 (`DescribeSecret`: metadata only, never the value)."""

    def __init__(self, client_for: Callable[[str], Any]) -> None:
        self._client_for = client_for

    def secret_exists(self, region: str, secret_id: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            reply = self._client_for(region).describe_secret(SecretId=secret_id)
        except ClientError as error:
            if error.response["Error"]["Code"] == "ResourceNotFoundException":
                return False
            raise _refused(error) from None
        return "DeletedDate" not in reply  # scheduled for deletion: unusable


@dataclass(frozen=True)
class Prerequisite:
    kind: str  # "certificate" or "secret"
    region: str
    ident: str  # the certificate's ARN, the secret's id or ARN
    needed_for: str
    #: The names a certificate must cover.
    names: tuple[str, ...] = ()


@dataclass
class PrerequisiteCheck:
    prerequisite: Prerequisite
    verdict: str = "ok"
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        p = self.prerequisite
        return {"kind": p.kind, "region": p.region, "id": p.ident, "neededFor": p.needed_for,
                "verdict": self.verdict, "reasons": self.reasons}  # fmt: skip


def planned_prerequisites(env: EnvironmentSpec) -> list[Prerequisite]:
    """Every prerequisite of `env` that an AWS API can confirm."""
    domain = env.ingress.domain_name
    listeners = "the internal NLB's TLS listener"
    if env.global_router.enabled:
        listeners += " and the global router's"
    out = [
        Prerequisite(
            "certificate", region, arn, listeners, (domain, regional_domain_name(domain, region))
        )
        for region, arn in sorted(env.ingress.certificate_arns.items())
    ]
    out += [
        Prerequisite("secret", env.aws.region, secret_id, "External Secrets (in the cluster)")
        for secret_id in env.external_secret_ids
    ]
    out += [
        Prerequisite("secret", region, arn, "ECR pull-through cache of Docker Hub")
        for region, arn in sorted(env.aws.docker_hub_cache_credentials.items())
    ]
    return out


def covers(names_on_certificate: Sequence[str], name: str) -> bool:
    """Whether a certificate naming `names_on_certificate` is valid for `name`: the same
    name, or a wildcard `*.rest` for exactly one label before `rest` (RFC 6125 6.4.3)."""
    name = name.lower()
    for on in (n.lower() for n in names_on_certificate):
        if on == name:
            return True
        if on.startswith("*.") and "." in name and name.split(".", 1)[1] == on[2:]:
            return True
    return False


def _check_certificate(check: PrerequisiteCheck, acm: AcmApi, now: datetime) -> None:
    p = check.prerequisite
    certificate = acm.certificate(p.region, p.ident)
    if certificate is None:
        check.verdict = "missing"
        check.reasons.append(f"no ACM certificate {p.ident} in {p.region}")
        return
    status = certificate.get("Status")
    if status != "ISSUED":
        check.verdict = "missing"
        check.reasons.append(f"status {status}, not ISSUED")
    expires = certificate.get("NotAfter")
    if isinstance(expires, datetime) and expires <= now:
        check.verdict = "missing"
        check.reasons.append(f"expired {expires:%Y-%m-%d}")
    on = [certificate.get("DomainName", ""), *certificate.get("SubjectAlternativeNames", [])]
    for name in p.names:
        if not covers(on, name):
            check.verdict = "missing"
            check.reasons.append(f"does not cover {name} (it names {', '.join(sorted(set(on)))})")


def check_prerequisites(
    prerequisites: Sequence[Prerequisite], acm: AcmApi, secrets: SecretsApi, *, now: datetime
) -> list[PrerequisiteCheck]:
    """One check per prerequisite; a refused call is `unchecked`, never a pass."""
    checks = []
    for prerequisite in prerequisites:
        check = PrerequisiteCheck(prerequisite)
        try:
            if prerequisite.kind == "certificate":
                _check_certificate(check, acm, now)
            elif not secrets.secret_exists(prerequisite.region, prerequisite.ident):
                check.verdict = "missing"
                check.reasons.append(
                    f"no secret {prerequisite.ident} in Secrets Manager ({prerequisite.region})"
                )
        except Unreadable as error:
            check.verdict = "unchecked"
            check.reasons.append(f"could not be read: {error}")
        checks.append(check)
    return checks
