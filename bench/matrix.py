"""The benchmark matrix: which scenario runs under which policies, and the checks.

Every case is a shipped scenario, possibly changed in one dimension (load, fleet size,
scrape interval, duration). Cases are plain data, so `run.py` can fan them out to worker
processes and `report.py` can draw them without knowing how they were built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inference_gateway.sim.scenario import (
    PoissonArrival,
    Scenario,
    load_scenario,
    shipped_scenarios,
)

__all__ = ["CHECKS", "PEERS", "PUBLISHED", "QUANTILES", "Case", "PublishedRow", "build_matrix"]

QUANTILES = [*range(0, 100), 99.5, 99.9, 100]  # TTFT percentiles kept for CDF charts

# Every policy a platform team could deploy instead of ours (DESIGN §5); the oracle is the
# limit, not a peer.
PEERS = [
    "round-robin",
    "least-outstanding",
    "upstream-default",
    "production-stack-prefixaware",
    "sglang-cache-aware",
    "dynamo-kv",
]
ALL = ["gateway", *PEERS, "oracle"]
SHIPPED = ["mixed-fleet-bursty", "shared-prefix", "lora-mix", "homogeneous-steady", "long-context"]
# Other shipped scenarios run under their own `policies`, cut to OTHER_SECONDS (the
# published rows' scenarios keep their shipped 600 s); the one-hour 64-pod speed test is
# left out (it measures the simulator, not routing).
EXCLUDED = {"fleet-64-hour"}
OTHER_SECONDS = 120.0
# ...except those a check reads: their claim is on the scenario as shipped
AS_SHIPPED = {"disagg-long-prompts"}
# Sweep point durations: shorter than the shipped 1800 s / 600 s to fit the 10-minute
# budget; the bursty one keeps three full 60 s on-off periods.
SWEEP_SCENARIOS = {"mixed-fleet-bursty": 180.0, "shared-prefix": 90.0}
SWEEP_LOADS = [0.3, 0.5, 0.7, 0.9, 1.1]
SWEEP_POLICIES = [p for p in ALL if p != "least-outstanding"]  # round-robin is the baseline
SCRAPE_INTERVALS_MS = [10, 50, 200, 1000]
SCALE_PODS = 256
SCALE_SECONDS = 10.0
REPLICAS = [2, 4]

# (check id, scenario, rule): "beat" = gateway P99 below every peer's; "within:X" =
# gateway P99 at most X × the best peer's.
CHECKS = [
    ("beats-peers", "mixed-fleet-bursty", "beat"),
    ("beats-peers", "shared-prefix", "beat"),
    ("beats-peers", "lora-mix", "beat"),
    ("within-5pct", "homogeneous-steady", "within:1.05"),
    ("within-5pct", "long-context", "within:1.05"),
    # issue 15: 4 replicas sharing their dispatch view as shipped (gateway@4)
    ("replicas-4-within-1.15x", "mixed-fleet-bursty", "replicas:4:1.15"),
    # issue 25: the same GPUs split into prefill and decode pods (gateway-pd)
    ("pd-tpot-half", "disagg-long-prompts", "pd"),
]


@dataclass(frozen=True)
class PublishedRow:
    """One row of the managed gateway's published benchmark table (issue 17) and the
    shipped scenario that reproduces it. The published changes are the vendor's figures
    against a Kubernetes round-robin Service, as printed (-0.97 = -97 %); None where the
    row gives words, not a figure (`claim` keeps the words). `quantile` is the TTFT
    quantile the row's headline figure compares ("p99", or "p50" for the chat example);
    `why` is the reason a row may differ, printed under the table with our figures."""

    row: str
    scenario: str
    claim: str
    p95: float | None
    p99: float | None
    throughput: float | None
    quantile: str = "p99"
    headline: float | None = None  # the published change at `quantile` (default: p99)
    why: str = ""


_OPEN_LOOP = (
    "our arrivals are open-loop at a fixed rate, so every policy is offered the same "
    "requests and throughput moves only where a policy leaves work unserved when the run "
    "ends; the published figures come from fixed-concurrency clients, where a slow router "
    "lowers the request rate instead"
)
PUBLISHED = [
    PublishedRow(
        "Llama-3.1-8B",
        "mixed-fleet-bursty",
        "P95 and P99 TTFT -97 %, throughput +8 %",
        -0.97,
        -0.97,
        0.08,
        why=_OPEN_LOOP,
    ),
    PublishedRow(
        "Llama-3.1-8B, shared prompt prefixes",
        "shared-prefix",
        "P95 -26 %, P99 -43 %",
        -0.26,
        -0.43,
        None,
        why="8 identical H100 pods at 70 % load: round-robin's tail is already short, so "
        "the whole gain is the prefill that prefix affinity skips",
    ),
    PublishedRow(
        "Qwen3-32B",
        "qwen3-32b-mixed",
        "P95 -98 %, P99 -97 %, throughput +50 %",
        -0.98,
        -0.97,
        0.50,
        why=_OPEN_LOOP,
    ),
    PublishedRow(
        "Llama-3.1-70B, bursty traffic",
        "llama-70b-bursty",
        "P95 -94 %, P99 -98 %, throughput +12 %",
        -0.94,
        -0.98,
        0.12,
        why=_OPEN_LOOP,
    ),
    PublishedRow(
        "Qwen3-235B",
        "qwen3-235b-h100",
        "similar at P95, P99 -89 %",
        None,
        -0.89,
        None,
        why="no A10G shape holds the model, so the fleet is identical H100 pods, where "
        "only bursts and prefixes separate routers; at 70 % mean load round-robin's tail "
        "stays short, and even the oracle's reduction is a fraction of the published one: "
        "that gain needs a fleet or traffic the published text does not give",
    ),
    PublishedRow(
        "any model, homogeneous fleet, steady traffic",
        "homogeneous-steady",
        "about the same as round-robin",
        None,
        None,
        None,
        why="the must-hold is within 5 % of round-robin or better (check within-5pct)",
    ),
    PublishedRow(
        "headline chat example",
        "chat-headline",
        "first token 4.4 s -> under 800 ms (-82 %)",
        None,
        None,
        None,
        quantile="p50",
        headline=-0.82,
        why="the median is over completed requests: round-robin sends half the requests "
        "to A10G pods that cannot keep up, leaves many of them unserved when the run ends, "
        "and its median is mostly over the H100 pods' requests, while ours also uses the "
        "slower A10G prefill for the requests it sends there",
    ),
]
PUBLISHED_SCENARIOS = {r.scenario for r in PUBLISHED}


@dataclass(frozen=True)
class Case:
    """One scenario variant and the policies to run on it."""

    id: str
    kind: str  # scenario | load-sweep | scale | scrape-interval | replicas
    scenario: Scenario
    policies: list[str]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def weight(self) -> float:
        """Rough relative cost, to start the longest jobs first."""
        s = self.scenario
        pods = sum(p.replicas for p in s.fleet)
        load = getattr(s.workload.arrival, "load", None) or 0.7
        return s.duration_s * pods * load


def _with(scenario: Scenario, **changes: Any) -> Scenario:
    return scenario.model_copy(update=changes)


def _load(scenario: Scenario, load: float) -> Scenario:
    arrival = scenario.workload.arrival.model_copy(update={"load": load})
    return _with(scenario, workload=scenario.workload.model_copy(update={"arrival": arrival}))


def build_matrix(quick: bool = False) -> list[Case]:
    """The whole matrix. `quick` divides every duration by 4 (a smoke run, not figures to
    quote)."""
    cut = 4.0 if quick else 1.0
    cases: list[Case] = []
    for name in SHIPPED:
        s = load_scenario(name)
        s = _with(s, duration_s=s.duration_s / cut)
        cases.append(Case(f"scenario/{name}", "scenario", s, list(ALL)))
    for name in shipped_scenarios():
        if name in SHIPPED or name in EXCLUDED:
            continue
        s = load_scenario(name)
        whole = name in PUBLISHED_SCENARIOS or name in AS_SHIPPED
        seconds = s.duration_s if whole else min(s.duration_s, OTHER_SECONDS)
        s = _with(s, duration_s=seconds / cut)
        cases.append(Case(f"scenario/{name}", "scenario", s, list(s.policies)))
    for name, seconds in SWEEP_SCENARIOS.items():
        base = load_scenario(name)
        for load in SWEEP_LOADS:
            s = _with(_load(base, load), duration_s=seconds / cut, name=f"{name}@load{load}")
            cases.append(
                Case(f"load-sweep/{name}/{load}", "load-sweep", s, SWEEP_POLICIES, {"load": load})
            )
    # 256 pods (half H100, half A10G), the headline request shape, Poisson at 70% (a
    # short run must not be all burst), 10 s: ~17,000 requests, each scored against 256
    # pods in Python, which is what this case measures; the O(pods) peers' answer is the
    # same shape as at 8 pods, so only the cheap ones run.
    base = load_scenario("mixed-fleet-bursty")
    fleet = [p.model_copy(update={"replicas": SCALE_PODS // len(base.fleet)}) for p in base.fleet]
    poisson = PoissonArrival(kind="poisson", load=0.7)
    s = _with(
        base,
        fleet=fleet,
        workload=base.workload.model_copy(update={"arrival": poisson}),
        duration_s=SCALE_SECONDS / cut,
        name=f"mixed-fleet-{SCALE_PODS}-pods",
    )
    cases.append(
        Case(
            f"scale/{SCALE_PODS}-pods",
            "scale",
            s,
            ["gateway", "round-robin", "least-outstanding", "sglang-cache-aware"],
            {"pods": SCALE_PODS},
        )
    )
    # Scrape interval: only the policies that read scrapes change with it.
    for interval in SCRAPE_INTERVALS_MS:
        s = _with(
            base,
            scrape_interval_ms=float(interval),
            duration_s=300 / cut,
            name=f"mixed-fleet-bursty@scrape{interval}ms",
        )
        cases.append(
            Case(
                f"scrape-interval/{interval}ms",
                "scrape-interval",
                s,
                ["gateway", "upstream-default"],
                {"scrape_interval_ms": interval},
            )
        )
    # Replicas: same scenario and duration as scenario/mixed-fleet-bursty, so the P99s
    # compare directly with its single-replica gateway. `gateway@N` shares its dispatch
    # view through the (modelled) store as shipped; `-unshared` is each replica alone.
    s = _with(base, duration_s=base.duration_s / cut)
    cases.append(
        Case(
            "replicas/mixed-fleet-bursty",
            "replicas",
            s,
            [f"gateway@{n}" for n in REPLICAS]
            + [f"gateway@{REPLICAS[-1]}-unshared", f"upstream-default@{REPLICAS[-1]}"],
            {"replicas": REPLICAS},
        )
    )
    return cases
