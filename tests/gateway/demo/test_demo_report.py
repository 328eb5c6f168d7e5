"""`demo-out/report.html` explains itself: what produced it, the TTFT distribution of
each policy, and what TTFT and E2E mean."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from inference_gateway.demo.report import LEGEND, render_report, ttft_cdf_svg, write_report

RESULTS = {
    name: {"ttft_p50_s": 0.1, "ttft_p95_s": 0.3, "ttft_p99_s": 0.4, "e2e_p99_s": 0.9,
           "tokens_per_s": 190.0, "completed": 50, "errors": 0}
    for name in ("gateway", "round-robin")
}  # fmt: skip


def _samples() -> dict[str, list[float]]:
    rnd = random.Random(1)
    return {
        "gateway": [rnd.lognormvariate(-2.3, 0.5) for _ in range(50)],
        "round-robin": [rnd.lognormvariate(-1.0, 1.2) for _ in range(50)],
    }


def test_report_has_the_ttft_cdf_per_policy_a_legend_and_its_provenance(tmp_path: Path) -> None:
    args = argparse.Namespace(duration=10.0, rate=4.0)
    html = render_report(
        RESULTS,
        _samples(),
        requests=50,
        fleet=["4 H100 pods of llama-3.1-8b"],
        args=args,
        trace="50 chat requests over 10 s",
        policies={"gateway": "igw serve", "round-robin": "igw serve, round robin"},
        provenance=["gateway: fleet pid 11, 4 pods fresh", "round-robin: fleet pid 12"],
        ratios={"gateway/round-robin": "gateway P99 TTFT = 0.020 x round-robin's"},
        machine="machine: load average 0.5 before, 0.7 after, 2 CPUs",
    )
    for text in (
        "50 chat requests over 10 s",
        "<dt>round-robin</dt>",
        "fleet pid 12",
        "0.020 x round-robin",
        "load average 0.5 before",
        "same state",
    ):
        assert text in html  # what was compared, from which state, how spread, how busy
    assert "<svg" in html
    assert "gateway (50 requests)" in html and "round-robin (50 requests)" in html
    assert "<strong>emulated</strong> vLLM pods" in html and "4 H100 pods of llama-3.1-8b" in html
    for term in LEGEND:
        assert f"<dt>{term}</dt>" in html
    assert "time to first token" in html and "end to end" in html
    path = write_report(tmp_path / "out", html)
    assert path.read_text() == html


def test_cdf_draws_one_line_per_policy_and_skips_empty_ones() -> None:
    svg = ttft_cdf_svg({**_samples(), "nobody": []})
    assert svg is not None
    assert "nobody" not in svg
    assert "share of requests with TTFT" in svg
    assert ttft_cdf_svg({"gateway": []}) is None
