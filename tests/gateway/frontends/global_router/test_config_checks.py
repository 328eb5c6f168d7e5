"""The rules between fields of the global router's config (issue 23, item 8): a
`staleAfterMs` that would drain a healthy cluster between polls and a `homeRegion` that
is no cluster's region are refused, and every problem comes in one report, the field
errors and the cross-field ones together (`igw global` exits 2 with all of them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from inference_gateway.errors import ConfigError
from inference_gateway.frontends.global_router import GlobalRouterSpec, parse_router_config

CLUSTERS = [
    {"name": "a", "region": "r1", "endpoint": "http://127.0.0.1:1"},
    {"name": "b", "region": "r2", "endpoint": "http://127.0.0.1:2"},
]


def problems(**config: Any) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_router_config({"clusters": CLUSTERS, **config})
    return raised.value.problems


@pytest.mark.parametrize(("poll", "stale"), [(1000, 500), (1000, 1000), (1000, 1999), (100, 150)])
def test_stale_after_below_twice_the_poll_interval_is_refused(poll: int, stale: int) -> None:
    found = problems(pollIntervalMs=poll, staleAfterMs=stale)
    assert len(found) == 1 and found[0].startswith("staleAfterMs: ")


def test_the_default_poll_interval_counts() -> None:
    assert problems(staleAfterMs=1500)[0].startswith("staleAfterMs: ")  # poll 1000 default
    parse_router_config({"clusters": CLUSTERS, "staleAfterMs": 2000})


def test_home_region_must_be_a_clusters_region() -> None:
    found = problems(homeRegion="mars")
    assert found == ["homeRegion: 'mars' is no cluster's region (regions: ['r1', 'r2'])"]
    assert parse_router_config({"clusters": CLUSTERS, "homeRegion": "r2"}).home_region == "r2"


def test_every_problem_is_reported_at_once() -> None:
    found = problems(
        clusters=[*CLUSTERS, dict(CLUSTERS[0])],  # a duplicate name
        maxAttempts=0,  # a field error
        pollIntervalMs=1000,
        staleAfterMs=500,
        homeRegion="mars",
        rateLimits={"rules": [{"requestsPerMinute": 5}]},  # and no store
    )
    fields = [p.split(":", 1)[0] for p in found]
    assert fields == ["maxAttempts", "clusters", "homeRegion", "staleAfterMs", "rateLimits"]


def test_a_spec_built_in_code_is_checked_too() -> None:
    with pytest.raises(ValidationError, match="staleAfterMs"):
        GlobalRouterSpec.model_validate(
            {"clusters": CLUSTERS, "pollIntervalMs": 1000, "staleAfterMs": 500}
        )


def test_igw_global_exits_2_with_every_problem(tmp_path: Path) -> None:
    path = tmp_path / "global.yaml"
    config = {"clusters": CLUSTERS, "maxAttempts": 0, "staleAfterMs": 100, "homeRegion": "x"}
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-m", "inference_gateway.cli", "global", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    for field in ("maxAttempts", "staleAfterMs", "homeRegion"):
        assert field in done.stderr
