"""`igw preflight ENVIRONMENT`: check instance offerings and vCPU quotas before a deploy.

    igw preflight prod [--json PATH|-] [--profile AWS_PROFILE]

ENVIRONMENT is a name under gitops/environments/ or the path of an environment.yaml; it
is read through the platform repository's `stacks` package (aws_cdk-free), so the check
sees exactly the regions and zones that `cdk deploy` would build. Credentials come from
the usual boto3 chain (`--profile`, environment, instance role); the calls are read-only:
`ec2:DescribeInstanceTypeOfferings`, `ec2:DescribeInstanceTypes`,
`servicequotas:GetServiceQuota`.

Checked: every GPU node group and the system node group. Not checked: HyperPod instance
groups (SageMaker `ml.*` types have their own quotas).

Exit codes: 0 every group can be placed, 1 at least one is blocked (or AWS could not be
queried: no credentials, no network, a denied call), 2 bad input.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from ..errors import ConfigError
from .preflight import BotoEc2Api, PlannedGroup, PreflightReport, run_preflight
from .quotas import ServiceQuotasSource

__all__ = ["planned_groups", "register", "render_preflight"]

_STYLE = {"ok": "green", "partial": "yellow", "blocked": "red"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "preflight",
        help="check instance offerings per zone and vCPU quotas for an environment",
        description="For each node group of ENVIRONMENT and each region it is built in: "
        "which zones offer its instance type, and whether the account's vCPU quota covers "
        "what the groups need at max size. Exits 1 when a group cannot be placed.",
    )
    parser.add_argument("environment", metavar="ENVIRONMENT", help="name or environment.yaml")
    parser.add_argument("--json", metavar="PATH", help="write the JSON report ('-': stdout)")
    parser.add_argument("--profile", default=None, help="AWS profile (default: boto3 chain)")
    parser.set_defaults(handler=_run)


def planned_groups(environment: str) -> tuple[str, list[PlannedGroup]]:
    """The environment's name and every (node group, region) it builds."""
    try:
        from stacks.environment import load_environment
        from stacks.placement import plan_regions
    except ImportError:
        raise ConfigError(
            environment,
            ["<environment>: igw preflight reads environments through the platform "
             "repository's `stacks` package; run it from the repository's venv (make venv)"],
        ) from None  # fmt: skip
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
    table = Table(title=f"Capacity preflight: {report.environment}", title_justify="left")
    for column in ("group", "region", "type", "zones offering / wanted", "vCPUs need / quota"):
        table.add_column(column)
    table.add_column("verdict")
    for p in report.placements:
        wanted = f"{', '.join(p.zones_offered) or 'none'} / {len(p.zones_wanted)}"
        need = "–" if p.region_vcpus_needed is None else str(p.region_vcpus_needed)
        quota = "?" if p.quota_vcpus is None else f"{p.quota_vcpus:g}"
        verdict = f"[{_STYLE[p.verdict]}]{p.verdict}[/]"
        table.add_row(p.group, p.region, p.instance_type, wanted, f"{need} / {quota}", verdict)
    console.print(table)
    for p in report.placements:
        for reason in p.reasons:
            console.print(f"[{_STYLE[p.verdict]}]{p.group} in {p.region}[/]: {reason}")
    if report.blocked:
        names = sorted({f"{p.group} ({p.region})" for p in report.blocked})
        console.print(f"[red]cannot be placed: {', '.join(names)}[/]")


def _run(args: argparse.Namespace) -> int:
    name, groups = planned_groups(args.environment)
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, ProfileNotFound

    try:
        session = boto3.Session(profile_name=args.profile)
    except ProfileNotFound as error:
        raise ConfigError("arguments", [f"--profile: {error}"]) from None
    ec2 = BotoEc2Api(functools.cache(lambda region: session.client("ec2", region_name=region)))
    quotas = ServiceQuotasSource(
        functools.cache(lambda region: session.client("service-quotas", region_name=region))
    )
    try:
        report = run_preflight(name, groups, ec2, quotas)
    except (BotoCoreError, ClientError) as error:  # credentials, network, permissions
        print(f"igw preflight: cannot query AWS: {error}", file=sys.stderr)
        return 1
    to_stdout = args.json == "-"
    console = Console(stderr=to_stdout)
    if not console.is_terminal:
        console = Console(stderr=to_stdout, width=120)
    document = orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2)
    if to_stdout:
        sys.stdout.write(document.decode() + "\n")
    elif args.json:
        Path(args.json).write_bytes(document + b"\n")
    render_preflight(report, console)
    return 1 if report.blocked else 0
