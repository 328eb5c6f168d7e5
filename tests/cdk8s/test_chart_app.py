"""The chart tests build their charts on `chart_app()`, which leaves nothing behind, never
on `cdk8s.Testing.app()`, which leaves a `cdk8s.outdir.*` folder in the system's temp
folder a call (chart_app.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from chart_app import UNWRITTEN, chart_app

import cdk8s

TESTS = Path(__file__).resolve().parents[1]


def test_no_test_builds_on_the_app_that_leaves_a_temp_folder() -> None:
    calls = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in sorted([*TESTS.rglob("test_*.py"), *TESTS.rglob("conftest.py")])
        if path.name != Path(__file__).name
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "Testing.app(" in line
    ]
    assert calls == []


def test_a_chart_synthesised_on_it_writes_no_folder() -> None:
    before = set(Path(tempfile.gettempdir()).glob("cdk8s.outdir.*"))
    chart = cdk8s.Chart(chart_app(), "t")
    cdk8s.ApiObject(chart, "config", api_version="v1", kind="ConfigMap")
    assert [d["kind"] for d in cdk8s.Testing.synth(chart)] == ["ConfigMap"]
    assert set(Path(tempfile.gettempdir()).glob("cdk8s.outdir.*")) == before
    assert not UNWRITTEN.exists()
