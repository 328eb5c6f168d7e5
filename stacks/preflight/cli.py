"""The preflight command: instance offerings, vCPU quotas and prerequisites before a deploy.

    python -m stacks.preflight prod [--json PATH|-] [--profile AWS_PROFILE] [--allow-unread-quotas]

ENVIRONMENT is a name under gitops/environments/ or the path of an environment.yaml, read
through `stacks.environment` and planned by `stacks.placement` (both aws_cdk-free), so the
check sees exactly the regions and zones that `cdk deploy` would build. Credentials come
from the usual boto3 chain (`--profile`, environment, instance role); the calls are
read-only: `ec2:DescribeInstanceTypeOfferings`, `ec2:DescribeInstanceTypes`,
`servicequotas:GetServiceQuota`, `acm:DescribeCertificate`, `secretsmanager:DescribeSecret`
(metadata, never a secret's value).

Checked: every GPU node group and the system node group; the prerequisites the tree
cannot create (`prerequisites.py`: ACM certificates, Secrets Manager secrets). Not
checked: HyperPod instance groups (SageMaker `ml.*` types have their own quotas).

Exit codes: 0 every group can be placed and every prerequisite is there; 1 at least one
group is blocked or prerequisite missing or unread, or a quota could not be read (unless
`--allow-unread-quotas`), or AWS could not be queried (no credentials, no network, a
denied call), or boto3 is not installed; 2 bad input.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import orjson
from rich.console import Console

from envspec.environment import load_environment
from inference_gateway.errors import ConfigError
from inference_gateway.terminal import Column, print_table

from ..placement import plan_regions
from .checks import BotoEc2Api, PlannedGroup, PreflightReport, run_preflight
from .prerequisites import (
    BotoAcmApi,
    BotoSecretsApi,
    PrerequisiteCheck,
    check_prerequisites,
    planned_prerequisites,
)
from .quotas import ServiceQuotasSource

__all__ = ["build_parser", "main", "planned_groups", "render_preflight", "render_prerequisites"]

PROG = "igw-preflight"
_STYLE = {
    "ok": "green",
    "partial": "yellow",
    "unchecked": "yellow",
    "blocked": "red",
    "missing": "red",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="For each node group of ENVIRONMENT and each region it is built in: "
        "which zones offer its instance type, and whether the account's vCPU quota covers "
        "what the groups need at max size. Exits 1 when a group cannot be placed or a "
        "quota could not be read.",
    )
    parser.add_argument("environment", metavar="ENVIRONMENT", help="name or environment.yaml")
    parser.add_argument("--json", metavar="PATH", help="write the JSON report ('-': stdout)")
    parser.add_argument("--profile", default=None, help="AWS profile (default: boto3 chain)")
    parser.add_argument(
        "--allow-unread-quotas",
        action="store_true",
        help="exit 0 even when a vCPU quota could not be read (verdict stays 'unchecked')",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except ConfigError as error:
        print(f"{PROG}: invalid input in {error.source}", file=sys.stderr)
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2


def planned_groups(environment: str) -> tuple[str, list[PlannedGroup]]:
    """The environment's name and every (node group, region) it builds."""
    env = load_environment(environment)
    groups = []
    for plan in plan_regions(env, str(environment)):
        system = env.cluster.system_node_group
        groups.append(
            PlannedGroup(
                "system", plan.region, system.instance_type, "ON_DEMAND", system.max_size,
                plan.availability_zones,
            )
        )  # fmt: skip
        for g in plan.node_groups:
            groups.append(
                PlannedGroup(
                    g.name, plan.region, g.instance_type, g.capacity_type, g.max_size,
                    plan.node_group_zones[g.name],
                )
            )  # fmt: skip
    return env.name, groups


def render_preflight(report: PreflightReport, console: Console) -> None:
    rows = []
    for p in report.placements:
        wanted = f"{', '.join(p.zones_offered) or 'none'} / {len(p.zones_wanted)}"
        need = "–" if p.region_vcpus_needed is None else str(p.region_vcpus_needed)
        quota = "?" if p.quota_vcpus is None else f"{p.quota_vcpus:g}"
        verdict = f"[{_STYLE[p.verdict]}]{p.verdict}[/]"
        rows.append([p.group, p.region, p.instance_type, wanted, f"{need} / {quota}", verdict])
    name = {"text": True, "wrap": False}
    columns = [
        Column("group", **name),
        Column("region", **name),
        Column("type", **name),
        Column("zones offering / wanted", text=True),
        Column("vCPUs need\n/ quota"),
        Column("verdict", **name),
    ]
    print_table(console, f"Capacity preflight: {report.environment}", columns, rows, keys=2)
    for p in report.placements:
        for reason in p.reasons:
            console.print(f"[{_STYLE[p.verdict]}]{p.group} in {p.region}[/]: {reason}")
    if report.blocked:
        names = sorted({f"{p.group} ({p.region})" for p in report.blocked})
        console.print(f"[red]cannot be placed: {', '.join(names)}[/]")
    if report.unchecked:
        names = sorted({f"{p.group} ({p.region})" for p in report.unchecked})
        console.print(
            f"[yellow]not checked (vCPU quota unread; a quota is not capacity, and an unread "
            f"quota is not a pass): {', '.join(names)}[/]"
        )


def render_prerequisites(checks: Sequence[PrerequisiteCheck], console: Console) -> None:
    rows = []
    for c in checks:
        p = c.prerequisite
        verdict = f"[{_STYLE[c.verdict]}]{c.verdict}[/]"
        rows.append([p.kind, p.region, p.ident, p.needed_for, verdict])
    name = {"text": True, "wrap": False}
    columns = [
        Column("kind", **name),
        Column("region", **name),
        Column("id", text=True),
        Column("needed for", text=True),
        Column("verdict", **name),
    ]
    print_table(console, "Prerequisites", columns, rows, keys=1)
    for c in checks:
        for reason in c.reasons:
            console.print(f"[{_STYLE[c.verdict]}]{c.prerequisite.ident}[/]: {reason}")


def _run(args: argparse.Namespace) -> int:
    name, groups = planned_groups(args.environment)
    prerequisites = planned_prerequisites(load_environment(args.environment))
    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError, ProfileNotFound
    except ModuleNotFoundError as error:
        print(
            f"{PROG}: needs the Python package {error.name!r}, which this venv lacks: "
            "pip install -r requirements/bench.txt (or `make venv` for everything)",
            file=sys.stderr,
        )
        return 1

    try:
        session = boto3.Session(profile_name=args.profile)
    except ProfileNotFound as error:
        raise ConfigError("arguments", [f"--profile: {error}"]) from None
    ec2 = BotoEc2Api(functools.cache(lambda region: session.client("ec2", region_name=region)))
    quotas = ServiceQuotasSource(
        functools.cache(lambda region: session.client("service-quotas", region_name=region))
    )
    acm = BotoAcmApi(functools.cache(lambda region: session.client("acm", region_name=region)))
    secrets = BotoSecretsApi(
        functools.cache(lambda region: session.client("secretsmanager", region_name=region))
    )
    try:
        report = run_preflight(name, groups, ec2, quotas)
        checks = check_prerequisites(prerequisites, acm, secrets, now=datetime.now(UTC))
    except (BotoCoreError, ClientError) as error:  # credentials, network, permissions
        print(f"{PROG}: cannot query AWS: {error}", file=sys.stderr)
        return 1
    to_stdout = args.json == "-"
    console = Console(stderr=to_stdout)  # not a terminal: $COLUMNS, else 80; cells wrap
    summary = report.to_json()
    unmet = [c for c in checks if c.verdict != "ok"]
    summary["ok"] = summary["ok"] and not unmet
    summary["prerequisites"] = [c.to_json() for c in checks]
    document = orjson.dumps(summary, option=orjson.OPT_INDENT_2)
    if to_stdout:
        sys.stdout.write(document.decode() + "\n")
    elif args.json:
        Path(args.json).write_bytes(document + b"\n")
    render_preflight(report, console)
    render_prerequisites(checks, console)
    if unmet:
        print(
            f"{PROG}: {len(unmet)} prerequisite(s) missing or unread "
            "(docs/first-deploy.md, Prerequisites)",
            file=sys.stderr,
        )
    if report.blocked:
        return 1
    if report.unchecked and not args.allow_unread_quotas:
        print(
            f"{PROG}: {len(report.unchecked)} placement(s) not checked because a vCPU quota "
            "could not be read (servicequotas:GetServiceQuota); --allow-unread-quotas "
            "accepts that",
            file=sys.stderr,
        )
        return 1
    return 1 if unmet else 0
