"""What a replica publishes of its dispatches and how the others' enter its picking."""

from __future__ import annotations

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.shared_view import apply_peer_dispatch, own_dispatch


def _pods() -> list[Endpoint]:
    return [
        Endpoint(f"p{i}", "10.0.0.1", 8000 + i, metrics=PodMetrics(), stale=False, index=i)
        for i in range(3)
    ]


def test_own_dispatch_is_what_this_replica_sent_and_nothing_else() -> None:
    pods = _pods()
    assert own_dispatch(pods) == {}
    pods[1].sent_requests, pods[1].prefill_tokens = 2, 1500
    pods[2].peer_requests = 7  # another replica's: never republished
    assert own_dispatch(pods) == {"10.0.0.1:8001": (2, 1500)}


def test_peer_counts_are_summed_and_unknown_pods_ignored() -> None:
    pods = _pods()
    apply_peer_dispatch(
        pods, [{"10.0.0.1:8000": (1, 100)}, {"10.0.0.1:8000": (2, 50), "10.9.9.9:1": (5, 5)}]
    )
    assert [(p.peer_requests, p.peer_prefill_tokens) for p in pods] == [(3, 150), (0, 0), (0, 0)]
    apply_peer_dispatch(pods, [])  # no peers (or no store): back to the local view
    assert all(p.peer_requests == p.peer_prefill_tokens == 0 for p in pods)


def test_the_latency_profile_avoids_a_pod_the_other_replicas_just_loaded() -> None:
    """Two idle identical pods: alone, either may win; with another replica's pending
    prefill on the first, the pick is the second (predicted TTFT sees the backlog)."""
    scheduler = Scheduler(GatewayConfigSpec(), seed=1)
    pods = _pods()[:2]
    request = LLMRequest("r", "m", prompt_tokens=800)
    pods[0].peer_requests, pods[0].peer_prefill_tokens = 4, 8000
    assert scheduler.schedule(request, pods)[0] is pods[1]
    apply_peer_dispatch(pods, [{pods[1].hostport: (4, 8000)}])
    assert scheduler.schedule(request, pods)[0] is pods[0]
