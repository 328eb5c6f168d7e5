"""Admission control as a pure state machine: bands, fairness, TTL, Retry-After."""

from __future__ import annotations

import math

import pytest

from inference_gateway.config import BandSpec, FlowControlSpec
from inference_gateway.scheduling import Endpoint, PodMetrics
from inference_gateway.traffic.flow_control import FlowController

SPEC = FlowControlSpec(
    bands={
        "critical": BandSpec(max_queue=3, ttl_s=10),
        "standard": BandSpec(max_queue=2, ttl_s=5),
        "sheddable": BandSpec(max_queue=0, ttl_s=1),
    },
    retry_after_min_s=1,
    retry_after_max_s=30,
)


def always(n: int):
    def capacity(band: str = "") -> bool:
        nonlocal n
        n -= 1
        return n >= 0

    return capacity


def test_unsaturated_pool_admits_everyone() -> None:
    fc = FlowController(SPEC)
    assert fc.offer("sheddable", "", 0.0, saturated=False).admitted


def test_saturated_pool_sheds_sheddable_and_queues_the_rest() -> None:
    fc = FlowController(SPEC)
    shed = fc.offer("sheddable", "", 0.0, saturated=True)
    assert not shed.admitted and shed.status == 429 and shed.reason == "sheddable"
    assert fc.offer("standard", "", 0.0, saturated=True).waiter is not None
    assert fc.offer("standard", "", 0.0, saturated=True).waiter is not None
    full = fc.offer("standard", "", 0.0, saturated=True)
    assert full.status == 429 and full.reason == "queue_full"
    assert fc.rejected == {"sheddable": 1, "queue_full": 1}


def test_queued_requests_keep_new_ones_from_jumping_ahead() -> None:
    fc = FlowController(SPEC)
    fc.offer("standard", "", 0.0, saturated=True)
    assert not fc.offer("standard", "", 0.1, saturated=False).admitted


def test_release_is_strict_priority_then_round_robin_by_fairness_id() -> None:
    fc = FlowController(SPEC)
    order = [
        ("standard", "a"),
        ("standard", "b"),
        ("critical", "x"),
        ("critical", "x"),
        ("critical", "y"),
    ]
    waiters = [fc.offer(b, f, 0.0, saturated=True).waiter for b, f in order]
    released = fc.release(1.0, always(4))
    assert [(w.band, w.fairness_id) for w in released] == [
        ("critical", "x"),
        ("critical", "y"),
        ("critical", "x"),
        ("standard", "a"),
    ]
    assert fc.queued() == 1 and waiters[1] not in released


def test_ttl_expiry_and_cancel() -> None:
    fc = FlowController(SPEC)
    keep = fc.offer("critical", "", 0.0, saturated=True).waiter
    gone = fc.offer("standard", "", 0.0, saturated=True).waiter
    assert fc.expire(4.9) == []
    assert fc.expire(5.0) == [gone]
    assert fc.rejected["ttl_expired"] == 1
    fc.cancel(keep)  # the client hung up
    assert fc.queued() == 0 and fc.release(6.0, always(5)) == []


def test_retry_after_follows_drain_rate_and_clamps() -> None:
    fc = FlowController(SPEC)
    assert fc.retry_after(0.0) == 30  # nothing drained yet: the maximum
    for i in range(200):
        fc.on_completion(i * 0.1)  # ~10 completions per second
    assert fc.drain_rate(20.0) == pytest.approx(10, rel=0.1)
    rate = fc.drain_rate(20.0)
    assert fc.retry_after(20.0, pool_waiting=49) == math.ceil(50 / rate) == 6
    assert fc.retry_after(20.0, pool_waiting=0) == 1
    assert fc.retry_after(20.0, pool_waiting=10_000) == 30


def test_saturation_uses_thresholds_and_inflight() -> None:
    fc = FlowController(SPEC)
    busy = Endpoint("a", "h", 1, metrics=PodMetrics(waiting=5), stale=False)
    full_kv = Endpoint("b", "h", 2, metrics=PodMetrics(kv_usage=0.85), stale=False)
    free = Endpoint("c", "h", 3, metrics=PodMetrics(waiting=2), stale=False)
    assert fc.saturated([busy, full_kv])
    assert not fc.saturated([busy, free])
    free.sent_requests = 3
    assert fc.saturated([busy, free])
    assert fc.saturation([busy]) == pytest.approx(1.0)
