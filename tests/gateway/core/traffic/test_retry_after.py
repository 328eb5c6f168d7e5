"""The one Retry-After policy (core/traffic/retry_after.py): its rule, and that it is the
only place the gateway spells the header, so changing the policy is one file."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from inference_gateway.core.traffic import retry_after

PACKAGE = Path(__file__).resolve().parents[4] / "gateway_src" / "inference_gateway"


@pytest.mark.parametrize(
    ("wait_s", "low", "high", "told"),
    [
        (0.0, 1, None, 1),  # never "come back now"
        (0.001, 1, None, 1),
        (1.0, 1, None, 1),
        (1.2, 1, None, 2),  # rounded up: a client told 1 would come back too early
        (59.5, 1, None, 60),
        (3.0, 5, 60, 5),  # the configured floor
        (90.0, 1, 60, 60),  # the configured ceiling
        (math.inf, 1, 60, 60),  # no drain measured yet: the ceiling
    ],
)
def test_seconds(wait_s: float, low: int, high: int | None, told: int) -> None:
    assert retry_after.seconds(wait_s, low=low, high=high) == told


def test_milliseconds_round_as_seconds_do() -> None:
    assert [retry_after.seconds_from_ms(ms) for ms in (0, 1, 1000, 1001, 60_000)] == [
        1,
        1,
        1,
        2,
        60,
    ]


def test_the_header() -> None:
    assert retry_after.header(7) == {"retry-after": "7"}


def _spellings(path: Path) -> list[int]:
    """Lines where a string literal names the header."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.lower() == "retry-after"
    ]


def test_only_the_policy_spells_the_header() -> None:
    found = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := _spellings(path))
    }
    assert list(found) == ["core/traffic/retry_after.py"]
    assert len(found["core/traffic/retry_after.py"]) == 1  # `HEADER`
