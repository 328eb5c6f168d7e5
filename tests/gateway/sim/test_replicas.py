"""Gateway replicas sharing their dispatch view on the simulator's clock (sim/replicas.py).

The must-hold of issue 15 on a short run: 4 replicas sharing through the modelled store
stay within 1.15x one replica's P99 TTFT, and without sharing they do not (so the check
can fail). The exchange itself is pinned on hand-built states: a peer's dispatch is seen
one publish plus one round trip late, never at once.
"""

from __future__ import annotations

import pytest

from inference_gateway.sim.pods import SimPod, build_fleet, scrape
from inference_gateway.sim.policies import make_policy
from inference_gateway.sim.replicas import Replicated, Sharing
from inference_gateway.sim.runner import simulate
from inference_gateway.sim.scenario import PoolSpec, load_scenario
from inference_gateway.sim.workload import SimRequest

LIMIT = 1.15  # issue 15: gateway@4 P99 TTFT <= 1.15 x gateway's


class _Quiet:
    def on_first_token(self, request: object, time: float) -> None: ...
    def on_step(self, time: float) -> None: ...
    def on_finish(self, request: object, time: float) -> None: ...


def _fleet(n: int = 2) -> list[SimPod]:
    return build_fleet(
        [PoolSpec(name="h100", gpu="H100", model="llama-3.1-8b", replicas=n)], _Quiet()
    )


def _request(i: int) -> SimRequest:
    return SimRequest(t=0.0, prompt_tokens=800, output_tokens=10, request_id=i)


@pytest.mark.slow
def test_four_sharing_replicas_pick_like_one_and_unshared_ones_do_not() -> None:
    """25 s of mixed-fleet-bursty (its first 3x burst), the three policies in one run."""
    scenario = load_scenario("mixed-fleet-bursty").model_copy(update={"duration_s": 25.0})
    result = simulate(scenario, ["gateway", "gateway@4", "gateway@4-unshared"])["policies"]
    one = result["gateway"]["ttft_p99_s"]
    shared = result["gateway@4"]["ttft_p99_s"] / one
    unshared = result["gateway@4-unshared"]["ttft_p99_s"] / one
    assert shared <= LIMIT < unshared, (shared, unshared)
    assert result["gateway@4"]["rejected"] <= result["gateway"]["rejected"]
    assert result["gateway@4"]["completed"] == result["gateway"]["completed"]


def test_a_peers_dispatch_is_seen_one_publish_and_one_round_trip_late() -> None:
    sharing = Sharing(interval_s=0.005, rtt_s=0.001)
    policy = Replicated(
        "gateway@2", _fleet(), 0, base="gateway", count=2, make=make_policy, sharing=sharing
    )
    exchange = policy.exchange
    assert exchange is not None and exchange.phase == [0.0, 0.0025]
    mine, theirs = (view[0].endpoint for view in policy.views)
    # replica 0 dispatches just after its tick at 0: it publishes at its next, 0.005
    mine.sent_requests, mine.prefill_tokens = 1, 800
    exchange.record(0, 0.0001)
    # replica 1 ticks at 0.0025 (before that publish) and 0.0075 (after): its answer of
    # the 0.0075 exchange arrives one round trip later, at 0.0085
    for now, seen in ((0.0001, 0), (0.006, 0), (0.0084, 0), (0.0085, 1), (0.02, 1)):
        exchange.refresh(1, now)
        assert (theirs.peer_requests, theirs.peer_prefill_tokens) == (seen, 800 * seen), now
    assert (mine.peer_requests, mine.peer_prefill_tokens) == (0, 0)  # never its own


def test_a_peers_waiters_are_shared_with_their_age() -> None:
    policy = make_policy("gateway@2", _fleet(), 0)
    assert isinstance(policy, Replicated) and policy.exchange is not None
    first, second = (r.controller for r in policy.replicas)
    waiter = first.offer("standard", "", 1.0, saturated=True)
    assert waiter.waiter is not None
    policy.exchange.record(0, 1.0)
    policy.exchange.refresh(1, 1.02)
    # published at replica 0's tick 1.015, read at replica 1's tick 1.0175: the waiter
    # looks 2.5 ms younger than it is (its age travels, not the other clock's time)
    assert second.peer_waiters["standard"] == [pytest.approx(1.0025)]
    assert not second.offer("standard", "", 1.02, saturated=False).admitted


def test_unshared_replicas_see_only_their_own_dispatches() -> None:
    fleet = _fleet()
    for pod in fleet:
        scrape(pod, 0.0)
    policy = make_policy("gateway@2-unshared", fleet, 0)
    assert isinstance(policy, Replicated) and policy.exchange is None
    for i in range(6):
        policy.route(_request(i), 0.001 * i)
    views = [[p.endpoint for p in view] for view in policy.views]
    sent = [sum(e.sent_requests for e in v) for v in views]
    assert sum(sent) == 6 and min(sent) > 0
    assert all(e.peer_requests == 0 for v in views for e in v)
