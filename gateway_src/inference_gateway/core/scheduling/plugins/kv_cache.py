"""`kv-cache-utilization-scorer`: prefer pods with KV-cache headroom.

Formula (upstream GIE): `1 - kv_usage`.
"""

from __future__ import annotations

from inference_gateway.core.scheduling.plugins.base import Params
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PluginContext

TYPE = "kv-cache-utilization-scorer"


class KVParams(Params):
    pass


class KVCacheScorer:
    def __init__(self, name: str = TYPE) -> None:
        self.name = name

    def score(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[float]:
        return [1.0 - (e.metrics.kv_usage if e.metrics else 0.0) for e in endpoints]


def build(name: str, params: KVParams, context: PluginContext) -> KVCacheScorer:
    return KVCacheScorer(name)
