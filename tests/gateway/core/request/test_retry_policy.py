"""The one retry rule both data planes follow: only what no engine started goes again."""

from __future__ import annotations

import pytest

from inference_gateway.core.request.retry import RetryPolicy
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.transport.http1_client import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamTimeout,
)


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (UpstreamConnectError("refused"), True),
        (UpstreamError("closed before answering", before_response=True), True),
        (UpstreamError("closed mid-answer"), False),
        (UpstreamTimeout("no first byte", before_response=True), False),
        (UpstreamTimeout("stalled mid-answer"), False),
    ],
)
def test_only_errors_before_the_engine_started_are_retried(
    error: UpstreamError, retried: bool
) -> None:
    assert RetryPolicy().retry_error(error) is retried


@pytest.mark.parametrize(
    ("status", "retried"), [(429, True), (503, True), (500, False), (504, False)]
)
def test_only_refusals_are_retried_by_status(status: int, retried: bool) -> None:
    assert RetryPolicy().retry_status(status) is retried


def test_attempts_are_bounded() -> None:
    pods = [Endpoint(f"p{i}", "127.0.0.1", 8000 + i) for i in range(5)]
    assert RetryPolicy(max_attempts=2).attempts(pods) == pods[:2]
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(max_attempts=0)
