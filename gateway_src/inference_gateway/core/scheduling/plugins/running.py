"""`running-requests-size-scorer`: prefer pods with fewer running requests.

Same min-max formula as the queue scorer, over `vllm:num_requests_running`.
"""

from __future__ import annotations

from inference_gateway.core.scheduling.plugins.base import Params, inverse_minmax
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PluginContext

TYPE = "running-requests-size-scorer"


class RunningParams(Params):
    pass


class RunningRequestsScorer:
    def __init__(self, name: str = TYPE) -> None:
        self.name = name

    def score(self, request: LLMRequest, endpoints: list[Endpoint]) -> list[float]:
        return inverse_minmax([e.metrics.running if e.metrics else 0 for e in endpoints])


def build(name: str, params: RunningParams, context: PluginContext) -> RunningRequestsScorer:
    return RunningRequestsScorer(name)
