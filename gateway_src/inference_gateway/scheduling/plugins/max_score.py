"""`max-score-picker`: the highest total score wins; ties are broken at random.

Returns every candidate ranked, so the data plane has fallbacks for retries.
"""

from __future__ import annotations

import random

from ..types import Endpoint, LLMRequest
from .base import Params

TYPE = "max-score-picker"


class MaxScoreParams(Params):
    max_num_of_endpoints: int = 1  # upstream name; fallbacks are always ranked after it


class MaxScorePicker:
    def __init__(self, name: str = TYPE, *, seed: int | None = None) -> None:
        self.name = name
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
        return [endpoints[i] for i in order]


def build(name: str, params: dict, *, seed: int | None = None, **_: object) -> MaxScorePicker:
    MaxScoreParams.model_validate(params)
    return MaxScorePicker(name, seed=seed)
