"""`igw global` in the managed Global Inference Gateway's terms (its API reference:
CreateGlobalInferenceGateway / GlobalInferenceGatewayRoutingWeights, "each from 0 to 1.
Specify all four weights or none. If you specify them, they must sum to 1.0, within
0.001"; GlobalInferenceGatewayMember {Name, Namespace, ClusterArn}; "The 1 to 10
in-cluster inference gateways"): the weights become the latency profile's on this
router's signals of the same meaning, the members become its clusters."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from inference_gateway.config.global_router import load_router_config
from inference_gateway.core.scheduling.cluster_choice import RequestTraits, rank_clusters
from inference_gateway.core.scheduling.cluster_registry import ClusterState, ClusterStatus
from inference_gateway.errors import ConfigError
from inference_gateway.frontends.global_router import parse_router_config

EXAMPLE = Path(__file__).parents[4] / "examples" / "managed" / "global.yaml"
ARN = "arn:aws:sagemaker:{region}:111111111111:cluster/{id}"


def member(name: str, region: str, cluster_id: str, port: int) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "igw",
        "clusterArn": ARN.format(region=region, id=cluster_id),
        "endpoint": f"http://127.0.0.1:{port}",
    }


def config(**weights: float) -> dict[str, Any]:
    data: dict[str, Any] = {
        "homeRegion": "us-east-1",
        "gateways": [
            member("near", "us-east-1", "aaaa1111", 1),
            member("far", "us-west-2", "bbbb2222", 2),
        ],
    }
    if weights:
        data["routing"] = {"weights": weights}
    return data


def ranked(data: dict[str, Any], statuses: dict[str, dict[str, Any]]) -> list[str]:
    spec = parse_router_config(data)
    states = [
        ClusterState(c, ClusterStatus.model_validate(statuses[c.name]), 100.0, True, -math.inf)
        for c in spec.clusters
    ]
    traits = RequestTraits("us-east-1", "latency")
    return [s.name for s in rank_clusters(spec, states, traits, 100.0, lambda: 0.5).ranked]


def test_members_become_clusters_in_their_clusters_regions() -> None:
    spec = load_router_config(EXAMPLE)
    assert [(c.name, c.region) for c in spec.clusters] == [
        ("igw.a1b2c3d4e5f6", "us-east-1"),  # two members share the name `igw`
        ("igw.f6e5d4c3b2a1", "us-west-2"),
    ]
    weights = spec.weights("latency")
    assert (weights.kv_headroom, weights.queue, weights.proximity, weights.errors) == (
        0.4,
        0.3,
        0.2,
        0.1,
    )
    assert weights.cost == 0
    assert spec.weights("cost") == parse_router_config(config()).weights("cost")


BUSY_NEAR = {
    "near": {"readyPods": 4, "saturation": 0.95, "queue": {"standard": 20}},
    "far": {"readyPods": 4, "saturation": 0.1},
}


@pytest.mark.parametrize(
    ("weights", "order"),
    [
        # all on closeness: the caller's region wins however loaded it is
        ({"KVHeadroom": 0, "QueueDepth": 0, "RegionProximity": 1, "ErrorRate": 0}, ["near", "far"]),
        # all on free KV cache, or on queues: the idle cluster wins
        ({"KVHeadroom": 1, "QueueDepth": 0, "RegionProximity": 0, "ErrorRate": 0}, ["far", "near"]),
        ({"KVHeadroom": 0, "QueueDepth": 1, "RegionProximity": 0, "ErrorRate": 0}, ["far", "near"]),
        ({"KVHeadroom": 0.2, "QueueDepth": 0.2, "RegionProximity": 0.6, "ErrorRate": 0},
         ["near", "far"]),
    ],
)  # fmt: skip
def test_the_weights_decide_as_their_names_say(weights: dict[str, float], order: list[str]) -> None:
    assert ranked(config(**weights), BUSY_NEAR) == order


def test_error_rate_weighs_the_reported_error_rate() -> None:
    statuses = {
        "near": {"readyPods": 4, "saturation": 0.1, "errorRate": 0.4},
        "far": {"readyPods": 4, "saturation": 0.1},
    }
    errors_only = {"KVHeadroom": 0, "QueueDepth": 0, "RegionProximity": 0, "ErrorRate": 1}
    assert ranked(config(**errors_only), statuses) == ["far", "near"]
    closeness = {"KVHeadroom": 0, "QueueDepth": 0, "RegionProximity": 1, "ErrorRate": 0}
    assert ranked(config(**closeness), statuses) == ["near", "far"]


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_router_config(data, "global.yaml")
    return caught.value.problems


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            {"routing": {"weights": {"KVHeadroom": 0.5, "QueueDepth": 0.5}}},
            "routing.weights.RegionProximity: Field required",
        ),
        (
            {"routing": {"weights": {"KVHeadroom": 0.5, "QueueDepth": 0.3,
                                     "RegionProximity": 0.2, "ErrorRate": 0.1}}},
            "routing.weights: the four weights must sum to 1.0 within 0.001, not 1.1",
        ),
        (
            {"routing": {"weights": {"KVHeadroom": 1.2, "QueueDepth": -0.2,
                                     "RegionProximity": 0, "ErrorRate": 0}}},
            "routing.weights.KVHeadroom: Input should be less than or equal to 1",
        ),
        (
            {"routing": {"weights": {"KVHeadroom": 1, "QueueDepth": 0, "RegionProximity": 0,
                                     "ErrorRate": 0, "Cost": 0}}},
            "routing.weights.Cost: Extra inputs are not permitted",
        ),
        (
            {"gateways": [member(f"g{i}", "us-east-1", f"c{i}", i + 1) for i in range(11)]},
            "gateways: List should have at most 10 items",
        ),
        (
            {"gateways": [{**member("g", "us-east-1", "c", 1), "clusterArn": "cluster/c"}]},
            "gateways[0].clusterArn: String should match pattern",
        ),
        ({"gateways": [{**member("g", "us-east-1", "c", 1), "arn": "x"}]},
         "gateways[0].arn: Extra"),
        ({"gateways": []}, "clusters: list at least one cluster (or 1 to 10 `gateways`)"),
        (
            {"clusters": [{"name": "a", "region": "r", "endpoint": "http://127.0.0.1:1"}]},
            "list the clusters as `clusters` or as `gateways`, not both",
        ),
        (
            {"routing": {"weights": {"KVHeadroom": 1, "QueueDepth": 0, "RegionProximity": 0,
                                     "ErrorRate": 0}},
             "profiles": {"latency": {"queue": 1}}},
            "routing.weights and profiles.latency both set the latency profile",
        ),
        ({"homeRegion": "eu-west-1"}, "homeRegion: 'eu-west-1' is no cluster's region"),
    ],
)  # fmt: skip
def test_a_bad_managed_field_names_its_path(change: dict[str, Any], problem: str) -> None:
    found = problems({**config(), **change})
    assert any(problem in line for line in found), found
