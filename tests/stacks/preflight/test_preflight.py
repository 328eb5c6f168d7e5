"""The capacity preflight (`python -m stacks.preflight`): offerings per zone, vCPU quotas.

AWS APIs cannot be reached from here (tests talk to loopback only), so:

* EC2 (`DescribeInstanceTypeOfferings`, `DescribeInstanceTypes`) is served by `moto`
  (`mock_aws`), whose bundled offering data has, e.g., p5.48xlarge in every us-east-1
  zone and in no eu-west-3 zone — the "region with no offering" below.
* Service Quotas: moto 5.2 implements `GetServiceQuota` only for the `vpc` service code,
  not for EC2's vCPU quotas (`L-417A185B`, `L-DB2E81BA`, …), for which it answers
  `NoSuchResourceException`. So `ServiceQuotasSource` (the boto3 seam) is tested with
  moto on a VPC quota (a value is read) and on the EC2 codes (read as unknown, never
  guessed); the quota *shortfall* is tested through the same `QuotaSource` seam with the
  documented stub `FixedQuotas`, holding the values a real account would return.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto_env import ready_environment

from stacks.preflight import (
    BotoEc2Api,
    FixedQuotas,
    ServiceQuotasSource,
    run_preflight,
    vcpu_quota_for,
)
from stacks.preflight.cli import main, planned_groups

REPO = Path(__file__).resolve().parents[3]


def _environment(tmp_path: Path, *, secondary: str, h100_max: int = 2) -> Path:
    """The dev environment plus an H100 group (p5.48xlarge, no zones listed: every region)."""
    data: dict[str, Any] = yaml.safe_load(
        (REPO / "gitops/environments/dev/environment.yaml").read_text()
    )
    data["aws"]["secondary_regions"] = [secondary]
    # peered regions need their own VPC ranges (envspec/network.py)
    data["cluster"]["vpc_cidrs"] = {secondary: "10.41.0.0/16"}
    data["node_groups"][0]["availability_zones"] = []
    data["node_groups"].append(
        {"name": "h100", "instance_type": "p5.48xlarge", "gpu": "H100", "gpus_per_node": 8,
         "min_size": 0, "max_size": h100_max, "desired_size": 0}
    )  # fmt: skip
    path = tmp_path / "environment.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _clients(service: str) -> Any:
    make: Any = boto3.client  # typed loosely: the service name is a plain str here
    return lambda region: make(service, region_name=region)


@pytest.mark.parametrize(
    ("instance_type", "capacity", "code"),
    [
        ("p5.48xlarge", "ON_DEMAND", "L-417A185B"),
        ("p4d.24xlarge", "SPOT", "L-7212CCBC"),
        ("g5.2xlarge", "ON_DEMAND", "L-DB2E81BA"),
        ("g6.xlarge", "SPOT", "L-3819A6DF"),
        ("vt1.3xlarge", "ON_DEMAND", "L-DB2E81BA"),
        ("m6i.xlarge", "ON_DEMAND", "L-1216C47A"),
        ("inf2.xlarge", "ON_DEMAND", "L-1945791B"),
        ("trn1.32xlarge", "ON_DEMAND", "L-2C3B7624"),
        ("p5.48xlarge", "CAPACITY_BLOCK", None),
        ("inf2.xlarge", "SPOT", None),
        ("u-6tb1.metal", "ON_DEMAND", None),
    ],
)
def test_quota_code_of_instance_type(instance_type: str, capacity: str, code: str | None) -> None:
    ref = vcpu_quota_for(instance_type, capacity)
    assert (ref.code if ref else None) == code


def test_ec2_offerings_and_vcpus_through_boto3(aws: None) -> None:
    ec2 = BotoEc2Api(_clients("ec2"))
    assert {"us-east-1a", "us-east-1b"} <= ec2.offered_zones("us-east-1", "p5.48xlarge")
    assert ec2.offered_zones("eu-west-3", "p5.48xlarge") == set()
    assert ec2.offered_zones("af-south-1", "g5.2xlarge") == set()
    assert ec2.vcpus("us-east-1", "p5.48xlarge") == 192
    assert ec2.vcpus("us-east-1", "g5.2xlarge") == 8


def test_service_quotas_source_reads_what_moto_implements(aws: None) -> None:
    source = ServiceQuotasSource(_clients("service-quotas"))
    vpcs_per_region = source.quota("us-east-1", "vpc", "L-F678F1CE")
    assert vpcs_per_region is not None and vpcs_per_region > 0
    assert source.quota("us-east-1", "ec2", "L-417A185B") is None  # not in moto: unknown


def test_region_without_offering_and_quota_shortfall_block(aws: None, tmp_path: Path) -> None:
    name, groups = planned_groups(str(_environment(tmp_path, secondary="eu-west-3")))
    quotas = FixedQuotas(
        {
            ("us-east-1", "L-417A185B"): 192,  # P: one p5.48xlarge; the group needs two
            ("us-east-1", "L-DB2E81BA"): 64,  # G and VT: a10g needs 4 × 8 = 32
            ("eu-west-3", "L-DB2E81BA"): 64,
            ("us-east-1", "L-1216C47A"): 256,
            ("eu-west-3", "L-1216C47A"): 256,
        }
    )
    report = run_preflight(name, groups, BotoEc2Api(_clients("ec2")), quotas)
    by = {(p.group, p.region): p for p in report.placements}
    assert set(by) == {
        (g, r) for g in ("system", "a10g", "h100") for r in ("us-east-1", "eu-west-3")
    }
    assert by["a10g", "us-east-1"].verdict == "ok"
    assert by["a10g", "eu-west-3"].verdict == "ok"
    assert by["system", "eu-west-3"].verdict == "ok"

    no_offering = by["h100", "eu-west-3"]
    assert no_offering.verdict == "blocked"
    assert no_offering.zones_offered == [] and no_offering.region_zones_offering == []
    assert "no zone of eu-west-3 offers p5.48xlarge" in no_offering.reasons

    short = by["h100", "us-east-1"]
    assert short.verdict == "blocked"
    assert short.zones_offered == ["us-east-1a", "us-east-1b"]
    assert (short.region_vcpus_needed, short.quota_vcpus) == (384, 192)
    assert any("vCPU quota shortfall in us-east-1" in r for r in short.reasons)
    assert {(p.group, p.region) for p in report.blocked} == {
        ("h100", "eu-west-3"),
        ("h100", "us-east-1"),
    }


def test_groups_sharing_a_quota_add_up(aws: None, tmp_path: Path) -> None:
    name, groups = planned_groups(str(_environment(tmp_path, secondary="us-west-2")))
    quotas = FixedQuotas({("us-west-2", "L-417A185B"): 384, ("us-east-1", "L-417A185B"): 384})
    report = run_preflight(name, groups, BotoEc2Api(_clients("ec2")), quotas)
    assert [p.verdict for p in report.placements if p.group == "h100"] == ["ok", "ok"]
    unknown = next(p for p in report.placements if p.group == "a10g")
    assert unknown.verdict == "unchecked" and unknown.quota_vcpus is None
    assert "vCPU quota L-DB2E81BA could not be read" in unknown.reasons
    assert report.to_json()["ok"] is False


def test_cli_exits_1_when_a_group_cannot_be_placed(
    aws: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "preflight.json"
    path = _environment(tmp_path, secondary="eu-west-3")
    assert main([str(path), "--json", str(out)]) == 1
    document = json.loads(out.read_text())
    assert document["ok"] is False
    printed = capsys.readouterr().out
    assert "no zone of eu-west-3 offers p5.48xlarge" in printed
    assert "cannot be placed: h100 (eu-west-3)" in printed


def test_cli_unread_quota_is_not_a_pass(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    """moto cannot answer EC2 vCPU quotas: the verdict says so and the exit code is 1."""
    assert main(["dev"]) == 1
    captured = capsys.readouterr()
    assert "unchecked" in captured.out and "could not be read" in captured.out
    assert "not checked because a vCPU quota could not be read" in captured.err
    assert "--allow-unread-quotas" in captured.err


def test_cli_exits_0_when_told_to_accept_unread_quotas(
    aws: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dev, with its prerequisites made in moto (tests/stacks/preflight/conftest.py)."""
    assert main([str(ready_environment(tmp_path)), "--allow-unread-quotas"]) == 0
    assert "unchecked" in capsys.readouterr().out


def test_cli_without_boto3_says_what_to_install(tmp_path: Path) -> None:
    """A venv without boto3 (e.g. only the gateway's part, `make demo`): exit 1, not 2."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('boto3', 'botocore'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _Hide())\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run(
        [sys.executable, "-m", "stacks.preflight", "dev"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "needs the Python package 'boto3'" in result.stderr
    assert "pip install -r requirements/bench.txt" in result.stderr
    assert "invalid input" not in result.stderr


def test_cli_unknown_environment_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-env"]) == 2
    assert "no such environment" in capsys.readouterr().err


def test_cli_without_credentials_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No moto here: boto3 must fail on missing credentials before any network call."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookup
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE", raising=False)
    assert main(["dev"]) == 1
    assert "cannot query AWS: Unable to locate credentials" in capsys.readouterr().err
