"""Capacity preflight: can each node group of an environment be placed where it is planned?

A deploy that meets `InsufficientInstanceCapacity` or a vCPU limit fails late, halfway
through a stack. Before that, for every region of the environment and every GPU node group
planned there (`stacks.placement.plan_regions`: the group's listed zones in that region,
else the region's VPC zones), this module checks:

* **offerings** — which of the group's zones offer its instance type
  (`ec2:DescribeInstanceTypeOfferings`, location type `availability-zone`);
* **vCPU quota** — the group needs `max_size × vCPUs of the type`; groups of one region
  that share a quota (`quotas.py`) add up, and the sum is compared with the account's
  quota in that region (Service Quotas).

Verdict per (group, region): `ok`; `partial` (some zones do not offer the type — the node
group still launches in the others); `unchecked` (its vCPU quota could not be read: a
quota is not capacity, and an unread quota is not a pass); `blocked` (no zone offers it,
or the region's quota is below what its groups need). A quota that cannot be read is
reported as unknown, never guessed. The CLI exits 1 when any group is blocked, or
unchecked unless told to accept that.

AWS is reached only through two narrow seams: `Ec2Api` (offerings and vCPU counts) and
`quotas.QuotaSource`, so tests use moto and a stub without patching.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .quotas import QuotaSource, vcpu_quota_for

__all__ = [
    "BotoEc2Api",
    "Ec2Api",
    "GroupPlacement",
    "PlannedGroup",
    "PreflightReport",
    "run_preflight",
]


class Ec2Api(Protocol):
    def offered_zones(self, region: str, instance_type: str) -> set[str]: ...

    def vcpus(self, region: str, instance_type: str) -> int | None: ...


class BotoEc2Api:
    """`Ec2Api` over boto3; `client_for(region)` returns an `ec2` client of that region."""

    def __init__(self, client_for: Callable[[str], Any]) -> None:
        self._client_for = client_for

    def offered_zones(self, region: str, instance_type: str) -> set[str]:
        paginator = self._client_for(region).get_paginator("describe_instance_type_offerings")
        zones: set[str] = set()
        for page in paginator.paginate(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [instance_type]}],
        ):
            zones.update(o["Location"] for o in page.get("InstanceTypeOfferings", []))
        return zones

    def vcpus(self, region: str, instance_type: str) -> int | None:
        from botocore.exceptions import ClientError

        try:
            reply = self._client_for(region).describe_instance_types(InstanceTypes=[instance_type])
        except ClientError:
            return None  # not offered in the region at all: the offerings check says so
        types = reply.get("InstanceTypes") or []
        return int(types[0]["VCpuInfo"]["DefaultVCpus"]) if types else None


@dataclass(frozen=True)
class PlannedGroup:
    """One node group as one region builds it (from the environment's placement plan)."""

    name: str
    region: str
    instance_type: str
    capacity_type: str
    max_size: int
    zones: tuple[str, ...]


@dataclass
class GroupPlacement:
    group: str
    region: str
    instance_type: str
    zones_wanted: list[str]
    zones_offered: list[str]  # of the wanted ones
    region_zones_offering: list[str]  # every zone of the region that offers the type
    vcpus_needed: int | None  # this group, at max_size
    quota_code: str | None
    quota_name: str | None
    quota_vcpus: float | None
    region_vcpus_needed: int | None  # every group of the region on the same quota
    verdict: str = "ok"
    reasons: list[str] = field(default_factory=list)


@dataclass
class PreflightReport:
    environment: str
    placements: list[GroupPlacement]

    @property
    def blocked(self) -> list[GroupPlacement]:
        return [p for p in self.placements if p.verdict == "blocked"]

    @property
    def unchecked(self) -> list[GroupPlacement]:
        return [p for p in self.placements if p.verdict == "unchecked"]

    def to_json(self) -> dict[str, Any]:
        import dataclasses

        ok = not self.blocked and not self.unchecked
        return {"environment": self.environment, "ok": ok,
                "placements": [dataclasses.asdict(p) for p in self.placements]}  # fmt: skip


def _check(group: PlannedGroup, ec2: Ec2Api) -> GroupPlacement:
    offered = ec2.offered_zones(group.region, group.instance_type)
    vcpus = ec2.vcpus(group.region, group.instance_type) if offered else None
    quota = vcpu_quota_for(group.instance_type, group.capacity_type)
    placement = GroupPlacement(
        group=group.name,
        region=group.region,
        instance_type=group.instance_type,
        zones_wanted=list(group.zones),
        zones_offered=[z for z in group.zones if z in offered],
        region_zones_offering=sorted(offered),
        vcpus_needed=None if vcpus is None else vcpus * group.max_size,
        quota_code=quota.code if quota else None,
        quota_name=quota.name if quota else None,
        quota_vcpus=None,
        region_vcpus_needed=None,
    )
    missing = [z for z in group.zones if z not in offered]
    if not offered:
        placement.verdict = "blocked"
        placement.reasons.append(f"no zone of {group.region} offers {group.instance_type}")
    elif not placement.zones_offered:
        placement.verdict = "blocked"
        placement.reasons.append(
            f"{group.instance_type} is not offered in {', '.join(group.zones)}; "
            f"zones of {group.region} that offer it: {', '.join(sorted(offered))}"
        )
    elif missing:
        placement.verdict = "partial"
        placement.reasons.append(f"not offered in {', '.join(missing)}")
    return placement


def _apply_quotas(placements: Sequence[GroupPlacement], quotas: QuotaSource) -> None:
    """Sum each region's needs per quota code, then compare with that region's quota."""
    totals: dict[tuple[str, str], int] = {}
    for p in placements:
        if p.quota_code and p.vcpus_needed is not None:
            key = (p.region, p.quota_code)
            totals[key] = totals.get(key, 0) + p.vcpus_needed
    values = {key: quotas.quota(key[0], "ec2", key[1]) for key in totals}
    for p in placements:
        if p.quota_code is None:
            if p.vcpus_needed is not None:
                p.reasons.append("vCPU quota not checked for this instance or capacity type")
            continue
        key = (p.region, p.quota_code)
        if key not in totals:
            continue
        p.quota_vcpus, p.region_vcpus_needed = values[key], totals[key]
        if p.quota_vcpus is None:
            if p.verdict != "blocked":
                p.verdict = "unchecked"
            p.reasons.append(f"vCPU quota {p.quota_code} could not be read")
        elif p.region_vcpus_needed > p.quota_vcpus:
            p.verdict = "blocked"
            p.reasons.append(
                f"vCPU quota shortfall in {p.region}: groups on {p.quota_code} "
                f"({p.quota_name}) need {p.region_vcpus_needed} at max size, "
                f"quota is {p.quota_vcpus:g}"
            )


def run_preflight(
    environment: str, groups: Sequence[PlannedGroup], ec2: Ec2Api, quotas: QuotaSource
) -> PreflightReport:
    """Check every planned (group, region); never raises for a placement problem."""
    placements = [_check(group, ec2) for group in groups]
    _apply_quotas(placements, quotas)
    return PreflightReport(environment, placements)
