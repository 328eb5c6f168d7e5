"""Whole clusters lost mid-stream in the fleet simulation (issue 33): the streams a
killed cluster cut after their first token are resumed at the next cluster as `igw
global` resumes them (its `migration`), or lost without it; the same ledger as the
single-cluster pod failures (`sim.faults.StreamLedger`) counts them. Short runs of the
two-region test fleet (60 s of simulated time) and the shipped `fleet-cluster-loss`."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from inference_gateway.cli.main import main
from inference_gateway.sim.fleet.runner import simulate_fleet
from inference_gateway.sim.fleet.scenario import FleetScenario, load_fleet_scenario
from inference_gateway.sim.fleet.tier import FleetRequest, FleetTier
from inference_gateway.sim.workload import generate

from .test_fleet_tier import TWO_REGIONS, scenario

# the two refused kills of the test fleet: c1 at 15 s, then region r1 (c2) at 30 s
KILLS = [
    {"at_s": 15, "action": "kill", "cluster": "c1"},
    {"at_s": 30, "action": "kill", "region": "r1"},
    {"at_s": 40, "action": "restore", "region": "r1"},
]
LONG = {  # long answers, so that many streams are running when a cluster dies
    **TWO_REGIONS["workload"],
    "output_tokens": {"dist": "lognormal", "median": 500, "sigma": 0.5, "max": 3000},
}


def with_migration(migration: dict[str, Any], **changes: Any) -> FleetScenario:
    router = {**TWO_REGIONS["router"], "migration": migration, **changes.pop("router", {})}
    return scenario(**{"router": router, "workload": LONG, "events": KILLS, **changes})


def run(fleet: FleetScenario) -> tuple[FleetTier, dict[str, Any]]:
    capacity = simulate_fleet(fleet.model_copy(update={"duration_s": 1.0, "events": []}))
    tier = FleetTier(fleet, "latency", capacity["capacity_rps"])
    return tier, tier.run()


@pytest.fixture(scope="module")
def on() -> tuple[FleetTier, dict[str, Any]]:
    return run(with_migration({"enabled": True}))


@pytest.fixture(scope="module")
def off() -> tuple[FleetTier, dict[str, Any]]:
    return run(with_migration({"enabled": False}))


def test_with_migration_no_started_stream_is_lost_and_without_it_they_are(
    on: tuple[FleetTier, dict[str, Any]], off: tuple[FleetTier, dict[str, Any]]
) -> None:
    (_, yes), (_, no) = on, off
    assert yes["cluster_failures"] == no["cluster_failures"] == 2
    assert no["lost_mid_stream"] == no["requests"]["lost_started"] > 20
    assert no["requests_resumed"] == 0 and no["reprefill_gpu_s"] == 0
    assert yes["lost_mid_stream"] == yes["requests"]["lost_started"] == 0
    # every stream that was lost without migration is resumed with it (a few more were
    # running: the ones resumed once and cut again, and the load differs after the cut)
    assert yes["requests_resumed"] >= no["lost_mid_stream"]
    for report in (yes, no):
        q = report["requests"]
        assert report["requests_lost"] == (
            report["lost_mid_stream"] + report["lost_before_first_token"]
        )
        assert q["served"] + q["lost_started"] + q["rejected"] + q["unanswered"] == q["total"]
        assert q["unanswered"] == q["unfinished"] == 0
    assert yes["requests"]["served"] == yes["requests"]["total"]
    # the kills' own rows: the lost streams belong to the kill that cut them
    assert [e["lost_started"] for e in no["events"][:2]] == [
        sum(1 for _, o, when in off[0].recorder.failed if o == "lost_started" and a <= when < b)
        for a, b in ((15, 30), (30, 60))
    ]
    assert all(e["lost_started"] > 0 for e in no["events"][:2])
    assert [e["lost_started"] for e in yes["events"][:2]] == [0, 0]
    resumed = [e["resumed"] for e in yes["events"][:2]]  # by the kill that cut them
    assert min(resumed) > 0 and sum(resumed) == yes["requests_resumed"]
    assert [e["resumed"] for e in no["events"][:2]] == [0, 0]


def test_a_resumed_answer_reaches_its_client_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request served, every token of every answer counted once: the tokens the
    clients got are the tokens the workload asked for, resumed streams included (the
    tokens before the break plus the continuation's); a resumed stream's TTFT is its
    first token's, from before the break."""
    fleet = with_migration({"enabled": True})
    capacity = simulate_fleet(fleet.model_copy(update={"duration_s": 1.0, "events": []}))
    tier = FleetTier(fleet, "latency", capacity["capacity_rps"])
    first_at_cut: dict[FleetRequest, float] = {}
    ttft: dict[FleetRequest, float] = {}
    cut, served = tier._cut, tier.recorder.on_served

    def on_cut(req: FleetRequest, *args: Any) -> None:
        assert req.first_token is not None
        first_at_cut.setdefault(req, req.first_token)
        cut(req, *args)

    def on_served(req: FleetRequest, *args: Any) -> None:
        served(req, *args)
        ttft[req] = tier.recorder.served[-1][1]

    monkeypatch.setattr(tier, "_cut", on_cut)
    monkeypatch.setattr(tier.recorder, "on_served", on_served)
    report = tier.run()
    asked = sum(
        r.output_tokens
        for r in generate(fleet.workload, fleet.duration_s, fleet.seed, tier.capacity_rps)
    )
    assert sum(row[5] for row in tier.recorder.served) == asked
    assert len(first_at_cut) == report["requests_resumed"] > 20  # none resumed twice here
    for req, first in first_at_cut.items():
        assert ttft[req] == pytest.approx(first - req.sim.t)


def test_the_resume_costs_a_re_prefill_and_a_gap(on: tuple[FleetTier, dict[str, Any]]) -> None:
    """Each continuation re-prefills its prompt and the delivered tokens: the GPU time is
    positive and at most a prefill of the longest prompt plus answer per continuation;
    the gap from the break holds that prefill, so on average it is no shorter."""
    tier, report = on
    resumed, gpu_s = report["requests_resumed"], report["reprefill_gpu_s"]
    longest = tier.scenario.clusters[0].fleet[0]
    assert longest.model == "llama-3.1-8b"  # one GPU a pod: GPU seconds are seconds
    gaps = np.asarray(tier.ledger.gaps)
    assert len(gaps) == resumed
    assert 0 < gpu_s / resumed <= gaps.mean()
    assert gpu_s / resumed < 1.0  # an 8B prefill of at most 9,000 tokens on an H100
    assert (
        0
        < report["resume_gap_p50_s"]
        <= report["resume_gap_p99_s"]
        == pytest.approx(float(np.percentile(gaps, 99)), abs=1e-6)
    )


def test_a_stream_stalled_in_a_black_hole_resumes_after_the_idle_timeout() -> None:
    """A cluster that stops answering cuts nothing: its streams go silent, and the router
    sees the break only at `streamIdleTimeoutMs`, so no gap is shorter than that."""
    kill = [{"at_s": 20, "action": "kill", "cluster": "c1", "failure": "blackhole"}]
    fleet = with_migration({"enabled": True}, router={"streamIdleTimeoutMs": 2000}, events=kill)
    tier, report = run(fleet)
    assert report["lost_mid_stream"] == 0 and report["requests_resumed"] > 10
    assert min(tier.ledger.gaps) >= 2.0
    assert report["resume_gap_p50_s"] < 2.0 + 3.0


def test_max_resumes_zero_resumes_nothing() -> None:
    """`maxResumes: 0` is migration off (`MigrationSpec.resumes`, one reading for both
    tiers and the simulator), and so is a stream cut more often than `maxResumes`."""
    report = run(with_migration({"enabled": True, "maxResumes": 0}))[1]
    assert report["requests_resumed"] == 0 and report["lost_mid_stream"] > 20


def test_the_shipped_cluster_loss_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    """`fleet-cluster-loss` (docs/migration.md): two cluster losses, every stream they cut
    resumed, none lost; `igw simulate` prints the resume rows."""
    fleet = load_fleet_scenario("fleet-cluster-loss")
    assert [e.action for e in fleet.events] == ["kill", "restore", "kill", "restore"]
    report = simulate_fleet(fleet)["profiles"]["latency"]
    assert report["cluster_failures"] == 2
    assert report["requests_lost"] == 0 and report["requests_resumed"] > 100
    assert report["requests"]["served"] == report["requests"]["total"]
    assert main(["simulate", "fleet-cluster-loss"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "resumed on another cluster" in line)
    assert int(row.split()[-1].strip("│ ")) == report["requests_resumed"]
    assert "resume gap p99 s" in out


def test_a_lost_clusters_continuations_spread_over_the_survivors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`fleet-cluster-loss`'s first kill cuts use1-a's streams at once: ranked at the
    break with what the router sent since each status counted (`cluster_choice.load`),
    their continuations fill use1-b, the home survivor, only as far as they fill usw2-a,
    where the arrival ranking sent every one to use1-b (its next cluster)."""
    fleet = load_fleet_scenario("fleet-cluster-loss")
    kill, restore = fleet.events[0].at_s, fleet.events[1].at_s
    capacity = simulate_fleet(fleet.model_copy(update={"duration_s": 1.0, "events": []}))
    tier = FleetTier(fleet, "latency", capacity["capacity_rps"])
    landed: Counter[str] = Counter()  # the first kill's continuations, by cluster
    send = tier._send

    def on_send(req: FleetRequest) -> None:
        if req.first_token is not None and kill <= tier.now < restore:
            landed[req.attempts[req.index]] += 1
        send(req)

    monkeypatch.setattr(tier, "_send", on_send)
    report = tier.run()
    first = report["events"][0]
    assert first["resumed"] == landed.total() > 60
    assert set(landed) == {"use1-b", "usw2-a"}
    assert min(landed.values()) >= landed.total() / 3
