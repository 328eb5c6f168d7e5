"""The tier-2 attempt plan (core/request/attempts.py): the table `igw global` and the fleet
simulator both follow, read row by row."""

from __future__ import annotations

import pytest

from inference_gateway.core.request.attempts import (
    REFUSAL_STATUSES,
    AttemptPlan,
    Failure,
    Verdict,
)
from inference_gateway.core.request.retry import RetryPolicy


@pytest.mark.parametrize(
    ("failure", "retry", "drain", "failed", "status"),
    [
        (Failure.REFUSED, True, True, True, 502),
        (Failure.DRAINED, True, False, False, 502),
        (Failure.TIMEOUT, False, False, True, 504),  # it may be generating: never twice
        (Failure.BROKEN, False, False, True, 502),
    ],
)
def test_failures(failure: Failure, retry: bool, drain: bool, failed: bool, status: int) -> None:
    verdict = AttemptPlan().after_failure(failure)
    assert (verdict.retry, verdict.drain, verdict.failed, verdict.status) == (
        retry,
        drain,
        failed,
        status,
    )


@pytest.mark.parametrize(
    ("status", "retry", "failed"),
    [(200, False, False), (400, False, False), (429, True, False), (500, False, True),
     (502, False, True), (503, True, True), (504, False, True)],
)  # fmt: skip
def test_statuses(status: int, retry: bool, failed: bool) -> None:
    verdict = AttemptPlan().after_status(status)
    assert (verdict.retry, verdict.failed, verdict.status, verdict.drain) == (
        retry,
        failed,
        status,
        False,
    )


def test_the_refusals_are_the_proxys() -> None:
    """Tier 1 and tier 2 agree on what "refused, not started" means."""
    assert RetryPolicy().refusal_statuses == REFUSAL_STATUSES == frozenset({429, 503})


def test_next_index_skips_the_unroutable_and_stops_at_max_attempts() -> None:
    plan = AttemptPlan(max_attempts=2)
    up = {"a": True, "b": False, "c": True, "d": True}
    ranked = list(up)
    assert plan.next_index(ranked, -1, 0, up.__getitem__) == 0
    assert plan.next_index(ranked, 0, 1, up.__getitem__) == 2  # b drained since: skipped
    assert plan.next_index(ranked, 2, 2, up.__getitem__) is None  # two attempts made
    assert plan.next_index([], -1, 0, up.__getitem__) is None


def test_nothing_routable_is_503() -> None:
    assert AttemptPlan.nothing_routable() == Verdict(
        False, False, False, 503, "no_routable_cluster"
    )


def test_max_attempts_is_checked() -> None:
    with pytest.raises(ValueError):
        AttemptPlan(max_attempts=0)
