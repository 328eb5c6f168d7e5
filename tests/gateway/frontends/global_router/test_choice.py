"""Cluster choice, table-driven: clusters built in memory with explicit statuses, the
ranking called directly."""

from __future__ import annotations

import math
import random

import pytest

from inference_gateway.core.scheduling.cluster_choice import RequestTraits, rank_clusters
from inference_gateway.core.scheduling.cluster_registry import ClusterState, ClusterStatus
from inference_gateway.frontends.global_router import parse_router_config
from inference_gateway.frontends.global_router.requests import budget_s

SPEC = parse_router_config(
    {
        "clusters": [
            {
                "name": "near",
                "region": "r1",
                "endpoint": "http://127.0.0.1:1",
                "hourlyCostUsd": 100,
            },
            {"name": "far", "region": "r2", "endpoint": "http://127.0.0.1:2", "hourlyCostUsd": 40},
        ],
        "rampS": 10,
    }
)


def state(
    name: str, now: float = 100.0, ramp_started: float = -math.inf, **status: float
) -> ClusterState:
    spec = next(c for c in SPEC.clusters if c.name == name)
    fields = {"readyPods": 4, "saturation": 0.2, **status}
    s = ClusterState(spec, ClusterStatus.model_validate(fields), now, True, ramp_started)
    return s


def names(
    profile: str, *states: ClusterState, region: str | None = "r1", shed: bool = False
) -> list[str]:
    choice = rank_clusters(
        SPEC, list(states), RequestTraits(region, profile, shed), 100.0, lambda: 0.5
    )
    return [s.name for s in choice.ranked]


def test_latency_prefers_the_home_region() -> None:
    assert names("latency", state("far"), state("near")) == ["near", "far"]
    assert names("latency", state("far"), state("near"), region="r2") == ["far", "near"]


def test_latency_leaves_a_saturated_queued_home_cluster() -> None:
    busy = state("near", saturation=1.0, queue={"standard": 40})
    assert names("latency", busy, state("far")) == ["far", "near"]


def test_cost_prefers_the_cheaper_cluster() -> None:
    assert names("cost", state("near"), state("far")) == ["far", "near"]
    # sheddable traffic is routed by cost whatever the profile asked
    assert names("latency", state("near"), state("far"), shed=True) == ["far", "near"]


def test_cost_is_per_generated_token_at_capacity() -> None:
    """far is cheaper per hour but serves so little at capacity that its tokens cost more;
    what the clusters serve right now (tokensPerSecond) does not enter (issue 23, item 6)."""
    spec = parse_router_config(
        {
            "clusters": [
                {"name": "near", "region": "r1", "endpoint": "http://127.0.0.1:1",
                 "hourlyCostUsd": 100, "capacityTokensPerSecond": 10_000},
                {"name": "far", "region": "r2", "endpoint": "http://127.0.0.1:2",
                 "hourlyCostUsd": 40, "capacityTokensPerSecond": 1_000},
            ]
        }
    )  # fmt: skip
    near, far = (ClusterState(c, ClusterStatus(readyPods=4, saturation=0.2)) for c in spec.clusters)
    for s in (near, far):
        s.routable = True
    assert near.cost_per_million() == pytest.approx(100 / (10_000 * 3600) * 1e6)  # $2.78/M
    assert far.cost_per_million() == pytest.approx(40 / (1_000 * 3600) * 1e6)  # $11.1/M

    def ranked() -> list[str]:
        traits = RequestTraits("r2", "cost", True)
        return [x.name for x in rank_clusters(spec, [far, near], traits, 0.0).ranked]

    assert ranked() == ["near", "far"]
    # near busy, far idle: their cost at capacity is unchanged, and so is the ranking
    near.status = ClusterStatus(readyPods=4, saturation=0.2, tokensPerSecond=9_000)
    far.status = ClusterStatus(readyPods=4, saturation=0.2, tokensPerSecond=1)
    assert ranked() == ["near", "far"]


def test_a_cluster_that_fails_most_attempts_goes_behind_whatever_its_load() -> None:
    """An empty queue must not win for a cluster that breaks what it takes."""
    idle, busy = state("near", saturation=0.0), state("far", saturation=0.8)
    assert names("latency", idle, busy) == ["near", "far"]
    idle.error_ewma = 0.5
    assert names("latency", idle, busy) == ["far", "near"]


def test_cost_skips_a_saturated_cheap_cluster_and_one_over_the_latency_budget() -> None:
    assert names("cost", state("near"), state("far", saturation=0.95)) == ["near", "far"]
    slow = state("far")
    slow.ttft_ewma_s = 5.0  # budget is 2 s
    assert names("cost", state("near"), slow) == ["near", "far"]


def test_a_cluster_without_ready_pods_goes_last() -> None:
    assert names("latency", state("near", readyPods=0), state("far")) == ["far", "near"]


@pytest.mark.parametrize(("started", "fraction"), [(95.0, 0.5), (99.0, 0.1), (80.0, 1.0)])
def test_ramp_fraction_grows_over_the_window(started: float, fraction: float) -> None:
    s = state("near", ramp_started=started)
    assert s.ramp_fraction(100.0, SPEC.ramp_s) == pytest.approx(fraction)
    # with the draw at 0.5 the ramping cluster keeps its place only past half the window
    expected = ["near", "far"] if fraction > 0.5 else ["far", "near"]
    assert names("latency", s, state("far")) == expected


def test_passively_seen_errors_lower_a_cluster() -> None:
    near = state("near")
    assert names("latency", near, state("far")) == ["near", "far"]
    near.error_ewma = 1.0  # every attempt this router made there failed
    near.status = ClusterStatus.model_validate({"readyPods": 4, "saturation": 0.9})
    assert near.error_rate == 1.0
    assert names("latency", near, state("far")) == ["far", "near"]


def test_a_request_budget_overrides_the_configured_one() -> None:
    near, far = state("near"), state("far")
    far.ttft_ewma_s = 1.5  # within the configured 2 s, over a 1 s budget
    choice = rank_clusters(SPEC, [near, far], RequestTraits("r1", "cost", False, 1.0), 100.0)
    assert [s.name for s in choice.ranked] == ["near", "far"]
    assert names("cost", near, far) == ["far", "near"]


@pytest.mark.parametrize(
    ("value", "budget"),
    [("250", 0.25), ("600000", 600.0), ("0", None), ("-5", None), ("1e3", None),
     ("9999999", None), ("", None), (None, None), ("٣", None)],
)  # fmt: skip
def test_budget_header_is_checked(value: str | None, budget: float | None) -> None:
    assert budget_s(value) == budget


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75])
def test_returning_clusters_together_get_the_ramp_fraction(fraction: float) -> None:
    """Two home-region clusters back at once share f, not 1 - (1 - f)²."""
    spec = parse_router_config(
        {
            "clusters": [
                {"name": n, "region": r, "endpoint": f"http://127.0.0.1:{i + 1}"}
                for i, (n, r) in enumerate([("a", "r1"), ("b", "r1"), ("c", "r2")])
            ],
            "rampS": 10,
        }
    )
    started = 100.0 - fraction * 10
    fields = {"readyPods": 4, "saturation": 0.2}
    states = [
        ClusterState(c, ClusterStatus.model_validate(fields), 100.0, True, started)
        for c in spec.clusters[:2]
    ] + [ClusterState(spec.clusters[2], ClusterStatus.model_validate(fields), 100.0, True)]
    rng = random.Random(7)
    firsts = [
        rank_clusters(spec, states, RequestTraits("r1", "latency"), 100.0, rng.random)
        .ranked[0]
        .name
        for _ in range(4000)
    ]
    share = sum(f in ("a", "b") for f in firsts) / len(firsts)
    assert share == pytest.approx(fraction, abs=0.03)
