"""`queue-scorer`: prefer pods with fewer waiting requests.

Formula (upstream GIE): `(max_q - q) / (max_q - min_q)` over the candidates; all equal → 1.
With in-flight accounting on, `q` includes what this picker sent since the last scrape,
and what the other replicas sent (`Endpoint.peer_requests`).
"""

from __future__ import annotations

from inference_gateway.core.scheduling.plugins.base import Params, inverse_minmax
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PluginContext

TYPE = "queue-scorer"


class QueueScorerParams(Params):
    pass


class QueueScorer:
    def __init__(self, name: str = TYPE, *, count_inflight: bool = False) -> None:
        self.name = name
        self.count_inflight = count_inflight

    def score(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[float]:
        extra = self.count_inflight
        return inverse_minmax(
            [
                (e.metrics.waiting if e.metrics else 0)
                + (e.sent_requests + e.peer_requests if extra else 0)
                for e in endpoints
            ]
        )


def build(name: str, params: QueueScorerParams, context: PluginContext) -> QueueScorer:
    return QueueScorer(name, count_inflight=context.count_inflight)
