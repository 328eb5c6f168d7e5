"""bench/slow_pod.py at a tiny size, through the real scrape client on loopback: a pod
that answers late, or never, leaves the other pods' views as young as when none is slow
(the old store's rounds waited for it: the others' views aged past its delay)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import slow_pod


def test_a_slow_or_silent_pod_leaves_the_others_views_young() -> None:
    args = argparse.Namespace(pods=4, slow_ms=800.0, interval_ms=50.0, seconds=0.6)
    result = asyncio.run(slow_pod.run(args))
    cases = result["cases"]
    assert set(cases) == {"none", "slow", "silent"}
    for name in ("slow", "silent"):
        assert cases[name]["others_view_age_max_ms"] < 400, (name, cases[name])
        assert cases[name]["rounds_per_s"] > 5, (name, cases[name])
    assert set(result["max_ratio_to_none"]) == {"slow", "silent"}
