"""The documented CDK path (docs/infrastructure.md, README.md): `cdk synth -c
environment=<env>` with the CDK CLI the repo pins.

Synth must need no AWS credentials and look nothing up. The CDK CLI answers a construct's
lookup (`availability-zones`, `vpc-provider`, …) from `cdk.context.json` or by calling AWS
and writing the answer there; the synthesised assembly lists every lookup it still needs
under `missing` in `manifest.json` (aws-cdk `cloud-assembly-schema`: AssemblyManifest.missing,
the list the CLI resolves before it synthesises again). So no `missing` entry and no
`cdk.context.json` means nothing was looked up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Synth

REPO = Path(__file__).resolve().parents[2]
CDK = REPO / "node_modules" / ".bin" / "cdk"


def test_in_process_synth_needs_no_lookup(any_synth: Synth) -> None:
    """`make synth` (python app.py) leaves no lookup for the CLI to answer."""
    manifest = json.loads((any_synth.outdir / "manifest.json").read_text())
    assert manifest.get("missing", []) == []


def test_cdk_json_runs_the_app_with_the_repo_venv() -> None:
    """Without an activated venv a bare `python3` lacks inference_gateway and aws_cdk."""
    app = json.loads((REPO / "cdk.json").read_text())["app"]
    assert app.split()[0] == ".venv/bin/python"


def test_cdk_cli_version_is_pinned() -> None:
    package = json.loads((REPO / "package.json").read_text())
    version = package["devDependencies"]["aws-cdk"]
    assert version[0].isdigit(), f"aws-cdk must be an exact version, not {version!r}"
    lock = json.loads((REPO / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/aws-cdk"]["version"] == version


@pytest.mark.slow
def test_cdk_synth_without_credentials_writes_only_its_output(tmp_path: Path) -> None:
    """`cdk synth -c environment=dev` as the README says it, with no AWS credentials at all."""
    if not CDK.exists():
        pytest.fail("the pinned CDK CLI is not installed: run `make cdk-cli`")
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.fail("cdk.json runs .venv/bin/python: run `make venv`")
    assert not (REPO / "cdk.context.json").exists(), "cdk.context.json must not be committed"
    home = tmp_path / "home"  # no ~/.aws: neither credentials nor a profile
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(home), CDK_DISABLE_VERSION_CHECK="1", AWS_EC2_METADATA_DISABLED="true")
    out = tmp_path / "cdk.out"
    before = _repo_changes()
    try:
        result = subprocess.run(
            [str(CDK), "synth", "-c", "environment=dev", "-o", str(out), "--quiet"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        context_written = (REPO / "cdk.context.json").exists()
        after = _repo_changes()
    finally:
        (REPO / "cdk.context.json").unlink(missing_ok=True)
    assert result.returncode == 0, result.stderr[-3000:]
    # quiet (issue 37): no deprecation warning of a construct aws-cdk-lib builds for us, no
    # stray `program.js:…` line, no annotation warning, no "N feature flags" notice
    for noise in ("deprecated", "program.js", "WARNING", "feature flags"):
        assert noise not in result.stderr, result.stderr
    assert not context_written, "cdk synth looked something up and wrote cdk.context.json"
    assert after == before, "cdk synth wrote into the repository"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest.get("missing", []) == []
    assert sorted(p.name for p in out.glob("*.template.json"))


def _repo_changes() -> str:
    """Untracked and modified files, ignored ones included (cdk.out/ is ignored), less the
    bytecode caches Python writes on import."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "--", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return "\n".join(line for line in status.splitlines() if "__pycache__" not in line)


def test_every_feature_flag_the_cli_would_flag_is_pinned(any_synth: Synth) -> None:
    """The CDK CLI prints "N feature flags are not configured" for each flag of the
    assembly's feature-flag report that has no user value and whose value when unset
    differs from the recommended one (aws-cdk 2.1148.1, lib/commands/flags/operations.ts,
    `FlagOperations.filterNeedsAttention`; `defaultValue` is `unconfiguredBehavesLike.v2
    ?? false`). stacks/cdk_feature_flags.json pins each at its unset behaviour; an upgrade
    of aws-cdk-lib that adds one fails here, naming it."""
    manifest = json.loads((any_synth.outdir / "manifest.json").read_text())
    (report,) = [
        a for a in manifest["artifacts"].values() if a["type"] == "cdk:feature-flag-report"
    ]
    obsolete = {
        "@aws-cdk/core:enableStackNameDuplicates",
        "@aws-cdk/aws-s3:grantWriteWithoutAcl",
        "@aws-cdk/aws-kms:defaultKeyPolicies",
    }
    unpinned = sorted(
        name
        for name, flag in report["properties"]["flags"].items()
        if name not in obsolete
        and "userValue" not in flag
        and flag.get("unconfiguredBehavesLike", {}).get("v2", False) != flag.get("recommendedValue")
    )
    assert unpinned == [], "pin these in stacks/cdk_feature_flags.json at their unset value"


@pytest.mark.slow
def test_the_app_refuses_a_context_key_it_does_not_read_and_a_foreign_assembly_folder() -> None:
    """`cdk deploy --all -c env=prod` used to build dev silently (the app reads
    `environment`); and cdk.json's output is dev's folder, so another environment's
    assembly must be sent to its own. The CLI hands the app its context as
    CDK_CONTEXT_JSON and its output folder as CDK_OUTDIR (aws-cdk cx-api)."""
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"env": "prod"}),
           "CDK_OUTDIR": str(REPO / "cdk.out" / "prod")}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "cdk synth: invalid input in the command line", lines
    assert "-c env=…: not a context key of this app; it reads -c environment=<name>" in lines[1]
    assert "-o cdk.out/prod: dev's assembly goes to cdk.out/dev: add -o cdk.out/dev" in lines[2]


def test_the_docs_count_prod_s_stacks_right(prod_synth: Synth) -> None:
    """README.md and docs/infrastructure.md say how many stacks prod deploys (the README
    once said 7 per region, infrastructure.md 14, while the app built 19)."""
    count = len(prod_synth.templates)
    for page in ("README.md", "docs/infrastructure.md"):
        text = " ".join((REPO / page).read_text().split())
        assert f"{count} stacks" in text or f"{count} today" in text, (page, count)
