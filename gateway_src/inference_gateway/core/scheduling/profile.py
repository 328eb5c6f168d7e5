"""A scheduling profile: filters → weighted scorers → one picker.

Filters run in order, each on what the previous one left; none left means no endpoint.

Scores are clamped to [0, 1] before weighting; every plugin call is timed through an
optional callback (the telemetry module turns it into
`inference_extension_plugin_duration_seconds`), so the core needs no metrics library.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from inference_gateway.core.scheduling.types import Endpoint, Filter, LLMRequest, Picker, Scorer

__all__ = ["SchedulingProfile"]

PluginTimer = Callable[[str, str, float], None]  # (plugin type, name, seconds)


class SchedulingProfile:
    def __init__(
        self,
        name: str,
        scorers: list[tuple[Scorer, float]],
        picker: Picker,
        timer: PluginTimer | None = None,
        filters: Sequence[Filter] = (),
    ) -> None:
        for scorer, weight in scorers:
            if weight <= 0:
                raise ValueError(f"profile {name}: scorer {scorer.name} needs a weight above 0")
        self.name = name
        self.filters = list(filters)
        self.scorers = scorers
        self.picker = picker
        self.timer = timer

    def run(self, request: LLMRequest, candidates: list[Endpoint]) -> list[Endpoint]:
        """Rank the candidates best first (empty when the filters leave none). A request
        with an `explanation` gets what the filters removed and each scorer's clamped
        scores recorded there (explain.py)."""
        timer = self.timer
        explanation = request.explanation
        for plugin in self.filters:
            start = time.perf_counter() if timer else 0.0
            kept = plugin.filter(request, candidates)
            if timer:
                timer("filter", plugin.name, time.perf_counter() - start)
            if explanation is not None and len(kept) != len(candidates):
                still = set(map(id, kept))
                removed = [e for e in candidates if id(e) not in still]
                explanation.exclude(removed, f"filter:{plugin.name}")
            candidates = kept
            if not candidates:
                return []
        if len(candidates) <= 1:
            if explanation is not None:
                explanation.scored(self.name, list(candidates), [], [])
            return list(candidates)
        totals = [0.0] * len(candidates)
        kept_scores: list[tuple[str, float, list[float]]] = []
        for scorer, weight in self.scorers:
            start = time.perf_counter() if timer else 0.0
            scores = scorer.score(request, candidates)
            if timer:
                timer("scorer", scorer.name, time.perf_counter() - start)
            totals = [
                t + weight * (0.0 if s < 0 else 1.0 if s > 1 else s)
                for t, s in zip(totals, scores, strict=True)
            ]
            if explanation is not None:  # as returned: the summary clamps what it shows
                kept_scores.append((scorer.name, weight, scores))
        start = time.perf_counter() if timer else 0.0
        ranked = self.picker.pick(request, candidates, totals)
        if timer:
            timer("picker", self.picker.name, time.perf_counter() - start)
        if explanation is not None:
            explanation.scored(self.name, candidates, kept_scores, totals)
        return ranked
