"""Run a fleet scenario once per router profile, side by side (`igw simulate FLEET`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import inference_gateway.core.scheduling.cluster_registry as cluster_registry
from inference_gateway.sim.capacity import PROBE_REQUESTS, fleet_capacity
from inference_gateway.sim.fleet.scenario import FleetScenario, cluster_hourly_usd
from inference_gateway.sim.fleet.tier import FleetTier
from inference_gateway.sim.workload import sample_requests

__all__ = ["simulate_fleet"]


def simulate_fleet(
    scenario: FleetScenario,
    profiles: list[str] | None = None,
    *,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, Any]:
    """`{"scenario", "seed", "capacity_rps", "clusters", "profiles": {NAME: report}}`."""
    names = profiles or list(scenario.profiles)
    workload, seed = scenario.workload, scenario.seed
    sample = sample_requests(workload, PROBE_REQUESTS, seed)
    mean_output = sum(r.output_tokens for r in sample) / len(sample)
    clusters: dict[str, Any] = {}
    for c in scenario.clusters:
        capacity = fleet_capacity(c.fleet, workload, seed)
        hourly = cluster_hourly_usd(c)
        clusters[c.name] = {
            "region": c.region,
            "pods": sum(p.replicas for p in c.fleet),
            "hourly_usd": round(hourly, 4),
            "capacity_rps": round(capacity, 3),
            "unit_cost_per_million_tokens": round(
                hourly / (capacity * mean_output * 3600) * 1e6, 4
            ),
        }
    total = sum(c["capacity_rps"] for c in clusters.values())
    # what an operator writes as capacityTokensPerSecond: generated tokens/s at capacity
    capacity_tokens = {n: c["capacity_rps"] * mean_output for n, c in clusters.items()}
    results: dict[str, Any] = {}
    # the registry logs every drain and return, as it should in a router; in a
    # simulation those are the report's events, so its log stays quiet for the run
    registry_log = logging.getLogger(cluster_registry.__name__)
    was_disabled, registry_log.disabled = registry_log.disabled, True
    try:
        for name in names:
            tier = FleetTier(scenario, name, total, capacity_tokens_per_s=capacity_tokens)
            tier.recorder.unit_cost = {
                n: c["unit_cost_per_million_tokens"] for n, c in clusters.items()
            }
            results[name] = tier.run()
            if progress:
                progress(name, 1.0)
    finally:
        registry_log.disabled = was_disabled
    return {
        "scenario": scenario.name,
        "seed": seed,
        "capacity_rps": round(total, 3),
        "clusters": clusters,
        "profiles": results,
    }
