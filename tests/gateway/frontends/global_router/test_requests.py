"""What a request and its answer carry, parsed defensively: hostile or odd values read as
absent, never as a crash or a negative charge."""

from __future__ import annotations

import pytest

from inference_gateway.frontends.global_router.requests import (
    api_key_of,
    sse_usage,
    token_estimate,
    usage_of,
)


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        ({"prompt": "x" * 40, "max_tokens": 10}, 10 + 1 + 10),
        ({"messages": [{"role": "user", "content": "x" * 8}], "max_tokens": 5}, 2 + 1 + 5),
        ({"prompt": "x", "max_tokens": -5}, 0 + 1 + 256),  # negative: the default
        ({"prompt": "x", "max_tokens": True}, 0 + 1 + 256),  # a bool is not a count
        ({"prompt": ["a", "b"], "max_completion_tokens": 7}, 0 + 1 + 7),
        ({"messages": [1, {"content": None}, "x"]}, 0 + 1 + 256),
    ],
)
def test_token_estimate(body: dict[str, object], tokens: int) -> None:
    assert token_estimate(body) == tokens


@pytest.mark.parametrize(
    ("raw", "total"),
    [
        (b'{"usage": {"total_tokens": 12}}', 12),
        (b'{"usage": {"total_tokens": -1}}', None),
        (b'{"usage": {"total_tokens": "12"}}', None),
        (b'{"usage": {"total_tokens": true}}', None),
        (b'{"usage": null}', None),
        (b"[1]", None),
        (b"not json", None),
    ],
)
def test_usage_of(raw: bytes, total: int | None) -> None:
    assert usage_of(raw) == total


def test_sse_usage_takes_the_last_event_with_usage() -> None:
    chunk = b'data: {"choices":[]}\n\ndata: {"usage":{"total_tokens":9}}\n\ndata: [DONE]\n\n'
    assert sse_usage(chunk) == 9
    assert sse_usage(b"data: [DONE]\n\n") is None


@pytest.mark.parametrize(
    ("header", "key"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", ""), ("", ""), ("Bearer", "")],
)
def test_api_key_of(header: str, key: str) -> None:
    assert api_key_of({"authorization": header}) == key
