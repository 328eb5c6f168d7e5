"""The App a chart test builds one chart on, synthesised in memory (`cdk8s.Testing.synth`).

Not `cdk8s.Testing.app()`: that makes a `cdk8s.outdir.*` folder in the system's temp
folder on every call (cdk8s's `lib/testing.ts`: `mkdtempSync(join(tmpdir(),
'cdk8s.outdir.'))`) and nothing removes it; the chart tests left about a hundred a run.
An App writes its outdir only in `synth()`, which a chart test does not call.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import cdk8s

UNWRITTEN = Path(tempfile.gettempdir()) / "igw-chart-tests-never-written"


def chart_app() -> cdk8s.App:
    return cdk8s.App(outdir=str(UNWRITTEN))
