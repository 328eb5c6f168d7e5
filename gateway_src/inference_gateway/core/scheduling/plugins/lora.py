"""`lora-affinity-scorer`: keep adapter requests where the adapter is (or can be) loaded.

Scores (upstream GIE): 1.0 adapter running, 0.8 a free slot (fewer distinct adapters
than `max_lora`), 0.6 adapter only waiting, else 0. Requests without an adapter score 1
everywhere, so the scorer is neutral for them.
"""

from __future__ import annotations

from inference_gateway.core.scheduling.plugins.base import Params
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PluginContext

TYPE = "lora-affinity-scorer"


class LoraParams(Params):
    active: float = 1.0
    free_slot: float = 0.8
    waiting: float = 0.6


class LoraAffinityScorer:
    def __init__(self, name: str = TYPE, params: LoraParams | None = None) -> None:
        self.name = name
        self.params = params or LoraParams()

    def score(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[float]:
        adapter = request.adapter
        if adapter is None:
            return [1.0] * len(endpoints)
        p = self.params
        out: list[float] = []
        for e in endpoints:
            m = e.metrics
            if m is None:
                out.append(0.0)
            elif adapter in m.running_adapters:
                out.append(p.active)
            elif len(m.running_adapters | m.waiting_adapters) < m.max_loras:
                out.append(p.free_slot)
            elif adapter in m.waiting_adapters:
                out.append(p.waiting)
            else:
                out.append(0.0)
        return out


def build(name: str, params: LoraParams, context: PluginContext) -> LoraAffinityScorer:
    return LoraAffinityScorer(name, params)
