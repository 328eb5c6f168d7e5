"""Static discovery: the upstream file shape `endpoints: [{name, address, port, labels}]`."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inference_gateway.config.spec import format_validation_error, read_yaml
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.errors import ConfigError

__all__ = ["load_endpoints_file"]


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
