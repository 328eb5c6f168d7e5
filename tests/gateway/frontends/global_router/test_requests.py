"""What a request carries, parsed defensively: hostile or odd values read as absent, never
as a crash or a negative charge. (The answer's `usage` is the gateway's one usage parser,
tests/gateway/core/request/test_usage.py.)"""

from __future__ import annotations

import pytest

from inference_gateway.frontends.global_router.requests import api_key_of, token_estimate


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
    ("header", "key"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", ""), ("", ""), ("Bearer", "")],
)
def test_api_key_of(header: str, key: str) -> None:
    assert api_key_of({"authorization": header}) == key
