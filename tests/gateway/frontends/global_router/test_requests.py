"""What a request carries, parsed defensively: hostile or odd values read as absent, never
as a crash or a negative charge. (The answer's `usage` is the gateway's one usage parser,
tests/gateway/core/request/test_usage.py.)"""

from __future__ import annotations

import pytest

from inference_gateway.core.request.body import CLIENT_ID_HEADER, api_key_of


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", "anonymous"),
        ("", "anonymous"),
        ("Bearer", "anonymous"),
    ],
)
def test_api_key_of(header: str, key: str) -> None:
    """`igw global` keys its limits as tier 1 does: a caller's own client id counts for
    nothing (the router trusts none), a missing key is every anonymous caller's one key."""
    assert api_key_of({"authorization": header, CLIENT_ID_HEADER: "team-a"}) == key
