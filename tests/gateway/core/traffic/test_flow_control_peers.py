"""Admission queues of several replicas behaving like one (`FlowController.peer_waiters`),
and the other replicas' dispatch counts entering the saturation detector."""

from __future__ import annotations

import pytest

from inference_gateway.config.spec import BandSpec, FlowControlSpec
from inference_gateway.core.scheduling import Endpoint, PodMetrics
from inference_gateway.core.traffic.flow_control import (
    FlowController,
    Limits,
    pending_prefill_s,
    pod_load,
)

SPEC = FlowControlSpec(
    bands={
        "critical": BandSpec(max_queue=10, ttl_s=10),
        "standard": BandSpec(max_queue=10, ttl_s=10),
        "sheddable": BandSpec(max_queue=0, ttl_s=1),
    }
)


def slots(n: int):
    """A capacity callable with `n` free slots, recording which band took each."""
    taken: list[str] = []

    def capacity(band: str) -> bool:
        if len(taken) >= n:
            return False
        taken.append(band)
        return True

    capacity.taken = taken  # type: ignore[attr-defined]
    return capacity


def controller(*enqueued: float, band: str = "standard") -> FlowController:
    c = FlowController(SPEC)
    for t in enqueued:
        assert c.offer(band, "", t, saturated=True).waiter is not None
    return c


@pytest.mark.parametrize(
    ("peers", "free", "released"),
    [
        ({}, 2, [1.0, 2.0]),  # one replica: as before
        ({"standard": [0.5]}, 2, [1.0]),  # the older peer waiter takes the first slot
        ({"standard": [0.5]}, 1, []),  # ... and the only one
        ({"standard": [1.5]}, 2, [1.0]),  # a peer waiter between ours goes second
        ({"standard": [9.0]}, 2, [1.0, 2.0]),  # younger peers wait for their turn
        ({"critical": [5.0]}, 2, [1.0]),  # a better band goes first, whatever its age
        ({"critical": [5.0, 6.0]}, 2, []),
    ],
)
def test_release_gives_the_other_replicas_older_waiters_their_slots_first(
    peers: dict[str, list[float]], free: int, released: list[float]
) -> None:
    c = controller(1.0, 2.0)
    c.peer_waiters = peers
    out = c.release(3.0, slots(free))
    assert [w.enqueued_at for w in out] == released
    assert c.queued("standard") == 2 - len(released)


def test_a_newcomer_queues_behind_the_other_replicas_waiters() -> None:
    c = controller()
    assert c.offer("standard", "", 1.0, saturated=False).admitted
    c.peer_waiters = {"standard": [0.5]}
    assert not c.offer("standard", "", 1.0, saturated=False).admitted
    assert c.offer("critical", "", 1.0, saturated=False).admitted  # a better band is not held


def test_waiter_ages_travel_and_come_back_on_the_readers_clock() -> None:
    sender = controller(10.0, 11.0, 12.0)
    ages = sender.waiter_ages(now=13.0)
    assert ages == {"standard": [3.0, 2.0, 1.0]}
    reader = controller()
    reader.set_peer_waiters([ages, {"standard": [2.5], "vip": [9.0]}], at=100.0)
    assert reader.peer_waiters == {"standard": [97.0, 97.5, 98.0, 99.0]}
    reader.set_peer_waiters([], at=100.0)  # the store is away: the local view only
    assert reader.peer_waiters == {}


def test_other_replicas_dispatches_count_toward_a_pods_load() -> None:
    pod = Endpoint("a", "h", 1, metrics=PodMetrics(waiting=1), stale=False)
    pod.prefill_s_per_token = 1e-4
    limits = Limits(queue=5, kv=0.8, prefill_s=1.0)
    assert pod_load(pod, limits) == pytest.approx(0.2)
    pod.peer_requests, pod.peer_prefill_tokens = 3, 9000
    assert pending_prefill_s(pod) == pytest.approx(0.9)
    assert pod_load(pod, limits) == pytest.approx(0.9)
    pod.sent_requests = 1
    assert pod_load(pod, limits) == pytest.approx(1.0)
