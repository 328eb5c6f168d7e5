"""Static discovery: the upstream file shape `endpoints: [{name, address, port, labels}]`.

Which pool a listed pod belongs to is the config's business, as in the cluster: the first
pool whose label selector matches the pod's labels (`assign_pools`); a pod no selector
picks keeps its `igw.dev/pool` (or `pool`) label, else the pool `default`. Both data
planes call it, at start and on every config reload.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inference_gateway.config.spec import PoolSpec, format_validation_error, read_yaml
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.errors import ConfigError

__all__ = ["DEFAULT_POOL", "assign_pools", "label_pools", "load_endpoints_file"]

DEFAULT_POOL = "default"


class _EndpointEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    address: str
    port: int = Field(ge=1, le=65535)
    labels: dict[str, str] = Field(default_factory=dict)


class _EndpointsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    endpoints: list[_EndpointEntry] = Field(min_length=1)


def load_endpoints_file(path: str | Path) -> list[Endpoint]:
    data = read_yaml(path)
    try:
        spec = _EndpointsFile.model_validate(data)
    except ValidationError as error:
        raise ConfigError(str(path), format_validation_error(error)) from None
    return [
        Endpoint(
            name=e.name,
            address=e.address,
            port=e.port,
            pool=e.labels.get("igw.dev/pool", e.labels.get("pool", "")),
            labels=dict(e.labels),
            index=i,
        )
        for i, e in enumerate(spec.endpoints)
    ]


def label_pools(endpoints: Sequence[Endpoint]) -> dict[Endpoint, str]:
    """Each pod's pool before any config: the one it was given, else `default`."""
    return {e: e.pool or DEFAULT_POOL for e in endpoints}


def assign_pools(
    endpoints: Sequence[Endpoint], pools: Sequence[PoolSpec], fallback: Mapping[Endpoint, str]
) -> None:
    """Set each pod's pool: the first pool whose (non-empty) selector matches its labels,
    else its `fallback` (`label_pools`, taken once when the list was loaded)."""
    selecting = [p for p in pools if not p.selector.selects_everything]
    for e in endpoints:
        chosen = next((p.name for p in selecting if p.selector.matches(e.labels)), None)
        e.pool = chosen or fallback.get(e, e.pool or DEFAULT_POOL)
