"""Tier 2's decision explained: for each cluster ranked, its score, the signal behind
each weight, and why it sits where it does (the span `igw.route` and `igw explain`).

Each signal is the one `cluster_choice.score` weighs, computed by `score` itself with that
signal's weight alone set to 1, so this module restates no formula.
"""

from __future__ import annotations

from typing import Any

from inference_gateway.config.global_router import GlobalRouterSpec, WeightsSpec
from inference_gateway.core.scheduling.cluster_choice import (
    ERROR_RATE_BEHIND,
    Choice,
    RequestTraits,
    cost_basis,
    load,
    score,
)
from inference_gateway.core.scheduling.cluster_registry import ClusterState

__all__ = ["SIGNALS", "TOP", "explain_choice"]

SIGNALS = ("kv_headroom", "queue", "proximity", "errors", "cost")
TOP = 5
_UNIT = {name: WeightsSpec(**{s: 1.0 if s == name else 0.0 for s in SIGNALS}) for name in SIGNALS}


def explain_choice(
    spec: GlobalRouterSpec,
    routable: list[ClusterState],
    choice: Choice[ClusterState],
    traits: RequestTraits,
    now: float,
) -> dict[str, Any]:
    """The ranking's first `TOP` clusters with their signals, and the ones not routable."""
    weights = spec.weights(choice.profile)
    cheapest, at_capacity = cost_basis(routable)
    rows = []
    for state in choice.ranked[:TOP]:
        signals = {
            name: round(score(state, traits, unit, cheapest, at_capacity), 4)
            for name, unit in _UNIT.items()
        }
        rows.append(
            {
                "cluster": state.name,
                "region": state.spec.region,
                "total": round(score(state, traits, weights, cheapest, at_capacity), 4),
                "signals": signals,
                "placed": _placement(state, now, spec.ramp_s),
            }
        )
    return {
        "profile": choice.profile,
        "homeRegion": traits.home_region,
        "weights": {name: getattr(weights, name) for name in SIGNALS},
        "top": rows,
        "routable": len(routable),
        "picked": choice.ranked[0].name if choice.ranked else None,
    }


def _placement(state: ClusterState, now: float, ramp_s: float) -> str:
    """Why a cluster is where it is beyond its score (cluster_choice.py "Order of choice")."""
    status = state.status
    if status is None or status.readyPods == 0:
        return "behind: no ready pod"
    if state.error_rate >= ERROR_RATE_BEHIND:
        return f"behind: error rate {state.error_rate:.2f}"
    saturation = load(state, status)[0]  # with what this router sent since the status
    if saturation >= 1:
        return f"behind: full (saturation {saturation:.2f})"
    fraction = state.ramp_fraction(now, ramp_s)
    if fraction < 1:
        return f"ramping: {fraction:.2f} of its share"
    return "by score"
