"""Filters every profile applies before scoring: never route to a stale pod, a pod that
does not serve the model, or a pod outside Envoy's subset hint."""

from __future__ import annotations

from inference_gateway.core.scheduling.explain import Explanation
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest

__all__ = ["eligible", "explain_ineligible"]


def eligible(request: LLMRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
    subset = request.subset
    model = request.model
    return [
        e
        for e in endpoints
        if not e.stale and e.serves(model) and (subset is None or e.hostport in subset)
    ]


def explain_ineligible(
    explanation: Explanation, request: LLMRequest, endpoints: list[Endpoint]
) -> None:
    """Record why `eligible` left each pod out (its first failing rule, in its order)."""
    subset = request.subset
    model = request.model
    kept = set(map(id, eligible(request, endpoints)))
    for e in endpoints:
        if id(e) in kept:
            continue
        if e.stale:
            explanation.excluded.append((e.name, "stale"))
        elif not e.serves(model):
            explanation.excluded.append((e.name, "model"))
        elif subset is not None and e.hostport not in subset:
            explanation.excluded.append((e.name, "subset"))
