"""Pod failures on the virtual clock, and the gateway's resume on break (issue 33).

A scenario's `faults` (`scenario.Faults`) lists pods lost mid-run, spot-reclaim style:
at `at_s` the pod's engine and every request on it are gone, and `down_s` later an
empty replacement takes traffic again. While it is down the pod answers no scrape (a
router that scrapes sees it stale, as the gateway sees a pod whose connection failed:
the scheduler's filter skips it) and the baselines skip it (a refused connection).

What becomes of the requests it held, as `igw serve` answers them (docs/migration.md):

* a stream that had its first token is **resumed** when `faults.resume` holds: the
  request goes to the pod the policy picks now (the break marks the lost pod, so it is
  never the one) with the tokens delivered appended to its prompt and its `max_tokens`
  less them. Its cost is the re-prefill of prompt plus delivered tokens on the new pod
  (`reprefill_gpu_s`: that prefill alone by the new pod's roofline, times its GPUs; a
  prefix-cache hit on the new pod makes the real cost smaller). The client's TTFT stays
  its first token's; the resume gap runs from the break (the last token before it, within
  one decode step) to the continuation's first token. Without `resume` it is **lost**
  (the SSE error event).
* a request with no token yet is **retried whole** when `faults.resume` holds: `igw
  serve` sends a request whose pod broke before any byte reached the client to the next
  pod as it was sent (core/request/resume.py, outcome `retried`); without `resume` it is
  **lost before its first token** (a 502).

A continuation goes through the policy like a new request (a gateway policy admits it
again; `igw serve` sends it to the next pod without a second admission): a continuation
the policy refuses counts as rejected.

With a P/D split (docs/migration.md, "With a P/D split"): a continuation is a whole
request, served on the decode pod the policy picks, without a prefill leg (the driver
asks `StreamLedger.continues`); a prefill leg its pod held is **retried whole** on its
request's decode pod (`prefill_legs_retried`: `igw serve`'s failed prefill leg); a KV
read from a lost prefill pod fails and the decode pod prefills itself (the transfers'
fallback); a decode pod lost before the read routes the request again
(`requests_rerouted`; `igw serve` retries the next-ranked decode pod, which reads the
same blocks).

The account of what became of the cut streams (lost, resumed, re-prefill, gap) is
`StreamLedger`, one for both tiers: the fleet simulator keeps the same one for the streams
of a lost cluster, resumed as `igw global` resumes them (`fleet/tier.py`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inference_gateway.emulator.engine import Engine
from inference_gateway.sim.disagg import PrefillLeg
from inference_gateway.sim.pods import SimPod
from inference_gateway.sim.scenario import Faults
from inference_gateway.sim.workload import SimRequest

__all__ = ["FaultInjector", "StreamLedger"]


@dataclass(slots=True)
class _Broken:
    """A resumed stream as its client sees it: its first token, the tokens it had at the
    last break, when that break was."""

    first_token: float
    delivered: int
    broke_at: float


@dataclass(slots=True)
class StreamLedger:
    """What became of the streams that failures cut, and what resuming them cost: one
    account for both tiers, a single cluster's lost pods (`FaultInjector`, as `igw serve`
    resumes) and the fleet's lost clusters (`fleet.tier`, as `igw global` does), so both
    reports count lost, resumed, re-prefill and the gap the same way."""

    lost_mid_stream: int = 0
    lost_before_first_token: int = 0
    retried_whole: int = 0  # tier 1: cut before their first token, sent again whole
    resumed: int = 0
    reprefill_gpu_s: float = 0.0
    gaps: list[float] = field(default_factory=list)
    breaks: list[float] = field(default_factory=list)  # when each gap of `gaps` opened
    _broken: dict[int, _Broken] = field(default_factory=dict)
    _whole: set[int] = field(default_factory=set)  # retried whole, not answered yet

    def cut(
        self, sim: SimRequest, first_token: float | None, generated: int, now: float, *,
        resume: bool,
    ) -> SimRequest | None:  # fmt: skip
        """`sim`'s attempt is cut at `now` (`first_token`: the attempt's first token, None
        before it; `generated`: the tokens it produced). Returns the continuation to route:
        the tokens delivered appended to the prompt, the tokens to generate less them;
        the request itself when it had no token yet and `resume` holds (sent again
        whole); None when the request is lost (counted: before its first token, or
        mid-stream, without `resume`). A continuation cut before its own first token is
        cut again: its silence began at the earlier break."""
        earlier = self._broken.pop(sim.request_id, None)
        if first_token is None and earlier is None:
            if not resume:
                self.lost_before_first_token += 1
                return None
            self.retried_whole += 1
            self._whole.add(sim.request_id)
            return sim
        if not resume:
            self.lost_mid_stream += 1
            return None
        first = earlier.first_token if earlier is not None else first_token
        delivered = (earlier.delivered if earlier is not None else 0) + generated
        assert first is not None
        since = now if earlier is None or earlier.broke_at > now else earlier.broke_at
        self._broken[sim.request_id] = _Broken(first, delivered, since)
        return dataclasses.replace(
            sim,
            prompt_tokens=sim.prompt_tokens + generated,
            output_tokens=max(1, sim.output_tokens - generated),
        )

    def give_up(self, sim: SimRequest) -> None:
        """A continuation no target took (none left, or none answered in time): its
        stream ends with the SSE error event, lost mid-stream."""
        self._broken.pop(sim.request_id, None)
        self.lost_mid_stream += 1

    def never_started(self) -> None:
        """A request a failure dropped before its first token, that no other target
        answered either (tier 2 retries such a request; tier 1 counts it in `cut`)."""
        self.lost_before_first_token += 1

    def continues(self, sim: SimRequest) -> bool:
        """Whether `sim` is a cut stream's continuation (P/D: a whole request, no prefill
        leg, as `igw serve` sends one), or a request sent again whole (the same)."""
        return sim.request_id in self._broken or sim.request_id in self._whole

    def first_token(self, sim: SimRequest, pod: SimPod, now: float) -> None:
        """A continuation's first token: the gap closes, its re-prefill is counted."""
        broken = self._broken.get(sim.request_id)
        if broken is None or broken.broke_at > now:
            return
        self.resumed += 1
        self.gaps.append(now - broken.broke_at)
        self.breaks.append(broken.broke_at)
        n = sim.prompt_tokens
        prefill_s = pod.engine.step_time(n, n * (n - 1) / 2, 0, 0.0)
        self.reprefill_gpu_s += prefill_s * pod.profile.tp
        broken.broke_at = float("inf")  # closed: a later break opens it again

    def finished(self, sim: SimRequest, first_token: float, tokens: int) -> tuple[float, int]:
        """The client's first token and tokens for the request that ended (a resumed
        one: its first token before the break, and every token delivered)."""
        self._whole.discard(sim.request_id)
        broken = self._broken.pop(sim.request_id, None)
        if broken is None:
            return first_token, tokens
        return broken.first_token, broken.delivered + tokens

    def report(self) -> dict[str, Any]:
        gaps = np.asarray(self.gaps) if self.gaps else np.asarray([np.nan])
        return {
            "requests_lost": self.lost_mid_stream + self.lost_before_first_token,
            "lost_mid_stream": self.lost_mid_stream,
            "lost_before_first_token": self.lost_before_first_token,
            "retried_before_first_token": self.retried_whole,
            "requests_resumed": self.resumed,
            "reprefill_gpu_s": round(self.reprefill_gpu_s, 6),
            "resume_gap_p50_s": round(float(np.percentile(gaps, 50)), 6),
            "resume_gap_p99_s": round(float(np.percentile(gaps, 99)), 6),
        }


@dataclass(slots=True)
class FaultInjector:
    """One run's pod failures: when each pod goes down and comes back, and what the
    requests it held become (`ledger`, with the figures of the report)."""

    faults: Faults
    pods: list[SimPod]
    failed: int = 0
    ledger: StreamLedger = field(default_factory=StreamLedger)
    prefill_legs_retried: int = 0  # P/D: legs a lost prefill pod held, served whole
    rerouted: int = 0  # P/D: requests whose decode pod was lost before they got there

    def events(self, until: float) -> list[tuple[float, bool, SimPod]]:
        """(time, down, pod): the loss and the replacement of each failure before
        `until` (a scenario cut short, `--duration`, has only those of its span)."""
        by_name = {p.endpoint.name: p for p in self.pods}
        out: list[tuple[float, bool, SimPod]] = []
        for failure in self.faults.failures:
            if failure.at_s >= until:
                continue
            pod = by_name[failure.pod]
            out += [(failure.at_s, True, pod), (failure.at_s + failure.down_s, False, pod)]
        return out

    def recover(self, pod: SimPod) -> None:
        """The replacement is up: the next scrape sees it fresh."""
        pod.down = False

    def fail(
        self, pod: SimPod, now: float
    ) -> tuple[list[SimRequest], list[SimRequest], list[PrefillLeg]]:
        """The pod is lost with every request on it; its engine is replaced by an empty
        one (down until `recover`). Returns (the continuations to route, the requests
        lost, the prefill legs to retry whole on their decode pods), each request with
        the pod it was on already let go of by the caller's policy
        (`Policy.on_finished`)."""
        if pod.down:
            return [], [], []
        old = pod.engine
        old.advance(now)  # every step that ended by now was delivered
        held = old.requests()
        sink = pod.kv_feed.sink(pod.endpoint.name) if pod.kv_feed is not None else None
        pod.engine = Engine(old.profile, listener=old.listener, kv_sink=sink)
        pod.down = True
        pod.endpoint.stale = True
        self.failed += 1
        continuations: list[SimRequest] = []
        lost: list[SimRequest] = []
        legs: list[PrefillLeg] = []
        for request in held:
            if type(request.tag) is PrefillLeg:  # before any token: served whole instead
                self.prefill_legs_retried += 1
                legs.append(request.tag)
                continue
            sim: SimRequest = request.tag[0]
            continuation = self.ledger.cut(
                sim,
                request.first_token_time,
                request.generated(old.clock),
                now,
                resume=self.faults.resume,
            )
            if continuation is None:
                lost.append(sim)
            else:
                continuations.append(continuation)
        return continuations, lost, legs

    def report(self) -> dict[str, Any]:
        return {
            "pod_failures": self.failed,
            **self.ledger.report(),
            "prefill_legs_retried": self.prefill_legs_retried,
            "requests_rerouted": self.rerouted,
        }
