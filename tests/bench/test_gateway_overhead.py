"""bench/gateway_overhead.py: the open loop reports the zero-delay pod's own CPU per answer
(an aiohttp server that only answers), and the table against vllm-router sets it beside
what issue 32's CPU bar leaves `igw serve`."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import gateway_overhead


def _result(router_cpu: float, serve_cpu: float, pod_cpu: float) -> dict[str, object]:
    proxy = {
        "rate_rps": 200.0,
        "added_p50_ms": 0.8,
        "added_p99_ms": 0.6,
        "gateway_cpu_ms_per_request": serve_cpu,
        "pod_cpu_ms_per_request": pod_cpu,
        "vllm_router": {"added_p50_ms": 0.5, "added_p99_ms": 0.7, "cpu_ms_per_request": router_cpu},
    }
    paths = {
        "gateway": {"cpu_ms_per_request": 0.2, "rps": 4_000.0},
        "vllm-router": {"cpu_ms_per_request": 0.05, "rps": 9_000.0},
    }
    return {"proxy": proxy, "closed_loop": {"paths": paths}}


def test_the_table_sets_the_pods_answer_beside_what_the_cpu_bar_leaves() -> None:
    v = gateway_overhead.versus_vllm_router(_result(router_cpu=0.25, serve_cpu=0.7, pod_cpu=0.18))
    assert v["floor"] == {
        "cpu_bar_ms_per_request": pytest.approx(0.30),  # 1.2 x vllm-router's 0.25
        "aiohttp_answer_cpu_ms_per_request": 0.18,
    }
    f = v["figures"]
    assert f["open_loop_cpu_ms_per_request"]["ratio"] == pytest.approx(2.8)
    assert f["open_loop_cpu_ms_per_request"]["held"] is False
    assert f["open_loop_added_p50_ms"]["held"] is False  # 0.8 against 0.5
    assert f["open_loop_added_p99_ms"]["held"] is True  # 0.6 against 0.7
    assert f["closed_loop_rps"]["held"] is None  # no bar


def test_the_open_loop_measures_the_pods_cpu_per_answer() -> None:
    """A short real run (pod and `igw serve` as processes on loopback): the pod answered
    every path's requests, so its CPU per answer is a finite figure of its own."""
    p = asyncio.run(gateway_overhead.proxy_overhead(requests=60, rate=100.0))
    assert math.isfinite(p["pod_cpu_ms_per_request"]) and p["pod_cpu_ms_per_request"] >= 0
    assert p["pod_cpu_ms_per_request"] < 50  # per answer, not the loop's total


def test_a_run_that_ends_well_leaves_no_folder_and_a_failed_one_says_where_its_logs_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The benchmarks' scratch folders (configs, their processes' logs) went to the temp
    folder and stayed, one a run and one a test run."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with gateway_overhead.scratch_folder("igw-bench-") as folder:
        (folder / "pod.log").write_text("fine\n")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError), gateway_overhead.scratch_folder("igw-bench-") as folder:
        (folder / "pod.log").write_text("why it failed\n")
        raise RuntimeError("the pod did not come up")
    assert (folder / "pod.log").read_text() == "why it failed\n"
    assert str(folder) in capsys.readouterr().err


def test_a_config_folder_for_a_running_process_goes_when_the_interpreter_exits(
    tmp_path: Path,
) -> None:
    """`start_gateway`'s config folder must outlive the call (the gateway reads and watches
    it), so it is removed at exit."""
    script = (
        "import sys, tempfile; sys.path.insert(0, sys.argv[1]); tempfile.tempdir = sys.argv[2]\n"
        "import gateway_overhead\n"
        "folder = gateway_overhead.folder_until_exit('igw-overhead-')\n"
        "(folder / 'config.yaml').write_text('{}')\n"
        "print(folder)\n"
    )
    bench = Path(gateway_overhead.__file__).parent
    ran = subprocess.run(
        [sys.executable, "-c", script, str(bench), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert ran.stdout.strip().startswith(str(tmp_path))
    assert list(tmp_path.iterdir()) == []
