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
    assert burst_windows(25.0) == [(8.0, 13.0), (20.0, 25.0)]
    assert burst_windows(LEAD_IN_S) == []
    windows = burst_windows(40.0)
    assert windows[0][0] == LEAD_IN_S and windows[-1][1] <= 40.0


def test_the_rate_is_the_mean_over_the_trace() -> None:
    duration, rate = 25.0, 8.0
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
    settings = {"duration": 25.0, "rate": 8.0, "dataplane": "proxy"}
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
