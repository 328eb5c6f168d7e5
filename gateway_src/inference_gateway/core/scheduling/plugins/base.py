"""What every plugin shares: a typed parameter model that rejects unknown keys, and
the min-max normalisation the upstream scorers use.

Parameters are read under the upstream endpoint picker's camelCase names (`blockSize`,
`maxNumOfEndpoints`: GIE's plugin docs), so an upstream config carries over, and under
the Python names as well."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["Params", "inverse_minmax"]


class Params(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, alias_generator=to_camel
    )


def inverse_minmax(values: list[float]) -> list[float]:
    """Upstream queue formula `(max - v) / (max - min)`; all equal → 1 for everyone."""
    if not values:
        return []
    low, high = min(values), max(values)
    if high == low:
        return [1.0] * len(values)
    span = high - low
    return [(high - v) / span for v in values]
