"""Run a scenario under several policies: capacity first, then one simulation each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inference_gateway.sim.capacity import fleet_capacity
from inference_gateway.sim.driver import run_policy
from inference_gateway.sim.policies import make_policy
from inference_gateway.sim.scenario import Scenario

__all__ = ["simulate"]


def simulate(
    scenario: Scenario,
    policies: list[str] | None = None,
    *,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, Any]:
    """The DESIGN §5 result object for a scenario."""
    names = policies or scenario.policies
    for name in names:  # fail on a bad name before any work
        make_policy(name, [], 0)
    capacity = fleet_capacity(scenario.fleet, scenario.workload, scenario.seed)
    results: dict[str, Any] = {}
    for name in names:
        tick = (lambda f, n=name: progress(n, f)) if progress else None
        results[name] = run_policy(scenario, name, capacity, progress=tick)
        if progress:
            progress(name, 1.0)
    return {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "capacity_rps": round(capacity, 3),
        "policies": results,
    }
