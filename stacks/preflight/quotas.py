"""EC2 vCPU quotas: which Service Quotas code limits an instance type, and how to read it.

EC2 limits running instances by vCPUs per *family group*, one quota each (service code
`ec2`; codes as the Service Quotas console lists them):

| group | on-demand | spot |
|---|---|---|
| Standard (A, C, D, H, I, M, R, T, Z) | L-1216C47A | L-34B43A08 |
| G and VT | L-DB2E81BA | L-3819A6DF |
| P | L-417A185B | L-7212CCBC |
| Inf | L-1945791B | – |
| Trn | L-2C3B7624 | – |
| DL | L-6E869C2A | – |
| F | L-74FC7D96 | – |
| X | L-7295265B | – |

A type outside the table (or a spot request of a group without a code here, or a
Capacity Block, which reserves capacity outside these quotas) gets no code, and the
preflight reports its quota as "not checked" rather than guessing.

`QuotaSource` is the one-method seam the preflight reads quotas through.
`ServiceQuotasSource` is the boto3 implementation: the account's quota value in the region
(`get_service_quota`, which reports the default for a quota never raised), else unknown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "FixedQuotas",
    "QuotaRef",
    "QuotaSource",
    "ServiceQuotasSource",
    "vcpu_quota_for",
]


@dataclass(frozen=True)
class QuotaRef:
    code: str
    name: str


_GROUPS: dict[str, tuple[str, str | None, str]] = {
    # family prefix → (on-demand code, spot code, group name)
    "standard": ("L-1216C47A", "L-34B43A08", "Standard (A, C, D, H, I, M, R, T, Z)"),
    "g": ("L-DB2E81BA", "L-3819A6DF", "G and VT"),
    "vt": ("L-DB2E81BA", "L-3819A6DF", "G and VT"),
    "p": ("L-417A185B", "L-7212CCBC", "P"),
    "inf": ("L-1945791B", None, "Inf"),
    "trn": ("L-2C3B7624", None, "Trn"),
    "dl": ("L-6E869C2A", None, "DL"),
    "f": ("L-74FC7D96", None, "F"),
    "x": ("L-7295265B", None, "X"),
}
_STANDARD = set("acdhimrtz")
_FAMILY = re.compile(r"^([a-z]+?)\d")


def vcpu_quota_for(instance_type: str, capacity_type: str = "ON_DEMAND") -> QuotaRef | None:
    """The vCPU quota that limits `instance_type` (e.g. p5.48xlarge → P on-demand)."""
    match = _FAMILY.match(instance_type)
    if match is None or capacity_type == "CAPACITY_BLOCK":
        return None
    letters = match.group(1)
    key = next((k for k in ("inf", "trn", "dl", "vt") if letters.startswith(k)), letters[0])
    if key not in _GROUPS and key in _STANDARD:
        key = "standard"
    if key not in _GROUPS:
        return None
    on_demand, spot, name = _GROUPS[key]
    code = spot if capacity_type == "SPOT" else on_demand
    if code is None:
        return None
    kind = "Spot" if capacity_type == "SPOT" else "On-Demand"
    return QuotaRef(code, f"Running {kind} {name} instances (vCPUs)")


class QuotaSource(Protocol):
    """Where quota values come from: `None` when the value cannot be read."""

    def quota(self, region: str, service_code: str, quota_code: str) -> float | None: ...


class ServiceQuotasSource:
    """Service Quotas through boto3; `client_for(region)` returns a `service-quotas` client."""

    def __init__(self, client_for: Callable[[str], Any]) -> None:
        self._client_for = client_for

    def quota(self, region: str, service_code: str, quota_code: str) -> float | None:
        from botocore.exceptions import ClientError

        try:
            reply = self._client_for(region).get_service_quota(
                ServiceCode=service_code, QuotaCode=quota_code
            )
            return float(reply["Quota"]["Value"])
        except ClientError:  # NoSuchResource, AccessDenied, throttling: unknown, not guessed
            return None


class FixedQuotas:
    """Quotas from a mapping `{(region, quota_code): value}` — for tests and dry runs."""

    def __init__(self, values: Mapping[tuple[str, str], float]) -> None:
        self._values = dict(values)

    def quota(self, region: str, service_code: str, quota_code: str) -> float | None:
        return self._values.get((region, quota_code))
