"""Cross-region checks of the network fields (`cluster.vpc_cidr`, `cluster.vpc_cidrs`).

Each region's VPC is peered with every other region's (stacks/network_peering.py), and a
peering connection between overlapping CIDRs fails ("VPC peering limitations", Amazon VPC
Peering Guide): routes could not tell the two apart. So the regions' CIDRs must be
pairwise disjoint, and `vpc_cidrs` may name only the environment's regions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envspec.infra import vpc_network

if TYPE_CHECKING:
    from envspec.environment import EnvironmentSpec

__all__ = ["network_problems", "vpc_cidr_path"]


def vpc_cidr_path(env: EnvironmentSpec, region: str) -> str:
    """Where `region`'s CIDR is written: its own `vpc_cidrs` key, else `vpc_cidr`."""
    return f"cluster.vpc_cidrs.{region}" if region in env.cluster.vpc_cidrs else "cluster.vpc_cidr"


def network_problems(env: EnvironmentSpec) -> list[str]:
    """Unknown regions in `vpc_cidrs`, and every pair of regions whose CIDRs overlap."""
    regions = env.aws.regions
    problems = [
        f"cluster.vpc_cidrs.{region}: not one of {regions}"
        for region in sorted(set(env.cluster.vpc_cidrs) - set(regions))
    ]
    for i, region in enumerate(regions):
        cidr = env.cluster.vpc_cidr_of(region)
        for earlier in regions[:i]:
            other = env.cluster.vpc_cidr_of(earlier)
            if vpc_network(cidr).overlaps(vpc_network(other)):
                problems.append(
                    f"{vpc_cidr_path(env, region)}: {region}'s {cidr} overlaps {earlier}'s "
                    f"{other} ({vpc_cidr_path(env, earlier)}); the regions' VPCs are "
                    f"peered, so give {region} its own range in cluster.vpc_cidrs"
                )
    return problems
