"""The attempt plan (core/request/attempts.py): the table `igw serve` (over pods), `igw
global` and the fleet simulator (over clusters) all follow, read row by row."""

from __future__ import annotations

import pytest

from inference_gateway.core.request.attempts import (
    REFUSAL_STATUSES,
    AttemptPlan,
    Failure,
    Verdict,
)
from inference_gateway.core.request.relay import StreamEnd
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout


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


def test_the_refusals_are_429_and_503() -> None:
    """What "refused, not started" means by status, for pods and clusters alike."""
    assert AttemptPlan().refusal_statuses == REFUSAL_STATUSES == frozenset({429, 503})


@pytest.mark.parametrize(
    ("error", "failure", "retried"),
    [
        (UpstreamConnectError("refused"), Failure.REFUSED, True),
        (UpstreamError("closed before answering", before_response=True), Failure.REFUSED, True),
        (UpstreamError("closed mid-answer"), Failure.BROKEN, False),
        (UpstreamTimeout("no first byte", before_response=True), Failure.TIMEOUT, False),
        (UpstreamTimeout("stalled mid-answer"), Failure.TIMEOUT, False),
    ],
)
def test_only_errors_before_the_engine_started_are_retried(
    error: UpstreamError, failure: Failure, retried: bool
) -> None:
    """One reading of the outbound tree for both clients (a timeout never retries: the
    engine may be generating)."""
    plan = AttemptPlan()
    assert plan.failure_of(error) is failure
    assert plan.after_error(error).retry is retried


def test_targets_are_bounded() -> None:
    pods = [Endpoint(f"p{i}", "127.0.0.1", 8000 + i) for i in range(5)]
    assert AttemptPlan(max_attempts=2).targets(pods) == pods[:2]
    assert AttemptPlan(max_attempts=9).targets(pods) == pods


@pytest.mark.parametrize(("end", "drain"), [(StreamEnd.BROKEN, False), (StreamEnd.STALLED, True)])
@pytest.mark.parametrize("resume", [False, True])
def test_after_a_break_only_a_resuming_plan_goes_on(
    end: StreamEnd, drain: bool, resume: bool
) -> None:
    """The migration seam: a broken or stalled answer is a failed attempt and a stalled
    target is drained, whichever the tier; the request goes on to the next target (its
    continuation) only where the plan resumes (tier 2 with `migration` on). The default
    plan (tier 1's, which resumes in resume.py itself) never retries after a break."""
    verdict = AttemptPlan(resume=resume).after_break(end)
    assert (verdict.retry, verdict.drain, verdict.failed, verdict.code) == (
        resume,
        drain,
        True,
        end.value,
    )
    assert not AttemptPlan().after_break(end).retry


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
