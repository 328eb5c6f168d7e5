"""The demo's trace shape (demo/trace.py) and the spread over runs (demo/history.py)."""

from __future__ import annotations

from pathlib import Path

from inference_gateway.demo import history
from inference_gateway.demo.trace import (
    BURST_FACTOR,
    LEAD_IN_S,
    base_rate,
    burst_windows,
    make_trace,
)


def test_bursts_follow_a_lead_in_and_the_last_ends_with_the_trace() -> None:
    assert burst_windows(22.0) == [(7.0, 12.0), (17.0, 22.0)]
    assert burst_windows(LEAD_IN_S) == []
    windows = burst_windows(40.0)
    assert windows[0][0] == LEAD_IN_S and windows[-1][1] <= 40.0


def test_the_rate_is_the_mean_over_the_trace() -> None:
    duration, rate = 22.0, 8.0
    base = base_rate(duration, rate)
    burst = sum(b - a for a, b in burst_windows(duration))
    assert abs(base * (duration - burst) + base * BURST_FACTOR * burst - rate * duration) < 1e-9
    counts = [len(make_trace(duration, rate, seed)) for seed in range(40)]
    assert abs(sum(counts) / len(counts) - rate * duration) < 0.1 * rate * duration
    lead_in = [i.t for i in make_trace(duration, rate, 7) if i.t < LEAD_IN_S]
    assert len(lead_in) < 2 * base * LEAD_IN_S  # no burst before the caches are warm


def test_each_run_is_kept_and_the_spread_covers_runs_with_the_same_settings(
    tmp_path: Path,
) -> None:
    settings = {"duration": 22.0, "rate": 8.0, "dataplane": "proxy"}
    for gateway in (0.1, 0.2, 0.15):
        entry = history.record(tmp_path, settings, {"gateway": gateway, "round-robin": 4.0})
    assert entry["ratios"] == {"gateway/round-robin": 0.15 / 4.0}
    assert "load_1min" in entry
    history.record(tmp_path, {**settings, "rate": 2.0}, {"gateway": 9.0, "round-robin": 1.0})
    (tmp_path / history.FILE).open("a").write("not json\n")
    found = history.spread(tmp_path, settings)
    assert set(found) == {"gateway/round-robin"}  # no Envoy pair measured
    pair = found["gateway/round-robin"]
    assert (pair.runs, pair.low, pair.high) == (3, 0.1 / 4.0, 0.2 / 4.0)
    assert abs(pair.factor - 2.0) < 1e-9
    assert history.spread(tmp_path / "none", settings) == {}


def test_the_demo_says_when_the_machine_was_busier_than_its_cpus() -> None:
    from inference_gateway.demo.run import machine_line

    assert "busier" not in machine_line(0.5, 1.5, 2)
    assert "busier than its CPUs" in machine_line(0.5, 3.0, 2)


def test_ratio_lines_name_the_spread_once_there_is_one() -> None:
    from inference_gateway.demo.run import _ratio_lines

    results = {name: {"ttft_p99_s": p99} for name, p99 in (("gateway", 0.1), ("round-robin", 5.0))}
    first = _ratio_lines(results, {})
    assert first == {
        "gateway/round-robin": "gateway P99 TTFT = 0.020 x round-robin's (first run with "
        "these settings: run again for the spread)"
    }
    later = _ratio_lines(results, {"gateway/round-robin": history.Spread(3, 0.02, 0.025)})
    assert (
        "last 3 runs with these settings: 0.020-0.025, highest/lowest 1.25"
        in (later["gateway/round-robin"])
    )


def test_cpu_wait_sums_the_threads_of_live_processes_and_is_none_for_gone_ones() -> None:
    import os

    from inference_gateway.demo.processes import cpu_wait_s

    waited = cpu_wait_s([os.getpid()])
    assert waited is not None and waited >= 0
    assert cpu_wait_s([2**22 + 1]) is None  # above any pid_max: no such process
