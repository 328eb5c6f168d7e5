"""Preflight: can an environment's node groups be placed where it plans them, and is
what a deploy cannot create (certificates, secrets) there?

    python -m stacks.preflight prod      # or: make preflight ENV=prod, .venv/bin/igw-preflight

It lives on the IaC side because it reads environments through `stacks.environment` and
`stacks.placement` (the same per-region plan `cdk deploy` builds); the gateway package
and its container image know nothing of environments. Modules, one job each:

    checks   offerings and quota verdicts (EC2 behind the `Ec2Api` seam)
    quotas   EC2 vCPU quota codes, the `QuotaSource` seam and its Service Quotas reader
    prerequisites  ACM certificates and Secrets Manager secrets (`AcmApi`, `SecretsApi`)
    cli      the command: plan, query AWS (boto3), table and JSON, exit code

Nothing here imports aws_cdk; boto3 is imported only when the command queries AWS.
"""

from __future__ import annotations

from .checks import BotoEc2Api, Ec2Api, GroupPlacement, PlannedGroup, PreflightReport, run_preflight
from .quotas import FixedQuotas, QuotaSource, ServiceQuotasSource, vcpu_quota_for

__all__ = [
    "BotoEc2Api",
    "Ec2Api",
    "FixedQuotas",
    "GroupPlacement",
    "PlannedGroup",
    "PreflightReport",
    "QuotaSource",
    "ServiceQuotasSource",
    "run_preflight",
    "vcpu_quota_for",
]
