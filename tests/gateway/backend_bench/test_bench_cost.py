"""Cost per million output tokens reproduces published data points to the cent."""

from __future__ import annotations

import math

import pytest

from inference_gateway.backend_bench.cost import cost_per_million_tokens


@pytest.mark.parametrize(
    ("hourly_usd", "tokens_per_s", "expected"),
    [
        (0.8048, 131.5, 1.70),
        (0.556, 37.2, 4.15),
        (0.7582, 36.4, 5.79),
        (1.3438, 37.1, 10.06),
    ],
)
def test_known_data_points(hourly_usd: float, tokens_per_s: float, expected: float) -> None:
    cost = cost_per_million_tokens(hourly_usd, tokens_per_s)
    assert cost is not None
    assert round(cost, 2) == pytest.approx(expected)


@pytest.mark.parametrize("tokens_per_s", [0.0, -1.0, math.nan, math.inf])
def test_no_rate_gives_no_cost(tokens_per_s: float) -> None:
    assert cost_per_million_tokens(1.0, tokens_per_s) is None


def test_cost_is_linear_in_price_and_inverse_in_rate() -> None:
    base = cost_per_million_tokens(1.0, 100.0)
    assert cost_per_million_tokens(2.0, 100.0) == pytest.approx(2 * base)
    assert cost_per_million_tokens(1.0, 200.0) == pytest.approx(base / 2)
