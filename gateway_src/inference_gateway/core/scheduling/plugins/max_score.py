"""`max-score-picker`: the highest total score wins; ties are broken at random.

Returns the candidates ranked, best first: the data plane's fallbacks for retries are
the ones after the first. `max_num_of_endpoints` (upstream's name) caps how many are
returned; unset, every candidate is (upstream's default is 1, which leaves no fallback).
"""

from __future__ import annotations

import random

from pydantic import PositiveInt

from inference_gateway.core.scheduling.plugins.base import Params
from inference_gateway.core.scheduling.types import Endpoint, LLMRequest, PluginContext

TYPE = "max-score-picker"


class MaxScoreParams(Params):
    max_num_of_endpoints: PositiveInt | None = None  # None: every candidate, ranked


class MaxScorePicker:
    def __init__(
        self, name: str = TYPE, *, seed: int | None = None, max_endpoints: int | None = None
    ) -> None:
        self.name = name
        self.max_endpoints = max_endpoints
        self._random = random.Random(seed)

    def pick(
        self, request: LLMRequest, endpoints: list[Endpoint], scores: list[float]
    ) -> list[Endpoint]:
        order = sorted(range(len(endpoints)), key=scores.__getitem__, reverse=True)
        best = scores[order[0]]
        ties = 1
        while ties < len(order) and scores[order[ties]] == best:
            ties += 1
        if ties > 1:  # random tie-break for the winner; fallbacks stay in score order
            i = self._random.randrange(ties)
            order[0], order[i] = order[i], order[0]
        if self.max_endpoints is not None:
            del order[self.max_endpoints :]
        return [endpoints[i] for i in order]


def build(name: str, params: MaxScoreParams, context: PluginContext) -> MaxScorePicker:
    return MaxScorePicker(name, seed=context.seed, max_endpoints=params.max_num_of_endpoints)
