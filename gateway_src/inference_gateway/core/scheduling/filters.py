"""Filters every profile applies before scoring: never route to a stale pod, a pod that
does not serve the model, or a pod outside Envoy's subset hint."""

from __future__ import annotations

from inference_gateway.core.scheduling.types import Endpoint, LLMRequest

__all__ = ["eligible"]


def eligible(request: LLMRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
    subset = request.subset
    model = request.model
    return [
        e
        for e in endpoints
        if not e.stale and e.serves(model) and (subset is None or e.hostport in subset)
    ]
