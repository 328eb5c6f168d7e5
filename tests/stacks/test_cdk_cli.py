"""The documented CDK path: `cdk synth -c environment=<env>` with the CDK CLI the repo pins.

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
