"""Tables never cut a figure, at any width, piped or on a terminal (issue 37).

At 80 columns (what a pipe gets) `igw simulate … | cat` showed `$/Mt 0.9` for 0.935 and
dropped a column whose legend stayed. Every table printer is rendered here at 60, 80 and
120 columns, as rich renders for a terminal and for a pipe, from figures chosen wide
(long names, five-digit numbers): each cell must appear whole, no line may pass the
width, and rich's mark of a cut cell (…) never appears. Then the real command, piped and
on a pseudo-terminal of 60 columns, prints every figure its `--json` prints.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from inference_gateway.terminal import Column, print_table

WIDTHS = (60, 80, 120)
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


def _render(draw: Callable[[Console], None], width: int, terminal: bool) -> str:
    out = io.StringIO()
    draw(Console(file=out, width=width, force_terminal=terminal, color_system="standard"))
    return ANSI.sub("", out.getvalue())


def _whole(text: str, cells: list[str], width: int) -> None:
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, text
    assert "…" not in text, text
    for cell in cells:
        pattern = rf"(?<![\w.,%$+-]){re.escape(cell)}(?![\w.,%])"
        assert re.search(pattern, text), f"{cell!r} cut or missing at {width}:\n{text}"


def _sim_result() -> dict[str, Any]:
    figures = {
        "ttft_p50_s": 0.0334, "ttft_p95_s": 14.7, "ttft_p99_s": 20123.4, "tpot_p50_s": 0.014,
        "tpot_p99_s": 0.018, "e2e_p99_s": 8.855, "output_tokens_per_s": 14520.2,
        "completed": 21070, "rejected": 12345, "cost_per_million_tokens": 0.935,
    }  # fmt: skip
    names = ["gateway", "production-stack-prefixaware", "upstream-default"]
    return {"scenario": "lora-mix", "seed": 5, "capacity_rps": 145.9,
            "policies": {n: dict(figures) for n in names}}  # fmt: skip


def _sim(console: Console) -> None:
    from inference_gateway.sim.cli import print_table as sim_table

    sim_table(_sim_result(), 20, console)


SIM_CELLS = ["0.033", "14.7", "20,123", "0.014", "8.855", "14,520", "21,070", "12,345", "0.935"]


def _whatif(console: Console) -> None:
    from inference_gateway.sim.whatif import ROWS, _print

    changes = {
        key: {"base": 16711.725, "head": 9236.284, "change": -7475.441, "change_pct": -44.7}
        for key, _, _ in ROWS
    }
    _print({"scenario": "lora-mix", "seed": 5, "duration_s": 60, "changes": changes}, console)


def _fleet(console: Console) -> None:
    from inference_gateway.sim.fleet.cli import print_fleet

    report = {
        "requests": {"served": 17965, "retried_and_served": 50, "lost_started": 211,
                     "unanswered": 0, "rejected": 0},
        "ttft_p50_s": 0.056, "ttft_p99_s": 0.439, "tpot_p50_s": 0.01, "tpot_p99_s": 0.034,
        "cross_region": {"served": 3448, "ttft_p99_s": 0.758},
        "requests_resumed": 299, "reprefill_gpu_s": 17.982, "resume_gap_p50_s": 1.249,
        "resume_gap_p99_s": 7.209, "lost_before_first_token": 0,
        "cost": {"per_million_tokens": 1.522, "attributed_per_million_tokens": 0.476,
                 "by_cluster": {"use1-a": {"sheddable_share": 0.0}}},
        "events": [{"at_s": 120.5, "action": "kill", "target": "us-east-1",
                    "clusters": ["use1-a", "use1-b"], "failover_s": 0.97,
                    "last_retry_s": 1.3, "lost_started": 159, "resumed": 170,
                    "retried_and_served": 48,
                    "retried_ttft_max_s": 1.3, "ttft_p99_s": {"before": 0.227,
                    "during": 1.038, "after": 0.499}}],
        "share": {"bin_s": 5, "start_s": [0, 5], "by_cluster": {"use1-a": [0.44, 0.29],
                  "use1-b": [0.29, 0.4], "usw2-a": [0.27, 0.31]}},
    }  # fmt: skip
    cluster = {"region": "us-east-1", "pods": 4, "hourly_usd": 13.76, "capacity_rps": 84.6,
               "unit_cost_per_million_tokens": 0.476}  # fmt: skip
    print_fleet(
        {"scenario": "fleet-two-regions", "seed": 15, "capacity_rps": 253.7,
         "clusters": {"use1-a": cluster, "use1-b": cluster},
         "profiles": {"latency": report, "cost": report}},
        console,
    )  # fmt: skip


def _preflight(console: Console) -> None:
    from stacks.preflight.checks import GroupPlacement, PreflightReport
    from stacks.preflight.cli import render_preflight

    placement = GroupPlacement(
        group="h100", region="us-east-1", instance_type="p5.48xlarge",
        zones_wanted=["us-east-1a", "us-east-1b"], zones_offered=["us-east-1a", "us-east-1b"],
        region_zones_offering=["us-east-1a", "us-east-1b"], vcpus_needed=384,
        quota_code="L-417A185B", quota_name="P", quota_vcpus=192.0, region_vcpus_needed=384,
        verdict="blocked", reasons=["short"],
    )  # fmt: skip
    render_preflight(PreflightReport("prod", [placement]), console)


def _generic(console: Console) -> None:
    columns = [Column("name", text=True), *(Column(f"figure\n{i}") for i in range(9))]
    rows = [[f"row-{r}-with-a-long-name", *(f"{r}{i},{i}23.45" for i in range(9))] for r in (1, 2)]
    print_table(console, "a table wider than any terminal", columns, rows, legend="words " * 30)


CASES = {
    "simulate": (_sim, SIM_CELLS),
    "what-if": (_whatif, ["16,711.725", "9,236.284", "-7,475.441", "(-44.7%)"]),
    "fleet": (_fleet, ["17965", "3448", "0.439", "1.522", "0.970", "1.038", "13.76", "0.29"]),
    "preflight": (_preflight, ["384 / 192", "p5.48xlarge", "us-east-1", "blocked"]),
    "generic": (_generic, [f"{r}{i},{i}23.45" for r in (1, 2) for i in range(9)]),
}


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", list(CASES))
def test_no_figure_is_cut(case: str, width: int, terminal: bool) -> None:
    draw, cells = CASES[case]
    _whole(_render(draw, width, terminal), cells, width)


TINY = """
name: tiny
seed: 3
duration_s: 10
fleet:
  - {name: h100, gpu: H100, model: llama-3.1-8b, replicas: 2}
  - {name: a10g, gpu: A10G, model: llama-3.1-8b, replicas: 2}
workload:
  arrival: {kind: poisson, load: 0.6}
  prompt_tokens: {dist: lognormal, median: 400, sigma: 0.5, max: 2000}
  output_tokens: {dist: lognormal, median: 60, sigma: 0.5, max: 400}
policies: [gateway, production-stack-prefixaware, upstream-default]
"""
IGW = [sys.executable, "-m", "inference_gateway.cli", "simulate"]


def _on_a_terminal(argv: list[str], columns: int) -> str:
    """stdout of `argv` run on a pseudo-terminal `columns` wide (what a user sees)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(argv, stdout=follower, stderr=subprocess.DEVNULL, env=env)
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(leader)
        proc.wait(timeout=30)
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def test_igw_simulate_piped_and_on_a_terminal_prints_every_figure(tmp_path: Path) -> None:
    from inference_gateway.sim.cli import COLUMNS, _fmt

    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    result = json.loads(
        subprocess.run([*IGW, str(path), "--json"], capture_output=True, text=True,
                       check=True, timeout=120).stdout
    )  # fmt: skip
    cells = [_fmt(r[k]) for r in result["policies"].values() for k, _ in COLUMNS]
    piped = subprocess.run(
        [*IGW, str(path)], capture_output=True, text=True, check=True, timeout=120,
        env={**os.environ, "COLUMNS": "60"},
    ).stdout  # fmt: skip
    _whole(piped, cells, 60)
    _whole(_on_a_terminal([*IGW, str(path)], 60), cells, 60)
