"""checkov over a rendered tree, as every test that runs it reads it (the committed
gitops tree, a test's own P/D tree).

checkov runs from its own venv (cdk8s/checkov.sh creates it on first use: its pins
conflict with the project's .venv); `--skip-download` keeps it offline."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["CheckovReport", "run_checkov"]

SCRIPT = Path(__file__).resolve().parents[1] / "cdk8s" / "checkov.sh"


class CheckovReport:
    """The failed and skipped checks of one run, and how many passed."""

    def __init__(self, reports: list[dict[str, Any]]) -> None:
        results = [r["results"] for r in reports]
        self.failed = [c for r in results for c in r.get("failed_checks", [])]
        self.skipped = [c for r in results for c in r.get("skipped_checks", [])]
        self.passed = sum(r["summary"]["passed"] for r in reports)

    def unreasoned_skips(self) -> list[str]:
        """Skips whose suppression carries no reason (every skip must say why)."""
        return [
            f"{c['check_id']} on {c['resource']}"
            for c in self.skipped
            if not c["check_result"].get("suppress_comment", "").strip()
        ]


def run_checkov(directory: Path) -> CheckovReport:
    run = subprocess.run(
        [str(SCRIPT), "-d", str(directory), "--framework", "kubernetes", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.stdout.strip(), run.stderr[-3000:]
    report = json.loads(run.stdout)
    return CheckovReport(report if isinstance(report, list) else [report])
