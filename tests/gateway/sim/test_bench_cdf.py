"""`make bench` draws every TTFT CDF with the compiled simulator (issue 37).

`make bench` builds the mypyc modules first, and a compiled driver binds the observer
class when it is compiled: a bench worker that swapped `driver.Observer` for a subclass
keeping quantiles went unseen, so every CDF of report.html was empty and results.json
lacked `ttft_quantiles_s`. The quantiles are now the simulator's own report
(`run_policy(..., ttft_quantiles=…)`). This runs a short shipped scenario through the
bench's own worker pool with the compiled modules loaded (as `make test` builds them),
writes the reports, and checks the quantiles and the lines drawn; and that the HTML
carries its tables as tables, each check's figures under their own column.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inference_gateway import native
from inference_gateway.sim.configs import shorten
from inference_gateway.sim.scenario import load_scenario

BENCH = Path(__file__).resolve().parents[3] / "bench"
POLICIES = ["gateway", "round-robin", "oracle"]


@pytest.fixture(scope="module")
def bench() -> Iterator[Any]:
    sys.path.insert(0, str(BENCH))
    try:
        import matrix
        import report
        import run

        yield run, report, matrix
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def written(bench: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run, report, matrix = bench
    if native.status() != "compiled":  # the bug lived only there: never test around it
        pytest.fail("the compiled simulator modules are not built: run `make native`")
    scenario = shorten(load_scenario("homogeneous-steady"), 20)
    case = matrix.Case("scenario/homogeneous-steady", "scenario", scenario, POLICIES)
    cases, cpu = run.run_matrix([case], jobs=1)
    document = {
        "schema": run.SCHEMA,
        "run": {"started_at": "-", "wall_s": 1.0, "quick": True, "quick_cases": 1,
                "jobs": 1, "git_commit": None, "python": "3.11", "cpus": 1,
                "load_average": [0.0, 0.0, 0.0], "cpu_s_by_job": cpu},
        "cases": cases,
        "checks": run.evaluate_checks(cases),
        "published": run.evaluate_published(cases),
        "overhead": {},
    }  # fmt: skip
    out = tmp_path_factory.mktemp("bench")
    report.write_reports(document, out)
    return out


def test_results_carry_the_ttft_quantiles(bench: Any, written: Path) -> None:
    _, _, matrix = bench
    results = json.loads((written / "results.json").read_text())
    policies = results["cases"]["scenario/homogeneous-steady"]["policies"]
    for policy in POLICIES:
        quantiles = policies[policy]["ttft_quantiles_s"]
        assert len(quantiles) == len(matrix.QUANTILES)
        assert quantiles == sorted(quantiles) and quantiles[-1] > 0
        # the sketch agrees with the report's own percentiles
        assert quantiles[matrix.QUANTILES.index(99)] == pytest.approx(
            policies[policy]["ttft_p99_s"], rel=1e-6, abs=1e-6
        )


def test_every_cdf_has_a_line_per_policy(bench: Any, written: Path) -> None:
    _, report, _ = bench
    results = json.loads((written / "results.json").read_text())
    for case in results["cases"].values():
        figure = report.cdf_figure(case)
        labels = [line.get_label() for line in figure.axes[0].lines]
        assert labels == list(case["policies"]), case["scenario"]


def test_the_html_report_has_tables_not_preformatted_markdown(written: Path) -> None:
    page = (written / "report.html").read_text()
    assert "<pre" not in page and "| ---" not in page and "|---" not in page
    assert page.count("<table>") >= 2  # the checks, the scenario
    assert "<th>TTFT p99 s</th>" in page and "quick run" in page


def test_a_check_row_puts_each_figure_under_its_own_column(bench: Any) -> None:
    """The P/D check's ratio is of P99 TPOT: its row shows the TPOT figures and says so
    (it showed P99 TTFTs beside a TPOT ratio)."""
    run, report, _ = bench

    def figures(ttft: float, tpot: float) -> dict[str, Any]:
        return {"ttft_p99_s": ttft, "tpot_p99_s": tpot, "output_tokens_per_s": 100.0,
                "completed": 10, "rejected": 0}  # fmt: skip

    policies = {"gateway": figures(0.5, 0.08), "gateway-pd": figures(0.55, 0.03)}
    (check,) = [
        c
        for c in run.evaluate_checks({"scenario/disagg-long-prompts": {"policies": policies}})
        if c["check"] == "pd-tpot-half"
    ]
    assert check["figure"] == "tpot_p99_s"
    assert (check["gateway_p99_s"], check["reference_p99_s"]) == (0.08, 0.03)
    assert check["ratio"] == pytest.approx(0.03 / 0.08, abs=1e-4)
    (section,) = [s for s in report.sections(_doc(run, [check])) if s.heading == "Must-hold checks"]
    row = dict(zip(section.header, section.rows[0], strict=True))
    assert row["figure"] == "P99 TPOT" and row["gateway s"] == "0.080"


def _doc(run: Any, checks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema": run.SCHEMA, "cases": {}, "checks": checks, "overhead": {},
            "run": {"wall_s": 1.0, "cpus": 1, "jobs": 1, "load_average": [0.0]}}  # fmt: skip
