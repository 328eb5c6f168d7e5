"""What a request carries, parsed defensively: hostile or odd values read as absent, never
as a crash or a negative charge. (The answer's `usage` is the gateway's one usage parser,
tests/gateway/core/request/test_usage.py.)"""

from __future__ import annotations

import pytest

from inference_gateway.frontends.global_router.requests import api_key_of


@pytest.mark.parametrize(
    ("header", "key"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", ""), ("", ""), ("Bearer", "")],
)
def test_api_key_of(header: str, key: str) -> None:
    assert api_key_of({"authorization": header}) == key
