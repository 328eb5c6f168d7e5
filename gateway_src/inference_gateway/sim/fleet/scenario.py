"""Fleet scenario files: several clusters in several regions behind the global router.

The single-cluster scenario format (`scenario.py`) with a `clusters:` section in place of
`fleet:`, plus the router's settings, the network between regions, where clients are and
what happens to the clusters when:

    name: fleet-two-regions
    seed: 15
    duration_s: 240
    scrape_interval_ms: 50          # each cluster gateway scrapes its pods this often
    router: {pollIntervalMs: 1000, staleAfterMs: 3000, rampS: 30}   # igw global's keys
                                    # (migration: {enabled: false} loses cut streams)
    network:                        # round trips, added once to every TTFT
      in_region_rtt_ms: 1
      cross_region_rtt_ms: 65       # any pair of regions not in `links`
      links: [{regions: [us-east-1, us-west-2], rtt_ms: 62}]
    client_regions: {us-east-1: 0.7, us-west-2: 0.3}   # shares of the arrivals
    clusters:
      - name: use1-a                # the igw global cluster-name rules
        region: us-east-1
        priority: 0
        hourly_usd: 60              # optional; default: the sum of its pods' prices
        policy: gateway             # the cluster gateway's policy (a simulator policy)
        fleet: [{name: h100, gpu: H100, model: llama-3.1-8b, replicas: 4}]
    workload: {...}                 # as in every scenario; `load` is of all clusters
    events:                         # in time order; each names a cluster or a region
                                    # failure: refuse (default: the gateway's process is
                                    # gone, connections are refused) | blackhole (nothing
                                    # answers: connect, status and read timeouts apply)
      - {at_s: 60, action: kill, cluster: use1-a}
      - {at_s: 120, action: kill, region: us-east-1, failure: blackhole}
      - {at_s: 180, action: restore, region: us-east-1}
      - {at_s: 200, action: drain, cluster: use1-a}     # igw global drain: planned, no
      - {at_s: 220, action: undrain, cluster: use1-a}   # failover; back ramping over rampS
    profiles: [latency, cost]       # one run per router profile, side by side
    report: {bin_s: 5, window_s: 10}

Unknown keys are errors and every problem names its field, as everywhere. The router
keys are `igw global`'s own (validated by `GlobalRouterSpec`); the ones the simulation
sets itself (`clusters`, `homeRegion`, `profile`, `sheddableObjectives`, `store`) and
the ones it does not simulate (`rateLimits`, `drainFile`) are refused there. `migration`
is tier 2's resume on break, as in `igw global` (on unless `enabled: false`): a stream a
killed cluster cut goes on at the next cluster (`tier.py`, docs/migration.md).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inference_gateway.config.global_router import ClusterSpec, GlobalRouterSpec
from inference_gateway.config.spec import format_validation_error
from inference_gateway.core.scheduling.cluster_choice import ProfileName
from inference_gateway.errors import ConfigError
from inference_gateway.sim.policies import make_policy
from inference_gateway.sim.scenario import PoolSpec, TraceArrival, Workload

__all__ = [
    "FleetScenario",
    "is_fleet_scenario",
    "load_fleet_scenario",
    "router_spec",
    "shipped_fleet_scenarios",
]

FLEET_DIR = "fleet"  # shipped fleet scenarios: scenarios/fleet/NAME.yaml
SET_BY_SIMULATION = ("clusters", "homeRegion", "profile", "sheddableObjectives", "store")
# planned drains are drain/undrain events
NOT_SIMULATED = ("rateLimits", "drainFile")
SHEDDABLE_OBJECTIVE = "sheddable"  # a sheddable request's objective in the simulation


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Link(_Spec):
    regions: tuple[str, str]
    rtt_ms: float = Field(ge=0, le=10_000)


class Network(_Spec):
    in_region_rtt_ms: float = Field(default=1.0, ge=0, le=10_000)
    cross_region_rtt_ms: float = Field(default=60.0, ge=0, le=10_000)
    links: list[Link] = Field(default_factory=list)

    def rtt_s(self, a: str, b: str) -> float:
        if a == b:
            return self.in_region_rtt_ms / 1000
        for link in self.links:
            if set(link.regions) == {a, b}:
                return link.rtt_ms / 1000
        return self.cross_region_rtt_ms / 1000


class ClusterSimSpec(_Spec):
    name: str = Field(pattern=ClusterSpec.model_fields["name"].metadata[0].pattern)
    region: str = Field(min_length=1, max_length=64)
    priority: int = Field(default=0, ge=0)
    hourly_usd: float | None = Field(default=None, ge=0)
    policy: str = "gateway"
    fleet: list[PoolSpec] = Field(min_length=1)


class FleetEvent(_Spec):
    at_s: float = Field(ge=0)
    action: Literal["kill", "restore", "drain", "undrain"]
    cluster: str | None = None
    region: str | None = None
    failure: Literal["refuse", "blackhole"] | None = None  # kill only; default refuse

    @model_validator(mode="after")
    def _one_target(self) -> FleetEvent:
        if (self.cluster is None) == (self.region is None):
            raise ValueError("set exactly one of cluster or region")
        if self.failure is not None and self.action != "kill":
            raise ValueError("failure applies to a kill only")
        return self


class ReportSpec(_Spec):
    bin_s: float = Field(default=5.0, gt=0)
    window_s: float = Field(default=10.0, gt=0)


class FleetScenario(_Spec):
    name: str
    description: str = ""
    seed: int = 0
    duration_s: float = Field(gt=0, le=86400)
    scrape_interval_ms: float = Field(default=50, gt=0)
    router: dict[str, Any] = Field(default_factory=dict)
    network: Network = Network()
    client_regions: dict[str, float] = Field(default_factory=dict)
    clusters: list[ClusterSimSpec] = Field(min_length=1)
    workload: Workload
    events: list[FleetEvent] = Field(default_factory=list)
    profiles: list[ProfileName] = Field(default_factory=lambda: list[ProfileName](["latency"]))
    report: ReportSpec = ReportSpec()

    @property
    def regions(self) -> list[str]:
        return sorted({c.region for c in self.clusters})

    def shares(self) -> dict[str, float]:
        """Client region → share of arrivals (all in the first cluster's region if unset)."""
        if not self.client_regions:
            return {self.clusters[0].region: 1.0}
        total = sum(self.client_regions.values())
        return {r: s / total for r, s in sorted(self.client_regions.items())}

    def targets(self, event: FleetEvent) -> list[str]:
        """Names of the clusters an event acts on."""
        if event.cluster is not None:
            return [event.cluster]
        return [c.name for c in self.clusters if c.region == event.region]


def _check(scenario: FleetScenario) -> list[str]:
    """What pydantic cannot see: names that must exist, and events that must make sense."""
    problems: list[str] = []
    names = [c.name for c in scenario.clusters]
    for i, name in enumerate(names):
        if names.index(name) != i:
            problems.append(f"clusters[{i}].name: duplicate cluster name {name!r}")
    for i, cluster in enumerate(scenario.clusters):
        try:
            make_policy(cluster.policy, [], 0)
        except ConfigError as error:
            problems += [f"clusters[{i}].policy: {p.partition(': ')[2]}" for p in error.problems]
    regions = set(scenario.regions)
    for region, share in scenario.client_regions.items():
        if region not in regions:
            problems.append(f"client_regions.{region}: no cluster in region {region!r}")
        if share < 0:
            problems.append(f"client_regions.{region}: a share must not be negative")
    if scenario.client_regions and sum(scenario.client_regions.values()) <= 0:
        problems.append("client_regions: the shares must add up to more than 0")
    for i, link in enumerate(scenario.network.links):
        for region in link.regions:
            if region not in regions:
                problems.append(f"network.links[{i}].regions: no cluster in region {region!r}")
        if link.regions[0] == link.regions[1]:
            problems.append(f"network.links[{i}].regions: two different regions")
    down: set[str] = set()
    drained: set[str] = set()  # planned drains, apart from kills: a drained cluster may die
    last = 0.0
    for i, event in enumerate(scenario.events):
        where = f"events[{i}]"
        if event.at_s >= scenario.duration_s:
            problems.append(f"{where}.at_s: {event.at_s} is not before duration_s")
        if event.at_s < last:
            problems.append(f"{where}.at_s: events must be in time order")
        last = max(last, event.at_s)
        if event.cluster is not None and event.cluster not in names:
            problems.append(f"{where}.cluster: no cluster {event.cluster!r} (known: {names})")
            continue
        if event.region is not None and event.region not in regions:
            problems.append(f"{where}.region: no cluster in region {event.region!r}")
            continue
        targets = set(scenario.targets(event))
        if event.action == "kill":
            if not targets - down:
                problems.append(f"{where}: {sorted(targets)} already down at {event.at_s} s")
            down |= targets
        elif event.action == "restore":
            if not targets & down:
                problems.append(f"{where}: {sorted(targets)} not down at {event.at_s} s")
            down -= targets
        elif event.action == "drain":
            if not targets - drained:
                problems.append(f"{where}: {sorted(targets)} already drained at {event.at_s} s")
            drained |= targets
        else:
            if not targets & drained:
                problems.append(f"{where}: {sorted(targets)} not drained at {event.at_s} s")
            drained -= targets
    return problems


def router_spec(
    scenario: FleetScenario, profile: str, capacity: dict[str, float] | None = None
) -> GlobalRouterSpec:
    """The `igw global` configuration the simulated routers run with, for one profile.

    `latency`: no cost-aware shaping (no sheddable objective). `cost`: every request by
    the cost profile, and sheddable requests flagged as such. `capacity`: each cluster's
    generated tokens per second at capacity (`capacityTokensPerSecond`, what an operator
    writes from a benchmark), so cost-aware routing compares cost at capacity."""
    data = {
        **scenario.router,
        "clusters": [
            {
                "name": c.name,
                "region": c.region,
                "endpoint": f"http://{c.name}.sim:8080",
                "priority": c.priority,
                "hourlyCostUsd": cluster_hourly_usd(c),
                **(
                    {"capacityTokensPerSecond": capacity[c.name]}
                    if capacity and c.name in capacity
                    else {}
                ),
            }
            for c in scenario.clusters
        ],
        "profile": profile,
        "sheddableObjectives": [SHEDDABLE_OBJECTIVE] if profile == "cost" else [],
    }
    return GlobalRouterSpec.model_validate(data)


def cluster_hourly_usd(cluster: ClusterSimSpec) -> float:
    if cluster.hourly_usd is not None:
        return cluster.hourly_usd
    from inference_gateway.sim.pods import pool_profile

    return sum(pool_profile(p).hourly_usd * p.replicas for p in cluster.fleet)


def _router_problems(scenario: FleetScenario) -> list[str]:
    problems = [
        f"router.{key}: set by the simulation, not the scenario"
        for key in SET_BY_SIMULATION
        if key in scenario.router
    ]
    problems += [f"router.{key}: not simulated" for key in NOT_SIMULATED if key in scenario.router]
    if problems:
        return problems
    try:
        router_spec(scenario, "latency")
    except ValidationError as error:
        return [
            line if line.startswith("router.") else f"router.{line}"
            for line in format_validation_error(error)
        ]
    except ConfigError as error:  # a pool profile that does not exist
        return [f"clusters: {p}" for p in error.problems]
    return []


def parse_fleet_scenario(data: Any, source: str) -> FleetScenario:
    if not isinstance(data, dict):
        raise ConfigError(source, ["<root>: expected a mapping"])
    try:
        scenario = FleetScenario.model_validate(data)
    except ValidationError as error:
        raise ConfigError(source, format_validation_error(error)) from None
    problems = _check(scenario)
    if not problems:
        problems = _router_problems(scenario)
    if problems:
        raise ConfigError(source, problems)
    return scenario


def _shipped_dir() -> Any:
    return resources.files("inference_gateway.sim").joinpath("scenarios").joinpath(FLEET_DIR)


def shipped_fleet_scenarios() -> dict[str, str]:
    """Shipped fleet scenario name → first line of its description."""
    out = {}
    for entry in _shipped_dir().iterdir():
        if entry.name.endswith(".yaml"):
            data = yaml.safe_load(entry.read_text()) or {}
            out[entry.name[:-5]] = str(data.get("description", "")).split("\n")[0]
    return dict(sorted(out.items()))


def _read(name_or_path: str) -> tuple[str, str] | None:
    """(source, text) of a shipped fleet scenario or a file; None when neither."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        try:
            return str(path), path.read_text()
        except OSError as error:
            raise ConfigError(str(path), [f"<root>: cannot read file: {error.strerror}"]) from None
    entry = _shipped_dir().joinpath(f"{name_or_path}.yaml")
    if entry.is_file():
        return f"scenario {name_or_path}", entry.read_text()
    return None


def _yaml(source: str, text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(source, [f"<yaml>: {error}"]) from None


def is_fleet_scenario(name_or_path: str) -> bool:
    """A shipped fleet scenario, or a file whose top level has `clusters:`."""
    found = _read(name_or_path)
    if found is None:
        return False
    data = _yaml(*found)
    return isinstance(data, dict) and "clusters" in data


def load_fleet_scenario(name_or_path: str) -> FleetScenario:
    found = _read(name_or_path)
    if found is None:
        raise ConfigError(
            name_or_path,
            [f"<name>: no shipped fleet scenario {name_or_path!r} (see igw simulate --list)"],
        )
    scenario = parse_fleet_scenario(_yaml(*found), found[0])
    arrival = scenario.workload.arrival
    if isinstance(arrival, TraceArrival) and not Path(arrival.path).is_absolute():
        base = Path(name_or_path).parent if Path(name_or_path).exists() else Path.cwd()
        object.__setattr__(arrival, "path", str(base / arrival.path))
    return scenario
