"""Admission control as a pure state machine: the saturation detector, bands, fairness,
TTL, Retry-After."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from inference_gateway.config.spec import BandSpec, FlowControlSpec, SaturationSpec
from inference_gateway.core.scheduling import Endpoint, PodMetrics
from inference_gateway.core.traffic.flow_control import (
    FlowController,
    Limits,
    SlotCounter,
    free_slots,
    pod_load,
    pod_saturated,
)

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
    full_kv = Endpoint("b", "h", 2, metrics=PodMetrics(kv_usage=0.95), stale=False)
    free = Endpoint("c", "h", 3, metrics=PodMetrics(waiting=2), stale=False)
    assert fc.saturated([busy, full_kv])
    assert not fc.saturated([busy, free])
    free.sent_requests = 3
    assert fc.saturated([busy, free])
    assert fc.saturation([busy]) == pytest.approx(1.0)


# ---------------------------------------------------------------------- the detector


def pod(
    waiting: int = 0, sent: int = 0, kv: float = 0.0, prefill_tokens: int = 0, spt: float = 0.0
) -> Endpoint:
    e = Endpoint("p", "h", 1, metrics=PodMetrics(waiting=waiting, kv_usage=kv), stale=False)
    e.sent_requests, e.prefill_tokens, e.prefill_s_per_token = sent, prefill_tokens, spt
    return e


DEFAULTS = SaturationSpec()
CRITICAL = Limits.for_band(DEFAULTS, "critical")
STANDARD = Limits.for_band(DEFAULTS, "standard")


def test_default_limits_per_band() -> None:
    assert Limits(queue=5, kv=0.9, prefill_s=1.0) == CRITICAL  # KV: upstream's 0.8, see spec
    assert STANDARD == Limits.for_band(DEFAULTS, "sheddable") == Limits(1, 0.6, 0.05)


@pytest.mark.parametrize(
    ("endpoint", "critical", "standard"),
    [
        (pod(), 0.0, 0.0),
        (pod(waiting=2, sent=1), 3 / 5, 3.0),  # queue term: waiting + sent
        (pod(kv=0.4), 0.4 / 0.9, 0.4 / 0.6),  # kv term
        # prefill term: 2000 pending tokens at 40 µs each = 80 ms queued ahead
        (pod(prefill_tokens=2000, spt=4e-5), 0.08, 0.08 / 0.05),
        (pod(prefill_tokens=2000), 0.0, 0.0),  # speed not measured yet: no term
        (pod(waiting=1, kv=0.7, prefill_tokens=500, spt=4e-5), 0.7 / 0.9, 0.7 / 0.6),  # the max
    ],
)
def test_pod_load_is_the_max_of_queue_kv_and_prefill(
    endpoint: Endpoint, critical: float, standard: float
) -> None:
    assert pod_load(endpoint, CRITICAL) == pytest.approx(critical)
    assert pod_load(endpoint, STANDARD) == pytest.approx(standard)
    assert pod_saturated(endpoint, STANDARD) == (standard >= 1)


def test_prefill_term_off_is_upstreams_detector() -> None:
    upstream = Limits(queue=5, kv=0.8, prefill_s=None)
    deep = pod(waiting=1, prefill_tokens=10**6, spt=1e-4)  # 100 s of prefill queued
    assert pod_load(deep, upstream) == pytest.approx(max(1 / 5, 0 / 0.8))
    assert not pod_saturated(deep, upstream)
    assert pod_saturated(deep, Limits(5, 0.8, 1.0))


def test_scraped_metrics_missing_means_full() -> None:
    e = Endpoint("p", "h", 1, stale=False)
    assert pod_saturated(e, CRITICAL) and free_slots([e], CRITICAL) == 0


def test_free_slots_queue_headroom_and_one_per_pod_under_the_prefill_threshold() -> None:
    pods = [pod(waiting=1), pod(), pod(prefill_tokens=2000, spt=4e-5)]
    assert free_slots(pods, Limits(5, 0.8)) == 4 + 5 + 5
    assert free_slots(pods, Limits(5, 0.8, prefill_s=1.0)) == 3
    assert free_slots(pods, Limits(5, 0.8, prefill_s=0.05)) == 2  # the last one is full
    stale = pod()
    stale.stale = True
    assert free_slots([stale], CRITICAL) == 0


def test_slot_counter_counts_requests_in_transit_and_shares_slots_between_bands() -> None:
    spec = FlowControlSpec()
    pods = [pod(), pod(prefill_tokens=2000, spt=4e-5)]  # the second is full for standard
    slots = SlotCounter(pods, spec)
    assert (slots.critical, slots.normal) == (2, 1)
    assert slots.take("standard") and slots.full("standard") and not slots.full("critical")
    assert slots.take("critical") and slots.full("critical")
    reserved = SlotCounter(pods, spec, in_transit=1)
    assert reserved.full("standard") and not reserved.full("critical")


def test_saturated_and_saturation_signal_follow_the_band() -> None:
    fc = FlowController(FlowControlSpec())
    busy = pod(prefill_tokens=4000, spt=4e-5)  # 160 ms queued: full for standard only
    assert fc.saturated([busy], "standard") and not fc.saturated([busy], "critical")
    assert fc.saturation([busy]) == pytest.approx(0.16)


def test_headroom_is_kept_only_after_a_critical_request() -> None:
    fc = FlowController(FlowControlSpec())  # criticalReserveS 30
    busy = [pod(prefill_tokens=4000, spt=4e-5)]  # full for standard under the reserve
    assert not fc.reserving(0.0) and not fc.saturated(busy, "standard", now=0.0)
    assert not fc.slots(busy, 0.0).full("standard")
    fc.offer("critical", "", 10.0, saturated=False)
    assert fc.reserving(40.0) and fc.saturated(busy, "standard", now=40.0)
    assert fc.slots(busy, 40.0).full("standard")
    assert not fc.reserving(40.1)
    always_on = FlowController(FlowControlSpec(saturation=SaturationSpec(critical_reserve_s=None)))
    assert always_on.reserving(0.0) and always_on.slots(busy, 0.0).full("standard")


def test_critical_request_passes_standard_waiters() -> None:
    fc = FlowController(SPEC)
    fc.offer("standard", "", 0.0, saturated=True)
    assert fc.offer("critical", "", 0.1, saturated=False).admitted
    assert not fc.offer("standard", "", 0.1, saturated=False).admitted
    fc.offer("critical", "", 0.2, saturated=True)
    assert not fc.offer("critical", "", 0.3, saturated=False).admitted  # FIFO in its band


@pytest.mark.parametrize(
    "saturation",
    [
        {"noncritical_prefill_threshold_s": 2.0},  # laxer than critical's 1.0
        {"noncritical_prefill_threshold_s": None},  # off for non-critical, on for critical
        {"noncritical_queue_threshold": 6},
    ],
)
def test_noncritical_thresholds_must_be_stricter(saturation: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="noncritical thresholds"):
        SaturationSpec(**saturation)


def test_upstream_detector_is_selectable() -> None:
    spec = SaturationSpec.model_validate(
        {
            "kvThreshold": 0.8,
            "prefillThresholdS": None,
            "noncriticalPrefillThresholdS": None,
            "noncriticalQueueThreshold": 5,
            "noncriticalKvThreshold": 0.8,
        }
    )
    assert Limits.for_band(spec, "standard") == Limits.for_band(spec, "critical")
    assert Limits.for_band(spec, "critical") == Limits(5, 0.8, None)


def test_the_controllers_limits_follow_a_reloaded_spec() -> None:
    """The controller makes each band's `Limits` once per spec; a reload (a new spec
    assigned, as `Director.reload` does) must not keep the old thresholds."""
    fc = FlowController(FlowControlSpec())
    defaults = SaturationSpec()
    assert fc.limits("standard") == Limits.for_band(defaults, "standard")
    assert fc.limits("standard", reserve=False) == Limits.for_band(defaults, "critical")
    assert fc.limits("critical") == Limits.for_band(defaults, "critical")
    upstream = SaturationSpec(
        queue_threshold=7, noncritical_queue_threshold=3, critical_reserve_s=None
    )
    fc.spec = FlowControlSpec(saturation=upstream)
    assert fc.limits("standard") == Limits.for_band(upstream, "standard")
    assert fc.limits("standard").queue == 3 and fc.limits("critical").queue == 7
    busy = pod(waiting=3)  # full for standard under the new spec (always reserving), not critical
    assert fc.slots([busy], 0.0).full("standard") and not fc.full("critical", [busy], 0.0)


@given(
    pods=st.lists(
        st.tuples(
            st.integers(0, 8),  # waiting
            st.integers(0, 4),  # sent since the scrape
            st.floats(0, 1),  # kv use
            st.integers(0, 20_000),  # prompt tokens without a first token
            st.booleans(),  # stale
        ),
        max_size=6,
    ),
    in_transit=st.integers(0, 5),
    band=st.sampled_from(["critical", "standard", "sheddable"]),
    prefill=st.sampled_from([None, 0.05, 1.0]),
    critical_seen_at=st.sampled_from([-100.0, 0.0]),
)
def test_full_equals_the_whole_slot_count(
    pods: list[tuple[int, int, float, int, bool]],
    in_transit: int,
    band: str,
    prefill: float | None,
    critical_seen_at: float,
) -> None:
    spec = FlowControlSpec(
        saturation=SaturationSpec(
            prefill_threshold_s=prefill,
            noncritical_prefill_threshold_s=prefill and prefill / 2,
            critical_reserve_s=30,
        )
    )
    endpoints = []
    for i, (waiting, sent, kv, tokens, stale) in enumerate(pods):
        e = Endpoint(f"p{i}", "127.0.0.1", 8000 + i)
        e.metrics = PodMetrics(waiting=waiting, running=1, kv_usage=kv)
        e.sent_requests, e.prefill_tokens, e.stale = sent, tokens, stale
        e.prefill_s_per_token = 1e-4
        endpoints.append(e)
    fc = FlowController(spec)
    fc.offer("critical", "", critical_seen_at, saturated=False)  # sets the reserve window
    whole = fc.slots(endpoints, 1.0, in_transit).full(band)
    assert fc.full(band, endpoints, 1.0, in_transit) == whole
