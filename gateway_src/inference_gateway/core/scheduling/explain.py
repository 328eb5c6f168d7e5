"""Why a request went where it went: what one scheduling cycle saw, kept cheaply.

A request that asks to be explained carries an `Explanation` (`LLMRequest.explanation`,
set by the director); the scheduler and its profile then keep references to what they
computed anyway, and nothing else:

* `excluded`: the pods of the pool that were never candidates, each with its reason
  (`stale`, `model` not served, outside the `subset` hint), and per filter the pods it
  removed (`filter:<name>`);
* `scorers`: each scorer's name, weight and score list (as it returned them; a summary
  clamps them to [0, 1], as the profile weighs them), in the order of `candidates`, and
  `totals`, their weighted sums;
* `predicted_ttft_s`: per scorer that predicts a time to first token (`predicted-ttft-
  scorer`), its prediction for each candidate;
* `prefill`: the P/D prefill cycle's own explanation.

Keeping references costs a few attribute stores per request; `compact` turns them into
the small, bounded record the decision log keeps (plain lists: the best `top`
candidates with each scorer's score, weight and the predicted TTFT, the exclusions
counted and the first few named), once, when the request ends; `expand` names its
fields for a span, the debug header and `igw explain`. A request
without an `Explanation` (the simulator's) pays one `is None` check per cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inference_gateway.core.scheduling.types import Endpoint

__all__ = ["NAMED_PER_REASON", "TOP", "Explanation", "expand"]

TOP = 5  # candidates a summary lists, best first
NAMED_PER_REASON = 5  # excluded pods a summary names per reason (all are counted)


@dataclass(slots=True)
class Explanation:
    profile: str = ""
    considered: int = 0  # pods of the pool the cycle was given
    excluded: list[tuple[str, str]] = field(default_factory=list)  # (pod, reason)
    candidates: list[Endpoint] = field(default_factory=list)
    scorers: list[tuple[str, float, list[float]]] = field(default_factory=list)
    totals: list[float] = field(default_factory=list)
    predicted_ttft_s: dict[str, list[float]] = field(default_factory=dict)
    picked: str = ""
    prefill: Explanation | None = None

    def exclude(self, removed: list[Endpoint], reason: str) -> None:
        self.excluded.extend((e.name, reason) for e in removed)

    def scored(
        self,
        profile: str,
        candidates: list[Endpoint],
        scorers: list[tuple[str, float, list[float]]],
        totals: list[float],
    ) -> None:
        self.profile = profile
        self.candidates = candidates
        self.scorers = scorers
        self.totals = totals

    def compact(self, top: int = TOP) -> list[Any]:
        """The bounded record, as plain lists (cheap to build and to encode: what the
        decision log keeps per request): at most `top` candidates and
        `NAMED_PER_REASON` names per exclusion reason, whatever the pool's size.
        `expand` turns it into the named form (`summary`)."""
        totals, candidates, picked = self.totals, self.candidates, self.picked
        if totals:
            order = sorted(range(len(totals)), key=totals.__getitem__, reverse=True)[:top]
            if candidates[order[0]].name != picked:  # a tie-break chose another of the best
                best = next((i for i, e in enumerate(candidates) if e.name == picked), None)
                if best is not None:
                    order = [best, *(i for i in order if i != best)][:top]
        else:  # one candidate: nothing was scored
            order = [0] if candidates else []
        scorers = self.scorers
        predicted = [p for p in self.predicted_ttft_s.items() if len(p[1]) == len(candidates)]
        rows = [
            [
                candidates[i].name,
                totals[i] if totals else None,
                [_clamped(scores[i]) for _, _, scores in scorers],
                [values[i] for _, values in predicted],
            ]
            for i in order
        ]
        excluded: dict[str, list[Any]] = {}
        for pod, reason in self.excluded:
            entry = excluded.get(reason)
            if entry is None:
                entry = excluded[reason] = [0, []]
            entry[0] += 1
            if len(entry[1]) < NAMED_PER_REASON:
                entry[1].append(pod)
        return [
            self.profile,
            self.considered,
            len(candidates),
            [[name, weight] for name, weight, _ in scorers],
            [name for name, _ in predicted],
            rows,
            excluded,
            picked,
            self.prefill.compact(top) if self.prefill is not None else None,
        ]

    def summary(self, top: int = TOP) -> dict[str, Any]:
        """The bounded record with names (`expand` of `compact`)."""
        return expand(self.compact(top))


def _clamped(score: float) -> float:
    """A score as the profile weighed it (clamped to [0, 1])."""
    return 0.0 if score < 0 else 1.0 if score > 1 else score


def expand(compact: list[Any]) -> dict[str, Any]:
    """`Explanation.compact` with its fields named, figures rounded: what a span, the
    debug header and `igw explain` show."""
    profile, considered, count, weights, predictors, rows, excluded, picked, prefill = compact
    top = []
    for pod, total, scores, predictions in rows:
        row: dict[str, Any] = {
            "pod": pod,
            "total": None if total is None else round(total, 4),
            "scores": {w[0]: round(score, 4) for w, score in zip(weights, scores, strict=True)},
        }
        if predictions:
            row["predictedTtftS"] = {
                name: round(value, 5) for name, value in zip(predictors, predictions, strict=True)
            }
        top.append(row)
    out: dict[str, Any] = {
        "profile": profile,
        "considered": considered,
        "candidates": count,
        "weights": {name: weight for name, weight in weights},
        "top": top,
        "excluded": {reason: {"count": n, "pods": pods} for reason, (n, pods) in excluded.items()},
        "picked": picked,
    }
    if prefill is not None:
        out["prefill"] = expand(prefill)
    return out
