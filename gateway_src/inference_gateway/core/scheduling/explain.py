"""Why a request went where it went: what one scheduling cycle saw, kept cheaply.

A request that asks to be explained carries an `Explanation` (`LLMRequest.explanation`,
set by the director); the scheduler and its profile then keep references to what they
computed anyway, and nothing else:

* `excluded`: the pods of the pool that were never candidates, each with its reason
  (`stale`, `model` not served, outside the `subset` hint), and per filter the pods it
  removed (`filter:<name>`);
* `scorers`: each scorer's name, weight and score list (clamped to [0, 1] as the profile
  weighs them), in the order of `candidates`, and `totals`, their weighted sums;
* `predicted_ttft_s`: per scorer that predicts a time to first token (`predicted-ttft-
  scorer`), its prediction for each candidate;
* `prefill`: the P/D prefill cycle's own explanation.

Keeping references costs a few attribute stores per request; `summary` turns them into
the small, bounded record a trace span and `igw explain` show (the best `top` candidates
with each scorer's score, weight and the predicted TTFT, the exclusions counted and the
first few named), and is called once, off the request's critical path. A request
without an `Explanation` (the simulator's) pays one `is None` check per cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inference_gateway.core.scheduling.types import Endpoint

__all__ = ["NAMED_PER_REASON", "TOP", "Explanation"]

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

    def summary(self, top: int = TOP) -> dict[str, Any]:
        """The bounded record: at most `top` candidates and `NAMED_PER_REASON` names per
        exclusion reason, whatever the pool's size."""
        totals, candidates, picked = self.totals, self.candidates, self.picked
        # the pod picked first (a tie-break may have chosen any of the best), then by total
        order = sorted(range(len(totals)), key=lambda i: (candidates[i].name != picked, -totals[i]))
        if not totals and candidates:  # one candidate: nothing was scored
            order = [0]
        rows = []
        for i in order[:top]:
            row: dict[str, Any] = {
                "pod": self.candidates[i].name,
                "total": round(self.totals[i], 4) if self.totals else None,
                "scores": {name: round(scores[i], 4) for name, _, scores in self.scorers},
            }
            for scorer, predictions in self.predicted_ttft_s.items():
                if len(predictions) == len(self.candidates):
                    row.setdefault("predictedTtftS", {})[scorer] = round(predictions[i], 5)
            rows.append(row)
        reasons: dict[str, dict[str, Any]] = {}
        for pod, reason in self.excluded:
            entry = reasons.setdefault(reason, {"count": 0, "pods": []})
            entry["count"] += 1
            if len(entry["pods"]) < NAMED_PER_REASON:
                entry["pods"].append(pod)
        out: dict[str, Any] = {
            "profile": self.profile,
            "considered": self.considered,
            "candidates": len(self.candidates),
            "weights": {name: weight for name, weight, _ in self.scorers},
            "top": rows,
            "excluded": reasons,
            "picked": self.picked,
        }
        if self.prefill is not None:
            out["prefill"] = self.prefill.summary(top)
        return out
