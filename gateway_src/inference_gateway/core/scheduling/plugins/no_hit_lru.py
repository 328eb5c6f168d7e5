"""`no-hit-lru-scorer`: spread requests that hit no cache over the pods least recently
given one.

A request whose prompt no pod holds (no leading block in the prefix index) grows a
new KV cache wherever it goes; sending such cold requests round the pods in
least-recently-used order spreads that growth, and with it the prefill work, evenly.
A request with a hit leaves this scorer neutral (0.5 for every pod), so the prefix
scorer decides. This is llm-d's scorer of the same type name
(llm-d/llm-d-inference-scheduler `pkg/plugins/scorer/no_hit_lru.go`), the `lru`
weight of the managed add-on's schedulers (docs/managed-gateway.md):

* cold request, n candidates: pods never given a cold request first, then the others
  from least to most recently given one; the pod at rank r scores `1 - r / (n - 1)`
  (one candidate: 1.0);
* after a pick, a cold request moves its pod to the most-recent end.

"Cold" is read from the cycle's prefix matches (`request_matches`: the precise scorer's
when it ran first in the profile, else the approximate index's), which the scheduler
computes before the pick and keeps on the request, so `on_picked` sees what `score` saw.
The order is kept for at most `lruSize` pods (upstream default 1024).
"""

from __future__ import annotations

from collections import OrderedDict

from pydantic import Field

from inference_gateway.core.scheduling.plugins.base import Params
from inference_gateway.core.scheduling.plugins.prefix import PrefixIndex, request_matches
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PluginContext

__all__ = ["TYPE", "NoHitLRUParams", "NoHitLRUScorer", "build"]

TYPE = "no-hit-lru-scorer"
NEUTRAL = 0.5


class NoHitLRUParams(Params):
    lru_size: int = Field(default=1024, ge=1, description="Pods whose order is kept.")


class NoHitLRUScorer:
    def __init__(self, name: str, index: PrefixIndex, lru_size: int = 1024) -> None:
        self.name = name
        self.index = index
        self.lru_size = lru_size
        self._recent: OrderedDict[str, None] = OrderedDict()  # least recent first

    def _cold(self, request: LLMRequest) -> bool:
        return not request_matches(self.index, request)

    def score(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[float]:
        if not self._cold(request):
            return [NEUTRAL] * len(endpoints)
        n = len(endpoints)
        if n <= 1:
            return [1.0] * n
        position = {pod: i for i, pod in enumerate(self._recent)}
        never = [e for e in endpoints if e.name not in position]
        rank = {e.name: i for i, e in enumerate(never)}
        for e in endpoints:
            if e.name in position:
                rank[e.name] = len(never) + position[e.name]
        return [max(0.0, 1.0 - rank[e.name] / (n - 1)) for e in endpoints]

    def on_picked(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        if not self._cold(request):
            return
        self._recent.pop(endpoint.name, None)
        self._recent[endpoint.name] = None
        while len(self._recent) > self.lru_size:
            self._recent.popitem(last=False)

    def on_first_token(
        self, request: LLMRequest, endpoint: Endpoint, ttft_s: float, now: float
    ) -> None:
        return None

    def on_finished(self, request: LLMRequest, endpoint: Endpoint, now: float) -> None:
        return None


def build(name: str, params: NoHitLRUParams, context: PluginContext) -> NoHitLRUScorer:
    return NoHitLRUScorer(name, context.index, params.lru_size)
