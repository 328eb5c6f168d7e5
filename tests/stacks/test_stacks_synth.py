"""Whole-app checks: synth time, cdk-nag, cfn-lint, and the `app.py` entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from aws_cdk import Environment, Stack
from aws_cdk import aws_s3 as s3

from stacks.application import attach_nag, environment_name, nag_findings, new_app

if TYPE_CHECKING:
    from conftest import Synth

REPO = Path(__file__).resolve().parents[2]
CFN_LINT = Path(sys.executable).with_name("cfn-lint")
STACKS_PER_REGION = {
    "network",
    "cluster",
    "ingress",
    "identity",
    "images",
    "observability",
    "gitops",
}


def test_synth_writes_every_stack_of_every_region(any_synth: Synth) -> None:
    assert any_synth.error is None, any_synth.error
    written = {p.name.removesuffix(".template.json") for p in any_synth.templates}
    expected = {
        any_synth.stack_name(region, part)
        for region in any_synth.env.aws.regions
        for part in STACKS_PER_REGION
    }
    if any_synth.env.global_router.enabled:  # the fleet tier (stacks/global_app.py)
        expected |= {any_synth.stack_name(r, "fleet") for r in any_synth.env.aws.regions}
        expected.add(any_synth.stack_name(any_synth.env.aws.region, "dns"))
    if len(any_synth.env.aws.regions) > 1:  # VPC peering (stacks/network_peering.py)
        expected |= {any_synth.stack_name(r, "peering") for r in any_synth.env.aws.regions}
    assert written == expected


def test_synth_takes_under_a_minute(any_synth: Synth) -> None:
    print(f"synth {any_synth.name}: {any_synth.seconds:.1f} s")
    assert any_synth.seconds < 60


def test_cdk_nag_aws_solutions_passes(any_synth: Synth) -> None:
    assert any_synth.error is None, f"unacknowledged cdk-nag findings: {any_synth.error}"
    report = json.loads((any_synth.outdir / "validation-report.json").read_text())
    failed = [p for p in report["pluginReports"] if p["conclusion"] != "success"]
    assert failed == []


def _acknowledgements(synth: Synth) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in synth.outdir.glob("*.metadata.json"):
        for construct, entries in json.loads(path.read_text()).items():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    for rule, reason in entry["data"].items():
                        found[f"{construct} {rule}"] = reason
    return found


def test_every_cdk_nag_acknowledgement_carries_a_reason(any_synth: Synth) -> None:
    acknowledged = _acknowledgements(any_synth)
    rules = {key.split(" ", 1)[1].split("[")[0] for key in acknowledged}
    assert {"Annotation::AwsSolutions-IAM4", "Annotation::AwsSolutions-IAM5"} <= rules
    short = {key: reason for key, reason in acknowledged.items() if len(reason) < 40}
    assert short == {}
    # Nothing of ours is acknowledged wholesale: only the Pod Identity policies' own
    # wildcards (metric namespaces, Describe calls, own prefixes) are.
    identity = [k for k in acknowledged if "-identity/" in k]
    assert identity and all("AwsSolutions-IAM5[Resource::" in k for k in identity)


def test_cdk_nag_fails_synth_on_an_unacknowledged_finding(tmp_path: Path) -> None:
    app = new_app(outdir=str(tmp_path))
    stack = Stack(app, "Leaky", env=Environment(account="111111111111", region="us-east-1"))
    s3.Bucket(stack, "NoTlsNoLogs")
    attach_nag(app)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    findings = nag_findings(str(tmp_path))
    assert "AwsSolutions-S1" in findings
    assert "AwsSolutions-S10" in findings


def test_cfn_lint_reports_no_errors(any_synth: Synth) -> None:
    """One cfn-lint run over all templates of the environment, in all its regions."""
    assert any_synth.templates
    result = subprocess.run(
        [
            str(CFN_LINT),
            "--format",
            "json",
            "--regions",
            *any_synth.env.aws.regions,
            "--",
            *map(str, any_synth.templates),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    matches = json.loads(result.stdout or "[]")
    errors = [m for m in matches if m["Level"] == "Error"]
    assert errors == [], result.stdout[:4000]
    assert result.returncode in (0, 4, 8, 12), result.stderr  # 2 = errors found


def test_environment_comes_from_context_then_variable_then_dev(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IGW_ENVIRONMENT", "prod")
    assert environment_name(new_app(context={"environment": "dev"})) == "dev"
    assert environment_name(new_app()) == "prod"
    monkeypatch.delenv("IGW_ENVIRONMENT")
    assert environment_name(new_app()) == "dev"


def test_app_rejects_a_bad_environment_with_the_field_path(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "gitops/environments/dev/environment.yaml").read_text())
    data["node_groups"][0]["instance_type"] = "g5 2xlarge"
    path = tmp_path / "environment.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {
        **os.environ,
        "IGW_ENVIRONMENT": str(path),
        "CDK_OUTDIR": str(tmp_path / "out"),
    }
    result = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "node_groups[0].instance_type" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list((tmp_path / "out").glob("*.template.json"))
