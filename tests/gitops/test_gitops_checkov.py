"""checkov on the committed tree: no failed check; every skip carries its reason (the
`cdk8s/checkov.sh -d gitops --framework kubernetes` of docs/operations.md).

checkov runs from its own venv (cdk8s/checkov.sh creates it on first use: its pins
conflict with the project's .venv); `--skip-download` keeps it offline.
"""

from __future__ import annotations

import pytest
from checkov_run import run_checkov


@pytest.mark.slow
def test_checkov_passes_with_reasoned_skips(gitops_dir):
    report = run_checkov(gitops_dir)
    assert not report.failed, "\n".join(
        f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}"
        for c in report.failed
    )
    assert report.skipped, "the deliberate skips (CPU limits, digests) should be reported"
    assert not report.unreasoned_skips(), report.unreasoned_skips()
    assert report.passed > 100
