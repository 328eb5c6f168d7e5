"""Where each piece of an environment lands: one plan per region.

The environment file says which zones each region's VPC spans and which zones each GPU
node group expects its instance type in. This module turns that into one `RegionPlan` per
region and rejects, with the field path, a node group or HyperPod zone that no VPC spans —
so a typo fails synth instead of a deploy that meets `InsufficientInstanceCapacity`.
"""

from __future__ import annotations

from dataclasses import dataclass

from envspec.environment import EnvironmentSpec
from envspec.infra import NodeGroupSpec, region_of_zone
from inference_gateway.errors import ConfigError

__all__ = ["RegionPlan", "plan_regions"]


@dataclass(frozen=True)
class RegionPlan:
    """What one region builds."""

    region: str
    primary: bool
    availability_zones: tuple[str, ...]
    node_groups: tuple[NodeGroupSpec, ...]
    node_group_zones: dict[str, tuple[str, ...]]
    hyperpod_zones: tuple[str, ...]

    @property
    def hyperpod(self) -> bool:
        """HyperPod runs in the primary region only (see docs/infrastructure.md)."""
        return self.primary


def _default_zones(region: str, count: int) -> list[str]:
    return [f"{region}{letter}" for letter in "abcdef"[:count]]


def plan_regions(env: EnvironmentSpec, source: str = "environment.yaml") -> list[RegionPlan]:
    """One plan per region, primary first; raises `ConfigError` with field paths."""
    problems: list[str] = []
    vpc_zones = {
        region: list(env.aws.availability_zones.get(region) or [])
        or _default_zones(region, env.cluster.max_azs)
        for region in env.aws.regions
    }
    for region, zones in vpc_zones.items():
        if len(zones) < 2:
            problems.append(f"aws.availability_zones.{region}: EKS needs at least two zones")
    for i, group in enumerate(env.node_groups):
        for j, zone in enumerate(group.availability_zones):
            region = region_of_zone(zone)
            if region not in vpc_zones:
                problems.append(
                    f"node_groups[{i}].availability_zones[{j}]: {zone} is in {region}, "
                    f"not one of the environment's regions {env.aws.regions}"
                )
            elif zone not in vpc_zones[region]:
                problems.append(
                    f"node_groups[{i}].availability_zones[{j}]: the {region} VPC spans "
                    f"{vpc_zones[region]}, not {zone}"
                )
    hyperpod = env.cluster.hyperpod
    for j, zone in enumerate(hyperpod.availability_zones):
        if zone not in vpc_zones[env.aws.region]:
            problems.append(
                f"cluster.hyperpod.availability_zones[{j}]: the primary VPC spans "
                f"{vpc_zones[env.aws.region]}, not {zone}"
            )
    names = [g.name for g in env.node_groups]
    for i, name in enumerate(names):
        if name in names[:i]:
            problems.append(f"node_groups[{i}].name: duplicate name {name!r}")
    if problems:
        raise ConfigError(source, problems)

    plans = []
    for region in env.aws.regions:
        groups, zones_of = [], {}
        for group in env.node_groups:
            wanted = tuple(z for z in group.availability_zones if region_of_zone(z) == region)
            if group.availability_zones and not wanted:
                continue  # the group expects its instance type elsewhere
            groups.append(group)
            zones_of[group.name] = wanted or tuple(vpc_zones[region])
        plans.append(
            RegionPlan(
                region=region,
                primary=region == env.aws.region,
                availability_zones=tuple(vpc_zones[region]),
                node_groups=tuple(groups),
                node_group_zones=zones_of,
                hyperpod_zones=tuple(hyperpod.availability_zones or vpc_zones[region]),
            )
        )
    return plans
