"""Reading `usage` as an answer passes through: what output-token metrics and the
settlement of token-rate charges rely on, in both data planes."""

from __future__ import annotations

from typing import Any

import pytest

from inference_gateway.core.request.usage import UsageScanner, output_tokens, total_tokens

FINAL = b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}\n\n'


def test_sse_usage_is_found_across_chunk_boundaries() -> None:
    scanner = UsageScanner(streaming=True, limit=1024)
    stream = b'data: {"choices": [{"text": "a"}]}\n\n' + FINAL + b"data: [DONE]\n\n"
    for i in range(0, len(stream), 7):  # cut everywhere, mid-line included
        scanner.feed(stream[i : i + 7])
    assert scanner.close() == {"prompt_tokens": 7, "completion_tokens": 5}


def test_a_final_event_without_its_newline_still_counts() -> None:
    scanner = UsageScanner(streaming=True, limit=1024)
    scanner.feed(FINAL.rstrip())
    assert scanner.close() == {"prompt_tokens": 7, "completion_tokens": 5}


def test_a_json_body_past_the_bound_is_not_parsed() -> None:
    body = b'{"usage": {"completion_tokens": 5}, "pad": "' + b"x" * 100 + b'"}'
    small, large = UsageScanner(False, 1024), UsageScanner(False, 50)
    for scanner in (small, large):
        scanner.feed(body)
    assert small.close() == {"completion_tokens": 5} and large.close() is None


def test_the_responses_api_shape_is_read() -> None:
    scanner = UsageScanner(streaming=True, limit=1024)
    event = b'data: {"type": "response.completed", "response": {"usage": '
    scanner.feed(event + b'{"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}}}\n\n')
    usage = scanner.close()
    assert usage is not None and output_tokens(usage) == 4 and total_tokens(usage) == 7


@pytest.mark.parametrize(
    ("usage", "total"),
    [
        ({"total_tokens": 12, "prompt_tokens": 1, "completion_tokens": 1}, 12),
        ({"prompt_tokens": 2, "completion_tokens": 10}, 12),
        ({"input_tokens": 2, "output_tokens": 10}, 12),
        ({"total_tokens": -5}, None),  # nonsense from a pod never credits a bucket
        ({"prompt_tokens": 2, "completion_tokens": -10}, None),
        ({"completion_tokens": True, "prompt_tokens": 1}, None),
        ({}, None),
    ],
)
def test_total_tokens(usage: dict[str, Any], total: int | None) -> None:
    assert total_tokens(usage) == total
