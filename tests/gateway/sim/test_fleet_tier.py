"""The fleet simulation: clusters in two regions behind `igw global`'s own registry and
ranking on the virtual clock. Short scenarios (60 s of simulated time, a few thousand
requests each); the shipped ones and their figures are in docs/global-router.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from inference_gateway.cli.main import main
from inference_gateway.core.scheduling.cluster_choice import ERROR_RATE_BEHIND
from inference_gateway.core.scheduling.cluster_registry import ClusterRegistry, ClusterState
from inference_gateway.sim.fleet.runner import simulate_fleet
from inference_gateway.sim.fleet.scenario import (
    FleetScenario,
    load_fleet_scenario,
    parse_fleet_scenario,
    shipped_fleet_scenarios,
)
from inference_gateway.sim.fleet.tier import FleetRequest, FleetTier

RTT_S = 0.062
TWO_REGIONS: dict[str, Any] = {
    "name": "two-regions-small",
    "seed": 4,
    "duration_s": 60,
    "router": {"pollIntervalMs": 1000, "staleAfterMs": 3000, "rampS": 10},
    "network": {"links": [{"regions": ["r1", "r2"], "rtt_ms": RTT_S * 1000}]},
    "client_regions": {"r1": 0.7, "r2": 0.3},
    "clusters": [
        {
            "name": name,
            "region": region,
            "fleet": [{"name": "h100", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 2}],
        }
        for name, region in (("c1", "r1"), ("c2", "r1"), ("c3", "r2"))
    ],
    "workload": {
        "arrival": {"kind": "poisson", "load": 0.3},
        "prompt_tokens": {"dist": "lognormal", "median": 800, "sigma": 0.8, "max": 6000},
        "output_tokens": {"dist": "lognormal", "median": 150, "sigma": 0.6, "max": 2000},
    },
    "events": [
        {"at_s": 15, "action": "kill", "cluster": "c1"},
        {"at_s": 30, "action": "kill", "region": "r1"},
        {"at_s": 40, "action": "restore", "region": "r1"},
    ],
    "report": {"bin_s": 2, "window_s": 5},
}


def scenario(base: dict[str, Any] = TWO_REGIONS, **changes: Any) -> FleetScenario:
    return parse_fleet_scenario({**base, **changes}, "test")


@pytest.fixture(scope="module")
def two_regions() -> dict[str, Any]:
    return simulate_fleet(scenario())


def test_failover_within_the_heartbeat_staleness_bound(two_regions: dict[str, Any]) -> None:
    """After each kill the dead clusters get no attempt later than staleAfterMs plus one
    round trip; the drains are igw global's own failover events, one per router each."""
    report = two_regions["profiles"]["latency"]
    kills = [e for e in report["events"] if e["action"] == "kill"]
    assert [e["clusters"] for e in kills] == [["c1"], ["c2"]]
    for event in kills:
        assert 0 <= event["failover_s"] <= 3.0 + RTT_S
    assert report["failover_events"] == {"r1": 2, "r2": 2}


def test_quiet_cluster_is_drained_by_the_failed_poll() -> None:
    """With no request in flight to drop, the next status poll finds the cluster dead:
    the failover then takes up to one poll interval, still inside the bound."""
    quiet = scenario(
        workload={**TWO_REGIONS["workload"], "arrival": {"kind": "poisson", "rate_rps": 3}},
        events=[{"at_s": 15.3, "action": "kill", "cluster": "c1"}],
    )
    event = simulate_fleet(quiet)["profiles"]["latency"]["events"][0]
    assert event["failover_s"] <= 1.0 + RTT_S
    assert event["unanswered"] == 0


def test_black_hole_region_loss() -> None:
    """A region that stops answering (no refusals): the status polls time out, so the
    failover stays inside the bound. The requests it held without a first token are
    retried the moment their router drains the cluster (not after `readTimeoutMs`, 300 s
    by default), and the retry skips the other drained cluster of their ranking."""
    events = [
        {"at_s": 20.77, "action": "kill", "region": "r1", "failure": "blackhole"},
        {"at_s": 40.5, "action": "restore", "region": "r1"},
    ]
    report = simulate_fleet(scenario(events=events))["profiles"]["latency"]
    kill = report["events"][0]
    assert kill["clusters"] == ["c1", "c2"]
    assert 0 < kill["failover_s"] <= 3.0 + RTT_S
    assert kill["retried_and_served"] > 0
    # held since before the kill, retried at the drain (status timeout, within a poll)
    assert kill["retried_ttft_max_s"] <= 1.0 + 0.5 + 2 * RTT_S + 1.0
    assert kill["last_retry_s"] is None  # no retry was sent to the other dead cluster
    q = report["requests"]
    assert q["unanswered"] == q["unfinished"] == 0


def test_a_first_byte_timeout_ends_the_request_and_sends_it_nowhere_else() -> None:
    """A first-byte timeout shorter than the queueing of an overloaded cluster ends the
    requests that waited that long with 504 (the attempt plan: the cluster may already be
    generating them), so none is generated a second time on another cluster."""
    heavy = {**TWO_REGIONS["workload"], "arrival": {"kind": "poisson", "load": 1.3}}
    router = {**TWO_REGIONS["router"], "firstByteTimeoutMs": 1000}
    report = simulate_fleet(scenario(workload=heavy, router=router, events=[], duration_s=20))
    q = report["profiles"]["latency"]["requests"]
    assert q["unanswered"] > 0  # timed out, answered 504
    assert q["retried_and_served"] == 0
    assert q["unfinished"] == 0


def test_no_request_that_had_not_started_is_lost(two_regions: dict[str, Any]) -> None:
    """Every request is accounted for; none that had not streamed a token is lost: the
    ones a dying cluster held are retried on the next cluster of their ranking."""
    q = two_regions["profiles"]["latency"]["requests"]
    assert q["unanswered"] == 0
    assert q["retried_and_served"] > 0
    assert q["unfinished"] == 0
    assert q["served"] + q["lost_started"] + q["rejected"] + q["unanswered"] == q["total"]


def test_without_retries_the_dropped_requests_would_be_lost() -> None:
    """The same run with maxAttempts 1 loses requests: the retry is what saves them. Each
    is a request a dead cluster dropped before its first token (`lost_before_first_token`,
    as the single-cluster report counts those of a lost pod)."""
    one = scenario(router={**TWO_REGIONS["router"], "maxAttempts": 1})
    report = simulate_fleet(one)["profiles"]["latency"]
    q = report["requests"]
    assert q["unanswered"] > 0
    assert report["lost_before_first_token"] == q["unanswered"]
    assert report["requests_lost"] == q["unanswered"] + q["lost_started"]


def test_traffic_crosses_regions_when_the_home_region_is_out_or_loaded() -> None:
    """Migration off: r1's streams resumed on c3 at the region loss would saturate it,
    and a saturated home cluster rightly sends r2's clients to r1 once it is back.
    While its home region is in, a new request crosses only when the router's home
    clusters hold requests it sent since their last status and that have no first byte
    yet (the load a burst between two polls adds, `cluster_choice.load`), or are placed
    behind for their errors (a restored cluster's lost streams): a stale status alone
    never sends a request across, and such crossings are few beside the region loss's."""

    def behind(state: ClusterState) -> bool:
        status = state.status
        return status is None or status.readyPods == 0 or state.error_rate >= ERROR_RATE_BEHIND

    router = {**TWO_REGIONS["router"], "migration": {"enabled": False}}
    tier = FleetTier(scenario(router=router), "latency", simulate_fleet_capacity())
    loaded: list[bool] = []  # per first attempt across while home was in: home loaded
    attempt = tier.recorder.on_attempt

    def on_attempt(req: FleetRequest, cluster: Any, now: float, home_in: bool) -> None:
        if cluster.region != req.router.region and home_in and req.attempt == 0:
            home = [s for s in req.router.registry.routable() if s.spec.region == req.router.region]
            loaded.append(all(s.sent_requests > 0 or behind(s) for s in home))
        attempt(req, cluster, now, home_in)

    tier.recorder.on_attempt = on_attempt  # type: ignore[method-assign]
    report = tier.run()
    assert isinstance(tier.routers["r1"].registry, ClusterRegistry)  # igw global's own
    assert report["cross_region"]["served"] > 0
    assert len(loaded) == report["cross_region"]["while_home_in"]
    assert all(loaded)
    assert report["cross_region"]["while_home_in"] <= 0.1 * report["cross_region"]["served"]
    crossed = [t for t, _, cross, home_in, _ in tier.recorder.attempts if cross and not home_in]
    assert min(crossed) >= 30  # nothing crossed for want of a home cluster before it died
    # the network shows in TTFT: every cross-region answer took at least one round trip
    cross_ttft = [row[1] for row in tier.recorder.served if row[4]]
    assert min(cross_ttft) >= RTT_S


def simulate_fleet_capacity() -> float:
    result = simulate_fleet(scenario(duration_s=1.0, events=[]))
    return float(result["capacity_rps"])


def test_the_ramp_grows_the_returning_share(two_regions: dict[str, Any]) -> None:
    """After r1 returns (rampS 10, bins of 2 s) its share starts low and grows."""
    restore = two_regions["profiles"]["latency"]["events"][-1]
    share = restore["share_during"]
    assert len(share) == 5
    assert share[0] < 0.35 < share[-1]
    assert sum(share[:2]) < sum(share[-2:])


def test_a_planned_drain_is_igw_global_drain() -> None:
    """`drain` / `undrain` events act as `igw global drain/undrain`: the cluster gets no
    new request while drained, no router counts a failover (a kill of it does: the
    control), nothing is lost, and after the undrain its share ramps back over rampS."""
    planned = [
        {"at_s": 15, "action": "drain", "cluster": "c1"},
        {"at_s": 30, "action": "undrain", "cluster": "c1"},
    ]
    report = simulate_fleet(scenario(events=planned))["profiles"]["latency"]
    drain, undrain = report["events"]
    assert drain["clusters"] == undrain["clusters"] == ["c1"]
    c1 = report["share"]["by_cluster"]["c1"]  # bins of 2 s
    assert c1[6] > 0.2  # before the drain: c1 takes its share of r1's traffic
    assert c1[8:15] == [0.0] * 7  # 16 s .. 30 s: nothing new sent to a drained cluster
    assert report["failover_events"] == {"r1": 0, "r2": 0}
    q = report["requests"]
    assert q["lost_started"] == q["unanswered"] == q["unfinished"] == 0
    share = undrain["share_during"]  # rampS 10: five bins from the undrain
    before = sum(c1[:7]) / 7
    assert len(share) == 5 and share[0] < before / 2 and max(share[1:4]) > share[0]
    killed = [{"at_s": 15, "action": "kill", "cluster": "c1"}]
    control = simulate_fleet(scenario(events=killed))["profiles"]["latency"]
    assert control["failover_events"] == {"r1": 1, "r2": 1}


def test_the_shipped_planned_drain_scenario() -> None:
    """`fleet-planned-drain` (docs/global-router.md): use1-a gets nothing while drained
    (bins of 5 s, drained 30 s .. 60 s), no failover, every request served."""
    result = simulate_fleet(load_fleet_scenario("fleet-planned-drain"))
    report = result["profiles"]["latency"]
    assert report["share"]["by_cluster"]["use1-a"][6:12] == [0.0] * 6
    assert report["failover_events"] == {"us-east-1": 0, "us-west-2": 0}
    assert report["requests"]["served"] == report["requests"]["total"]


COST: dict[str, Any] = {
    "name": "cost-small",
    "seed": 2,
    "duration_s": 60,
    "router": {"rampS": 10},
    "clusters": [
        {
            "name": "fast",
            "region": "r1",
            "fleet": [{"name": "h100", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 1}],
        },
        {
            "name": "cheap",
            "region": "r1",
            "priority": 1,
            "fleet": [
                {
                    "name": "a100",
                    "gpu": "A100",
                    "model": "llama-3.1-8b",
                    "replicas": 4,
                    "hourly_usd": 1.2,
                }
            ],
        },
    ],
    "workload": {
        "arrival": {"kind": "poisson", "load": 0.3},
        "prompt_tokens": {"dist": "lognormal", "median": 800, "sigma": 0.8, "max": 6000},
        "output_tokens": {"dist": "lognormal", "median": 150, "sigma": 0.6, "max": 2000},
        "priorities": {"standard": 0.5, "sheddable": 0.5},
    },
    "profiles": ["latency", "cost"],
}


def test_cost_mode_sends_sheddable_traffic_to_the_cheaper_cluster() -> None:
    result = simulate_fleet(scenario(COST))
    cheap = result["clusters"]["cheap"]["unit_cost_per_million_tokens"]
    assert cheap < result["clusters"]["fast"]["unit_cost_per_million_tokens"]
    cost, latency = result["profiles"]["cost"]["cost"], result["profiles"]["latency"]["cost"]
    assert cost["by_cluster"]["cheap"]["sheddable_share"] >= 0.9
    assert latency["by_cluster"]["cheap"]["sheddable_share"] < 0.9
    assert cost["attributed_per_million_tokens"] < latency["attributed_per_million_tokens"]


def test_cost_mode_moves_away_when_the_cheap_cluster_saturates() -> None:
    """Offered more than the cheap cluster holds, its status shows saturation and the
    cost profile sends the rest to the dearer cluster."""
    heavy = {**COST["workload"], "arrival": {"kind": "poisson", "load": 0.8}}
    result = simulate_fleet(scenario(COST, workload=heavy), ["cost"])
    shed = result["profiles"]["cost"]["cost"]["by_cluster"]
    assert shed["fast"]["sheddable_share"] > 0.2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"colour": "blue"}, "colour"),
        ({"events": [{"at_s": 5, "action": "kill", "cluster": "c9"}]}, "events[0].cluster"),
        ({"events": [{"at_s": 5, "action": "kill", "region": "r9"}]}, "events[0].region"),
        ({"events": [{"at_s": 5, "action": "explode", "cluster": "c1"}]}, "events[0].action"),
        ({"events": [{"at_s": 5, "action": "kill"}]}, "events[0]"),
        ({"events": [{"at_s": 5, "action": "kill", "cluster": "c1", "when": 1}]}, "events[0].when"),
        ({"events": [{"at_s": 99, "action": "kill", "cluster": "c1"}]}, "events[0].at_s"),
        ({"events": [{"at_s": 5, "action": "restore", "cluster": "c1"}]}, "events[0]"),
        (
            {
                "events": [
                    {"at_s": 5, "action": "kill", "cluster": "c1"},
                    {"at_s": 6, "action": "kill", "cluster": "c1"},
                ]
            },
            "events[1]",
        ),
        (
            {
                "events": [
                    {"at_s": 9, "action": "kill", "cluster": "c1"},
                    {"at_s": 6, "action": "restore", "cluster": "c1"},
                ]
            },
            "events[1].at_s",
        ),
        ({"events": [{"at_s": 5, "action": "undrain", "cluster": "c1"}]}, "events[0]"),
        (
            {
                "events": [
                    {"at_s": 5, "action": "drain", "region": "r1"},
                    {"at_s": 6, "action": "drain", "cluster": "c2"},
                ]
            },
            "events[1]",
        ),
        (
            {"events": [{"at_s": 5, "action": "drain", "cluster": "c1", "failure": "blackhole"}]},
            "events[0]",
        ),
        ({"router": {"pollIntervalMS": 5}}, "router.pollIntervalMS"),
        ({"router": {"profile": "cost"}}, "router.profile"),
        ({"router": {"staleAfterMs": -1}}, "router.staleAfterMs"),
        ({"router": {"drainFile": "/tmp/drained"}}, "router.drainFile"),
        ({"router": {"migration": {"maxResumes": 99}}}, "router.migration.maxResumes"),
        ({"router": {"migration": {"streamIdleTimeoutMs": 5000}}}, "migration.streamIdleTimeoutMs"),
        ({"client_regions": {"r9": 1}}, "client_regions.r9"),
        ({"clusters": [{**TWO_REGIONS["clusters"][0], "gpu": "H100"}]}, "clusters[0].gpu"),
        ({"clusters": [{**TWO_REGIONS["clusters"][0], "name": "C_1"}]}, "clusters[0].name"),
        ({"clusters": [{**TWO_REGIONS["clusters"][0], "policy": "nope"}]}, "clusters[0].policy"),
        ({"profiles": ["fastest"]}, "profiles[0]"),
    ],
)
def test_loader_rejects_bad_scenarios_with_the_field_path(
    change: dict[str, Any], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {**TWO_REGIONS, "events": [], **change}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{field}:" in err and "Traceback" not in err


def test_cli_json_is_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({**TWO_REGIONS, "duration_s": 45}))
    assert main(["simulate", str(path), "--json"]) == 0
    first = capsys.readouterr().out
    assert main(["simulate", str(path), "--json"]) == 0
    assert capsys.readouterr().out == first
    result = json.loads(first)
    assert set(result) == {"scenario", "seed", "capacity_rps", "clusters", "profiles"}
    report = result["profiles"]["latency"]
    assert {"requests", "events", "share", "cost", "ttft_p99_s"} <= set(report)
    # TPOT as every report gives it: after the first token, below the whole answer's time
    assert 0 < report["tpot_p50_s"] <= report["tpot_p99_s"] < report["e2e_p99_s"]
    assert main(["simulate", str(path), "--policies", "gateway"]) == 2


def test_cli_text_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({**TWO_REGIONS, "duration_s": 45}))
    assert main(["simulate", str(path)]) == 0
    out = capsys.readouterr().out
    for text in (
        "per router profile",
        "TPOT p99 s",
        "[latency] events",
        "[latency] share of routing",
        "kill",
    ):
        assert text in out


def test_shipped_fleet_scenarios_load() -> None:
    names = shipped_fleet_scenarios()
    assert {
        "fleet-two-regions",
        "fleet-cost-shaping",
        "fleet-planned-drain",
        "fleet-cluster-loss",
    } <= set(names)
    for name in names:
        assert load_fleet_scenario(name).name == name
    assert load_fleet_scenario("fleet-cost-shaping").profiles == ["latency", "cost"]
