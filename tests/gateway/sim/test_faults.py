"""Pod failures on the virtual clock (`sim.faults`, issue 33): the shipped spot-reclaims
scenario loses no started stream with resume on and loses them with it off; every
request is accounted for either way; a resumed answer reaches its client whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from inference_gateway.cli.main import main
from inference_gateway.emulator.engine import EngineRequest
from inference_gateway.sim.capacity import fleet_capacity
from inference_gateway.sim.driver import run_policy
from inference_gateway.sim.faults import FaultInjector, StreamLedger
from inference_gateway.sim.pods import build_fleet
from inference_gateway.sim.scenario import (
    Faults,
    PodFailure,
    PoolSpec,
    Scenario,
    load_scenario,
)
from inference_gateway.sim.workload import SimRequest

POLICIES = ["gateway", "round-robin", "least-outstanding"]


def run(scenario: Scenario, policy: str) -> dict[str, Any]:
    return run_policy(scenario, policy, fleet_capacity(scenario.fleet, scenario.workload, 0))


def with_resume(scenario: Scenario, resume: bool) -> Scenario:
    assert scenario.faults is not None
    faults = scenario.faults.model_copy(update={"resume": resume})
    return scenario.model_copy(update={"faults": faults})


@pytest.fixture(scope="module")
def spot() -> Scenario:
    # the first two reclaims (the third at 90 s is left out: a shorter run)
    return load_scenario("spot-reclaims").model_copy(update={"duration_s": 75})


@pytest.mark.parametrize("policy", POLICIES)
def test_resume_loses_no_started_stream_and_without_it_they_are_lost(
    spot: Scenario, policy: str
) -> None:
    on, off = run(with_resume(spot, True), policy), run(with_resume(spot, False), policy)
    assert on["pod_failures"] == off["pod_failures"] == 2
    assert on["lost_mid_stream"] == 0 and on["requests_resumed"] > 10
    assert on["reprefill_gpu_s"] > 0 and on["resume_gap_p99_s"] >= on["resume_gap_p50_s"] > 0
    assert off["lost_mid_stream"] > 10 and off["requests_resumed"] == 0
    assert off["reprefill_gpu_s"] == 0
    # every request ends once: answered, refused or lost (the same arrivals either way)
    for report in (on, off):
        assert report["requests_lost"] == (
            report["lost_mid_stream"] + report["lost_before_first_token"]
        )
    total_on = on["completed"] + on["rejected"] + on["requests_lost"]
    assert total_on == off["completed"] + off["rejected"] + off["requests_lost"]
    assert on["completed"] > off["completed"]


def test_a_resumed_answer_reaches_its_client_whole() -> None:
    """A stream cut mid-decode continues with its delivered tokens appended to the prompt
    and the rest to generate; when it ends, its client has its first token from before
    the break and every token once."""
    pools = [PoolSpec(name="h100", gpu="H100", model="llama-3.1-8b", replicas=2)]
    pods = build_fleet(pools, listener=None)  # type: ignore[arg-type]
    failure = PodFailure(at_s=1.0, pod="h100-0")
    faults = FaultInjector(Faults(failures=[failure]), pods)
    sim = SimRequest(t=0.0, prompt_tokens=500, output_tokens=400, request_id=7)
    engine = pods[0].engine
    engine.submit(EngineRequest(7, 500, 400, tag=(sim, pods[0])), 0.0)
    engine.advance(1.0)
    first = engine.requests()[0].first_token_time
    assert first is not None  # decoding when the pod is lost
    continuations, lost, legs = faults.fail(pods[0], 1.0)
    assert lost == [] == legs and len(continuations) == 1 and pods[0].down
    (cont,) = continuations
    delivered = cont.prompt_tokens - 500
    assert 0 < delivered < 400 and cont.output_tokens == 400 - delivered
    assert pods[0].engine is not engine and pods[0].engine.requests() == []
    ledger = faults.ledger
    ledger.first_token(cont, pods[1], 1.2)
    assert ledger.resumed == 1 and ledger.gaps == [pytest.approx(0.2)]
    assert ledger.reprefill_gpu_s > 0
    assert ledger.finished(cont, 1.2, cont.output_tokens) == (first, 400)


def test_a_request_cut_before_its_first_token_is_sent_again_whole_with_resume() -> None:
    """`igw serve` sends a request whose pod broke before any byte reached the client to
    the next pod as it was sent (outcome `retried`); without resume it answers 502."""
    sim = SimRequest(t=0.0, prompt_tokens=500, output_tokens=400, request_id=9)
    on, off = StreamLedger(), StreamLedger()
    assert on.cut(sim, None, 0, 1.0, resume=True) == sim and on.continues(sim)
    assert on.retried_whole == 1 and on.lost_before_first_token == 0
    assert on.finished(sim, 1.5, 400) == (1.5, 400) and not on.continues(sim)
    assert off.cut(sim, None, 0, 1.0, resume=False) is None
    assert off.lost_before_first_token == 1 and off.retried_whole == 0
    assert on.report()["retried_before_first_token"] == 1


def test_a_failure_names_a_pod_of_the_fleet() -> None:
    base = load_scenario("spot-reclaims").model_dump()
    base["faults"]["failures"][0]["pod"] = "h100-9"
    with pytest.raises(pydantic.ValidationError, match="no pod 'h100-9'"):
        Scenario.model_validate(base)


def test_igw_simulate_prints_what_became_of_the_streams(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "spot-reclaims", "--duration", "40", "--policies", "gateway"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("pod failures") :]
    row = next(line for line in table.splitlines() if line.startswith("gateway"))
    pods_lost, _, mid_stream, _, resumed = row.split()[1:6]
    assert pods_lost == "1" and mid_stream == "0" and int(resumed) > 0
    assert "retried whole" in " ".join(table.split())  # the column, read in the legend


def split_fleet_with_faults() -> Scenario:
    """5 H100 pods split 3 prefill (h100-0 .. h100-2) + 2 decode, every request P/D
    (`gateway-pd-always`); a decode pod lost, then a prefill pod (at this seed: streams
    resumed, a prefill leg retried and a request rerouted, each at least once)."""
    return Scenario.model_validate(
        {
            "name": "pd-faults",
            "seed": 5,
            "duration_s": 40,
            "fleet": [{"name": "h100", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 5}],
            "disaggregation": {"prefill": {"h100": 3}, "non_cached_tokens": 0},
            "workload": {
                "arrival": {"kind": "poisson", "rate_rps": 6},
                "prompt_tokens": {"dist": "lognormal", "median": 3000, "sigma": 0.3},
                "output_tokens": {"dist": "lognormal", "median": 400, "sigma": 0.3},
            },
            "faults": {
                "failures": [
                    {"at_s": 12, "pod": "h100-3", "down_s": 10},
                    {"at_s": 25, "pod": "h100-0", "down_s": 10},
                ]
            },
            "policies": ["gateway-pd-always"],
        }
    )


def test_with_a_p_d_split_lost_streams_resume_whole_and_lost_prefill_legs_are_retried() -> None:
    """A decode pod's started streams resume whole on a decode pod (no second prefill
    leg), a lost prefill pod's legs are served whole by their decode pods, a request
    whose decode pod was lost before it got there is routed again, and no stream is
    lost: every prefill leg is an admitted request's one leg, or a reroute's."""
    scenario = split_fleet_with_faults()
    report = run(scenario, "gateway-pd-always")
    assert report["pod_failures"] == 2 and report["rejected"] == 0
    admitted = report["completed"] + report["requests_lost"]
    assert report["prefill_legs"] == admitted + report["requests_rerouted"]
    assert report["lost_mid_stream"] == 0 and report["requests_resumed"] > 0
    assert report["prefill_legs_retried"] > 0 and report["requests_rerouted"] > 0
    off = run(with_resume(scenario, False), "gateway-pd-always")
    assert off["lost_mid_stream"] > 0 and off["requests_resumed"] == 0
    assert report["completed"] > off["completed"]


def test_igw_simulate_prints_what_became_of_the_legs_with_a_split(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pd-faults.yaml"
    path.write_text(yaml.safe_dump(split_fleet_with_faults().model_dump(mode="json")))
    assert main(["simulate", str(path), "--policies", "gateway-pd-always"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("pod failures") :]
    legend = " ".join(table.split())  # the legend wraps with the terminal
    assert "req rerouted" in legend and "legs retried" in legend
    # the last columns (a narrow terminal wraps the table: the last row of the policy)
    row = [line for line in table.splitlines() if line.startswith("gateway-pd-always")][-1]
    retried, rerouted = (int(cell) for cell in row.split()[-2:])
    assert retried > 0 and rerouted > 0
