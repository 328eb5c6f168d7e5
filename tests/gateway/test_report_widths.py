"""The HTML reports read at 1400 and 700 px: nothing wider than the window, no scrolling box.

Rendered by headless Chromium (Debian package `chromium`, installed by .ci/run): a probe
script appended to the page measures, after layout, the rightmost edge of every element
and counts elements whose content is wider than their box where that box clips or scrolls
(`overflow-x` not `visible`); `--dump-dom` returns the page with the probe's answer.
`--window-size` sets the layout viewport of a headless page, so the widths are the
reader's. A narrow width that does overflow (500 px for the backends table) proves the
probe sees overflow at all.
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from inference_gateway.backend_bench.report import render_html
from inference_gateway.backend_bench.results import (
    BackendResult,
    BenchResult,
    ConcurrencyPoint,
    DeterminismResult,
    ToolCallResult,
)
from inference_gateway.backend_bench.stats import summarize
from inference_gateway.demo.report import render_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(autouse=True)
def _chromium_installed() -> None:
    """Rendering is the test: a missing browser fails it (`make test` installs it)."""
    if CHROMIUM is None:
        pytest.fail("chromium is missing: `make test` installs the Debian package", pytrace=False)


PROBE = """<script>
(() => {
  const all = [...document.body.querySelectorAll("*")];
  const right = Math.max(...all.map(e => e.getBoundingClientRect().right));
  const clipped = all.filter(e => getComputedStyle(e).overflowX !== "visible"
                                  && e.scrollWidth > e.clientWidth + 1);
  document.body.dataset.probe = JSON.stringify({right: Math.ceil(right),
      viewport: document.documentElement.clientWidth, clipped: clipped.length});
})();
</script>"""


def _measure(page: str, width: int, tmp_path: Path) -> dict[str, int]:
    path = tmp_path / f"page-{width}.html"
    path.write_text(page.replace("</body>", PROBE + "</body>"))
    dom = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={width},1000", f"--user-data-dir={tmp_path / 'profile'}",
         "--dump-dom", path.as_uri()],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, "the probe did not run"
    return json.loads(html.unescape(found.group(1)))


def _backends() -> BenchResult:
    backends = []
    for label, gpu, tps in (("h100", "H100", 151.2), ("a10g", "A10G", 29.3),
                            ("l4", "L4", 14.8), ("l4-flaky", "L4", 14.8)):  # fmt: skip
        b = BackendResult(label, "llama-3.1-8b", "http://127.0.0.1:1/v1", 0.8048)
        b.emulated = f"emulated {gpu}, llama-3.1-8b" + (" (told to misbehave)" * ("-" in label))
        b.tokens_per_s = summarize([tps * 0.97, tps, tps * 1.01])
        b.ttft_s = summarize([0.07, 0.075])
        b.tpot_s = summarize([0.0066, 0.0068])
        b.cost_per_million_tokens = 15.12
        b.tool_calls = ToolCallResult(20, 20, 16, ["case 9 ('How many IDs are >= 730?'): "
                                                   "expected ge 730, got ge 731"] * 4)  # fmt: skip
        b.determinism = DeterminismResult(5, 5)
        b.run_to_run_change_pct = 0.0
        b.concurrency = [ConcurrencyPoint(1, tps, tps, 0.07, 0.0066, 15.1),
                         ConcurrencyPoint(8, tps * 7.6, tps, 0.14, 0.0081, 1.96)]  # fmt: skip
        backends.append(b)
    settings = {"runs": 2, "throughput": {"max_tokens": 32, "repeats": 3}}
    return BenchResult("2026-12-01T14:09:36+00:00", settings, backends)


def _demo() -> str:
    rnd = random.Random(1)
    row = {"ttft_p50_s": 0.101, "ttft_p95_s": 0.32, "ttft_p99_s": 0.454, "e2e_p99_s": 0.862,
           "tokens_per_s": 190.9, "completed": 57, "errors": 0}  # fmt: skip
    samples = {
        p: [rnd.lognormvariate(-2, 1) for _ in range(57)] for p in ("gateway", "round-robin")
    }
    args = argparse.Namespace(duration=40.0, rate=6.0)
    fleet = ["4 H100 pods of llama-3.1-8b", "4 A10G pods of llama-3.1-8b"]
    return render_report({p: row for p in samples}, samples, requests=57, fleet=fleet, args=args)


@pytest.mark.parametrize("width", [1400, 700])
@pytest.mark.parametrize("report", ["backends", "demo"])
def test_report_fits_the_window(report: str, width: int, tmp_path: Path) -> None:
    page = render_html(_backends()) if report == "backends" else _demo()
    probe = _measure(page, width, tmp_path)
    assert probe["viewport"] == width
    assert probe["right"] <= width and probe["clipped"] == 0, probe


def test_the_probe_sees_overflow(tmp_path: Path) -> None:
    probe = _measure(render_html(_backends()), 500, tmp_path)
    assert probe["right"] > 500 or probe["clipped"] > 0
