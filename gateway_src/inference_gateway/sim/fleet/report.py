"""What a fleet run measured: outcomes per request, attempts per cluster, the report.

Definitions (docs/global-router.md, "Simulating the fleet"):

* **failover_s** of a kill: from the kill to the last new request any router sent to a
  killed cluster while it was down (0 when none was sent). After it, the dead cluster
  receives no new traffic. **last_retry_s**: the same for retries, which follow the
  ranking their request got on arrival (`server._forward`), so one ranked before the
  drain can still try the dead cluster later (a black hole: after a read timeout).
* **requests**: `served`; `retried_and_served` (served after a dead cluster dropped or
  refused an attempt); `lost_started` (the cluster died after the first token and the
  stream was not resumed: migration off, or no cluster took the continuation);
  `unanswered` (no cluster could take it: every attempt was refused, or
  nothing was routable); `rejected` (the last cluster's admission answered 429/503:
  load shedding, not a failure of the tier); `unfinished` (still open when the run
  stopped, `DRAIN_FACTOR` durations after the start).
* **cluster_failures** (clusters killed) and the single-cluster report's fault fields
  (`sim.faults.StreamLedger`): `requests_lost` = `lost_mid_stream` (= `lost_started`) +
  `lost_before_first_token` (a dead cluster dropped it before its first token and no
  other cluster answered it: part of `unanswered`), `requests_resumed`,
  `reprefill_gpu_s` (each continuation's prompt and delivered tokens prefilled alone on
  the pod that took it), `resume_gap_p50_s` / `resume_gap_p99_s` (from the break, the
  last token's arrival at the router, to the continuation's first token there).
  A resumed request's TTFT is its first token's; its E2E and tokens span the break.
* **ttft_p99_s** per event window, by arrival time: `before` = since the previous event,
  `during` = the event's first `window_s` (a restore or an undrain: its `rampS`), `after` =
  from there to the next event. TTFT is what the client sees: network included.
* **tpot_p50_s / tpot_p99_s**: time per output token after the first, per served
  request of more than one token (`core/request/latency.py`, as every report).
* **share**: routing decisions (attempts) per cluster per `bin_s`, as fractions.
* **cost**: `per_million_tokens` = the clusters' hourly prices while up / output tokens
  (the fleet as provisioned); `attributed_per_million_tokens` = each output token at
  the unit price of the cluster that served it, `hourly / (capacity tokens/s × 3600) ×
  1e6` (what the traffic costs when clusters scale with their load: the saving that
  cost-aware shaping is for).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from inference_gateway.core.request.latency import time_per_output_token
from inference_gateway.sim.faults import StreamLedger
from inference_gateway.sim.fleet.scenario import FleetEvent, FleetScenario

__all__ = ["FleetRecorder"]


def _p(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 6) if values else None


class FleetRecorder:
    def __init__(
        self, scenario: FleetScenario, profile: str, clusters: dict[str, Any], ramp_s: float
    ) -> None:
        self.scenario = scenario
        self.ramp_s = ramp_s
        self.profile = profile
        self.clusters = clusters
        # time, cluster, cross-region, home region in, retry (not the first attempt)
        self.attempts: list[tuple[float, str, bool, bool, bool]] = []
        # arrival, TTFT, E2E, cluster, cross-region, output tokens, band, refused at
        self.served: list[tuple[float, float, float, str, bool, int, str, float | None]] = []
        self.failed: list[tuple[float, str, float]] = []  # arrival, outcome, when
        self.events: list[tuple[FleetEvent, list[str], float]] = []
        self.unit_cost: dict[str, float] = {}
        self.arrivals = 0

    # hooks ---------------------------------------------------------------------------

    def on_arrival(self, req: Any) -> None:
        self.arrivals += 1

    def on_attempt(self, req: Any, cluster: Any, now: float, home_in: bool) -> None:
        cross = cluster.region != req.router.region
        self.attempts.append((now, cluster.name, cross, home_in, req.attempt > 0))

    def on_served(self, req: Any, cluster: Any, seen: float, tokens: int) -> None:
        """`tokens`: every output token its client got (a resumed stream's from before
        the break too)."""
        sim = req.sim
        self.served.append(
            (
                sim.t,
                req.first_token - sim.t,
                seen - sim.t,
                cluster.name,
                cluster.region != req.router.region,
                tokens,
                sim.priority,
                req.refused_at,
            )
        )

    def on_failed(self, req: Any, outcome: str, now: float) -> None:
        self.failed.append((req.sim.t, outcome, now))

    def on_event(self, event: FleetEvent, names: list[str], now: float) -> None:
        self.events.append((event, names, now))

    # the report ----------------------------------------------------------------------

    def report(self, routers: dict[str, Any], ledger: StreamLedger) -> dict[str, Any]:
        resumes = list(zip(ledger.breaks, ledger.gaps, strict=True))  # (break, gap) each
        ttft = [row[1] for row in self.served]
        tpot = [
            t
            for row in self.served
            if (t := time_per_output_token(row[1], row[2], row[5])) is not None
        ]
        cross = [row[1] for row in self.served if row[4]]
        outcomes: dict[str, int] = defaultdict(int)
        for _, outcome, _ in self.failed:
            outcomes[outcome] += 1
        return {
            "profile": self.profile,
            "requests": {
                "total": self.arrivals,
                "served": len(self.served),
                "retried_and_served": sum(1 for row in self.served if row[7] is not None),
                "lost_started": outcomes["lost_started"],
                "unanswered": outcomes["unanswered"],
                "rejected": outcomes["rejected"],
                "unfinished": self.arrivals - len(self.served) - len(self.failed),
            },
            "ttft_p50_s": _p(ttft, 50),
            "ttft_p99_s": _p(ttft, 99),
            "e2e_p99_s": _p([row[2] for row in self.served], 99),
            "tpot_p50_s": _p(tpot, 50),
            "tpot_p99_s": _p(tpot, 99),
            "cross_region": {
                "served": len(cross),
                "ttft_p50_s": _p(cross, 50),
                "ttft_p99_s": _p(cross, 99),
                # new requests ranked across regions while a home cluster was in (a
                # retry follows its request's first ranking, so it does not count)
                "while_home_in": sum(1 for a in self.attempts if a[2] and a[3] and not a[4]),
            },
            "events": [self._event(i, resumes) for i in range(len(self.events))],
            "share": self._share(),
            "cost": self._cost(),
            "failover_events": {
                region: int(
                    sum(
                        s.value
                        for family in r.metrics.registry.collect()
                        for s in family.samples
                        if s.name == "igw_global_failover_events_total"
                    )
                )
                for region, r in routers.items()
            },
            # what became of the streams the kills cut: the single-cluster report's fields
            "cluster_failures": sum(
                len(names) for e, names, _ in self.events if e.action == "kill"
            ),
            **ledger.report(),
        }

    def _event(self, i: int, resumes: list[tuple[float, float]]) -> dict[str, Any]:
        event, names, t = self.events[i]
        end = self.events[i + 1][2] if i + 1 < len(self.events) else self.scenario.duration_s
        start = self.events[i - 1][2] if i > 0 else 0.0
        span = (
            self.ramp_s if event.action in ("restore", "undrain") else self.scenario.report.window_s
        )
        during_end = min(t + span, end)

        def window(a: float, b: float) -> float | None:
            return _p([row[1] for row in self.served if a <= row[0] < b], 99)

        out: dict[str, Any] = {
            "at_s": t,
            "action": event.action,
            "target": event.cluster or event.region,
            "clusters": names,
            "ttft_p99_s": {
                "before": window(start, t),
                "during": window(t, during_end),
                "after": window(during_end, end),
            },
            "windows_s": [[start, t], [t, during_end], [during_end, end]],
        }
        if event.action == "kill":
            dead = [a for a in self.attempts if t <= a[0] < end and a[1] in set(names)]
            last = max((a[0] for a in dead if not a[4]), default=t)
            out["failover_s"] = round(last - t, 6)
            last_retry = max((a[0] for a in dead if a[4]), default=None)
            out["last_retry_s"] = None if last_retry is None else round(last_retry - t, 6)
            # a retry (or a lost continuation) belongs to the latest kill before it,
            # however late it came
            later_kills = [e[2] for e in self.events[i + 1 :] if e[0].action == "kill"]
            upto = later_kills[0] if later_kills else math.inf
            out["lost_started"] = sum(
                1 for _, o, when in self.failed if o == "lost_started" and t <= when < upto
            )
            retried = [row[1] for row in self.served if row[7] is not None and t <= row[7] < upto]
            out["retried_and_served"] = len(retried)
            out["retried_ttft_max_s"] = round(max(retried), 6) if retried else None
            gaps = [gap for broke, gap in resumes if t <= broke < upto]
            out["resumed"] = len(gaps)
            out["resume_gap_p99_s"] = _p(gaps, 99)
            out["unanswered"] = sum(
                1 for _, o, when in self.failed if o == "unanswered" and t <= when < upto
            )
        else:
            out["share_during"] = self._share_between(set(names), t, during_end)
        return out

    def _share_between(self, names: set[str], a: float, b: float) -> list[float]:
        """Share of attempts that went to `names`, per bin from `a` to `b`."""
        bin_s = self.scenario.report.bin_s
        count = max(1, math.ceil((b - a) / bin_s))
        hits, totals = [0] * count, [0] * count
        for t, name, *_ in self.attempts:
            if a <= t < b:
                k = min(count - 1, int((t - a) / bin_s))
                totals[k] += 1
                hits[k] += name in names
        return [round(h / n, 4) if n else 0.0 for h, n in zip(hits, totals, strict=True)]

    def _share(self) -> dict[str, Any]:
        bin_s = self.scenario.report.bin_s
        count = max(1, math.ceil(self.scenario.duration_s / bin_s))
        names = list(self.clusters)
        counts = {n: [0] * count for n in names}
        totals = [0] * count
        for t, name, *_ in self.attempts:
            k = min(count - 1, int(t / bin_s))
            counts[name][k] += 1
            totals[k] += 1
        return {
            "bin_s": bin_s,
            "start_s": [round(k * bin_s, 3) for k in range(count)],
            "by_cluster": {
                n: [round(c / t, 4) if t else 0.0 for c, t in zip(counts[n], totals, strict=True)]
                for n in names
            },
        }

    def _cost(self) -> dict[str, Any]:
        duration = self.scenario.duration_s
        up = {n: duration for n in self.clusters}
        down_since: dict[str, float] = {}
        for event, names, t in self.events:
            for n in names:
                if event.action == "kill" and n not in down_since:
                    down_since[n] = t
                elif event.action == "restore" and n in down_since:
                    up[n] -= t - down_since.pop(n)
        for n, t in down_since.items():
            up[n] -= duration - t
        tokens: dict[str, int] = defaultdict(int)
        sheddable: dict[str, int] = defaultdict(int)
        for row in self.served:
            tokens[row[3]] += row[5]
            if row[6] == "sheddable":
                sheddable[row[3]] += 1
        total = max(1, sum(tokens.values()))
        spent = sum(self.clusters[n].hourly_usd * up[n] / 3600 for n in self.clusters)
        attributed = sum(tokens[n] * self.unit_cost.get(n, 0.0) for n in self.clusters)
        shed_total = sum(sheddable.values())
        return {
            "per_million_tokens": round(spent / total * 1e6, 4),
            "attributed_per_million_tokens": round(attributed / total, 4),
            "by_cluster": {
                n: {
                    "unit_cost_per_million_tokens": round(self.unit_cost.get(n, 0.0), 4),
                    "output_tokens": tokens[n],
                    "sheddable_share": round(sheddable[n] / shed_total, 4) if shed_total else 0.0,
                }
                for n in self.clusters
            },
        }
