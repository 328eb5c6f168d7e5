"""Which priority band a request belongs to.

The header `x-gateway-inference-objective` names an InferenceObjective; its priority
maps to a band (above 0 critical, 0 standard, below 0 sheddable, as upstream treats
negative priorities as sheddable). Without the header, or with an unknown objective,
the model's `defaultBand` applies.
"""

from __future__ import annotations

from inference_gateway.config.spec import GatewayConfigSpec

__all__ = ["band_for", "band_of_priority"]


def band_of_priority(priority: int) -> str:
    if priority > 0:
        return "critical"
    return "standard" if priority == 0 else "sheddable"


def band_for(config: GatewayConfigSpec | None, objective: str | None, model: str) -> str:
    if config is None:
        return "standard"
    if objective:
        for o in config.objectives:
            if o.name == objective:
                return band_of_priority(o.priority)
    for m in config.models:
        if m.name == model or model in m.adapters:
            return m.default_band
    return "standard"
