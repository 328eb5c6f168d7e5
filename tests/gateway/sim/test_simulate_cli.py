"""`igw simulate` as a newcomer meets it: at 80 columns, in a log, with --list and --help.

Run in a child process with COLUMNS=80 and stdout/stderr as pipes (what CI logs see), so
rich sizes its tables exactly as it does there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from inference_gateway.sim.cli import policy_names
from inference_gateway.sim.policies import POLICIES
from inference_gateway.sim.scenario import load_scenario, shipped_scenarios

TINY = """
name: tiny-mixed
seed: 3
duration_s: 120
fleet:
  - {name: h100, gpu: H100, model: llama-3.1-8b, replicas: 2}
  - {name: a10g, gpu: A10G, model: llama-3.1-8b, replicas: 2}
workload:
  arrival: {kind: poisson, load: 0.6}
  prompt_tokens: {dist: lognormal, median: 400, sigma: 0.5, max: 2000}
  output_tokens: {dist: lognormal, median: 60, sigma: 0.5, max: 400}
policies: [gateway]
"""


def _igw(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inference_gateway.cli.main", *argv],
        env={**os.environ, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def _fits(text: str) -> None:
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text  # rich's mark of a cell cut short


def test_list_wraps_whole_words_and_names_every_policy() -> None:
    out = _igw("simulate", "--list").stdout
    _fits(out)
    tokens = out.split()
    for name in shipped_scenarios():
        assert name in tokens
        first_paragraph = load_scenario(name).description.strip().split("\n\n")[0]
        for word in first_paragraph.split():
            assert word in tokens, f"{name}: {word!r} cut or missing"
    for policy in POLICIES:
        assert policy in out.replace(",", " ").split()


def test_help_names_the_policies_and_duration() -> None:
    out = _igw("simulate", "--help").stdout
    assert "--duration S" in out
    words = out.replace(",", " ").split()
    for policy in policy_names():
        assert policy in words, f"{policy!r} missing or broken across lines in --help"


@pytest.mark.parametrize("policies", ["gateway,production-stack-prefixaware,upstream-default"])
def test_table_fits_80_columns_and_duration_cuts_the_run(tmp_path: Path, policies: str) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    result = _igw("simulate", str(path), "--policies", policies, "--duration", "30")
    _fits(result.stdout)
    assert "30 s simulated" in result.stdout
    assert "production-" in result.stdout and "prefixaware" in result.stdout
    assert "upstream-" in result.stdout.split() and "default" in result.stdout.split()
    assert "TTFT: time to first token" in result.stdout  # the legend of the abbreviations
    assert result.stderr.endswith("\n")  # progress and notes on stderr, whole lines


def test_duration_shortens_the_simulation(tmp_path: Path) -> None:
    import json

    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    whole = json.loads(_igw("simulate", str(path), "--json").stdout)["policies"]["gateway"]
    short = json.loads(_igw("simulate", str(path), "--json", "--duration", "30").stdout)
    assert 0 < short["policies"]["gateway"]["completed"] < whole["completed"] / 2
